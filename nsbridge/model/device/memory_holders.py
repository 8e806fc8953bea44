"""What holds memory at the window's peak, and at each measured step's end: the blocks
live there, each named by kind, op, module and the user's line.

torch.profiler's memory events carry the block's address ("Addr"), so an allocation and
its free pair up by address: a block is live at a moment when the last event of its
address up to then is an allocation. Each live block is named from the host stacks around
its allocation (and its free, for the kind):

- **op**: the outermost aten op or autograd function around the allocation (the call the
  model made, not the ``aten::empty`` inside it);
- **module**: the innermost ``nn.Module`` range around it, and **line**: the innermost
  frame of the user's own code (both from the Python stacks: ``with_stack`` and
  ``with_modules``, as the ``memory`` profile records; None without them);
- **kind**, from where the block was allocated and when it is freed (torch's own
  categories, as its memory tracker names them): ``inputs`` (under the DataLoader's
  range, or a copy by ``.to()`` outside every module kept past the step), ``optimizer state`` (allocated in ``optimizer.step`` and kept past the step),
  ``gradients`` (allocated in the backward pass and kept past the step: .grad until the
  next zero_grad), ``activations`` (allocated in the forward pass and freed in the backward
  pass: saved for backward), ``kept across steps`` (allocated in the forward pass and kept
  past the step: a loss history, a cache), ``temporaries`` (freed within the step where
  they were made).

Blocks allocated before the recording are not in the trace: on a GPU, the allocator's
total at the peak minus the named blocks is said as ``before_mib`` (parameters and state
made before the window); on the host the level is relative to the window's start
(model.device.memory), and the named blocks are those allocated inside it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ... import schema as S
from ..host.nesting import HostTree, build_host_tree
from ..host.ops import MIB
from ..host.python_lines import FRAME
from ..strings import starts_with
from ...contract.report import MemoryHolder, MemoryHolders, MemoryKindLevel

STARTUP_BURST_US = 1000.0   # frames running when recording starts are all recorded within this
TOP_HOLDERS = 12    # rows of the holders table (the rest is summed in the kinds)
KINDS = ("activations", "gradients", "optimizer state", "kept across steps", "inputs",
         "temporaries")
_OUTER_OPS = ("aten::", "autograd::engine::evaluate_function: ")
_BACKWARD = "autograd::engine::evaluate_function: "
_OPTIMIZER = "Optimizer.step#"
_LOADER = "enumerate(DataLoader)#"
MODULE = "nn.Module: "
_COPIES = ("aten::to", "aten::_to_copy")   # outside a module and kept: the batch moved in
NOT_USER = ("/torch/", "torch/", "/site-packages/", "/dist-packages/", "/nsbridge/",
             "<frozen", "threading.py", "runpy.py")


def memory_holders(mem: pd.DataFrame, peak: int, events: pd.DataFrame, tree: HostTree,
                   windows: pd.DataFrame, peak_bytes: Optional[float],
                   top: int = TOP_HOLDERS) -> Optional[MemoryHolders]:
    """The blocks live at the peak (row ``peak`` of ``mem``, the window's memory events
    of one device in time order) grouped by kind, op, module and line, and the live bytes
    by kind at each measured step's end. ``peak_bytes``: the allocator's total at the peak
    (None on the host, where levels are relative). None without addresses in the events."""
    addr = mem[S.ADDR].to_numpy(np.float64)
    if np.isnan(addr).all():
        return None
    change = np.nan_to_num(mem[S.BYTES].to_numpy(np.float64))
    ts = mem[S.TS].to_numpy(np.float64)
    blocks = _blocks(addr, change, ts)
    ends = windows["end"].to_numpy(np.float64) if int(windows["step"].iloc[0]) >= 0 else []
    wanted = _live_at(blocks, ts[peak]).copy()
    for end in ends:
        wanted |= _live_at(blocks, end - 1e-3)
    named = _named(blocks[wanted].reset_index(drop=True), mem, events, tree)
    live = _live_at(named, ts[peak])
    live_bytes = float(named.loc[live, "bytes"].sum())
    before = (max(peak_bytes - live_bytes, 0.0) if peak_bytes is not None else None)
    return {
        "at_ms": round(float(ts[peak] - windows["start"].min()) / 1e3, 3),
        "named_mib": mib(live_bytes), "blocks": int(live.sum()),
        "before_mib": mib(before) if before is not None else None,
        "named_pct": (round(100.0 * live_bytes / peak_bytes, 1) if peak_bytes else None),
        "with_stacks": bool((events[S.CAT] == S.PYTHON_FUNCTION).any()),
        "kinds": _by_kind(named[live]),
        "rows": holder_rows(named[live], top),
        "per_step_end": [_kinds_at(named, end - 1e-3) for end in ends],
    }


def _blocks(addr: np.ndarray, change: np.ndarray, ts: np.ndarray) -> pd.DataFrame:
    """One row per allocation seen (its event row ``at``, bytes, allocation time, and the
    time and row of its free: inf and -1 when it outlives the trace)."""
    order = np.lexsort((np.arange(len(addr)), addr))
    same_next = np.zeros(len(addr), dtype=bool)
    same_next[:-1] = addr[order][1:] == addr[order][:-1]
    freed_by = np.full(len(addr), -1, dtype=np.int64)
    nxt = np.r_[order[1:], -1]
    frees = same_next & (change[nxt.clip(0)] < 0)
    freed_by[order[frees]] = nxt[frees]
    allocs = np.flatnonzero((change > 0) & ~np.isnan(addr))
    free_row = freed_by[allocs]
    return pd.DataFrame({"at": allocs, "bytes": change[allocs], "t": ts[allocs],
                         "free_at": free_row,
                         "t_free": np.where(free_row >= 0, ts[free_row.clip(0)], np.inf)})


def _live_at(blocks: pd.DataFrame, t: float) -> np.ndarray:
    return ((blocks["t"] <= t) & (blocks["t_free"] > t)).to_numpy()


def _named(blocks: pd.DataFrame, mem: pd.DataFrame, events: pd.DataFrame,
           tree: HostTree) -> pd.DataFrame:
    """Each block with its op, module, line and kind (see the module docstring)."""
    allocs = mem.iloc[blocks["at"].to_numpy()]
    stacks = _stacks(tree, allocs)
    frees = mem.iloc[blocks["free_at"].to_numpy().clip(0)]
    freed_in_backward = np.array([any(n.startswith(_BACKWARD) for n in s)
                                  for s in _stacks(tree, frees)]) & (blocks["free_at"] >= 0)
    py = build_host_tree(events, (S.PYTHON_FUNCTION,))
    py_stacks = _stacks(py, allocs) if len(py) else [[] for _ in range(len(blocks))]
    step_end = _step_end_of(blocks["t"].to_numpy(), mem, events)
    kept = blocks["t_free"].to_numpy() > step_end
    named = blocks.copy()
    named["op"] = [_op(s) for s in stacks]
    named["module"] = [_module(s) for s in py_stacks]
    named["line"] = _user_lines(py, allocs)
    named["kind"] = [_kind(s, k, b, o, m) for s, k, b, o, m in
                     zip(stacks, kept, freed_in_backward, named["op"], named["module"])]
    return named


def _stacks(tree: HostTree, at: pd.DataFrame) -> list[list[str]]:
    """The names around each event, outermost first (ProfilerStep and nsbridge ranges out)."""
    if not len(tree) or at.empty:
        return [[] for _ in range(len(at))]
    pos = tree.enclosing(at[S.PID], at[S.TID], at[S.TS].to_numpy(np.float64))
    names, parent = tree.name_values, tree.parent
    out: list[list[str]] = []
    for p in pos:
        stack: list[str] = []
        p = int(p)
        while p >= 0:
            stack.append(str(names[p]))
            p = int(parent[p])
        stack.reverse()
        skip = starts_with(np.array(stack, dtype=object),
                           (S.PROFILER_STEP_PREFIX, S.NSBRIDGE_RANGE_PREFIX))
        out.append([n for n, s in zip(stack, skip) if not s])
    return out


def _step_end_of(t: np.ndarray, mem: pd.DataFrame, events: pd.DataFrame) -> np.ndarray:
    """The end of the profiler step holding each time (inf outside every step)."""
    steps = events[starts_with(events[S.NAME].array, S.PROFILER_STEP_PREFIX)
                   & (events[S.PH] == "X").to_numpy()]
    start = steps[S.TS].to_numpy(np.float64)
    end = start + steps[S.DUR].to_numpy(np.float64)
    order = np.argsort(start)
    start, end = start[order], end[order]
    i = np.searchsorted(start, t, side="right") - 1
    inside = (i >= 0) & (end[i.clip(0)] > t) if len(start) else np.zeros(len(t), dtype=bool)
    return np.where(inside, end[i.clip(0)] if len(start) else np.inf, np.inf)


def _op(stack: list[str]) -> Optional[str]:
    for name in stack:
        if name.startswith(_OUTER_OPS):
            return name[len(_BACKWARD):] if name.startswith(_BACKWARD) else name
    return stack[-1] if stack else None


def _module(stack: list[str]) -> Optional[str]:
    """The innermost nn.Module range: 'Conv2d_0'."""
    for name in reversed(stack):
        if name.startswith(MODULE):
            return name[len(MODULE):]
    return None


def _user_lines(py: HostTree, at: pd.DataFrame) -> list[Optional[str]]:
    """The innermost frame of the user's code around each event: 'train.py:31 forward'.
    torch.profiler names a frame entered while it records by the function's first line;
    a frame already running when it started, by the line it was on then, which is not
    where the event happened: those (recorded in the burst at its start) are named without
    a line ('train.py main')."""
    if not len(py) or at.empty:
        return [None] * len(at)
    running_at_start = float(py.start.min()) + STARTUP_BURST_US
    pos = py.enclosing(at[S.PID], at[S.TID], at[S.TS].to_numpy(np.float64))
    names, parent, start = py.name_values, py.parent, py.start
    out: list[Optional[str]] = []
    for p in pos:
        found, p = None, int(p)
        while p >= 0 and found is None:
            m = FRAME.match(str(names[p]))
            if m and not any(part in m["file"] for part in NOT_USER):
                where = "" if start[p] <= running_at_start else f":{m['line']}"
                found = f"{m['file'].rsplit('/', 1)[-1]}{where} {m['func']}"
            p = int(parent[p])
        out.append(found)
    return out


def _kind(stack: list[str], kept: bool, freed_in_backward: bool, op: Optional[str],
          module: Optional[str]) -> str:
    if any(n.startswith(_LOADER) for n in stack) or (op in _COPIES and module is None
                                                      and kept and not freed_in_backward):
        return "inputs"
    if any(n.startswith(_OPTIMIZER) for n in stack):
        return "optimizer state" if kept else "temporaries"
    if any(n.startswith(_BACKWARD) for n in stack):
        return "gradients" if kept else "temporaries"
    if freed_in_backward:
        return "activations"
    return "kept across steps" if kept else "temporaries"


def _by_kind(live: pd.DataFrame) -> list[MemoryKindLevel]:
    sums = live.groupby("kind")["bytes"].agg(["sum", "size"])
    return [{"kind": k, "mib": mib(float(sums.at[k, "sum"])), "blocks": int(sums.at[k, "size"])}
            for k in KINDS if k in sums.index]


def _kinds_at(named: pd.DataFrame, t: float) -> dict[str, float]:
    """Live MiB by kind at one time (every kind, 0 where none)."""
    sums = named[_live_at(named, t)].groupby("kind")["bytes"].sum()
    return {k: mib(float(sums.get(k, 0.0))) for k in KINDS}


def holder_rows(blocks: pd.DataFrame, top: int) -> list[MemoryHolder]:
    """Blocks (kind, module, op, line, bytes) grouped by the four names, most bytes first:
    the ``top`` largest groups."""
    rows = (blocks.groupby(["kind", "module", "op", "line"], dropna=False, sort=False)
            .agg(bytes=("bytes", "sum"), blocks=("bytes", "size"))
            .reset_index().sort_values("bytes", ascending=False, kind="stable"))
    return [{"kind": kind, "module": _text(module), "op": _text(op), "line": _text(line),
             "mib": mib(nbytes), "blocks": int(count)}
            for kind, module, op, line, nbytes, count in rows.head(top).itertuples(index=False)]


def _text(value: object) -> Optional[str]:
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def mib(nbytes: float) -> float:
    """Bytes as MiB, to the KiB."""
    return round(float(nbytes) / MIB, 3)
