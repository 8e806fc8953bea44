"""Work signatures: what an op computes (input shapes, dtypes, layouts), read from real
torch.profiler traces, and how two runs' signatures differ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from nsbridge.model.analysis import analyze_events
from nsbridge.model.comparing.work import OpWork, dtype_text, layout_text, signature_changes
from nsbridge.parse.torch_trace import read_trace
from nsbridge.profiles import load_profile


@pytest.mark.parametrize("types, expected", [
    ('["float","float","Scalar"]', "float32"),
    ('["double","double"]', "float64"),
    ('["c10::BFloat16","float"]', "bfloat16, float32"),
    ('["long int","","Scalar"]', "int64"),
    ('["Scalar"]', None),
    ("not json", None),
    (None, None),
])
def test_dtypes_are_torch_names_of_the_tensor_inputs(types: str, expected: str) -> None:
    assert dtype_text(types) == expected


@pytest.mark.parametrize("dims, strides, expected", [
    ("[[512,256],[256,512]]", "[[256,1],[512,1]]", "contiguous"),
    ("[[512,256],[256,512]]", "[[256,1],[1,256]]", "contiguous, transposed"),
    ("[[8,3,32,32]]", "[[3072,1,96,3]]", "channels_last"),
    ("[[8,16]]", "[[32,1]]", "strided"),                     # every other row: a slice
    ("[[1,16],[16]]", "[[99,1],[1]]", "contiguous"),        # a size-1 dim's stride never matters
    ("[[512],[],[]]", "[[1],[],[]]", "contiguous"),          # scalars left out
    ("[[4,4]]", None, None),
])
def test_layouts_from_dims_and_strides(dims: str, strides: str, expected: str) -> None:
    assert layout_text(dims, strides) == expected


def _work(entries: list[tuple[str, str, str, int]], calls: int | None = None) -> OpWork:
    shape_work = [{"shape": s, "dtypes": d, "layout": lay, "calls": c, "us": 10.0 * c}
                  for s, d, lay, c in entries]
    total = calls if calls is not None else sum(e[3] for e in entries)
    return OpWork(total, sum(e["us"] for e in shape_work), shape_work, 1)


def test_signature_changes_name_the_kind_and_both_sides() -> None:
    a = _work([("[[8,8]]", "float32", "contiguous", 4)])
    assert signature_changes(a, a) == {}
    f64 = _work([("[[8,8]]", "float64", "contiguous", 4)])
    assert signature_changes(a, f64) == {"dtype": ("float32", "float64")}
    transposed = _work([("[[8,8]]", "float32", "transposed", 4)])
    assert signature_changes(a, transposed) == {"layout": ("contiguous", "transposed")}
    bigger = _work([("[[16,16]]", "float32", "contiguous", 4)])
    assert signature_changes(a, bigger) == {"shapes": ("[[8,8]]", "[[16,16]]")}
    more = _work([("[[8,8]]", "float32", "contiguous", 4), ("[[16,16]]", "float32",
                                                             "contiguous", 64)])
    assert signature_changes(a, more) == {}     # calls added: more work, priced as such


def test_shapes_are_compared_only_when_every_call_is_covered() -> None:
    """shape_work keeps the most called signatures: one missing from a cut list is not a
    new shape."""
    cut = _work([("[[8,8]]", "float32", "contiguous", 4)], calls=9)
    other = _work([("[[16,16]]", "float32", "contiguous", 4)], calls=9)
    assert signature_changes(cut, other) == {}


def test_a_real_trace_records_dtype_and_layout_per_signature(tmp_path: Path) -> None:
    """torch.profiler on this machine: x @ w.t() in float64 is aten::mm over a float64,
    transposed second input; the same op in float32 is another signature."""
    x, w = torch.randn(64, 32), torch.randn(16, 32)
    with torch.profiler.profile(record_shapes=True) as prof:
        for dtype in (torch.float32, torch.float64):
            torch.mm(x.to(dtype), w.to(dtype).t())
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    ops = analyze_events(read_trace(path).events, thresholds=load_profile("default").analysis,
                         window="trace").ops
    mm = ops.set_index("name").loc["aten::mm", "shape_work"]
    by_dtype = {w["dtypes"]: w for w in mm}
    assert set(by_dtype) == {"float32", "float64"}
    assert by_dtype["float64"]["layout"] == "contiguous, transposed"
    assert by_dtype["float64"]["shape"] == "[[64,32],[32,16]]" and by_dtype["float64"]["calls"] == 1


def test_tied_signatures_are_kept_alike_whatever_their_times() -> None:
    """An op with more equally called signatures than are kept (an aten::add_ with 12
    shapes, once each per step): two runs of the same work, timed differently, keep the
    same ones, so an unchanged pair never reads as a layout or shape change."""
    from nsbridge.model.host.ops import SHAPE_WORK_TOP, _shape_work, merge_shape_work

    shapes = [f"[[{n},4]]" for n in range(12)]

    def kept(times: list[float]) -> list[tuple]:
        per_op = pd.DataFrame({"name": "aten::add_", "shape": shapes, "dtypes": "float32",
                               "layout": ["contiguous", "strided"] * 6, "self_us": times})
        work = _shape_work(per_op, "self_us")["aten::add_"]
        assert len(work) == SHAPE_WORK_TOP
        return [(w["shape"], w["layout"]) for w in work]

    rng = np.random.default_rng(0)
    first = kept(list(rng.uniform(1, 100, 12)))
    for _ in range(5):
        assert kept(list(rng.uniform(1, 100, 12))) == first
    merged = [merge_shape_work(pd.Series([[{"shape": s, "dtypes": "float32",
                                            "layout": "contiguous", "calls": 1, "us": us}
                                           for s, us in zip(shapes, rng.uniform(1, 9, 12))]]))
              for _ in range(2)]
    assert [w["shape"] for w in merged[0]] == [w["shape"] for w in merged[1]]
