"""Host-op nesting and interval helpers on synthetic frames."""

from __future__ import annotations

import numpy as np
import pytest

from nsbridge import schema as S
from nsbridge.model.host import nesting
from nsbridge.model.host.nesting import (build_host_tree, build_tree, clipped_union, merge_intervals,
                                    sort_intervals)

from builders import events, op


def _tree():
    frame = events(
        op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION),
        op("aten::linear", 10, 50),
        op("aten::addmm", 12, 40),          # child of linear
        op("aten::relu", 70, 10),           # sibling of linear
        op("aten::add", 5, 20, tid="2"),    # other thread: never nested under thread 1 ops
    )
    return frame, build_host_tree(frame)


def test_parents_depth_and_self_time() -> None:
    frame, tree = _tree()
    names = list(frame.loc[tree.rows, S.NAME])
    by = {n: i for i, n in enumerate(names)}
    assert tree.parent[by["aten::addmm"]] == by["aten::linear"]
    assert tree.parent[by["aten::linear"]] == by["ProfilerStep#1"]
    assert tree.parent[by["aten::add"]] == -1
    assert tree.depth[by["aten::addmm"]] == 2
    assert tree.self_us[by["aten::linear"]] == 10          # 50 - 40
    assert tree.self_us[by["ProfilerStep#1"]] == 40        # 100 - 50 - 10


def test_innermost_enclosing_op() -> None:
    frame, tree = _tree()
    names = frame.loc[tree.rows, S.NAME].to_numpy()
    import pandas as pd
    pos = tree.enclosing(pd.Series(["1", "1", "1", "1", "1", "9"]),
                         pd.Series(["1", "1", "1", "1", "2", "1"]),
                         np.array([13.0, 55.0, 75.0, 90.0, 6.0, 13.0]))
    got = [names[p] if p >= 0 else None for p in pos]
    assert got == ["aten::addmm", "aten::linear", "aten::relu", "ProfilerStep#1", "aten::add", None]


def test_a_step_starting_inside_the_optimizer_is_still_top_level() -> None:
    frame = events(op("Optimizer.step#SGD.step", 0, 10, cat=S.USER_ANNOTATION),
                   op("ProfilerStep#2", 8, 100, cat=S.USER_ANNOTATION),
                   op("aten::mm", 20, 5))
    tree = build_host_tree(frame)
    names = list(frame.loc[tree.rows, S.NAME])
    assert tree.parent[names.index("ProfilerStep#2")] == -1
    assert tree.self_us[names.index("Optimizer.step#SGD.step")] == 10
    assert names[tree.parent[names.index("aten::mm")]] == "ProfilerStep#2"


def test_interval_union() -> None:
    s, e = merge_intervals(np.array([0.0, 5, 20, 21]), np.array([10.0, 8, 25, 22]))
    assert list(s) == [0, 20] and list(e) == [10, 25]
    assert clipped_union(np.array([0.0, 20]), np.array([10.0, 30]), 5, 25) == 10


def _reference_parents(codes: np.ndarray, start: np.ndarray, end: np.ndarray,
                       top_level: np.ndarray) -> np.ndarray:
    """A plain stack sweep over intervals sorted by (thread, start, longest first): pop
    what ended by this start; the top of the stack is the parent."""
    parent = np.full(len(codes), -1, dtype=np.int64)
    stack: list[int] = []
    current = None
    for k in range(len(codes)):
        if codes[k] != current:
            stack, current = [], codes[k]
        while stack and end[stack[-1]] <= start[k]:
            stack.pop()
        if stack and not top_level[k]:
            parent[k] = stack[-1]
        stack.append(k)
    return parent


def test_depths_take_parents_in_any_order() -> None:
    """Depths count ancestors; parents listed after their children (never from the
    sweep) are counted too."""
    assert nesting._depths(np.array([-1, 0, 1, 0, -1])).tolist() == [0, 1, 2, 1, 0]
    assert nesting._depths(np.array([2, -1, 1])).tolist() == [2, 0, 1]
    assert nesting._depths(np.zeros(0, dtype=np.int64)).tolist() == []


@pytest.mark.parametrize("seed", range(40))
def test_vectorised_nesting_equals_a_stack_sweep(seed: int) -> None:
    """Random interval sets on a few threads, with equal timestamps, zero durations,
    intervals that overlap without nesting and forced top-level rows."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    thread = rng.integers(0, 3, n)
    start = rng.integers(0, 60, n).astype(np.float64)
    dur = rng.choice([0.0, 0.0, 1.0, 2.0, 5.0, 20.0, 70.0], n)
    top_level = rng.random(n) < 0.05
    tree = build_tree(thread, ["a", "b", "c"], start, dur, top_level)
    order = tree.rows
    expected = _reference_parents(thread[order], start[order], start[order] + dur[order],
                                  top_level[order])
    assert (tree.parent == expected).all()
    depth = np.zeros(n, dtype=np.int64)
    for k in range(n):       # depth: the length of the parent chain
        p, d = expected[k], 0
        while p >= 0:
            p, d = expected[p], d + 1
        depth[k] = d
    assert (tree.depth == depth).all()


def _nested_intervals(rng: np.random.Generator, lo: int, hi: int, depth: int,
                      out: list[tuple[int, int]]) -> None:
    """Random properly nested intervals inside [lo, hi]: children that touch, repeat
    their parent's span, share a start or have no length."""
    at = lo
    while at < hi and depth < 6:
        if at == lo and rng.random() < 0.15:         # a child spanning its parent
            a, b = lo, hi
        else:
            a = int(rng.integers(at, hi + 1))
            b = a if rng.random() < 0.2 else int(rng.integers(a, hi + 1))
        out.append((a, b))
        if b > a and rng.random() < 0.7:
            _nested_intervals(rng, a, b, depth + 1, out)
        at = b + int(rng.integers(0, 3))
        if rng.random() < 0.3:
            break


def _nested_set(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thread, start, dur) of nested sets on three threads (see _nested_intervals)."""
    spans: list[tuple[int, int]] = []
    threads: list[int] = []
    for code in range(3):
        before = len(spans)
        _nested_intervals(rng, 0, 200, 0, spans)
        threads += [code] * (len(spans) - before)
    return (np.array(threads), np.array([a for a, _ in spans], dtype=np.float64),
            np.array([b - a for a, b in spans], dtype=np.float64))


@pytest.mark.parametrize("seed", range(40))
def test_properly_nested_intervals_equal_a_stack_sweep(seed: int) -> None:
    """Nested sets as real captures have them (ties, zero lengths, touching siblings and,
    for odd seeds, children ending a hair after their parent, as float rounding does)."""
    rng = np.random.default_rng(seed)
    thread, start, dur = _nested_set(rng)
    if seed % 2:
        dur[rng.random(len(dur)) < 0.1] += 1e-9
    shuffle = rng.permutation(len(thread))
    thread, start, dur = thread[shuffle], start[shuffle], dur[shuffle]
    top_level = np.zeros(len(thread), dtype=bool)
    tree = build_tree(thread, ["a", "b", "c"], start, dur, top_level)
    order = tree.rows
    expected = _reference_parents(thread[order], start[order], start[order] + dur[order],
                                  top_level[order])
    assert (tree.parent == expected).all()


@pytest.mark.parametrize("seed", range(60))
def test_interval_order_equals_lexsort(seed: int) -> None:
    """sort_intervals gives lexsort's (thread, start, longest first) order, stable, on
    nearly sorted and shuffled sets, many equal starts and lengths, thread codes beyond
    16 bits or negative, and missing times."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 600))
    threads = [3, 3, 40000, 2][seed % 4]
    thread = rng.integers(-1 if seed % 7 == 0 else 0, threads, n)
    start = np.sort(rng.integers(0, 80, n)).astype(np.float64)
    if seed % 3 == 0:
        start = rng.permutation(start)
    elif n:                                       # a few out of order, as traces have
        swap = rng.integers(0, n, max(n // 50, 1))
        start[swap] = start[rng.permutation(swap)]
    dur = rng.choice([0.0, 1.0, 1.0, 2.5, 30.0], n)
    if seed % 5 == 0 and n:
        (start if seed % 2 else dur)[rng.integers(0, n, 3)] = np.nan
    assert np.array_equal(sort_intervals(thread, start, dur), np.lexsort((-dur, start, thread)))


def test_covered_within_equals_a_clipped_union_per_window() -> None:
    """The vectorised coverage of many windows (comm_overlap's, once a loop per NCCL
    interval over every compute interval) equals clipped_union window by window."""
    from nsbridge.model.host.nesting import clipped_union, covered_within, merge_intervals

    rng = np.random.default_rng(1)
    for _ in range(500):
        n = int(rng.integers(0, 30))
        start = rng.integers(0, 100, n).astype(float)
        merged_start, merged_end = merge_intervals(start, start + rng.integers(0, 15, n))
        m = int(rng.integers(0, 10))
        lo = rng.integers(-5, 110, m).astype(float)
        hi = lo + rng.integers(0, 20, m)
        want = [clipped_union(merged_start, merged_end, a, b) for a, b in zip(lo, hi)]
        assert np.allclose(covered_within(merged_start, merged_end, lo, hi), want)


@pytest.mark.parametrize("seed", range(30))
def test_longest_gaps_equal_a_full_sort(seed: int) -> None:
    """The partitioned pick of the longest gaps equals sorting every gap as a (length,
    start, device) tuple, ties on every key included."""
    from nsbridge.model.host.nesting import longest_gaps, merge_intervals

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    device = rng.integers(0, 3, n)
    start = rng.integers(0, 40, n).astype(float) * 5
    end = start + rng.choice([1.0, 2.0, 5.0], n)
    top = int(rng.integers(0, 15))
    gaps = []
    for dev in np.unique(device):
        s, e = merge_intervals(start[device == dev], end[device == dev])
        gaps += [(b - a, a, int(dev)) for a, b in zip(e[:-1], s[1:]) if b > a]
    assert longest_gaps(device, start, end, top) == sorted(gaps, reverse=True)[:top]


@pytest.mark.parametrize("order", ["random", "by time"])
@pytest.mark.parametrize("seed", range(40))
def test_innermost_interval_equals_a_plain_search(seed: int, order: str) -> None:
    """enclosing_codes on random sets (overlapping without nesting too, ties, zero
    lengths), at points on interval edges, between them and on threads the tree lacks,
    in any order and in time order: a plain loop's answer (the last interval of the
    thread starting at or before the point, then up the parents while that one ended
    before it)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    thread = rng.integers(0, 3, n)
    start = rng.integers(0, 60, n).astype(np.float64)
    dur = rng.choice([0.0, 1.0, 2.0, 5.0, 20.0, 70.0], n)
    tree = build_tree(thread, ["a", "b", "c", "d"], start, dur, rng.random(n) < 0.05)
    m = int(rng.integers(0, 100))
    codes = rng.integers(-1, 4, m)                         # -1 and 3: no intervals
    times = np.concatenate([start, start + dur, rng.integers(-5, 140, n)]).astype(
        np.float64)[rng.integers(0, 3 * n, m)] if n else rng.integers(-5, 140, m) * 1.0
    if order == "by time":
        codes, times = codes[np.argsort(times, kind="stable")], np.sort(times)
    expected = []
    for code, t in zip(codes, times):
        j = -1
        if 0 <= code < 4:
            lo, hi = tree.bounds[code]
            for k in range(lo, hi):
                if tree.start[k] <= t:
                    j = k
            while j >= 0 and tree.end[j] < t:
                j = int(tree.parent[j])
        expected.append(j)
    assert tree.enclosing_codes(codes, times).tolist() == expected


@pytest.mark.parametrize("seed", range(40))
def test_a_tree_of_the_intervals_holding_points_answers_as_the_full_tree(seed: int) -> None:
    """build_tree(points=...) keeps only intervals holding a point of their thread; every
    innermost-interval and nearest-wanted-ancestor answer at those points is the full
    tree's, on nested sets with ties, zero lengths and points on interval edges."""
    rng = np.random.default_rng(seed)
    thread, start, dur = _nested_set(rng)
    m = int(rng.integers(0, 60))
    point_thread = rng.integers(-1, 4, m)               # -1 and 3: threads without ranges
    point_time = rng.integers(-5, 206, m).astype(np.float64)
    wanted = rng.random(len(thread)) < 0.4
    top = np.zeros(len(thread), dtype=bool)
    full = build_tree(thread, ["a", "b", "c", "d"], start, dur, top)
    pruned = build_tree(thread, ["a", "b", "c", "d"], start, dur, top,
                        points=(point_thread, point_time))
    assert len(pruned) <= len(full)

    def answers(tree) -> tuple[list[int], list[int]]:
        at = tree.enclosing_codes(point_thread, point_time)
        near = tree.nearest(at, wanted[tree.rows])
        return ([int(tree.rows[p]) if p >= 0 else -1 for p in at],
                [int(tree.rows[p]) if p >= 0 else -1 for p in near])

    assert answers(pruned) == answers(full)
    holding = [r for r in range(len(thread))
               if ((point_thread == thread[r]) & (point_time >= start[r])
                   & (point_time <= start[r] + dur[r])).any()]
    assert sorted(pruned.rows) == holding     # exactly the intervals holding a point
