"""The memory section (report key ``memory``, model.device.memory.memory_over_window): the peak,
the ops live at it and whether memory grows from step to step; report.html adds the curve."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ... import schema as S
from ...model.device.memory import HOST_TOTALS
from ...model.device.memory_holders import KINDS
from ..document.document import Block, Section, Table, Text, without_empty_columns
from ..document.pass_view import PassView
from ..document.formats import decimals, fixed
from ..document.wording import is_autograd_wrapper
from ...contract.report import Memory, MemoryHolder, MemoryHolders, Report

GROWTH_MIB = 1.0   # step-end growth above this, in every step, is memory kept across steps


def memory_line(memory: Memory) -> str:
    """One sentence: the peak (with its step and ops), the start and end levels."""
    level = "since the window's start" if memory["relative"] else "allocated"
    where = f" in step {memory['peak_step']}" if memory.get("peak_step") is not None else ""
    ops = [op for op in memory.get("peak_ops") or [] if not is_autograd_wrapper(op)]
    inside = f", inside {' › '.join(ops[-2:])}" if ops else ""
    reserved = (f"; reserved peak {_one(memory.get('reserved_peak_mib'))} MiB"
                if memory.get("reserved_peak_mib") is not None else "")
    levels = (f"{level_text(memory, memory.get('end_mib'))} MiB at its end"
              if memory["relative"]
              else f"{_one(memory.get('start_mib'))} MiB at the window's start, "
                   f"{_one(memory.get('end_mib'))} MiB at its end")
    return (f"peak {level_text(memory, memory.get('peak_mib'))} MiB {level} on "
            f"{memory.get('device')} at {_one(memory.get('peak_at_ms'))} ms{where}{inside}; "
            f"{levels}{reserved}")


def _one(value: Optional[float]) -> str:
    return decimals(value, 1, 1) or "-"


def level_text(memory: Memory, mib: Optional[float]) -> str:
    """A level as shown: signed where it is a change since the window's start ('-' where
    not measured)."""
    text = _one(mib)
    return f"+{text}" if memory["relative"] and not text.startswith("-") else text


def growth_line(memory: Memory) -> Optional[str]:
    """Whether memory held at each step's end grows: a tensor kept across steps."""
    ends = memory.get("per_step_end_mib") or []
    if len(ends) < 2:
        return None
    rises = [b - a for a, b in zip(ends, ends[1:])]
    if all(r > GROWTH_MIB for r in rises):
        return (f"Memory held at the end of each step grows by {sum(rises) / len(rises):.1f} "
                f"MiB per step ({', '.join(level_text(memory, e) for e in ends)} MiB): something keeps "
                "tensors across steps (a loss history without .item() or .detach(), a cache, "
                "growing buffers); at this rate the run ends out of memory")
    since = " since the window's start" if memory["relative"] else ""
    return (f"Memory held at the end of each step: "
            f"{', '.join(level_text(memory, e) for e in ends)} MiB{since} "
            "(no growth across the measured steps)")


def memory_section(report: Report, limit: Optional[int]) -> Optional[Section]:
    memory = report.get(S.MEMORY_SECTION)
    if not memory:
        return None
    growth = growth_line(memory)
    blocks: list[Block] = []
    if memory.get("relative_why") == HOST_TOTALS:
        blocks.append(Text("host memory: levels are bytes allocated minus freed since the "
                           "window's start. torch counts host blocks only while it records, "
                           "so its totals are not the process's, and a free of a block "
                           "allocated before the window is missing: the first step's levels "
                           "are upper bounds, the change from step to step after it is exact",
                           note=True))
    elif memory["relative"]:
        blocks.append(Text("the trace's memory events carry no allocator totals: levels are "
                           "bytes allocated minus freed since the window's start", note=True))
    holders = memory.get("holders")
    if holders and holders.get("rows") and not report.get(S.SNAPSHOT_SECTION):
        blocks += holders_blocks(holders, memory)   # else torch's snapshot names them
    runs = int((report.get("window") or {}).get("runs") or 1)
    title = ("Memory over the measured window" if runs == 1
             else f"Memory over run 1's measured window (of {runs} processes)")
    return Section("memory", title, blocks,
                   lead=memory_line(memory) + (f". {growth}" if growth else ""))


HOLDERS_HEADER = ["MiB", "kind", "module", "op", "line", "blocks"]
NAMES = ("module", "op", "line")   # shown as code


def holders_blocks(holders: MemoryHolders, memory: Memory) -> list[Block]:
    """What holds the peak: MiB by kind in one sentence, then the largest holders by kind,
    module, op and the user's line (model.device.memory_holders)."""
    kinds = ", ".join(f"{k['kind']} {_one(k.get('mib'))}" for k in holders.get("kinds") or []
                      if (k.get("mib") or 0) >= 0.05)
    if memory["relative"]:
        scope = (f"{_one(holders.get('named_mib'))} MiB in {holders.get('blocks')} blocks "
                 "made in the window")
    else:
        scope = (f"{_one(holders.get('named_mib'))} MiB in {holders.get('blocks')} blocks "
                 f"named ({decimals(holders.get('named_pct'), 1, 1) or '-'}% of the peak); "
                 f"{_one(holders.get('before_mib'))} MiB allocated before the recording "
                 "(parameters, optimizer state, tensors kept across steps)")
    stacks = "" if holders.get("with_stacks") else "; modules and lines: --profile memory"
    return [holders_table([r for r in holders.get("rows") or [] if (r.get("mib") or 0) >= 0.05],
                          f"What holds the peak: {scope}; by kind (MiB): {kinds}{stacks}")]


def holders_table(holders: Sequence[MemoryHolder], lead: str) -> Table:
    """The largest holders (MiB, kind, module, op, line, blocks) under ``lead``, folded in
    the files (the lead is what shows); a name column no row has is left out."""
    rows = [[_one(r.get("mib")), r["kind"], r.get("module") or "-", r.get("op") or "-",
             r.get("line") or "-", str(r.get("blocks") or "-")] for r in holders]
    header, rows = without_empty_columns(HOLDERS_HEADER, rows)
    return Table(header, rows, lead=lead,
                 code=frozenset(i for i, h in enumerate(header) if h in NAMES), brief=5,
                 folded=True)


def memory_charts(report: Report) -> list[dict[str, Any]]:
    """report.html's chart of what holds memory by kind: at the peak and at each measured
    step's end (model.device.memory_holders)."""
    holders = (report.get(S.MEMORY_SECTION) or {}).get("holders") or {}
    ends = holders.get("per_step_end") or []
    at_peak: dict[str, Optional[float]] = {k["kind"]: k.get("mib")
                                           for k in holders.get("kinds") or []}
    points: list[Mapping[str, Optional[float]]] = [at_peak, *ends]
    kinds = [k for k in KINDS if any(p.get(k) for p in points)]
    if not ends or not kinds:
        return []
    return [{"id": "memory_kinds", "kind": "bar", "unit": "MiB",
             "title": "What holds memory, by kind: at the peak and at each measured step's end "
                      "(MiB, blocks allocated in the window)",
             "labels": ["peak", *(f"end of measured step {i}" for i in range(1, len(ends) + 1))],
             "series": {k: [p.get(k) or 0.0 for p in points] for k in kinds}}]


MEMORY_VIEW = PassView(report_key=S.MEMORY_SECTION, section=memory_section,
                       charts=memory_charts)
