"""Memory over the measured window: the allocator's curve, its peak and the ops live there.

torch.profiler's memory events (``profile_memory``) each carry the allocator's totals
after the event ("Total Allocated", "Total Reserved"), so the curve is read, not
rebuilt; a trace without the totals gets the running sum of the events' bytes from the
window start (``relative``: the level before the window is unknown). So does host memory
(``relative_why`` says which): torch's CPU totals count only blocks allocated while a
recording ran (c10's ProfiledCPUMemoryReporter), and keep those freed between recordings
(nsbridge's start-up recording, freed in the unrecorded warm-up steps), so their level is
not the process's (49 MiB held where 33 were live); a free of a block allocated before
the window is not in the trace at all, so a level since the window start is an upper
bound, exact from the first measured step's end on. Only the run's
device counts: the busiest GPU on a GPU run, host memory otherwise (torch's own rule for
its CUDA Mem / CPU Mem columns).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from ... import schema as S
from ..host.nesting import HostTree
from ..host.ops import MIB
from .memory_holders import memory_holders
from ..strings import starts_with
from ...contract.report import Memory

MAX_POINTS = 400     # at most: each time bucket's highest and lowest point, and the peak
NO_TOTALS = "no totals"      # relative_why: the trace's memory events carry none
HOST_TOTALS = "host"         # relative_why: torch's CPU totals are not the process's


def memory_over_window(events: pd.DataFrame, tree: HostTree, windows: pd.DataFrame,
                       device_run: bool) -> Optional[Memory]:
    """The window's memory curve and peak, or None without memory events in it.

    Returns device ("cuda:N" or "cpu"), events, relative (True: levels are bytes since the
    window start, not the allocator's totals), relative_why (NO_TOTALS, HOST_TOTALS or
    None), points {t_ms (from the window start),
    allocated_mib, reserved_mib (None on the host)}, start_mib / end_mib (allocated before
    the first and after the last event), peak_mib, peak_at_ms, peak_step, peak_ops (the
    op stack at the peak, outermost first), reserved_peak_mib, per_step_end_mib
    (allocated at each measured step's end: growth from step to step is memory kept).
    """
    mem = events[events[S.CAT] == S.MEMORY]
    device = mem[S.DEVICE].fillna(-1).to_numpy(np.float64)
    if device_run:
        gpus = device[device >= 0]
        if not len(gpus):
            return None
        wanted = float(pd.Series(gpus).mode().iloc[0])
        mem, label = mem[device == wanted], f"cuda:{int(wanted)}"
    else:
        mem, label = mem[device < 0], "cpu"
    lo, hi = float(windows["start"].min()), float(windows["end"].max())
    ts_all = mem[S.TS].to_numpy(np.float64)
    mem = mem[(ts_all >= lo) & (ts_all < hi)]
    if mem.empty:
        return None
    order = np.argsort(mem[S.TS].to_numpy(np.float64), kind="stable")
    mem = mem.iloc[order]
    ts = mem[S.TS].to_numpy(np.float64)
    change = np.nan_to_num(mem[S.BYTES].to_numpy(np.float64))
    totals = mem[S.TOTAL_ALLOCATED].to_numpy(np.float64)
    relative_why = (NO_TOTALS if np.isnan(totals).any() else None if device_run
                    else HOST_TOTALS)
    relative = relative_why is not None
    allocated = np.cumsum(change) if relative else totals
    reserved = mem[S.TOTAL_RESERVED].to_numpy(np.float64)
    has_reserved = device_run and not np.isnan(reserved).any()
    peak = int(np.argmax(allocated))
    keep = _curve_points(ts, allocated, lo, hi, peak)
    step_ends = windows["end"].to_numpy(np.float64)
    at_end = np.searchsorted(ts, step_ends, side="right") - 1
    start = allocated[0] - change[0]
    per_step_end = np.where(at_end >= 0, allocated[np.maximum(at_end, 0)], start)
    return {
        "device": label, "events": int(len(mem)), "relative": relative,
        "relative_why": relative_why,
        "points": {"t_ms": _round((ts[keep] - lo) / 1e3),
                   "allocated_mib": _round(allocated[keep] / MIB),
                   "reserved_mib": _round(reserved[keep] / MIB) if has_reserved else None},
        "start_mib": round(float(start) / MIB, 3),
        "end_mib": round(float(allocated[-1]) / MIB, 3),
        "peak_mib": round(float(allocated[peak]) / MIB, 3),
        "peak_at_ms": round(float(ts[peak] - lo) / 1e3, 3),
        "peak_step": _step_at(windows, float(ts[peak])),
        "peak_ops": _op_stack(events, tree, mem.iloc[[peak]]),
        "reserved_peak_mib": round(float(np.max(reserved)) / MIB, 3) if has_reserved else None,
        "per_step_end_mib": _round(per_step_end / MIB) if int(windows["step"].iloc[0]) >= 0
        else [],
        "holders": memory_holders(mem, peak, events, tree, windows,
                                  None if relative else float(allocated[peak])),
    }


def _curve_points(ts: np.ndarray, level: np.ndarray, lo: float, hi: float,
                  peak: int) -> np.ndarray:
    """Indices to draw: every event when few, else each time bucket's highest and lowest
    point (a step's rise and fall both show), plus the first, last and peak events."""
    if len(ts) <= MAX_POINTS:
        return np.arange(len(ts))
    buckets = np.minimum(((ts - lo) / max(hi - lo, 1e-9) * (MAX_POINTS // 2)).astype(np.int64),
                         MAX_POINTS // 2 - 1)
    frame = pd.DataFrame({"b": buckets, "v": level, "i": np.arange(len(ts))}, copy=False)
    highs = frame.loc[frame.groupby("b")["v"].idxmax(), "i"].to_numpy()
    lows = frame.loc[frame.groupby("b")["v"].idxmin(), "i"].to_numpy()
    return np.unique(np.concatenate([highs, lows, [0, len(ts) - 1, peak]]))


def _op_stack(events: pd.DataFrame, tree: HostTree, event: pd.DataFrame) -> list[str]:
    """The host ops around one event, outermost first (steps and nsbridge ranges left out)."""
    pos = int(tree.enclosing(event[S.PID], event[S.TID], event[S.TS].to_numpy())[0])
    names = tree.name_values
    stack = []
    while pos >= 0:
        stack.append(str(names[pos]))
        pos = int(tree.parent[pos])
    ours = starts_with(np.array(stack, dtype=object),
                       (S.PROFILER_STEP_PREFIX, S.NSBRIDGE_RANGE_PREFIX))
    return [name for name, skip in zip(reversed(stack), reversed(ours)) if not skip]


def _step_at(windows: pd.DataFrame, ts: float) -> Optional[int]:
    inside = windows[(windows["start"] <= ts) & (ts < windows["end"])]
    step = int(inside["step"].iloc[0]) if len(inside) else -1
    return step if step >= 0 else None


def _round(values: np.ndarray) -> list[float]:
    return [round(float(v), 3) for v in values]
