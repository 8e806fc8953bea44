"""Host-op nesting: which op encloses which, per thread, in columnar form.

Ops on one thread nest properly (torch records them as a call stack), so one sweep over
the ops sorted by (thread, start, -duration) gives every op's parent. The innermost op
enclosing a point in time (a kernel launch, an allocation, a sync call) is then found by a
binary search on start times followed by a short walk up the parent chain, vectorised.
Float rounding in new traces makes a child end a hair after its parent; only the start
decides nesting, so that is tolerated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .. import schema as S
from .strings import starts_with, thread_codes


@dataclass(frozen=True)
class HostTree:
    """Host ops (cpu_op and user_annotation) sorted per thread, with parents.

    Attributes:
        rows: row labels into the EVENTS frame, in sorted order.
        thread: thread code per op; ``thread_codes`` maps "pid/tid" to it.
        start, end, dur: microseconds.
        parent: position of the enclosing op in this tree, -1 for top-level ops.
        depth: 0 for top-level ops.
        self_us: duration minus the durations of direct children (>= 0).
    """

    rows: np.ndarray
    thread: np.ndarray
    thread_codes: dict[str, int]
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    self_us: np.ndarray
    bounds: np.ndarray  # bounds[code] = (first, last+1) positions of that thread

    def __len__(self) -> int:
        return len(self.rows)

    def enclosing(self, pid: pd.Series, tid: pd.Series, ts: np.ndarray) -> np.ndarray:
        """Position of the innermost op containing each (thread, time) point, or -1."""
        local, keys = thread_codes(pid, tid)
        mapping = np.array([self.thread_codes.get(k, -1) for k in keys], dtype=np.int64)
        codes = mapping[local] if len(mapping) else np.full(len(local), -1, dtype=np.int64)
        return self.enclosing_codes(codes, ts)

    def enclosing_codes(self, codes: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Like ``enclosing`` with the points' threads given as this tree's thread codes."""
        ts = np.asarray(ts, dtype=np.float64)
        out = np.full(len(ts), -1, dtype=np.int64)
        for code in np.unique(codes[codes >= 0]):
            sel = np.nonzero(codes == code)[0]
            lo, hi = self.bounds[code]
            j = np.searchsorted(self.start[lo:hi], ts[sel], side="right") - 1 + lo
            j[j < lo] = -1
            out[sel] = j
        return self._climb(out, ts)

    def nearest(self, pos: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """For each position, the closest ancestor-or-self whose ``wanted`` flag is set."""
        cur = pos.copy()
        while True:
            miss = (cur >= 0) & ~wanted[np.maximum(cur, 0)]
            if not miss.any():
                return cur
            cur[miss] = self.parent[cur[miss]]

    def ancestors_or_self(self, pos: np.ndarray) -> list[np.ndarray]:
        """[pos, parent(pos), grandparent(pos), ...] until every chain ends (-1 entries)."""
        chain = [pos]
        cur = pos
        while (cur >= 0).any():
            cur = np.where(cur >= 0, self.parent[np.maximum(cur, 0)], -1)
            chain.append(cur)
        return chain[:-1]

    def _climb(self, j: np.ndarray, ts: np.ndarray) -> np.ndarray:
        while True:
            valid = j >= 0
            outside = np.zeros(len(j), dtype=bool)
            outside[valid] = self.end[j[valid]] < ts[valid]
            if not outside.any():
                return j
            j[outside] = self.parent[j[outside]]


def build_host_tree(events: pd.DataFrame, cats: tuple[str, ...] = S.HOST_OP_CATS) -> HostTree:
    """Nest the complete events of the given categories (default: host ops) per thread.

    ``rows`` of the result are row labels of ``events``.
    """
    host = events[events[S.CAT].isin(cats) & (events[S.PH] == "X")]
    codes, keys = thread_codes(host[S.PID], host[S.TID])
    tree = build_tree(codes, keys, host[S.TS].to_numpy(np.float64),
                      host[S.DUR].to_numpy(np.float64),
                      starts_with(host[S.NAME].to_numpy(), S.PROFILER_STEP_PREFIX))
    return replace(tree, rows=host.index.to_numpy()[tree.rows])


def build_tree(thread: np.ndarray, keys: list[str], start: np.ndarray, dur: np.ndarray,
               top_level: np.ndarray) -> HostTree:
    """Nest intervals given as arrays: ``thread`` codes index ``keys`` ("pid/tid" or any
    thread label). ``rows`` of the result are positions in the input arrays."""
    order = np.lexsort((-dur, start, thread))
    codes, start, dur = thread[order], start[order].astype(np.float64), dur[order].astype(np.float64)
    end = start + dur
    parent = _parents(codes, start, end, top_level[order])
    depth = np.zeros(len(parent), dtype=np.int64)
    ancestor = parent.copy()
    while (ancestor >= 0).any():  # one pass per nesting level, vectorised
        has = ancestor >= 0
        depth[has] += 1
        ancestor[has] = parent[ancestor[has]]
    has_parent = parent >= 0
    child_sum = np.bincount(parent[has_parent], weights=dur[has_parent], minlength=len(parent))
    bounds = np.zeros((len(keys), 2), dtype=np.int64)
    if len(codes):
        bounds[:, 0] = np.searchsorted(codes, np.arange(len(keys)), side="left")
        bounds[:, 1] = np.searchsorted(codes, np.arange(len(keys)), side="right")
    return HostTree(rows=order, thread=codes, thread_codes={str(k): i for i, k in enumerate(keys)},
                    start=start, end=end, dur=dur, parent=parent, depth=depth,
                    self_us=np.clip(dur - child_sum, 0.0, None), bounds=bounds)


def _parents(codes: np.ndarray, start: np.ndarray, end: np.ndarray,
             top_level: np.ndarray) -> np.ndarray:
    """Each interval's parent, the intervals sorted by (thread, start, longest first): the
    latest earlier interval of its thread still open at its start (end > start), as a
    stack sweep finds it, vectorised. ``top_level`` rows (step ranges) never get a parent:
    a step that begins inside the previous step's optimizer range is still a step.

    Walking back from the previous interval, a candidate that ended by the start is
    skipped together with everything its own "previous longer-reaching" interval jumps
    over (``_previous_reaching_further``), so each walk takes a few vectorised steps."""
    n = len(codes)
    parent = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return parent
    further = _previous_reaching_further(codes, end)
    index = np.arange(n)
    cand = index - 1
    cand[np.r_[True, codes[1:] != codes[:-1]]] = -1        # a thread's first interval
    active = index[cand >= 0]
    while len(active):
        c = cand[active]
        open_ = end[c] > start[active]
        parent[active[open_]] = c[open_]
        rest = active[~open_]
        cand[rest] = further[cand[rest]]
        active = rest[cand[rest] >= 0]
    parent[top_level] = -1
    return parent


def _previous_reaching_further(codes: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each interval, the latest earlier one of its thread that ends later (-1: none),
    by pointer jumping: a pointer past intervals ending no later than this one may jump
    to where that interval's own pointer points, since all between end no later too."""
    n = len(codes)
    pointer = np.arange(n) - 1
    first = np.r_[True, codes[1:] != codes[:-1]] if n else np.zeros(0, dtype=bool)
    pointer[first] = -1
    # none when no earlier interval of the thread ends later (the running maximum of end):
    # top-level intervals would otherwise walk back through every earlier one
    starts = np.flatnonzero(first).tolist() + [n]
    reach = np.empty(n)
    for a, b in zip(starts[:-1], starts[1:]):
        reach[a:b] = np.maximum.accumulate(end[a:b])
    pointer[1:][reach[:-1] <= end[1:]] = -1
    active = np.nonzero(pointer >= 0)[0]
    while len(active):
        p = pointer[active]
        shorter = end[p] <= end[active]
        active = active[shorter]
        pointer[active] = pointer[p[shorter]]
        active = active[pointer[active] >= 0]
    return pointer


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as sorted, disjoint intervals."""
    if len(start) == 0:
        return np.array([]), np.array([])
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    running_end = np.maximum.accumulate(e)
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > running_end[:-1]
    firsts = np.flatnonzero(new_block)
    return s[firsts], np.maximum.reduceat(e, firsts).astype(np.float64, copy=False)


def covered_within(start: np.ndarray, end: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray) -> np.ndarray:
    """Per window [lo, hi): how much of it the disjoint, sorted intervals [start, end) cover
    (merge_intervals' output), for all windows at once: the covered length up to x is
    a running sum of whole intervals plus the part of the one x falls in."""
    lengths = end - start
    before = np.concatenate([[0.0], np.cumsum(lengths)])

    def covered_to(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(start, x, side="right") - 1
        inside = np.clip(x - start[np.maximum(k, 0)], 0.0, lengths[np.maximum(k, 0)])
        return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0.0)

    if not len(start):
        return np.zeros(len(lo))
    return covered_to(np.asarray(hi, dtype=np.float64)) - covered_to(np.asarray(lo, dtype=np.float64))


def clipped_union(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> float:
    """Length of the union of intervals, clipped to [lo, hi]."""
    s, e = merge_intervals(np.clip(start, lo, hi), np.clip(end, lo, hi))
    return float((e - s).sum()) if len(s) else 0.0


def longest_gaps(device: np.ndarray, start: np.ndarray, end: np.ndarray, top: int,
                 lo: float | None = None,
                 hi: float | None = None) -> list[tuple[float, float, int]]:
    """The ``top`` longest stretches without activity, per device: (length, start, device),
    longest first. With ``lo``/``hi`` the window's edges count as gap ends too (and the
    intervals are clipped to it); without, only gaps between activities count."""
    lengths, starts, devices = [], [], []
    for dev in np.unique(device):
        sel = device == dev
        a, b = start[sel].astype(np.float64), end[sel].astype(np.float64)
        if lo is not None and hi is not None:
            a, b = np.clip(a, lo, hi), np.clip(b, lo, hi)
        s, e = merge_intervals(a, b)
        gap_start, gap_end = e[:-1], s[1:]
        if lo is not None and hi is not None:
            gap_start, gap_end = np.concatenate([[lo], e]), np.concatenate([s, [hi]])
        real = gap_end > gap_start
        lengths.append((gap_end - gap_start)[real])
        starts.append(gap_start[real])
        devices.append(np.full(int(real.sum()), dev))
    if not lengths:
        return []
    length, begin, dev = (np.concatenate(x) for x in (lengths, starts, devices))
    top_rows = np.lexsort((dev, begin, length))[::-1][:top]   # longest first, ties as tuples
    return [(float(length[i]), float(begin[i]), int(dev[i])) for i in top_rows]
