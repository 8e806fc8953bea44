"""Sync points: where the host waits for the device, with the Python line that asked.

A sync point is a call that can wait for a device:

- GPU runs: the runtime's blocking calls in the measured window (stream, device and event
  synchronize, synchronous memcpy). `.item()`, `.tolist()` and `.cpu()` on a device tensor
  reach the device through one of them. Each call is tied to its line by the enclosing
  ``nsbridge::sync_site`` range (traces nsbridge writes), else by the trace's Python
  stack (function granularity, facts.md), and to the op it ran in. Calls inside
  ``nsbridge::own_sync`` are nsbridge's own and left out.
- CPU-only runs: nothing waits, so the script's own `.item()`/`.cpu()`/... calls, recorded
  in the profiled process, stand in for the syncs they would be on a GPU (those on tensors
  that stay on the host either way are left out there: _bootstrap.syncs). Library calls on
  CPU tensors (optimizer step counters, mask helpers) are not sync points, and neither are
  a CPU trace's ``_local_scalar_dense`` ops. Implicit syncs are predicted from the trace
  for the ops whose output size is the data's (``implicit_syncs``: ``nonzero``, so boolean
  mask indexing ``x[mask]`` and ``torch.where(mask)``, ``masked_select``, ``unique``,
  ``repeat_interleave`` by a tensor): on a GPU the host waits to learn that size. Others
  show only on a GPU (a scalar an op reads back inside a library, a copy into pageable
  host memory, an allocator retry).

Sync cost, one definition for the verdict, its evidence and the recommendations, per
measured step: the host time blocked in the blocking calls, and the GPU idle time that
follows each sync until the device's next activity (the queue drained while the host
waited, and stays empty while the host prepares the next launches). A CPU-only run cannot
measure that, so its sync points are ranked by calls per step (each would drain the GPU's
queue once), never by the host time of the CPU call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from ...schema.records import SyncRecord
from ... import schema as S
from .nesting import HostTree
from .python_lines import python_lines
from ..strings import is_in, name_mask
from ...contract.report import SyncPoint

BLOCKING_CALL = re.compile(
    r"^(cuda|hip)(Stream|Device|Event)Synchronize|^cu(Stream|Ctx|Event)Synchronize"
    r"|^(cuda|hip)Memcpy(2D|3D)?(_v\d+)?$|^cuMemcpy(DtoH|HtoD|DtoD)?(_v\d+)?$")
ITEM_OP = "aten::_local_scalar_dense"
COPY_OPS = {"aten::_to_copy", "aten::copy_", "aten::to"}
_SITE = re.compile(r"^(?P<kind>\S+) (?P<device>\S+) (?P<file>.+):(?P<line>\d+)$")
# ops whose output size is the data's: on a GPU the host reads it back before going on
DATA_DEPENDENT = frozenset({"aten::nonzero", "aten::masked_select", "aten::_unique",
                            "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
                            "aten::unique_dim_consecutive"})
REPEAT_INTERLEAVE = "aten::repeat_interleave"   # by a tensor of repeats: it reads a scalar
IMPLICIT = "implicit"
# ranges whose ops run on the host on a GPU machine too
_HOST_SIDE = ("Optimizer.", "enumerate(DataLoader)")
_BACKWARD_NODE = re.compile(r"^\w+Backward\d*$")
WINDOW, WHOLE_RUN, OUTSIDE = "measured steps", "whole run", "outside the steps"
TRACE_WINDOW = "window"
# one blocking call as blocking_calls reads it: call, kind, op, file, line, device, site
_CallRow = tuple[str, str, Optional[str], Optional[str], Optional[int], Optional[str], bool]


@dataclass(frozen=True)
class SyncCost:
    """What syncs cost per measured step (None where a CPU-only run cannot tell)."""

    calls_per_step: float
    blocked_ms: Optional[float]      # host time in blocking calls
    gpu_idle_ms: Optional[float]     # GPU idle after them until its next activity
    step_ms: float

    @property
    def blocked_share(self) -> Optional[float]:
        return None if self.blocked_ms is None or not self.step_ms else self.blocked_ms / self.step_ms

    @property
    def idle_share(self) -> Optional[float]:
        return None if self.gpu_idle_ms is None or not self.step_ms else self.gpu_idle_ms / self.step_ms


def blocking_calls(events: pd.DataFrame, tree: HostTree, lo: float, hi: float) -> pd.DataFrame:
    """One row per blocking runtime call in [lo, hi), nsbridge's own left out.

    Columns: start, end, call (runtime function), kind (the site's kind, else ``item`` /
    ``copy`` from the op it ran in, else the call), op (innermost op), file, line, device
    (the tensor's, from the site; else None), site (True when an ``nsbridge::sync_site``
    range named the line).
    """
    in_window = ((events[S.TS] >= lo) & (events[S.TS] < hi)).to_numpy()
    calls = events.loc[is_in(events[S.CAT], S.LAUNCH_CATS) & in_window
                       & name_mask(events[S.NAME], BLOCKING_CALL.match),
                       [S.NAME, S.PID, S.TID, S.TS, S.DUR]]
    columns = ["start", "end", "call", "kind", "op", "file", "line", "device", "site"]
    if calls.empty:
        return pd.DataFrame(columns=columns)
    probe = calls[S.TS].to_numpy(np.float64) + np.minimum(calls[S.DUR].to_numpy(), 1e-3)
    pos = tree.enclosing(calls[S.PID], calls[S.TID], probe)
    host_names = tree.name_values
    rows: list[Optional[_CallRow]] = []   # None: nsbridge's own
    for p, call in zip(pos, calls[S.NAME].str.replace(r"_v\d+$", "", regex=True)):
        chain = []
        while p >= 0:
            chain.append(str(host_names[p]))
            p = tree.parent[p]
        if any(c.startswith(S.OWN_SYNC_RANGE) for c in chain):
            rows.append(None)
            continue
        ops = [c for c in chain if not c.startswith((S.NSBRIDGE_RANGE_PREFIX,
                                                      S.PROFILER_STEP_PREFIX))]
        site = next((_SITE.match(c[len(S.SYNC_SITE_PREFIX):]) for c in chain
                     if c.startswith(S.SYNC_SITE_PREFIX)), None)
        if site:
            rows.append((call, site["kind"], ops[0] if ops else None, site["file"],
                         int(site["line"]), site["device"], True))
            continue
        kind = ("item" if ITEM_OP in ops else "copy" if COPY_OPS & set(ops) else call)
        rows.append((call, kind, ops[0] if ops else None, None, None, None, False))
    keep = np.array([r is not None for r in rows], dtype=bool)
    frame = pd.DataFrame([r for r in rows if r is not None],
                         columns=["call", "kind", "op", "file", "line", "device", "site"])
    kept = calls[keep]
    frame.insert(0, "start", kept[S.TS].to_numpy(np.float64))
    frame.insert(1, "end", frame["start"].to_numpy() + kept[S.DUR].to_numpy(np.float64))
    if not frame.empty and not frame["site"].all():
        files, lines = python_lines(events, kept[S.PID], kept[S.TID], probe[keep])
        no_site = ~frame["site"].to_numpy(dtype=bool)
        for column, values in (("file", files), ("line", lines)):   # object: None stays None
            merged = frame[column].to_numpy(dtype=object).copy()
            merged[no_site] = np.asarray(values, dtype=object)[no_site]
            frame[column] = merged
    return frame[columns]


def implicit_syncs(tree: HostTree, lo: float, hi: float, n_steps: int,
                   seconds: Optional[float]) -> list[SyncPoint]:
    """The sync points a GPU would add to a CPU-only run: ops in [lo, hi) whose output size
    is the data's (DATA_DEPENDENT, and REPEAT_INTERLEAVE where it reads a scalar), the
    outermost such op of each nest, none under an optimizer step or a DataLoader fetch.
    One point per (op, the aten op or autograd node around it), without a Python line: a
    trace's stacks give a function's first line, not the call's (facts.md), and the
    profiled process records only the calls it wraps. ``seconds``: a window without steps
    (rates per second)."""
    if not len(tree):
        return []
    names = tree.names       # each test runs once per distinct name (model.strings)
    syncs = is_in(names, DATA_DEPENDENT).copy()
    scalar = np.flatnonzero(is_in(names, (ITEM_OP,)))
    repeat = is_in(names, (REPEAT_INTERLEAVE,))
    up = tree.parent[scalar]
    while len(up):        # a repeat_interleave that reads a scalar inside it
        up = up[up >= 0]
        syncs[up[repeat[up]]] = True
        up = tree.parent[up]
    host_side = name_mask(names, lambda name: name.startswith(_HOST_SIDE))
    # what the script called: an aten op, or in a backward pass the autograd node
    called_op = name_mask(names, lambda name: name.startswith("aten::")
                          or _BACKWARD_NODE.match(name) is not None)
    found = np.flatnonzero(syncs & (tree.start >= lo) & (tree.start < hi))
    keep = np.ones(len(found), dtype=bool)
    called = found.copy()                  # the outermost aten op around each
    up = tree.parent[found]
    while (up >= 0).any():
        live = up >= 0
        at = up[live]
        keep[live] &= ~(syncs[at] | host_side[at])
        called_here = called_op[at]
        called[np.flatnonzero(live)[called_here]] = at[called_here]
        up = np.where(live, tree.parent[np.maximum(up, 0)], -1)
    found, called = found[keep], called[keep]
    if not len(found):
        return []
    values = tree.name_values
    frame = pd.DataFrame({"call": values[found], "op": values[called], "dur": tree.dur[found]})
    agg = frame.groupby(["call", "op"], sort=False).agg(
        count=("dur", "size"), host_us=("dur", "sum")).reset_index()
    return [{"kind": IMPLICIT, "call": r.call, "op": r.op, "file": None,
             "line": None, "function": None, "code": None, "device": "cpu",
             "count": int(r.count),
             "per_step": None if seconds else round(r.count / max(n_steps, 1), 2),
             "per_s": round(r.count / seconds, 3) if seconds else None,
             "counted_over": TRACE_WINDOW if seconds else WINDOW,
             "placement": "window" if seconds else "steps",
             "placement_why": f"{r.call}: its output size is the data's, which a GPU "
                              "reads back to the host",
             "host_ms": round(float(r.host_us) / 1e3, 3), "gpu_idle_ms": None,
             "run_count": None, "library": False, "via": None,
             "source": "torch.profiler trace (an op that syncs on a GPU)"}
            for r in agg.itertuples(index=False)]


def gpu_idle_after(calls: pd.DataFrame, gpu: pd.DataFrame, hi: float) -> np.ndarray:
    """GPU idle time that follows each blocking call until the next GPU activity (µs).

    Zero when the GPU is still busy when the call returns. The idle stretch starts when
    both the call has begun and the GPU has run dry, and ends at the next GPU activity (on
    any device of the trace), the next sync's own stretch, or ``hi``: no time counts twice.
    """
    if calls.empty:
        return np.zeros(0)
    g_start = gpu["ts"].to_numpy(np.float64)
    order = np.argsort(g_start, kind="stable")
    g_start = g_start[order]
    g_end = np.maximum.accumulate((gpu["ts"] + gpu["dur"]).to_numpy(np.float64)[order]) \
        if len(order) else np.zeros(0)
    by_end = np.argsort(calls["end"].to_numpy(np.float64), kind="stable")
    start = calls["start"].to_numpy(np.float64)[by_end]
    end = calls["end"].to_numpy(np.float64)[by_end]
    i = np.searchsorted(g_start, end, side="left")
    last_end = np.where(i > 0, g_end[np.maximum(i - 1, 0)] if len(g_end) else -np.inf, -np.inf)
    next_start = np.where(i < len(g_start), g_start[np.minimum(i, len(g_start) - 1)]
                          if len(g_start) else hi, hi)
    begin = np.maximum(start, last_end)
    stop = np.minimum(np.minimum(next_start, hi), np.append(begin[1:], np.inf))
    idle = np.where(last_end > end, 0.0, np.clip(stop - begin, 0.0, None))
    out = np.empty(len(idle))
    out[by_end] = idle
    return out


def sync_points(*, calls: pd.DataFrame, idle_us: np.ndarray,
                process_records: Optional[list[SyncRecord]], n_steps: int,
                run_steps: Optional[int], device_run: bool,
                seconds: Optional[float] = None,
                implicit: Sequence[SyncPoint] = ()) -> list[SyncPoint]:
    """The report's ``sync_points``: one dict per call site, costliest first (GPU runs:
    host blocked + GPU idle after; CPU-only runs: calls per step, then count).

    Each: kind, call, op, file, line, function, code (the statement's text, from the
    profiled process), device, count, per_step, per_s, counted_over, placement, host_ms,
    gpu_idle_ms (GPU runs), run_count (calls over the whole run, from the profiled
    process), library, via, source. ``implicit``: a CPU-only run's implicit_syncs.

    ``counted_over``: ``measured steps`` (in the trace's window), ``whole run`` (the profiled
    process's records of a site that runs in the training steps) or ``outside the steps``.
    ``placement``: ``steps`` when the site runs in the training steps, else ``outside``
    (see ``placement``); only ``steps`` sites have a ``per_step`` and count toward the
    verdict. ``seconds`` (a window without steps): no site has a ``per_step``; a trace's
    sites (placement ``window``) have ``per_s``, their rate over the window, and the
    process's records (placement ``run``) only their count over the whole run.
    """
    records = process_records or []
    if device_run:
        points = _trace_points(calls, idle_us, n_steps, seconds)
        records = [r for r in records if r["device"] != "cpu"]  # a CPU tensor never waits
    else:
        points = list(implicit)
        records = [r for r in records if not r.get("library")]
    by_site = {(p["kind"], p["file"], p["line"]): p for p in points}
    for rec in records:
        point = by_site.get((rec["kind"], rec["file"], rec["line"]))
        if point is not None:
            point["run_count"] = rec["count"]
            point["function"], point["code"] = rec.get("function"), rec.get("code")
            point["source"] = f"{point.get('source')} + nsbridge (in-process)"
            point["via"] = rec.get("via")
            continue
        steps = max(run_steps or rec["steps"], 1)
        where, why = placement(rec, run_steps) if seconds is None else ("run", None)
        inside = where == "steps"
        points.append({"kind": rec["kind"], "call": None, "op": rec["op"], "file": rec["file"],
                       "line": rec["line"], "function": rec.get("function"),
                       "code": rec.get("code"), "device": rec["device"], "count": rec["count"],
                       "per_step": round(rec["count"] / steps, 2) if inside else None,
                       "per_s": None,
                       "counted_over": OUTSIDE if where == "outside" else WHOLE_RUN,
                       "placement": where, "placement_why": why,
                       "host_ms": round(rec["cost_ms"], 3), "gpu_idle_ms": None,
                       "run_count": rec["count"], "library": bool(rec.get("library")),
                       "via": rec.get("via"), "source": "nsbridge (in-process)"})
    if device_run:
        return sorted(points, key=lambda p: (p.get("placement") != "steps",
                                             -((p.get("host_ms") or 0.0)
                                               + (p.get("gpu_idle_ms") or 0.0)),
                                             -(p.get("count") or 0)))
    return sorted(points, key=lambda p: (p.get("placement") != "steps",
                                         -(p.get("per_step") or 0.0), -(p.get("per_s") or 0.0),
                                         -(p.get("count") or 0), -(p.get("host_ms") or 0.0)))


def placement(record: SyncRecord, run_steps: Optional[int]) -> tuple[str, str]:
    """Whether a call site recorded in the profiled process runs in the training steps:
    ("steps" | "outside", why). A site runs in the steps when it ran in at least half of
    the steps the script ran; one that ran only after the last step, before the first, or
    in fewer steps (evaluation between epochs, a periodic checkpoint) is outside them."""
    n = int(run_steps or 0)
    if n == 0:
        return "outside", "the script ran no training step"
    first, last = record.get("first_step"), record.get("last_step")
    if first is not None and first >= n:
        return "outside", "after the last training step"
    if last is not None and last == 0 and n > 1:
        return "outside", "before the first training step ended"
    seen = int(record.get("steps") or 0)
    if seen * 2 >= n:
        return "steps", f"in {seen} of {n} steps"
    most = record.get("max_in_one_step")
    calls = f", up to {most} calls in one step" if most and most > 1 else ""
    return "outside", f"periodic: in {seen} of {n} steps{calls}"


def sync_cost(*, calls: pd.DataFrame, idle_us: np.ndarray, points: list[SyncPoint],
              n_steps: int, step_ms: float, device_run: bool) -> SyncCost:
    """Per measured step: calls, host time blocked and GPU idle after (GPU runs from the
    trace's blocking calls; CPU-only runs count the script's sync calls per step)."""
    steps = max(n_steps, 1)
    if device_run:
        dur = (calls["end"] - calls["start"]).sum() if len(calls) else 0.0
        return SyncCost(calls_per_step=len(calls) / steps, blocked_ms=float(dur) / 1e3 / steps,
                        gpu_idle_ms=float(idle_us.sum()) / 1e3 / steps, step_ms=step_ms)
    return SyncCost(calls_per_step=float(sum(p["per_step"] or 0.0 for p in points
                                             if p["placement"] == "steps")),
                    blocked_ms=None, gpu_idle_ms=None, step_ms=step_ms)


def _trace_points(calls: pd.DataFrame, idle_us: np.ndarray, n_steps: int,
                  seconds: Optional[float]) -> list[SyncPoint]:
    if calls.empty:
        return []
    frame = calls.assign(dur=calls["end"] - calls["start"], idle=idle_us)
    keys = ["kind", "op", "file", "line", "device"]
    frame[keys] = frame[keys].astype(object).where(frame[keys].notna(), "")
    agg = frame.groupby(keys, sort=False).agg(
        call=("call", "first"), count=("dur", "size"), host_us=("dur", "sum"),
        idle_us=("idle", "sum"), site=("site", "any")).reset_index()
    return [{"kind": r.kind, "call": r.call, "op": r.op or None, "file": r.file or None,
             "line": None if r.line == "" else int(r.line), "device": r.device or "cuda",
             "function": None, "code": None, "count": int(r.count),
             "per_step": None if seconds else round(r.count / max(n_steps, 1), 2),
             "per_s": round(r.count / seconds, 3) if seconds else None,
             "counted_over": WINDOW if not seconds else TRACE_WINDOW,
             "placement": "steps" if not seconds else "window", "placement_why": None,
             "host_ms": round(float(r.host_us) / 1e3, 3),
             "gpu_idle_ms": round(float(r.idle_us) / 1e3, 3), "run_count": None,
             "library": False, "via": None, "source": "torch.profiler trace"}
            for r in agg.itertuples(index=False)]
