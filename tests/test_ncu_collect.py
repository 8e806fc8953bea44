"""The deep pass's orchestration, with a fake `ncu` and `nvidia-smi` at the process boundary.

The fake's report is parsed from a real H200 raw-page CSV (what `ncu --import` prints), so
the merge into the run's op rows is checked on real ncu numbers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsbridge.api import analyze
from nsbridge.errors import NsbridgeError
from nsbridge.collect.ncu import nvtx_include, profile_argv

from conftest import TORCH_DATA, fake_ncu_env

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

SCRIPT = """
import torch, nsbridge
x = torch.randn(8, 8)
for _ in range(4):
    (x @ x).sum()
    nsbridge.step()
print("script ran")
"""


def test_argv_for_ops_with_templates_commas_and_parentheses() -> None:
    child = ["python", "-m", "nsbridge._bootstrap.entry", "cfg.json"]
    argv = profile_argv("ncu", ops=["aten::addmm", "my_ops::fused<float,2>(x)/y", "a@b[c]*+"],
                        launch_skip=8, launch_count=4, sections=["SpeedOfLight", "Occupancy"],
                        metrics=["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak"],
                        replay_mode="kernel", clock_control="base", cache_control="all",
                        output=Path("/r/deep"), child_argv=child)
    assert argv == [
        "ncu", "--target-processes", "all", "--nvtx",
        "--nvtx-include", "nsbridge@aten::addmm]",
        "--nvtx-include", "nsbridge@my_ops::fused<float\\,2>(x)\\/y]",
        "--nvtx-include", "nsbridge@a\\@b\\[c\\]\\*\\+]",
        "--launch-skip", "8", "--launch-count", "4", "--replay-mode", "kernel",
        "--clock-control", "base", "--cache-control", "all",
        "--section", "SpeedOfLight", "--section", "Occupancy",
        "--metrics", "gpu__time_duration.sum,sm__throughput.avg.pct_of_peak",
        "--export", "/r/deep", "--force-overwrite", *child]
    assert nvtx_include("aten::mm", domain="d") == "d@aten::mm]"


@pytest.fixture
def gpu_run(tmp_path: Path) -> dict:
    """A run as a GPU triage of a small script leaves it (ops from the H200 CNN trace), a
    fake ncu and nvidia-smi on PATH."""
    run = tmp_path / "run"
    analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz"], out=run)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(command="triage", target=str(script), args=[], cwd=str(tmp_path))
    manifest["passes"] = [{"name": "torch.profiler", "status": "ok", "exit_code": 0,
                           "wall_s": 9.0}]
    (run / "manifest.json").write_text(json.dumps(manifest))
    env = fake_ncu_env(tmp_path)
    return {"run": run, "env": env, "log": tmp_path / "calls", "bin": tmp_path / "bin",
            "tmp": tmp_path}


def _deep(fake: dict, *args: str, mode: str = "ok", env: dict | None = None):
    env = dict(env or fake["env"], FAKE_NCU_MODE=mode)
    return subprocess.run([sys.executable, "-m", "nsbridge", "deep", *args], cwd=fake["tmp"],
                          env=env, capture_output=True, text=True, timeout=300)


def _calls(fake: dict) -> list[list[str]]:
    log = fake["log"]
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_deep_profiles_the_ops_kernels_and_merges_ncu_into_the_op_rows(gpu_run: dict) -> None:
    proc = _deep(gpu_run, "--kernel", "aten::addmm", "--kernel", "aten::convolution_backward",
                 "--run", str(gpu_run["run"]))
    assert proc.returncode == 0, proc.stderr
    assert "Deep pass plan: 2 op(s), skip 52 matching launches" in proc.stderr   # before ncu
    assert "its kernels run within: aten::linear" in proc.stderr
    assert "script ran" in proc.stdout
    profile = next(c for c in _calls(gpu_run) if "--nvtx" in c)
    assert profile[:4] == ["--target-processes", "all", "--nvtx", "--nvtx-include"]
    assert profile[4:9] == ["nsbridge@aten::addmm]", "--nvtx-include", "nsbridge@aten::linear]",
                            "--nvtx-include", "nsbridge@aten::convolution_backward]"]
    # per measured step in the triage: 4 addmm and 19 convolution_backward kernel launches,
    # and 3 aten::sum launches (bias gradients) that run within convolution_backward's
    # range: two steps' worth skipped, one profiled
    assert profile[profile.index("--launch-skip") + 1] == "52"
    assert profile[profile.index("--launch-count") + 1] == "26"
    assert "gpu__time_duration.sum" in profile[profile.index("--metrics") + 1].split(",")
    assert profile[profile.index("--force-overwrite") + 1:][1:3] == ["-m",
                                                                     "nsbridge._bootstrap.entry"]
    assert ["--import", str(gpu_run["run"] / "deep.ncu-rep"), "--csv", "--page", "raw",
            "--print-units", "base"] in _calls(gpu_run)
    report = json.loads((gpu_run["run"] / "report.json").read_text())
    rows = {op["name"]: op for op in report["ops"]}
    assert rows["aten::addmm"]["ncu"]["launches"] == 4
    assert rows["aten::convolution_backward"]["ncu"]["launches"] == 6
    assert report["ncu"]["attribution"]["outside_filter"] == 29
    assert report["ncu"]["plan"]["ops"][0]["reason"] == "asked for with --kernel"
    passes = json.loads((gpu_run["run"] / "manifest.json").read_text())["passes"]
    assert [p["name"] for p in passes][-1] == "ncu" and passes[-1]["ncu_version"] == "2099.1.0.0"
    assert "Nsight Compute: ncu 2099.1.0.0" in proc.stdout


def test_ops_over_the_launch_cap_get_one_ncu_run_each(gpu_run: dict) -> None:
    """A step's worth of the ops' launches over max_launches: one shared window would stop
    in the forward and never reach the backward's op, so each op gets its own run."""
    profile = gpu_run["tmp"] / "capped.yaml"
    text = (ROOT / "profiles" / "deep.yaml").read_text()
    profile.write_text(re.sub(r"max_launches:\s*\d+", "max_launches: 12", text))
    proc = _deep(gpu_run, "--kernel", "aten::addmm", "--kernel", "aten::convolution_backward",
                 "--profile", str(profile), "--run", str(gpu_run["run"]))
    assert proc.returncode == 0, proc.stderr
    assert "one ncu run each" in proc.stderr
    runs = [c for c in _calls(gpu_run) if "--nvtx" in c]
    filters = [[c[i + 1] for i, a in enumerate(c) if a == "--nvtx-include"] for c in runs]
    assert filters == [["nsbridge@aten::addmm]", "nsbridge@aten::linear]"],
                       ["nsbridge@aten::convolution_backward]"]]
    # addmm: 4 a step, 2 skipped steps, all 4 under its share (6); convolution_backward:
    # 22 a step with the bias sums in its range, capped at its share
    windows = [(c[c.index("--launch-skip") + 1], c[c.index("--launch-count") + 1]) for c in runs]
    assert windows == [("8", "4"), ("44", "6")]
    report = json.loads((gpu_run["run"] / "report.json").read_text())
    assert report["files"]["ncu_rep"] == ["deep.ncu-rep", "deep-2.ncu-rep"]
    assert report["ncu"]["file"] == "deep.raw.csv, deep-2.raw.csv"
    rows = {op["name"]: op for op in report["ops"]}
    assert rows["aten::addmm"]["ncu"]["launches"] == 2 * 4   # the fake's capture, read twice
    assert report["ncu"]["plan"]["capped"] is True


def test_unknown_op_is_refused_before_any_gpu_or_ncu_lookup(gpu_run: dict) -> None:
    env = dict(gpu_run["env"], PATH=os.path.dirname(sys.executable))   # no GPU, no ncu
    proc = _deep(gpu_run, "--kernel", "aten::adddmm", "--run", str(gpu_run["run"]), env=env)
    assert proc.returncode == 1
    assert "The run has no op 'aten::adddmm' (did you mean 'aten::addmm'" in proc.stderr
    assert _calls(gpu_run) == []


def test_no_gpu(gpu_run: dict) -> None:
    env = dict(gpu_run["env"], PATH=os.path.dirname(sys.executable))
    proc = _deep(gpu_run, "--top", "2", "--run", str(gpu_run["run"]), env=env)
    assert proc.returncode == 1 and "needs an NVIDIA GPU" in proc.stderr


def test_ncu_missing_says_how_to_get_it(gpu_run: dict) -> None:
    (gpu_run["bin"] / "ncu").unlink()
    env = dict(gpu_run["env"], PATH=f"{gpu_run['bin']}{os.pathsep}{os.path.dirname(sys.executable)}")
    proc = _deep(gpu_run, "--top", "2", "--run", str(gpu_run["run"]), env=env)
    assert proc.returncode == 1 and "ncu (Nsight Compute) was not found" in proc.stderr
    assert "CUDA toolkit" in proc.stderr


def test_counter_permission_denied(gpu_run: dict) -> None:
    proc = _deep(gpu_run, "--top", "2", "--run", str(gpu_run["run"]), mode="perm")
    assert proc.returncode == 1 and "ERR_NVGPUCTRPERM" in proc.stderr
    assert "NVreg_RestrictProfilingToAdminUsers=0" in proc.stderr and "--cap-add" in proc.stderr
    assert (gpu_run["run"] / "report.json").is_file()                    # nothing lost


def test_filter_that_matched_no_kernel_names_the_filter(gpu_run: dict) -> None:
    proc = _deep(gpu_run, "--kernel", "aten::addmm", "--run", str(gpu_run["run"]),
                 mode="nokernels")
    assert proc.returncode == 1 and "ncu profiled no kernel" in proc.stderr
    assert "nsbridge@aten::addmm]" in proc.stderr and "deep.ncu.log" in proc.stderr


def test_ncu_failure_quotes_ncu_and_keeps_the_log(gpu_run: dict) -> None:
    proc = _deep(gpu_run, "--top", "1", "--run", str(gpu_run["run"]), mode="fail")
    assert proc.returncode == 1
    assert "ncu said: ==ERROR== An error occurred while trying to profile." in proc.stderr
    assert (gpu_run["run"] / "deep.ncu.log").is_file()


def test_top_n_says_why_each_op_was_picked(gpu_run: dict) -> None:
    proc = _deep(gpu_run, "--top", "3", "--run", str(gpu_run["run"]))
    assert proc.returncode == 0, proc.stderr
    assert "aten::convolution_backward: 19 launches per step; #1 by device time" in proc.stderr
    plan = json.loads((gpu_run["run"] / "report.json").read_text())["ncu"]["plan"]
    assert len(plan["ops"]) == 3 and all(o["reason"].startswith("#") for o in plan["ops"])


def test_triage_deep_without_a_gpu_fails_before_running_the_script(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "triage", "--deep=2", "--out",
                           str(tmp_path / "run"), str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "needs an NVIDIA GPU" in proc.stderr
    assert "script ran" not in proc.stdout and not (tmp_path / "run").exists()


def test_analyze_exports_a_report_it_cannot_read_with_the_ncu_of_its_environ(
        tmp_path: Path) -> None:
    """A .ncu-rep the ncu-report package cannot read goes through `ncu --import` of the
    environment given to analyze (not this process's PATH); without an ncu there, the
    reader's own error stands."""
    rep = tmp_path / "elsewhere.ncu-rep"
    rep.write_text("not a report the ncu-report package can read")
    env = fake_ncu_env(tmp_path)
    result = analyze([rep], out=tmp_path / "r", environ=env)
    assert result.report["ncu"]["launches"] == 39
    assert result.report["files"]["ncu_export"] == "elsewhere.raw.csv"
    assert (tmp_path / "r" / "elsewhere.raw.csv").is_file()
    calls = [json.loads(line) for line in (tmp_path / "calls").read_text().splitlines()]
    assert calls == [["--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"]]
    no_ncu = {**env, "PATH": "/nonexistent"}
    with pytest.raises(NsbridgeError, match="elsewhere.ncu-rep"):
        analyze([rep], out=tmp_path / "r2", environ=no_ncu)
