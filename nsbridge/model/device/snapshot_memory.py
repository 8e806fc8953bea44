"""The CUDA caching allocator's snapshot read as people debug memory: the peak of its
history and what holds it (by the user's line, the torch call, the module and the kind),
the out-of-memory that ended a run, and fragmentation.

The history (``_record_memory_history``) lists each allocation and free with its stack;
the segments are the allocator's state when the snapshot was taken (at the end, or in the
out-of-memory observer at the failure). Levels are replayed from the history: an
allocation adds its size, a completed free (``free_completed``; ``free_requested`` in a
history without them) takes it away, and the level before the history starts is the live
bytes at the end less the history's net change, so the levels are the allocator's own
"allocated" (torch.cuda.memory_stats' ``allocated_bytes.all.current``). Blocks live at a
moment are those allocated before it and freed after it, plus blocks from before the
history: freed later in it (their size is in the free) or still live at the end.

Kinds come from the stacks (torch's memory tracker sorts its categories the same way):
``parameters`` (made under ``Module._apply``/``to``/``cuda`` or a module's ``__init__``),
``optimizer state`` (under torch/optim, kept), ``gradients`` (under the autograd engine,
kept), ``activations`` (under a ``forward`` and freed under the autograd engine),
``kept across steps`` (under a forward, never freed in the history), ``temporaries``
(freed within the history), ``before the history`` (no stack: made before recording
started) and ``allocator cache`` (reserved but not allocated).
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from ..host.ops import MIB
from .memory_holders import MODULE, NOT_USER, holder_rows, mib
from ...contract.report import (AllocatorOom, AllocatorSnapshot, Fragmentation,
                                MemoryKindLevel, SnapshotHolders)
from ...contract.snapshot import ACTIONS, CATEGORIES, Snapshot

TOP_HOLDERS = 12
_ALLOC, _FREE_REQ, _FREE_DONE = (ACTIONS.index(a) for a in ("alloc", "free_requested",
                                                            "free_completed"))
_SEG_ALLOC, _SEG_FREE, _OOM = (ACTIONS.index(a) for a in ("segment_alloc", "segment_free", "oom"))
KINDS = ("parameters", "gradients", "optimizer state", "activations", "inputs",
         "kept across steps", "temporaries", "autograd detail", "unknown",
         "before the history")
# torch's memory profiler's categories as kinds (a snapshot made from a profile names them)
_CATEGORY_KIND = dict(zip(CATEGORIES, ("parameters", "gradients", "optimizer state",
                                        "activations", "inputs", "temporaries",
                                        "autograd detail", "unknown")))
_BUILTIN = re.compile(r"^<built-in (?:function|method) (?P<name>\w+)")
Frame = tuple[str, int, str]


def snapshot_memory(snap: Snapshot, device: Optional[int] = None,
                    top: int = TOP_HOLDERS) -> Optional[AllocatorSnapshot]:
    """The history's peak and what holds it, fragmentation at the snapshot, and the last
    out-of-memory with what held memory then; None without a history for ``device``
    (default: the device with the longest history)."""
    if not snap.traces:
        return None
    device = device if device is not None else max(snap.traces, key=lambda d: len(snap.traces[d]))
    trace = snap.traces.get(device)
    if trace is None or trace.empty:
        return None
    action = trace["action"].to_numpy()
    size = trace["size"].to_numpy(np.int64)
    addr = trace["addr"].to_numpy(np.int64)
    free_code = _FREE_DONE if (action == _FREE_DONE).any() else _FREE_REQ
    delta = np.where(action == _ALLOC, size, np.where(action == free_code, -size, 0))
    seg = snap.segments[snap.segments["device"] == device]
    live_end = int(seg.loc[seg["state"].str.startswith("active"), "size"].sum())
    level = np.cumsum(delta) + max(live_end - int(delta.sum()), 0)
    reserved = (np.full(len(trace), np.nan) if snap.from_profile else
                _reserved(action, size, int(seg.drop_duplicates("segment")["segment_size"].sum())))
    blocks = _blocks(action, addr, size, free_code, seg)
    peak = int(np.argmax(level))
    ooms = np.flatnonzero(action == _OOM)
    at_oom = int(ooms[-1]) if len(ooms) else None
    host = snap.from_profile and device == snap.devices - 1
    result: AllocatorSnapshot = {
        "device": "cpu" if host else f"cuda:{device}", "entries": int(len(trace)),
        "from_profile": snap.from_profile,
        "free_entries": ACTIONS[free_code],
        "start_mib": mib(level[0] - delta[0]), "end_mib": mib(level[-1]),
        "peak_mib": mib(level[peak]), "peak_entry": peak,
        "reserved_peak_mib": None if np.isnan(reserved).all() else mib(np.nanmax(reserved)),
        "peak": _holders(blocks, peak, level[peak], reserved[peak], trace, snap.stacks, top),
        "fragmentation": None if snap.from_profile else _fragmentation(seg, int(len(ooms))),
        "oom": None,
    }
    if at_oom is not None:
        held = _holders(blocks, at_oom, level[at_oom], reserved[at_oom], trace, snap.stacks,
                        top, in_forward=True)
        result["oom"] = _oom(trace, at_oom, snap.stacks, held, _fragmentation(seg, len(ooms)))
    return result


def _reserved(action: np.ndarray, size: np.ndarray, reserved_end: int) -> np.ndarray:
    """Reserved bytes after each entry, replayed back from the segments at the end; known
    only at the end (NaN before) in a history without segment entries."""
    change = np.where(action == _SEG_ALLOC, size, np.where(action == _SEG_FREE, -size, 0))
    if not ((action == _SEG_ALLOC) | (action == _SEG_FREE)).any():
        out = np.full(len(action), np.nan)
        out[-1] = reserved_end
        return out
    return (reserved_end - (change.sum() - np.cumsum(change))).astype(np.float64)


def _blocks(action: np.ndarray, addr: np.ndarray, size: np.ndarray, free_code: int,
            seg: pd.DataFrame) -> pd.DataFrame:
    """Every block the history can see: its alloc entry (-1: made before the history), its
    free entry (len: never freed in it), size, and its stack's entry (the alloc's)."""
    n = len(action)
    mine = np.flatnonzero((action == _ALLOC) | (action == free_code))
    order = mine[np.lexsort((mine, addr[mine]))]
    nxt = np.r_[order[1:], -1]
    same = np.r_[addr[order][1:] == addr[order][:-1], False]
    is_alloc = action[order] == _ALLOC
    paired = is_alloc & same & (action[nxt.clip(0)] == free_code)
    allocs = order[is_alloc]
    free_at = np.full(n, n, dtype=np.int64)
    free_at[order[paired]] = nxt[paired]
    prev_same = np.r_[False, addr[order][1:] == addr[order][:-1]]
    prev_alloc = np.r_[False, is_alloc[:-1]]
    orphan = order[~is_alloc & ~(prev_same & prev_alloc)]      # a free of an earlier block
    # what is live at the end beyond the history's unfreed allocations was made before it
    unfreed = int(size[allocs[free_at[allocs] == n]].sum())
    live_end = int(seg.loc[seg["state"].str.startswith("active"), "size"].sum())
    early = [live_end - unfreed] if live_end > unfreed else []
    return pd.DataFrame({
        "alloc": np.r_[allocs, np.full(len(orphan) + len(early), -1)],
        "free": np.r_[free_at[allocs], orphan, np.full(len(early), n)],
        "bytes": np.r_[size[allocs], size[orphan], np.asarray(early, dtype=np.int64)],
        "free_entry": np.r_[np.where(free_at[allocs] < n, free_at[allocs], -1), orphan,
                            np.full(len(early), -1)],
    })


def _holders(blocks: pd.DataFrame, at: int, level: float, reserved: float,
             trace: pd.DataFrame, stacks: Sequence[tuple[Frame, ...]],
             top: int, in_forward: bool = False) -> SnapshotHolders:
    """The blocks live after entry ``at``, named and grouped (rows, kinds, named share).
    ``in_forward``: the history ends inside a forward pass (an out-of-memory), so a block
    a forward made and nothing freed is an activation waiting for its backward."""
    live = blocks[(blocks["alloc"] <= at) & (blocks["free"] > at)]
    stack_col = trace["stack"].to_numpy()
    alloc_stack = np.where(live["alloc"] >= 0, stack_col[live["alloc"].clip(0)], -1)
    free_entry = live["free_entry"].to_numpy()
    free_stack = np.where(free_entry >= 0, stack_col[free_entry.clip(0)], -1)
    freed = (live["free"] < len(trace)).to_numpy()
    category = np.where(live["alloc"] >= 0,
                        trace["category"].to_numpy()[live["alloc"].clip(0)], -1)
    names = [_name(stacks[s] if s >= 0 else (), stacks[f] if f >= 0 else (), k, a >= 0, c,
                   in_forward)
             for s, f, k, a, c in zip(alloc_stack, free_stack, freed, live["alloc"], category)]
    frame = pd.DataFrame(names, columns=["kind", "module", "op", "line"])
    frame["bytes"] = live["bytes"].to_numpy()
    live_bytes = float(frame["bytes"].sum())
    with_stack = float(frame.loc[frame["kind"] != "before the history", "bytes"].sum())
    kinds: list[MemoryKindLevel] = [
        {"kind": k, "mib": mib(s), "blocks": int(c)}
        for k, (s, c) in ((k, (frame.loc[frame["kind"] == k, "bytes"].sum(),
                                (frame["kind"] == k).sum())) for k in KINDS) if c]
    cache = 0.0 if np.isnan(reserved) else max(float(reserved) - float(level), 0.0)
    if cache:
        kinds.append({"kind": "allocator cache", "mib": mib(cache), "blocks": None})
    return {"entry": at, "allocated_mib": mib(level),
            "reserved_mib": None if np.isnan(reserved) else mib(reserved),
            "live_mib": mib(live_bytes), "blocks": int(len(frame)),
            "named_pct": round(100.0 * with_stack / float(level), 1) if level > 0 else None,
            "kinds": kinds, "rows": holder_rows(frame, top)}


def _name(alloc: tuple[Frame, ...], free: tuple[Frame, ...], freed: bool,
          in_history: bool, category: int = -1, in_forward: bool = False
          ) -> tuple[str, Optional[str], Optional[str], Optional[str]]:
    """(kind, module, op, line) of one block from its stacks (innermost frame first) and
    torch's category when the snapshot gives one."""
    if not in_history:
        return ("before the history", None, None, None)
    module, op, line = _module(alloc), _op(alloc), _line(alloc)
    if category >= 0:
        return (_CATEGORY_KIND[CATEGORIES[category]], module, op, line)
    if not alloc:
        return ("unknown", None, None, None)
    return (_kind(alloc, free, freed, module, in_forward), module, op, line)


def _module(frames: tuple[Frame, ...]) -> Optional[str]:
    """The innermost nn.Module range ('Linear_0', in stacks made from a profile), else the
    innermost forward of the user's code ('model.py:20'), else torch's ('linear.py:125')."""
    named = next((f[2][len(MODULE):] for f in frames if f[2].startswith(MODULE)), None)
    forwards = [f for f in frames if f[2] == "forward"]
    mine = [f for f in forwards if not any(p in f[0] for p in NOT_USER)]
    return named or next((f"{_base(f[0])}:{f[1]}" for f in mine or forwards), None)


def _op(frames: tuple[Frame, ...]) -> Optional[str]:
    """The torch call that allocated: an aten op (C++ stacks), a builtin torch function,
    or the innermost torch Python function."""
    for f in frames:
        if f[2].startswith("aten::"):
            return f[2]
        m = _BUILTIN.match(f[2])
        if m:
            return m["name"]
    return next((f[2] for f in frames if "torch/" in f[0] and not f[2].startswith("_")), None)


def _line(frames: tuple[Frame, ...]) -> Optional[str]:
    """The innermost frame of the user's code: 'train.py:42 main'."""
    return next((f"{_base(f[0])}:{f[1]} {f[2]}" for f in frames
                 if f[0].endswith(".py") and not any(p in f[0] for p in NOT_USER)), None)


def _kind(alloc: tuple[Frame, ...], free: tuple[Frame, ...], freed: bool,
          module: Optional[str], in_forward: bool) -> str:
    """A block's kind from where it was made and freed (no category given)."""
    files = [f[0] for f in alloc]
    fnames = [f[2] for f in alloc]
    in_autograd = any("torch/autograd/" in f or "autograd" in n for f, n in zip(files, fnames))
    if any(n in ("_apply", "to", "cuda", "__init__") and "torch/nn/modules/module.py" in f
           for f, n in zip(files, fnames)):
        return "parameters"
    if any("torch/optim/" in f for f in files):
        return "temporaries" if freed else "optimizer state"
    if in_autograd:
        return "temporaries" if freed else "gradients"
    if module is not None:
        backward_free = any("torch/autograd/" in f[0] or "autograd" in f[2] for f in free)
        if backward_free or (in_forward and not freed):
            return "activations"
        return "temporaries" if freed else "kept across steps"
    return "temporaries" if freed else "kept across steps"


def _fragmentation(seg: pd.DataFrame, ooms: int) -> Fragmentation:
    """The allocator's state at the snapshot: reserved against allocated, the largest free
    block, the segments, and how many out-of-memory errors the history holds."""
    reserved = int(seg.drop_duplicates("segment")["segment_size"].sum())
    allocated = int(seg.loc[seg["state"] == "active_allocated", "size"].sum())
    free = seg.loc[seg["state"] == "inactive", "size"]
    return {"reserved_mib": mib(reserved), "allocated_mib": mib(allocated),
            "cached_free_mib": mib(reserved - allocated),
            "largest_free_mib": mib(free.max()) if len(free) else 0.0,
            "free_blocks": int(len(free)), "segments": int(seg["segment"].nunique()),
            "ooms": ooms}


def _oom(trace: pd.DataFrame, at: int, stacks: Sequence[tuple[Frame, ...]],
         held: SnapshotHolders,
         frag: Fragmentation) -> AllocatorOom:
    """The failed allocation, what held memory just before it, and what to do."""
    request = int(trace["size"].iat[at])
    stack = int(trace["stack"].iat[at])
    frames = stacks[stack] if stack >= 0 else ()
    line = _line(frames)
    free = trace["device_free"].iat[at]
    return {"entry": at, "request_mib": mib(request), "line": line,
            "device_free_mib": None if np.isnan(free) else mib(free),
            "held": held, "advice": _advice(request, held, frag)}


def _advice(request: int, held: SnapshotHolders, frag: Fragmentation) -> list[str]:
    """What fits what held memory at the failure, most likely first."""
    out = []
    cached = (frag.get("cached_free_mib") or 0.0) * MIB
    largest = (frag.get("largest_free_mib") or 0.0) * MIB
    if request <= cached and largest < request:
        out.append(f"fragmentation: {cached / MIB:.0f} MiB were reserved but free, "
                   f"in pieces no larger than {largest / MIB:.0f} MiB, under the "
                   f"{request / MIB:.0f} MiB asked: set PYTORCH_CUDA_ALLOC_CONF="
                   "expandable_segments:True")
    kinds = {k["kind"]: k.get("mib") or 0.0 for k in held.get("kinds") or []
             if k["kind"] != "allocator cache"}
    total = sum(kinds.values()) or 1.0
    acts = [r for r in held.get("rows") or [] if r["kind"] == "activations"]
    if kinds.get("activations", 0.0) / total >= 0.3:
        where = f" on {acts[0]['module']}" if acts and acts[0].get("module") else ""
        out.append(f"activations hold {kinds['activations']:.0f} MiB: activation "
                   f"checkpointing{where} (torch.utils.checkpoint) or a smaller batch")
    if kinds.get("optimizer state", 0.0) / total >= 0.25:
        out.append(f"optimizer state holds {kinds['optimizer state']:.0f} MiB: shard it "
                   "(FSDP, ZeroRedundancyOptimizer) or a lighter optimizer")
    if not out:
        out.append("a smaller batch, or a model in a lower precision (bf16)")
    return out


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]
