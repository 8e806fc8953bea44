"""Real Nsight Systems end to end (CI installs Debian's nsys; skipped where it is missing)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import DATA, ROOT, requires_gpu, run_nsbridge

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys is not installed")]


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("tl") / "run"
    proc = run_nsbridge("triage", "--nsys", "--out", str(run), "examples/train_cnn.py", "--",
                        "--epochs", "1", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Timeline: nsys" in proc.stdout
    (run.parent / "stdout.txt").write_text(proc.stdout)
    return run


def test_a_cpu_capture_shows_no_gpu_numbers_and_keeps_no_raw_stream(cnn_run: Path) -> None:
    """No CUDA in the capture: GPU fields are null (not 0) in report.json and no column of
    dashes or zeros is shown; the 20+ MB .qdstrm is gone once the report exists."""
    report = json.loads((cnn_run / "report.json").read_text())
    timeline = report["timeline"]
    assert timeline["gpu_traced"] is False
    assert timeline["kernels"] is None and timeline["gpu_busy_pct"] is None
    assert all(op["kernel_us"] is None and op["kernels"] is None for op in timeline["ops"])
    joined = [op["nsys"] for op in report["ops"] if op["nsys"]]
    assert joined and all(n["kernel_us"] is None and n["range_us"] > 0 for n in joined)
    shown = [(cnn_run.parent / "stdout.txt").read_text(), (cnn_run / "report.md").read_text(),
             (cnn_run / "report.html").read_text()]
    for text in shown:
        assert "no GPU activity traced" in text
        assert "kernel ms" not in text and "nsys kernel" not in text
        # report.html's op table by input shape lists every shape of every op: three calls
        # of a tiny CPU op (aten::resize_) can total 0.000 ms there, measured, not a GPU cell
        text = re.sub(r"<div class='toggled' data-toggle='op-table-by-shape'.*?</table>", "",
                      text, flags=re.S)
        assert not re.search(r"(?<![\d.])0\.000(?![\d])", text)   # no zero cell (20.000 is fine)
    assert not list(cnn_run.glob("*.qdstrm"))


def test_export_holds_forward_and_backward_op_ranges(cnn_run: Path) -> None:
    with sqlite3.connect(cnn_run / "timeline.sqlite") as conn:
        names = {r[0] for r in conn.execute(
            "SELECT DISTINCT coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
            "ON s.id = n.textId WHERE n.eventType = 59")}
    assert {"aten::convolution", "aten::addmm"} <= names                  # forward
    assert {"aten::convolution_backward", "aten::threshold_backward"} <= names  # backward
    assert "model.features.0" in names and "model.features.0 [backward]" in names
    assert (cnn_run / "timeline.nsys-rep").stat().st_size > 0


def test_report_joins_timeline_to_triage_ops(cnn_run: Path) -> None:
    report = json.loads((cnn_run / "report.json").read_text())
    timeline = report["timeline"]
    assert timeline["nvtx"]["emitted"] == timeline["nvtx"]["recorded"] > 0
    assert timeline["nvtx"]["warning"] is None
    joined = [op for op in report["ops"] if op["nsys"]]
    assert any(op["name"] == "aten::convolution_backward" for op in joined)
    by_torch = [op["name"] for op in report["ops"][:10]]
    by_nsys = [op["op"] for op in timeline["ops"][:10]]
    assert len(set(by_torch) & set(by_nsys)) >= 4, (by_torch, by_nsys)
    passes = [p["name"] for p in json.loads((cnn_run / "manifest.json").read_text())["passes"]]
    assert passes == ["torch.profiler", "nsys"]


def test_timeline_run_adds_to_an_existing_triage(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert run_nsbridge("triage", "--profile", "quick", "--out", str(run),
                        "examples/sync_bound.py", "--", "--steps", "6", cwd=ROOT).returncode == 0
    proc = run_nsbridge("timeline", "--run", str(run), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((run / "report.json").read_text())
    assert report["verdict"]["label"] == "sync-bound" and report["timeline"]["op_ranges"] > 0
    assert (run / "trace.json.gz").is_file() and (run / "timeline.sqlite").is_file()


def test_analyze_accepts_nsys_rep_and_sqlite(cnn_run: Path, tmp_path: Path) -> None:
    for name, source in (("rep", cnn_run / "timeline.nsys-rep"),
                         ("sqlite", DATA / "nsys" / "h100_2gpu_1s.sqlite")):
        proc = run_nsbridge("analyze", "--out", str(tmp_path / name), str(source), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        report = json.loads((tmp_path / name / "report.json").read_text())
        assert report["timeline"]["op_ranges"] > 0


def test_report_newer_than_nsys_is_explained(tmp_path: Path) -> None:
    newer = ROOT.parent / "shared" / "fixtures" / "real" / "cs336-halfemptydrum" / "report1.nsys-rep"
    if not newer.is_file():
        pytest.skip("../shared fixtures not beside the repository")
    proc = run_nsbridge("analyze", "--out", str(tmp_path / "r"), str(newer), cwd=tmp_path)
    assert proc.returncode == 1 and "newer nsys" in proc.stderr


def test_doctor_with_nsys() -> None:
    proc = run_nsbridge("doctor", cwd=ROOT)
    lines = proc.stdout.splitlines()
    assert any(l.startswith("OK   nsys: 20") for l in lines), proc.stdout
    assert any(l.startswith("OK   nvtx round trip: nsys recorded 3 of 3") for l in lines)
    assert any(l.startswith("OK   torch:") for l in lines)


@pytest.mark.gpu
@pytest.mark.skipif(not requires_gpu(), reason="needs a CUDA GPU")
def test_gpu_kernels_join_to_ops(cnn_run: Path) -> None:
    report = json.loads((cnn_run / "report.json").read_text())
    assert report["timeline"]["kernels"] > 0
    assert report["timeline"]["attribution"].get("nvtx_push_pop", 0) > 0
