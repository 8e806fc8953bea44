"""`nsbridge.load(run_dir)`: a run read back as DataFrames, and its notebook view."""

from __future__ import annotations

from pathlib import Path

import pytest

import nsbridge
from nsbridge.errors import RunDirError
from nsbridge.report.frames import summary_html

from conftest import DATA, TORCH_DATA


def test_load_gives_every_table_as_a_frame(tmp_path: Path) -> None:
    made = nsbridge.analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz",
                             DATA / "ncu" / "train_cnn_nvtx_sections.raw.csv"], out=tmp_path / "r")
    run = nsbridge.load(tmp_path / "r")
    assert run.report == made.report and run.manifest["command"] == "analyze"
    ops = run.ops.set_index("name")
    assert ops.loc["aten::addmm", "device_self_us"] == pytest.approx(113.342)
    assert ops.loc["aten::addmm", "ncu_launches"] == 4 and "ncu_tensor_pct" in ops
    kernels = run.kernels
    assert set(kernels["kind"]) >= {"kernel", "memset"}
    assert kernels.loc[kernels["op"] == "aten::addmm", "calls"].sum() == 18   # 12 kernels, 6 memsets
    assert len(run.steps) == 3 and len(run.ncu) == 39 and len(run.gaps) > 0
    assert run.timeline_ops is None and run.exit_code == 0
    html = run._repr_html_()
    assert "cpu-bound" in html and "aten::convolution_backward" in html


def test_notebook_view_escapes_names() -> None:
    report = {"command": "analyze", "target": "t<1>", "status": "ok",
              "verdict": {"label": "gpu-bound", "evidence": ["a & b"]},
              "ops": [{"name": "<script>alert(1)</script>", "calls": 1, "cpu_self_us": 1.0,
                       "device_self_us": None, "self_pct": 100.0}]}
    page = summary_html(report, "runs/x")
    assert "<script>" not in page and "&lt;script&gt;" in page and "a &amp; b" in page


def test_load_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="not an nsbridge run directory"):
        nsbridge.load(tmp_path)
