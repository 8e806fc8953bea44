"""The allocator snapshot's section (report key ``memory_snapshot``,
model.device.snapshot_memory): the history's peak and what holds it, the out-of-memory
that ended the run with what held memory then and what to do, and fragmentation."""

from __future__ import annotations

from typing import Optional

from ... import schema as S
from ..document.document import Block, Items, Section, Text
from ..document.formats import decimals
from ..document.pass_view import PassView
from .memory_view import holders_table
from ...contract.report import AllocatorSnapshot, Fragmentation, Report, SnapshotHolders



def snapshot_section(report: Report, limit: Optional[int]) -> Optional[Section]:
    snap = report.get(S.SNAPSHOT_SECTION)
    if not snap:
        return None
    blocks: list[Block] = []
    oom = snap.get("oom")
    if oom:
        free = (f", with {_one(oom.get('device_free_mib'))} MiB free on the device"
                if oom.get("device_free_mib") is not None else "")
        blocks.append(Text(f"Out of memory: the allocation of {_one(oom.get('request_mib'))} "
                           f"MiB at {oom.get('line') or 'an unknown line'} failed{free}"))
        held, advice = oom.get("held"), oom.get("advice")
        if held:
            blocks += _holders("What held memory then", held, limit)
        if advice:
            blocks.append(Items(list(advice), lead="What fits what held it:"))
    peak = snap.get("peak")
    if peak:
        blocks += _holders("What holds the history's peak", peak, limit)
    frag = snap.get("fragmentation")
    if frag:
        blocks.append(Text(fragmentation_line(frag)))
    if snap.get("from_profile"):
        blocks.append(Text("made by torch from a torch.profiler profile: kinds are torch's "
                           "memory categories; no reserved memory or fragmentation",
                           note=True))
    title = ("What holds memory (torch's memory snapshot of the recording)"
             if snap.get("from_profile") else "Allocator snapshot")
    return Section(S.SNAPSHOT_SECTION, title, blocks, lead=snapshot_line(snap))


def snapshot_line(snap: AllocatorSnapshot) -> str:
    """The history in one sentence: its entries, levels and peak."""
    reserved = (f"; reserved peak {_one(snap.get('reserved_peak_mib'))} MiB"
                if snap.get("reserved_peak_mib") is not None else "")
    return (f"{snap.get('entries')} history entries on {snap.get('device')}: "
            f"{_one(snap.get('start_mib'))} MiB allocated at its start, peak "
            f"{_one(snap.get('peak_mib'))} MiB at entry {snap.get('peak_entry')}, "
            f"{_one(snap.get('end_mib'))} MiB at its end{reserved}")


def fragmentation_line(frag: Fragmentation) -> str:
    return (f"Fragmentation at the snapshot: {_one(frag.get('reserved_mib'))} MiB reserved, "
            f"{_one(frag.get('allocated_mib'))} MiB allocated, {_one(frag.get('cached_free_mib'))} "
            f"MiB cached and free in {frag.get('free_blocks')} blocks (the largest "
            f"{_one(frag.get('largest_free_mib'))} MiB), {frag.get('segments')} segments, "
            f"{frag.get('ooms')} out-of-memory error(s) in the history")


def _holders(title: str, held: SnapshotHolders, limit: Optional[int]) -> list[Block]:
    kinds = ", ".join(f"{k['kind']} {_one(k.get('mib'))}" for k in held.get("kinds") or [])
    named = (f" ({decimals(held.get('named_pct'), 1, 1)}% of it named by a stack)"
             if held.get("named_pct") is not None else "")
    return [holders_table((held.get("rows") or [])[:limit],
                          f"{title}: {_one(held.get('allocated_mib'))} MiB allocated{named}; by "
                          f"kind (MiB): {kinds}")]


def _one(value: Optional[float]) -> str:
    return decimals(value, 1, 1) or "-"


SNAPSHOT_VIEW = PassView(report_key=S.SNAPSHOT_SECTION, section=snapshot_section)
