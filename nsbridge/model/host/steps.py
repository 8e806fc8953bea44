"""Steps and where their time goes: data loading, forward, backward, optimizer, other.

Steps are the ``ProfilerStep#N`` ranges torch.profiler writes; a trace without them (or
``window="trace"``) is one window over the whole recording, judged in totals and rates per
second. A step the recording ended inside is not a step: the last step is dropped when it
is shorter than half the median of the others and holds fewer than half their median
number of events (a complete but fast step has as many); a lone step whose recorded
activity (host ops and runtime calls on any thread, GPU work) ends before a tenth of its
span is clipped to that activity. Steps nsbridge closed itself at step boundaries (triage,
unless a budget stopped the window) are complete and kept as they are.

Phases are defined so they add up to the step for any loop. Each instant of the step
belongs to the first of these that covers it (unions of host intervals, clipped to the
step):

1. data: ``enumerate(DataLoader)#...`` ranges (DataLoader ``__next__``);
2. backward: ``autograd::engine::evaluate_function: ...`` ranges on any thread, and
   nsbridge's range around each ``loss.backward()`` call (``nsbridge::backward``, in runs
   nsbridge profiled: the engine's final callbacks run in no op, and DDP's wait for its
   gradients' all-reduce, FSDP's for its reduce-scatters, are in them); in a trace without
   it, from the last backward range's end to the end of the gradient synchronisation that
   closes it before the optimizer (DDP's ``torch.distributed.ddp.reducer::`` ranges,
   FSDP's ``FSDP::root_post_backward...``/``FSDP::post_backward...``): the wait between
   is the same callbacks';
3. forward: the step's top-level ops on its thread that start before the step's last
   backward range (every forward of a GAN's two models, not only the first; all of them
   in a step without backward, as in inference) with the Python between two of them
   (module calls, hooks) unless a data, optimizer or backward range lies there, and the ops an optimizer range runs
   before its own last backward (the closures of LBFGS, Lightning's training_step), and
   the first optimizer range's span up to its first backward (the closure's Python)
   less the optimizer ranges nested in it;
4. optimizer: ``Optimizer.step#...`` and ``Optimizer.zero_grad#...`` ranges;
5. other: the rest (ops after the last backward such as gradient clipping or metrics,
   Python between ops, logging, idle waits).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import schema as S
from .nesting import HostTree, clipped_union, covered_within, merge_intervals
from ..strings import starts_with

DATA_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
# what closes a backward pass in the autograd engine's final callbacks: DDP's copies of the
# reduced buckets, FSDP's wait for its reduce-scatters
GRAD_SYNC_PREFIXES = ("torch.distributed.ddp.reducer::", "FSDP::root_post_backward",
                      "FSDP::post_backward")
PHASES = ["data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms"]


def step_windows(events: pd.DataFrame, tree: HostTree) -> pd.DataFrame:
    """One row per step: step (int, -1 for a whole-recording window), start, end (µs), pos.

    ``pos`` is the step range's position in the tree (-1 for a whole-run window).
    """
    is_step = starts_with(tree.names, S.PROFILER_STEP_PREFIX)   # tested per distinct name
    if is_step.any():
        pos = np.nonzero(is_step)[0]
        frame = pd.DataFrame({"name": tree.name_values[pos], "start": tree.start[pos],
                              "end": tree.end[pos], "pos": pos}, copy=False)
        frame = frame.drop_duplicates("name").sort_values("start", kind="stable")
        frame["step"] = _step_numbers(frame["name"].str[len(S.PROFILER_STEP_PREFIX):])
        return frame[["step", "start", "end", "pos"]].reset_index(drop=True)
    start, end = events[S.TS], events[S.TS] + events[S.DUR]
    return pd.DataFrame({"step": [-1], "start": [float(start.min())], "end": [float(end.max())],
                         "pos": [-1]})


LONE_STEP_ACTIVE = 0.10   # a lone step whose activity ends before this share of it is cut


def _step_numbers(suffixes: pd.Series) -> np.ndarray:
    """``ProfilerStep#N`` numbers; a name that is not a number (``ProfilerStep#warmup``)
    gets the next numbers after the largest one, in order."""
    numbers = pd.to_numeric(suffixes, errors="coerce")
    numbers = numbers.where(numbers.abs() < 2 ** 53)   # beyond: not a step number
    odd = numbers.isna().to_numpy()
    top = int(numbers.max()) if (~odd).any() else -1
    out = numbers.fillna(0).to_numpy(np.int64).copy()
    out[odd] = top + 1 + np.arange(int(odd.sum()))
    return out


def drop_partial_steps(windows: pd.DataFrame, events: pd.DataFrame) -> tuple[pd.DataFrame,
                                                                          list[str]]:
    """The steps without the one the recording ended inside (see the module docstring),
    with a note for each step dropped or clipped."""
    if windows.empty or int(windows["step"].iloc[0]) < 0:
        return windows, []
    last = windows.iloc[-1]
    start, span = float(last["start"]), float(last["end"] - last["start"])
    if len(windows) == 1:
        busy_end = _activity_end(events, start, float(last["end"]))
        if not start < busy_end < start + LONE_STEP_ACTIVE * span:
            return windows, []
        clipped = windows.copy()
        clipped.loc[clipped.index[-1], "end"] = busy_end
        return clipped, [f"step {int(last['step'])} spans {span / 1e3:.2f} ms but its recorded "
                         f"activity ends after {(busy_end - start) / 1e3:.2f} ms (the recording "
                         "ended inside it): it is clipped to its activity"]
    others = (windows["end"] - windows["start"]).iloc[:-1]
    counts = _event_counts(events, windows)
    if span >= 0.5 * float(others.median()) or counts[-1] >= 0.5 * float(np.median(counts[:-1])):
        return windows, []
    return windows.iloc[:-1].reset_index(drop=True), [
        f"the last step ({int(last['step'])}) is partial ({span / 1e3:.2f} ms and {counts[-1]} "
        f"events against a median of {others.median() / 1e3:.2f} ms and "
        f"{np.median(counts[:-1]):.0f}: the recording ended inside it) and is left out"]


def _event_counts(events: pd.DataFrame, windows: pd.DataFrame) -> np.ndarray:
    """Events (step ranges aside) starting in each step, [start, end). Each event is
    placed among the steps' sorted edges (a few hundred), not the events sorted."""
    start = events[S.TS].to_numpy(np.float64)[~starts_with(events[S.NAME],
                                                          S.PROFILER_STEP_PREFIX)]
    lo, hi = windows["start"].to_numpy(np.float64), windows["end"].to_numpy(np.float64)
    edges = np.unique(np.concatenate([lo, hi]))
    # before[j]: the events starting before edges[j] (NaN lands past every edge)
    before = np.cumsum(np.bincount(np.searchsorted(edges, start, side="right"),
                                   minlength=len(edges) + 1))
    counts = before[np.searchsorted(edges, hi)] - before[np.searchsorted(edges, lo)]
    return counts.astype(np.int64)


def _activity_end(events: pd.DataFrame, lo: float, hi: float) -> float:
    """End of the last event (host op, runtime call, GPU work; step ranges aside) that
    starts in [lo, hi), clipped to hi."""
    start = events[S.TS].to_numpy(np.float64)
    inside = (start >= lo) & (start < hi) & ~starts_with(events[S.NAME], S.PROFILER_STEP_PREFIX)
    if not inside.any():
        return lo
    return float(np.minimum(start[inside] + events[S.DUR].to_numpy(np.float64)[inside],
                            hi).max())


def main_thread(tree: HostTree, windows: pd.DataFrame) -> int:
    """Thread code of the training loop: the one holding the steps, else the busiest."""
    if (windows["pos"] >= 0).any():
        return int(tree.thread[int(windows["pos"].iloc[0])])
    top = tree.depth == 0
    if not top.any():
        return -1
    busy = np.bincount(tree.thread[top], weights=tree.dur[top])
    return int(np.argmax(busy))


def step_breakdown(events: pd.DataFrame, tree: HostTree, windows: pd.DataFrame) -> pd.DataFrame:
    """Per step: step, wall_ms and the PHASES columns (milliseconds, summing to wall_ms).
    Each step looks only at the ops starting inside it (a binary search in each thread's
    ops, sorted by start), not at every op of the trace. nsbridge's speed probe
    (``nsbridge::speed_probe``, in a gate's processes) is not part of any step."""
    names = tree.names
    data = starts_with(names, DATA_PREFIX)
    optim = starts_with(names, OPTIMIZER_PREFIXES)
    backward = starts_with(names, (BACKWARD_PREFIX, S.BACKWARD_RANGE))
    grad_sync = starts_with(names, GRAD_SYNC_PREFIXES)
    own_backward = starts_with(names, S.BACKWARD_RANGE)
    is_step = starts_with(names, S.PROFILER_STEP_PREFIX)
    closure_range = starts_with(names, S.CLOSURE_PREFIX)
    probe = starts_with(names, S.SPEED_PROBE_RANGE)
    thread = main_thread(tree, windows)
    under_step = np.zeros(len(tree), dtype=bool)
    under_step[tree.parent >= 0] = is_step[tree.parent[tree.parent >= 0]]
    loop_top = (tree.thread == thread) & (((tree.depth == 0) & ~is_step) | under_step)
    rows = []
    for step, lo, hi, pos in windows[["step", "start", "end", "pos"]].itertuples(index=False):
        ops = _starting_in(tree, lo, hi)
        start, end = tree.start[ops], tree.end[ops]
        # pos >= 0: the step range's children; one window: the loop thread's top level
        top = tree.parent[ops] == pos if pos >= 0 else loop_top[ops]
        bwd = backward[ops]
        last_bwd = start[bwd].max() if bwd.any() else np.inf   # no backward: inference
        fwd = top & (start < last_bwd) & ~data[ops] & ~optim[ops] & ~bwd & ~probe[ops]
        gaps = _forward_gaps(start, end, fwd, data[ops] | optim[ops] | bwd)
        fwd |= _closure_ops(tree, ops, optim[ops], bwd, closure_range)
        closure = _closure_spans(start, end, optim[ops], bwd)
        spans = (np.concatenate([closure[0], gaps[0]]), np.concatenate([closure[1], gaps[1]]))
        closing = _grad_sync_span(start, end, bwd, grad_sync[ops], optim[ops], hi) \
            if not own_backward[ops].any() else (spans[0][:0], spans[1][:0])
        covered, lengths = np.zeros(len(ops), dtype=bool), {}
        extra_start, extra_end = np.zeros(0), np.zeros(0)   # spans a phase adds, kept after
        done = 0.0
        for phase, mask, adds in (("data", data[ops], None), ("backward", bwd, closing),
                                  ("forward", fwd, spans), ("optimizer", optim[ops], None)):
            covered |= mask
            if adds is not None:
                extra_start = np.concatenate([extra_start, adds[0]])
                extra_end = np.concatenate([extra_end, adds[1]])
            union = clipped_union(np.concatenate([start[covered], extra_start]),
                                  np.concatenate([end[covered], extra_end]), lo, hi)
            lengths[phase], done = union - done, union
        own = float((end - start)[probe[ops] & top].sum())   # nsbridge's speed probe
        wall = hi - lo - own
        rows.append({"step": int(step), "wall_ms": wall / 1e3, "data_ms": lengths["data"] / 1e3,
                     "forward_ms": lengths["forward"] / 1e3,
                     "backward_ms": lengths["backward"] / 1e3,
                     "optimizer_ms": lengths["optimizer"] / 1e3,
                     "other_ms": max(wall - done, 0.0) / 1e3})
    return pd.DataFrame(rows, columns=["step", "wall_ms", *PHASES])


def _grad_sync_span(start: np.ndarray, end: np.ndarray, bwd: np.ndarray, sync: np.ndarray,
                    optim: np.ndarray, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The wait that closes a backward pass in a trace without nsbridge's backward range
    (module docstring, 2), as (starts, ends): from the end of the step's backward ranges to
    the end of the gradient synchronisation ranges (``sync``) that begin after the last
    backward range does, end after it, and begin before the next optimizer range."""
    none = (np.zeros(0), np.zeros(0))
    if not bwd.any() or not sync.any():
        return none
    closed = float(end[bwd].max())
    after = optim & (start >= closed)
    limit = start[after].min() if after.any() else hi
    closing = sync & (start >= start[bwd].max()) & (end > closed) & (start < limit)
    if not closing.any():
        return none
    return np.array([closed]), np.array([float(end[closing].max())])


def _starting_in(tree: HostTree, lo: float, hi: float) -> np.ndarray:
    """Tree positions of the ops starting in [lo, hi), in tree order: each thread's ops
    are sorted by start, so a step's are one run per thread, found by binary search."""
    runs = []
    for first, last in tree.bounds:
        starts = tree.start[first:last]
        runs.append(np.arange(first + np.searchsorted(starts, lo, "left"),
                              first + np.searchsorted(starts, hi, "left")))
    return np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)


def _forward_gaps(start: np.ndarray, end: np.ndarray, forward: np.ndarray,
                  barrier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Python between consecutive forward ops (module calls, hooks), as spans: each gap
    between one forward op's end and the next one's start, unless a data, optimizer or
    backward range lies in it (then the gap is between phases, not inside the forward)."""
    ops_start, ops_end = merge_intervals(start[forward], end[forward])
    lo, hi = ops_end[:-1], ops_start[1:]
    if not np.any(barrier):
        return lo, hi
    clear = covered_within(*merge_intervals(start[barrier], end[barrier]), lo, hi) == 0
    return lo[clear], hi[clear]


def _closure_spans(start: np.ndarray, end: np.ndarray, optim: np.ndarray,
                   backward: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The forward of a closure an optimizer range calls, as spans: from the range's start
    to the first backward inside it, the Python of the closure included (a Lightning
    training_step runs inside the optimizer's step: its Python is the forward's, not the
    optimizer's), less the optimizer ranges nested there (the closure's zero_grad)."""
    bwd_start = start[backward]
    for owner in np.flatnonzero(optim):
        inside = bwd_start[(bwd_start >= start[owner]) & (bwd_start < end[owner])]
        if not len(inside):
            continue
        lo, hi = float(start[owner]), float(inside.min())
        cuts = sorted((float(start[i]), float(end[i])) for i in np.flatnonzero(optim)
                      if i != owner and lo <= start[i] < hi)
        pieces, at = [], lo
        for cut_lo, cut_hi in cuts:
            if cut_lo > at:
                pieces.append((at, cut_lo))
            at = max(at, cut_hi)
        if hi > at:
            pieces.append((at, hi))
        return (np.array([p[0] for p in pieces], dtype=np.float64),
                np.array([p[1] for p in pieces], dtype=np.float64))
    return np.zeros(0), np.zeros(0)


def _closure_ops(tree: HostTree, ops: np.ndarray, optim: np.ndarray,
                 backward: np.ndarray, closure_range: np.ndarray) -> np.ndarray:
    """Of the step's ``ops`` (tree positions; ``optim`` and ``backward`` their masks), the
    direct children of an optimizer range that start before the last backward range (any
    thread: on GPUs autograd has its own) within that range's span: the model forward of
    a closure the optimizer calls (LBFGS). The range nsbridge puts around the closure
    (``closure_range``, a mask over the tree) is looked through: its children count as
    the optimizer's."""
    out = np.zeros(len(ops), dtype=bool)
    start = tree.start[ops]
    bwd_start = start[backward]
    if not len(bwd_start):
        return out
    parent = tree.parent[ops]
    wrapped = parent >= 0
    wrapped[wrapped] = closure_range[parent[wrapped]]
    parent = np.where(wrapped, tree.parent[np.maximum(parent, 0)], parent)
    own = ~closure_range[ops]
    for owner in ops[optim]:
        within = bwd_start[(bwd_start >= tree.start[owner]) & (bwd_start < tree.end[owner])]
        if len(within):
            out |= (parent == owner) & (start < within.max()) & ~backward & ~optim & own
    return out


def gpu_done_ms(tree: HostTree, gpu: pd.DataFrame, windows: pd.DataFrame) -> np.ndarray:
    """Per step, how long after the GPU finished the previous step's work it finished this
    one's (ms; the first step from its own start; NaN for a step that launched nothing):
    the step's length as the GPU delivers it. A GPU that runs behind the host finishes a
    step every N ms however fast the host queues them; a host-bound loop gives about its
    wall time. Work counts for the step whose op launched it."""
    done = np.full(len(windows), np.nan)
    work = gpu[gpu["op_pos"].to_numpy() >= 0] if len(gpu) else gpu
    if not len(work) or not len(windows):
        return done
    starts = windows["start"].to_numpy(np.float64)
    launched = tree.start[work["op_pos"].to_numpy()]
    step = np.searchsorted(starts, launched, side="right") - 1
    inside = (step >= 0) & (launched < windows["end"].to_numpy(np.float64)[np.maximum(step, 0)])
    ends = (work["ts"] + work["dur"]).to_numpy(np.float64)
    finished = pd.Series(ends[inside]).groupby(step[inside]).max()
    previous = starts[0]
    for index in range(len(windows)):
        if index in finished.index:
            done[index] = (float(finished[index]) - previous) / 1e3
            previous = float(finished[index])
    return done
