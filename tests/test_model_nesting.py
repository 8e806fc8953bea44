"""Host-op nesting and interval helpers on synthetic frames."""

from __future__ import annotations

import numpy as np

from nsbridge import schema as S
from nsbridge.model.nesting import build_host_tree, clipped_union, merge_intervals

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
