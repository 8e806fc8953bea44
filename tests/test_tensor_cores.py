"""Tensor Core eligibility from the triage alone (dtype, shapes, TF32 settings, kernel
names), checked on a real H200 trace, a CPU run, and against ncu's counters."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nsbridge.api import analyze
from nsbridge.model.device.tensor_cores import (ELIGIBLE, MISALIGNED, NOT_ELIGIBLE, OFF, ON, mark,
                                         settle_with_ncu)

from conftest import DATA, ROOT, TORCH_DATA, run_nsbridge

H200 = TORCH_DATA / "h200" / "train_cnn_h200.json.gz"
NCU = DATA / "ncu" / "train_cnn_nvtx_sections.raw.csv"
TF32_OFF = {"matmul_allow_tf32": False, "cudnn_allow_tf32": True,
            "float32_matmul_precision": "highest"}


def test_h200_trace_marks_ops_by_their_kernels() -> None:
    """The CNN on an H200 (TF32 off for matmuls, on for cuDNN, torch's defaults): the
    convolutions ran TF32 kernels, the linear layer FFMA ones."""
    report = analyze([H200]).report
    marks = {op["name"]: op["tensor_cores"] for op in report["ops"] if op.get("tensor_cores")}
    assert marks["aten::cudnn_convolution"]["status"] == ON
    assert "tf32" in marks["aten::cudnn_convolution"]["reason"]
    assert marks["aten::addmm"]["status"] == OFF
    assert "fp32 without TF32" in marks["aten::addmm"]["reason"]
    assert all(m["evidence"] == "kernel names" and m["dtype"] == "float32"
               for m in marks.values())
    assert "aten::linear" not in marks          # a wrapper: marked through its addmm
    assert report["tensor_cores"][ON] == 2 and report["tensor_cores"][OFF] == 2


def test_marks_from_dtype_shapes_and_settings() -> None:
    mm = {"name": "aten::mm", "shapes": ["[[64,100],[100,256]]"], "kernels": []}
    assert mark(mm, '["float", "float"]', TF32_OFF, gpu_run=False)["status"] == NOT_ELIGIBLE
    tf32 = mark(mm, '["float", "float"]', {**TF32_OFF, "float32_matmul_precision": "high"},
                gpu_run=False)
    assert tf32["status"] == ELIGIBLE and "100" not in tf32["reason"]   # 100 % 4 == 0
    half = mark(mm, '["c10::BFloat16", "c10::BFloat16"]', TF32_OFF, gpu_run=False)
    assert half["status"] == MISALIGNED and "100 are not multiples of 8" in half["reason"]
    wide = mark(mm, '["long int", "long int"]', TF32_OFF, gpu_run=False)
    assert wide["status"] == NOT_ELIGIBLE and "int64" in wide["reason"]
    nvjet = {**mm, "kernels": [{"name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"}]}
    assert mark(nvjet, '["c10::BFloat16"]', TF32_OFF, gpu_run=True)["status"] == ON
    assert mark(mm, None, TF32_OFF, gpu_run=False) is None     # shapes not recorded


def test_ncu_counters_settle_a_wrong_mark() -> None:
    ops = [{"name": "aten::mm", "tensor_cores": {"status": ON, "evidence": "kernel names",
                                                 "reason": "x"},
            "ncu": {"tensor_pct": 0.0003, "findings": []}},
           {"name": "aten::addmm", "tensor_cores": {"status": OFF, "evidence": "kernel names",
                                                    "reason": "y"},
            "ncu": {"tensor_pct": 0.01, "findings": []}}]
    settle_with_ncu(ops)
    assert ops[0]["tensor_cores"]["status"] == OFF
    assert ops[0]["tensor_cores"]["evidence"] == "ncu counters"
    assert ops[0]["tensor_cores"]["triage_status"] == ON
    assert [f["id"] for f in ops[0]["ncu"]["findings"]] == ["tensor-cores-disagree"]
    assert ops[1]["ncu"]["findings"] == [] and ops[1]["tensor_cores"]["status"] == OFF


def test_with_ncu_the_marks_rest_on_the_counters(tmp_path: Path) -> None:
    report = analyze([H200, NCU], out=tmp_path / "r").report
    conv = next(op for op in report["ops"] if op["name"] == "aten::convolution_backward")
    assert conv["tensor_cores"]["evidence"] == "ncu counters"
    assert conv["tensor_cores"]["status"] == ON and conv["ncu"]["tensor_pct"] >= 1.0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Tensor Cores" in md and "| Tensor Cores |" in md


@pytest.mark.slow
def test_a_cpu_triage_records_the_tf32_settings_and_marks_ops(tmp_path: Path) -> None:
    proc = run_nsbridge("-q", "triage", "--out", str(tmp_path / "run"),
                        "examples/train_cnn.py", "--", "--epochs", "1", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["environment"]["math"] == TF32_OFF          # torch's defaults
    marks = {op["name"]: op["tensor_cores"] for op in report["ops"] if op.get("tensor_cores")}
    assert marks["aten::addmm"]["status"] == NOT_ELIGIBLE
    assert "allow_tf32 = True" in marks["aten::addmm"]["reason"]
    assert "a CPU run" in marks["aten::addmm"]["evidence"]
    # once per chain of calls: the op doing the work, not the wrappers around it
    assert "aten::mkldnn_convolution" in marks and "aten::linear" not in marks
    assert not {"aten::conv2d", "aten::convolution", "aten::_convolution"} & set(marks)
    counts = report["tensor_cores"]
    assert counts["ops"] == len(marks) == sum(v for k, v in counts.items() if k != "ops")
    # what a GPU would do: in report.md, not among the terminal's measured findings
    assert "Tensor Cores:" not in proc.stdout
    md = (tmp_path / "run" / "report.md").read_text()
    section = md[md.index("## Tensor Cores"):].split("\n## ", 1)[0]
    shown = re.findall(r"^\| `([^`]+)` \|", section, re.M)
    assert shown and set(shown) <= set(marks)        # its top rows, each a marked op


def test_common_input_types_equals_a_counter_per_name() -> None:
    """The vectorised count equals a plain Counter per op name (ties: the first seen),
    on random rows with missing and non-text types."""
    import random
    from collections import Counter

    from nsbridge.model.device.tensor_cores import common_input_types, is_tensor_core_op

    rng = random.Random(3)
    pool_names = ["aten::mm", "aten::addmm", "aten::conv2d", "aten::relu", "aten::bmm"]
    pool_types = ['["float"]', '["c10::Half"]', '["float","float"]', None, float("nan"), 7]
    for _ in range(200):
        n = rng.randrange(0, 60)
        names = [rng.choice(pool_names) for _ in range(n)]
        types = [rng.choice(pool_types) for _ in range(n)]
        seen: dict[str, Counter] = {}
        for name, text in zip(names, types):
            if isinstance(text, str) and is_tensor_core_op(name):
                seen.setdefault(name, Counter())[text] += 1
        want = {name: counts.most_common(1)[0][0] for name, counts in seen.items()}
        got = common_input_types(names, types)
        assert got == want and list(got) == list(want)
