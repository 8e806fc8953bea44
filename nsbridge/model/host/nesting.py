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
from functools import cached_property
from typing import Any, Optional

import numpy as np
import pandas as pd

from ... import schema as S
from ..strings import is_in, starts_with, thread_codes


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
        names: the ops' names in tree order, as the EVENTS frame holds them (a
            Categorical from the trace reader), when built from one (build_host_tree).
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
    names: Any = None

    def __len__(self) -> int:
        return len(self.rows)

    @cached_property
    def name_values(self) -> np.ndarray:
        """``names`` as an object array (missing: NaN), made once for the analysis steps
        that index names by tree position."""
        return np.asarray(self.names, dtype=object)

    def enclosing(self, pid: pd.Series, tid: pd.Series, ts: np.ndarray) -> np.ndarray:
        """Position of the innermost op containing each (thread, time) point, or -1."""
        local, keys = thread_codes(pid, tid)
        mapping = np.array([self.thread_codes.get(k, -1) for k in keys], dtype=np.int64)
        codes = mapping[local] if len(mapping) else np.full(len(local), -1, dtype=np.int64)
        return self.enclosing_codes(codes, ts)

    def enclosing_codes(self, codes: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Like ``enclosing`` with the points' threads given as this tree's thread codes:
        per thread, a binary search on start times for the latest op starting at or
        before each point, then a walk up the parent chain past ops that ended before it
        (a few vectorised steps)."""
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
        while len(self):
            miss = (cur >= 0) & ~wanted[np.maximum(cur, 0)]
            if not miss.any():
                break
            cur[miss] = self.parent[cur[miss]]
        return cur

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


def at_rows(events: pd.DataFrame, rows: np.ndarray, column: str) -> pd.Series:
    """``events.loc[rows, column]`` (row labels, as HostTree.rows holds them), taken by
    position when the frame's index is the default one: pandas' label lookup costs 5 ms per
    column at a million rows."""
    index = events.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return events[column].iloc[rows]
    return events.loc[rows, column]


def build_host_tree(events: pd.DataFrame, cats: tuple[str, ...] = S.HOST_OP_CATS) -> HostTree:
    """Nest the complete events of the given categories (default: host ops) per thread.

    ``rows`` of the result are row labels of ``events``.
    """
    host = np.flatnonzero(is_in(events[S.CAT], cats) & is_in(events[S.PH], ("X",)))
    names = events[S.NAME].array.take(host)   # the columns' arrays: no frame copied
    codes, keys = thread_codes(events[S.PID].array.take(host),
                               events[S.TID].array.take(host))
    tree = build_tree(codes, keys, events[S.TS].to_numpy(np.float64)[host],
                      events[S.DUR].to_numpy(np.float64)[host],
                      starts_with(names, S.PROFILER_STEP_PREFIX))
    return replace(tree, rows=events.index.to_numpy()[host[tree.rows]],
                   names=names.take(tree.rows))


def build_tree(thread: np.ndarray, keys: list[str], start: np.ndarray, dur: np.ndarray,
               top_level: np.ndarray,
               points: Optional[tuple[np.ndarray, np.ndarray]] = None) -> HostTree:
    """Nest intervals given as arrays: ``thread`` codes index ``keys`` ("pid/tid" or any
    thread label). ``rows`` of the result are positions in the input arrays.

    With ``points`` (thread codes, times), only intervals holding a point of their thread
    (start <= time <= end, as ``enclosing`` counts) are kept. For properly nested
    intervals that tree answers every ``enclosing`` and ``nearest`` query at those points
    as the full one does: an interval holding none of them is neither a point's
    innermost interval nor an ancestor of one. Queried anywhere else it may answer
    differently, and ``self_us`` counts only the kept children."""
    order = sort_intervals(thread, start, dur)
    if points is not None:
        sorted_start = start[order]
        order = order[_holding(thread[order], sorted_start, sorted_start + dur[order],
                               *points)]
        del sorted_start                # before the gathers below: 10M ranges are 80 MB each
    codes = thread[order]
    start = start[order].astype(np.float64, copy=False)
    dur = dur[order].astype(np.float64, copy=False)
    end = start + dur
    parent = _parents(codes, start, end, top_level[order])
    depth = _depths(parent)
    has_parent = parent >= 0
    child_sum = np.bincount(parent[has_parent], weights=dur[has_parent], minlength=len(parent))
    bounds = np.zeros((len(keys), 2), dtype=np.int64)
    if len(codes):
        bounds[:, 0] = np.searchsorted(codes, np.arange(len(keys)), side="left")
        bounds[:, 1] = np.searchsorted(codes, np.arange(len(keys)), side="right")
    return HostTree(rows=order, thread=codes, thread_codes={str(k): i for i, k in enumerate(keys)},
                    start=start, end=end, dur=dur, parent=parent, depth=depth,
                    self_us=np.clip(dur - child_sum, 0.0, None), bounds=bounds)


def sort_intervals(thread: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``np.lexsort((-dur, start, thread))``, the same order, fast on traces: their
    intervals come nearly in time order, which numpy's stable sort (timsort) takes in
    linear time. Sorted by start first, the runs of equal starts are put longest first,
    then a stable sort on the thread codes (a radix sort on 16-bit codes) groups the
    threads. Missing times fall back to lexsort (NaN's place among ties differs)."""
    start = np.asarray(start, dtype=np.float64)
    dur = np.asarray(dur, dtype=np.float64)
    if np.isnan(start).any() or np.isnan(dur).any():
        return np.lexsort((-dur, start, thread))
    order = np.argsort(start, kind="stable")
    ordered = start[order]
    tie = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tie):                    # runs of equal starts, longest first within each
        members = np.union1d(tie, tie + 1)
        run = np.cumsum(np.r_[True, ordered[members[1:]] != ordered[members[:-1]]])
        order[members] = order[members][np.lexsort((-dur[order[members]], run))]
    codes = np.asarray(thread)[order]
    if len(codes) and 0 <= codes.min() and codes.max() < 2**15:
        codes = codes.astype(np.int16)
    return order[np.argsort(codes, kind="stable")]


def _holding(codes: np.ndarray, start: np.ndarray, end: np.ndarray,
             point_thread: np.ndarray, point_time: np.ndarray) -> np.ndarray:
    """Whether each interval (sorted by thread code, then start) holds a point of its
    thread. Each point's insertion position among its thread's starts is counted, so the
    running count at an interval indexes the first point at or after its start in the
    points sorted by (thread, time)."""
    mine = point_thread >= 0
    by = np.lexsort((point_time[mine], point_thread[mine]))
    p_thread, p_time = point_thread[mine][by], point_time[mine][by]
    position = np.empty(len(p_time), dtype=np.int64)
    threads, firsts = np.unique(p_thread, return_index=True)
    for code, a, b in zip(threads, firsts, list(firsts[1:]) + [len(p_time)]):
        lo, hi = np.searchsorted(codes, code, "left"), np.searchsorted(codes, code, "right")
        position[a:b] = lo + np.searchsorted(start[lo:hi], p_time[a:b], side="right")
    if not len(p_time):
        return np.zeros(len(codes), dtype=bool)
    first = np.bincount(position, minlength=len(codes) + 1)[:len(codes)]
    np.cumsum(first, out=first)
    found = first < len(p_time)
    np.minimum(first, len(p_time) - 1, out=first)
    return found & (p_thread[first] == codes) & (p_time[first] <= end)


def _depths(parent: np.ndarray) -> np.ndarray:
    """Each interval's number of ancestors: one vectorised pass per nesting level over the
    intervals that deep (parents may be listed before or after their children)."""
    depth = np.zeros(len(parent), dtype=np.int64)
    below = np.flatnonzero(parent >= 0)
    ancestor = parent[below]
    while len(below):
        depth[below] += 1
        ancestor = parent[ancestor]
        deeper = ancestor >= 0
        below, ancestor = below[deeper], ancestor[deeper]
    return depth


def _parents(codes: np.ndarray, start: np.ndarray, end: np.ndarray,
             top_level: np.ndarray) -> np.ndarray:
    """Each interval's parent, the intervals sorted by (thread, start, longest first): the
    latest earlier interval of its thread still open at its start (end > start), as a
    stack sweep finds it. ``top_level`` rows (step ranges) never get a parent: a step that
    begins inside the previous step's optimizer range is still a step.

    The stack sweep's answer in a few vectorised passes: walking back from the previous
    interval, a candidate that ended by the start is skipped together with everything its
    own "previous longer-reaching" interval jumps over (``_previous_reaching_further``),
    so each walk takes a few vectorised steps."""
    n = len(codes)
    parent = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return parent
    first = _thread_firsts(codes)
    further = _previous_reaching_further(codes, end, first)
    active = np.flatnonzero(~first)        # a thread's first interval has no parent
    cand = active - 1
    while len(active):
        open_ = end[cand] > start[active]
        parent[active[open_]] = cand[open_]
        closed = ~open_
        active, cand = active[closed], further[cand[closed]]
        more = cand >= 0
        active, cand = active[more], cand[more]
    parent[top_level] = -1
    return parent


def _thread_firsts(codes: np.ndarray) -> np.ndarray:
    """Whether each row (sorted by thread code) is its thread's first."""
    first = np.empty(len(codes), dtype=bool)
    first[:1] = True
    np.not_equal(codes[1:], codes[:-1], out=first[1:])
    return first


def _previous_reaching_further(codes: np.ndarray, end: np.ndarray,
                               first: np.ndarray) -> np.ndarray:
    """For each interval, the latest earlier one of its thread that ends later (-1: none),
    by pointer jumping: a pointer past intervals ending no later than this one may jump
    to where that interval's own pointer points, since all between end no later too.
    ``first`` marks each thread's first interval."""
    n = len(codes)
    pointer = np.arange(-1, n - 1)
    pointer[first] = -1
    # none when no earlier interval of the thread ends later (the running maximum of end):
    # top-level intervals would otherwise walk back through every earlier one
    starts = np.flatnonzero(first).tolist() + [n]
    reach = np.empty(n)
    for a, b in zip(starts[:-1], starts[1:]):
        reach[a:b] = np.maximum.accumulate(end[a:b])
    pointer[1:][reach[:-1] <= end[1:]] = -1
    active = np.flatnonzero(pointer >= 0)
    own_end = end[active]
    while len(active):
        p = pointer[active]
        shorter = end[p] <= own_end
        active, own_end = active[shorter], own_end[shorter]
        jumped = pointer[p[shorter]]
        pointer[active] = jumped
        more = jumped >= 0
        active, own_end = active[more], own_end[more]
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
        a, b = start[sel].astype(np.float64, copy=False), end[sel].astype(np.float64, copy=False)
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
    keys = [length, begin, dev]
    rows = _largest(keys, np.arange(len(length)), top)
    order = np.lexsort((rows, dev[rows], begin[rows], length[rows]))[::-1][:top]
    return [(float(length[i]), float(begin[i]), int(dev[i])) for i in rows[order]]


def _largest(keys: list[np.ndarray], rows: np.ndarray, k: int) -> np.ndarray:
    """Rows holding the ``k`` largest (keys[0], keys[1], ..., row) tuples, in any order,
    by partitioning key after key: only rows tied at the cut go on to the next key."""
    if k <= 0:
        return rows[:0]
    if len(rows) <= k:
        return rows
    if not keys:
        return np.sort(rows)[len(rows) - k:]
    values = keys[0][rows]
    cut = np.partition(values, len(values) - k)[len(values) - k]
    above = rows[values > cut]
    return np.concatenate([above, _largest(keys[1:], rows[values == cut], k - len(above))])
