"""Steps and where their time goes: data loading, forward, backward, optimizer, other.

Steps are the ``ProfilerStep#N`` ranges torch.profiler writes; a trace without them is
one window over the whole recording. Within a step, phases are unions of host intervals:

- data: ``enumerate(DataLoader)#...`` ranges (DataLoader ``__next__``);
- optimizer: ``Optimizer.step#...`` and ``Optimizer.zero_grad#...`` ranges;
- backward: ``autograd::engine::evaluate_function: ...`` ranges on any thread;
- forward: top-level ops of the step's thread that start before the first backward op,
  minus the three above;
- other: the rest of the step's wall time (Python between ops, logging, idle waits).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import schema as S
from .nesting import HostTree, merge_intervals
from .strings import starts_with

DATA_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
PHASES = ["data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms"]


def step_windows(events: pd.DataFrame, tree: HostTree) -> pd.DataFrame:
    """One row per step: step (int, -1 for a whole-recording window), start, end (µs), pos.

    ``pos`` is the step range's position in the tree (-1 for a whole-run window).
    """
    names = events.loc[tree.rows, S.NAME].to_numpy()
    is_step = starts_with(names, S.PROFILER_STEP_PREFIX)
    if is_step.any():
        pos = np.nonzero(is_step)[0]
        frame = pd.DataFrame({"name": names[pos], "start": tree.start[pos],
                              "end": tree.end[pos], "pos": pos})
        frame = frame.drop_duplicates("name").sort_values("start", kind="stable")
        frame["step"] = frame["name"].str[len(S.PROFILER_STEP_PREFIX):].astype(int)
        return frame[["step", "start", "end", "pos"]].reset_index(drop=True)
    start, end = events[S.TS], events[S.TS] + events[S.DUR]
    return pd.DataFrame({"step": [-1], "start": [float(start.min())], "end": [float(end.max())],
                         "pos": [-1]})


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
    """Per step: step, wall_ms and the PHASES columns (milliseconds, summing to wall_ms)."""
    names = events.loc[tree.rows, S.NAME].to_numpy()
    data = starts_with(names, DATA_PREFIX)
    optim = starts_with(names, OPTIMIZER_PREFIXES)
    backward = starts_with(names, BACKWARD_PREFIX)
    thread = main_thread(tree, windows)
    rows = []
    for step, lo, hi, pos in windows[["step", "start", "end", "pos"]].itertuples(index=False):
        inside = (tree.start >= lo) & (tree.start < hi)
        if pos >= 0:
            top = inside & (tree.parent == pos)
        else:
            top = inside & (tree.depth == 0) & (tree.thread == thread)
        bwd = inside & backward
        first_bwd = tree.start[bwd].min() if bwd.any() else np.inf
        fwd = top & (tree.start < first_bwd) & ~data & ~optim
        spans = {"data": inside & data, "optimizer": inside & optim, "backward": bwd}
        lengths = {k: _union(tree, m, lo, hi) for k, m in spans.items()}
        claimed = inside & (data | optim | backward)
        forward = _union(tree, claimed | fwd, lo, hi) - _union(tree, claimed, lo, hi)
        wall = hi - lo
        other = max(wall - forward - sum(lengths.values()), 0.0)
        rows.append({"step": int(step), "wall_ms": wall / 1e3, "data_ms": lengths["data"] / 1e3,
                     "forward_ms": forward / 1e3, "backward_ms": lengths["backward"] / 1e3,
                     "optimizer_ms": lengths["optimizer"] / 1e3, "other_ms": other / 1e3})
    return pd.DataFrame(rows, columns=["step", "wall_ms", *PHASES])


def _union(tree: HostTree, mask: np.ndarray, lo: float, hi: float) -> float:
    s, e = merge_intervals(np.clip(tree.start[mask], lo, hi), np.clip(tree.end[mask], lo, hi))
    return float((e - s).sum()) if len(s) else 0.0
