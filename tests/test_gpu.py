"""End-to-end on a real GPU (skipped without CUDA): kernels reach their ops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, requires_gpu, run_nsbridge

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not requires_gpu(), reason="needs a CUDA GPU")]


def test_triage_cnn_on_gpu(tmp_path: Path) -> None:
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), "examples/train_cnn.py",
                        "--", "--epochs", "1", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["ranked_by"] == "device_self_us"
    assert report["device"]["kernels"] > 0 and 0 < report["device"]["busy_pct"] <= 100
    top = report["ops"][0]
    assert top["kernels"] and top["device_self_us"] > 0
    assert report["device"]["attribution"].get("external_id", 0) > 0


def test_sync_bound_on_gpu(tmp_path: Path) -> None:
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), "examples/sync_bound.py",
                        cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["sync_points"][0]["device"] == "cuda"
    assert report["verdict"]["label"] == "sync-bound"
