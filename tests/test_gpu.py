"""End-to-end on a real GPU (skipped without CUDA): kernels reach their ops, verdicts hold."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, requires_gpu, run_nsbridge, first_fix

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not requires_gpu(), reason="needs a CUDA GPU")]

GPU_BOUND = """
import torch
x = torch.randn(4096, 4096, device="cuda", requires_grad=True)
w = torch.randn(4096, 4096, device="cuda", requires_grad=True)
opt = torch.optim.SGD([x, w], lr=1e-6)
for _ in range(12):
    opt.zero_grad()
    ((x @ w) @ w).sum().backward()
    opt.step()
torch.cuda.synchronize()     # once, after the loop
print("done")
"""


def _report(run: Path) -> dict:
    return json.loads((run / "report.json").read_text())


def test_triage_cnn_on_gpu(tmp_path: Path) -> None:
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), "examples/train_cnn.py",
                        "--", "--epochs", "1", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = _report(tmp_path / "run")
    assert report["ranked_by"] == "device_self_us"
    assert report["device"]["kernels"] > 0 and 0 < report["device"]["busy_pct"] <= 100
    top = report["ops"][0]
    assert (top["kernels"] or top["copies"]) and top["device_self_us"] > 0
    assert report["device"]["attribution"].get("external_id", 0) > 0
    verdict = report["verdict"]   # a busy host can tip the data share past the input-bound line
    assert "cpu-bound" in [verdict["label"], *(a["label"] for a in verdict["alternatives"])]


def test_nsbridge_own_sync_is_named_and_never_the_scripts(tmp_path: Path) -> None:
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), "examples/train_cnn.py",
                        "--", "--epochs", "1", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = _report(tmp_path / "run")
    assert not [p for p in report["sync_points"] if p["kind"] == "cuda_synchronize"]
    assert not [p for p in report["sync_points"] if p["call"] == "cudaDeviceSynchronize"]
    trace = json.loads(gzip.open(tmp_path / "run" / "trace.json.gz").read())
    assert any(e.get("name") == "nsbridge::own_sync" for e in trace["traceEvents"])


def test_sync_bound_on_gpu(tmp_path: Path) -> None:
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), "examples/sync_bound.py",
                        cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = _report(tmp_path / "run")
    line = next(i for i, text in enumerate((EXAMPLES / "sync_bound.py").read_text()
                                           .splitlines(), 1) if "the anti-pattern" in text)
    top = report["sync_points"][0]
    assert top["device"] == "cuda" and (top["file"], top["line"]) == ("examples/sync_bound.py",
                                                                      line)
    assert top["counted_over"] == "measured steps" and top["gpu_idle_ms"] > 0
    assert report["verdict"]["label"] == "sync-bound"
    assert first_fix(report) == "remove-syncs"


def test_gpu_bound_with_an_end_of_loop_sync(tmp_path: Path) -> None:
    script = tmp_path / "gemm.py"
    script.write_text(GPU_BOUND)
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = _report(tmp_path / "run")
    assert report["verdict"]["label"] == "gpu-bound", report["verdict"]
    assert first_fix(report) in ("amp-tf32", "next-ncu")
    assert "remove-syncs" not in [r["id"] for r in report["recommendations"][:1]]


def test_triage_deep_on_the_cnn(tmp_path: Path) -> None:
    """Needs ncu too (the GPU machines here carry it)."""
    import shutil

    if shutil.which("ncu") is None:
        pytest.skip("ncu is not installed")
    proc = run_nsbridge("triage", "--deep", "3", "--out", str(tmp_path / "run"),
                        "examples/train_cnn.py", "--", "--epochs", "1", cwd=ROOT, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    assert "Deep pass plan: 3 op(s)" in proc.stderr
    report = _report(tmp_path / "run")
    with_ncu = [op for op in report["ops"] if op.get("ncu")]
    assert len(with_ncu) >= 2 and all(op["ncu"]["duration_ns"] > 0 for op in with_ncu)
    assert report["ncu"]["attribution"].get("nvtx", 0) > 0
    assert not report["ncu"]["attribution"].get("outside_filter")   # the filter held
    assert (tmp_path / "run" / "deep.ncu-rep").is_file()


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


@pytest.mark.skipif(not requires_gpu() or _gpus() < 2, reason="needs two CUDA GPUs (NCCL)")
def test_ddp_on_two_gpus_every_pass_per_rank(tmp_path: Path) -> None:
    """NCCL ranks: nsys on both, ncu on the planned ranks without hanging in a collective."""
    proc = run_nsbridge("triage", "--nproc-per-node", "2", "--nsys", "--deep", "2",
                        "--timeout", "900", "--out", str(tmp_path / "run"),
                        "examples/train_ddp.py", cwd=ROOT, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    report = _report(tmp_path / "run")
    rows = {r["rank"]: r for r in report["timeline"]["ranks"]}
    assert sorted(rows) == [0, 1] and all(r["kernels"] > 0 for r in rows.values())
    assert all(r["comm_kernel_us"] > 0 for r in rows.values())       # NCCL kernels joined
    assert [r["status"] for r in report["ncu"]["ranks"]] == ["ok", "ok"]
    assert not any(k["kernel"].startswith("nccl") for k in report["ncu"]["kernels"]
                   if k["attribution"] == "nvtx")


OUT_OF_MEMORY = """
import torch
torch.cuda.set_per_process_memory_fraction(0.05)     # a few GiB on any GPU: fails fast
model = torch.nn.Linear(1024, 1024).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
held = []
for step in range(1000):
    opt.zero_grad()
    x = torch.randn(256, 1024, device="cuda")
    held.append(torch.empty(256 * 2**20, device="cuda"))   # 1 GiB kept each step
    model(x).sum().backward()
    opt.step()
"""


def test_a_script_that_runs_out_of_memory_ends_with_the_oom_report(tmp_path: Path) -> None:
    """The allocator's snapshot at the failure (torch's out-of-memory observer) read into
    the report: the 1 GiB request, the script's line, what held memory (the kept blocks)
    and fragmentation; the run itself failed, as the script did."""
    (tmp_path / "oom.py").write_text(OUT_OF_MEMORY)
    proc = run_nsbridge("triage", "--profile", "memory", "--out", str(tmp_path / "run"),
                        str(tmp_path / "oom.py"), cwd=tmp_path)
    assert proc.returncode != 0 and "OutOfMemoryError" in proc.stderr
    report = _report(tmp_path / "run")
    assert report["files"]["memory_snapshot"] == "oom-snapshot.pickle"
    oom = report["memory_snapshot"]["oom"]
    assert oom["request_mib"] == pytest.approx(1024, rel=0.01)
    assert oom["line"].startswith("oom.py:")
    kept = [r for r in oom["held"]["rows"] if r["line"] and r["line"].startswith("oom.py:")]
    assert sum(r["mib"] for r in kept) >= 1024      # the blocks the loop kept
    assert report["memory_snapshot"]["fragmentation"]["ooms"] >= 1
