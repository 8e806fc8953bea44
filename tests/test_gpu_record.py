"""The live GPU record's tooling (issue 40), checked without a GPU.

bench/gpu_record.sh is run for real in its CPU mode (its GPU steps recorded as skipped, the
rest run), and bench/gpu_record/compare.py, which turns what the device brings back into the
comparisons table, is run on the real captures in tests/data: torch traces of an H200 with
torch's own key_averages table, nsys's export of an H100 run, ncu's --set full pages of two
H200 GEMMs. Each comparison is also shown to fail when the two sides disagree.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import DATA, ROOT, TORCH_DATA

SCRIPT = ROOT / "bench" / "gpu_record.sh"
GPU_STEPS = {"cnn_timeline", "cnn_nsys_stats", "ncu_conv", "ncu_attention", "compile_triage",
             "cudagraph_triage", "cudagraph_nsys_stats", "gate_same", "gate_bf16",
             "gate_extra"}
CPU_STEPS = {"setup", "versions", "doctor", "cnn_triage", "oracle_cnn", "bert_triage",
             "oracle_bert", "compare"}
H200_CNN = TORCH_DATA / "h200" / "train_cnn_h200"
H100_SQLITE = DATA / "nsys" / "nsbridge_sync_bound_h100_nsys2025.3.sqlite"
BF16 = DATA / "ncu" / "matmul_bf16_full.raw.csv"
FP32 = DATA / "ncu" / "matmul_fp32_full.raw.csv"


def _load_compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_record_compare",
                                                  ROOT / "bench" / "gpu_record" / "compare.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module         # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


compare = _load_compare()


def _rows(folder: Path, steps: Path | None = None) -> list[Any]:
    return compare.compare(folder, steps)


def _one(rows: list[Any], check: str, where: str) -> Any:
    [row] = [r for r in rows if r.check == check and r.where.startswith(where)]
    return row


# -- the script, in CPU mode ----------------------------------------------------------------

def _run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    out, work = tmp_path / "out", tmp_path / "work"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GPU_RECORD_")}
    environ.update(OUT=str(out), GPU_RECORD_WORK=str(work), GPU_RECORD_CPU="1",
                   GPU_RECORD_PYTHON=sys.executable, **env)
    done = subprocess.run(["bash", str(SCRIPT)], cwd=str(tmp_path), env=environ,
                          capture_output=True, text=True, timeout=900)
    return done, out, work


def _steps(out: Path) -> dict[str, dict[str, str]]:
    with (out / "steps.tsv").open(newline="") as handle:
        return {row["step"]: row for row in csv.DictReader(handle, delimiter="\t")}


@pytest.mark.slow
def test_the_script_in_cpu_mode_records_every_step(tmp_path: Path) -> None:
    done, out, work = _run_script(tmp_path, GPU_RECORD_BUDGET="400")
    assert done.returncode == 0, done.stdout + done.stderr
    steps = _steps(out)
    assert set(steps) == GPU_STEPS | CPU_STEPS
    for name in GPU_STEPS:
        assert steps[name]["status"] == "skipped: no GPU", (name, steps[name])
    for name in CPU_STEPS:
        assert steps[name]["status"] == "ok" and steps[name]["rc"] == "0", (name, steps[name])
        assert float(steps[name]["wall_s"]) > 0, name
    versions = (out / "versions.txt").read_text()
    assert "mode: cpu" in versions and re.search(r"^torch \S+", versions, re.M), versions
    # what comes back: few files, plain names, none deeper than the device tool returns
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} == {"steps.tsv", "versions.txt", "record.tar.gz",
                                       "comparisons.md"}
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in files)
    with tarfile.open(out / "record.tar.gz") as tar:
        names = set(tar.getnames())
    for needed in ("./runs/cnn/report.json", "./runs/cnn/key_averages.txt",
                   "./runs/bert/report.json", "./oracle/cnn.key_averages.csv",
                   "./oracle/bert.trace.json.gz", "./logs/doctor.log", "./steps.tsv"):
        assert needed in names, needed
    # compare ran on the record: the CPU runs agree with torch's own tables, and every
    # GPU-only comparison says which skipped step it waits for
    rows = _rows(out)
    for where in ("runs/cnn", "runs/bert", "oracle/cnn", "oracle/bert"):
        mine = [r for r in rows if r.where == where and "key_averages" in r.check]
        assert {r.verdict for r in mine} == {"ok"}, (where, mine)
        assert any(r.check == "per-op CPU self time vs key_averages" for r in mine)
    skipped = _one(rows, "Tensor Core verdict and roofline (--set full)", "ncu/conv")
    assert skipped.verdict == ("skipped: ncu/conv.raw.csv (step ncu_conv: skipped: no GPU)")
    table = (out / "comparisons.md").read_text()
    assert "| per-op calls vs key_averages | runs/cnn |" in table


@pytest.mark.slow
def test_a_spent_budget_skips_the_steps_but_compare_still_runs(tmp_path: Path) -> None:
    done, out, _ = _run_script(tmp_path, GPU_RECORD_BUDGET="30", GPU_RECORD_RESERVE="25")
    assert done.returncode == 0, done.stdout + done.stderr
    steps = _steps(out)
    assert steps["setup"]["status"] == "ok" and steps["compare"]["status"] == "ok"
    for name in CPU_STEPS - {"setup", "compare"}:
        assert steps[name]["status"] == "skipped: budget", (name, steps[name])
    for name in GPU_STEPS:
        assert steps[name]["status"] == "skipped: no GPU", name
    assert (out / "comparisons.md").is_file()


def test_the_script_parses_and_names_its_steps() -> None:
    text = SCRIPT.read_text()
    for name in GPU_STEPS:
        assert re.search(rf"^step_fn {name} gpu ", text, re.M), name
    assert "set -u" in text and "set -e" not in text


# -- compare.py on real captures ------------------------------------------------------------

def _h200_run(folder: Path, name: str = "cnn") -> Path:
    """runs/NAME as the record holds it: the H200 trace analysed, torch's table beside it."""
    import nsbridge

    run = folder / "runs" / name

    nsbridge.analyze([Path(f"{H200_CNN}.json.gz")], out=run, jobs=1)
    shutil.copy(f"{H200_CNN}.key_averages.txt", run / "key_averages.txt")
    return run


def test_device_times_agree_with_torchs_table_and_a_changed_cell_fails(tmp_path: Path) -> None:
    run = _h200_run(tmp_path)
    rows = _rows(tmp_path)
    calls = _one(rows, "per-op calls vs key_averages", "runs/cnn")
    self_time = _one(rows, "per-op device self time vs key_averages", "runs/cnn")
    total = _one(rows, "per-op device total time vs key_averages", "runs/cnn")
    assert (calls.verdict, self_time.verdict, total.verdict) == ("ok", "ok", "ok")
    assert int(calls.ours.split()[0]) >= 10
    table = run / "key_averages.txt"
    text = table.read_text()
    assert "419.674us" in text           # aten::convolution_backward's Self CUDA
    table.write_text(text.replace("419.674us", "440.000us"))
    changed = _one(_rows(tmp_path), "per-op device self time vs key_averages", "runs/cnn")
    assert changed.verdict == "FAIL"
    assert [d.split(": ")[0] for d in changed.details] == ["aten::convolution_backward"]


def test_the_oracle_csv_is_read_at_full_precision(tmp_path: Path) -> None:
    """oracle/cnn: a trace and a key_averages CSV (here the H200 table written as oracle.py
    writes it); one op's device time 2 % off fails, 0.5 % passes."""
    table = compare.read_key_averages_txt(Path(f"{H200_CNN}.key_averages.txt"))
    (tmp_path / "oracle").mkdir()
    shutil.copy(f"{H200_CNN}.json.gz", tmp_path / "oracle" / "cnn.trace.json.gz")

    def write(scale: float) -> None:
        with (tmp_path / "oracle" / "cnn.key_averages.csv").open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["name", "calls", "cpu_self_us", "cpu_total_us", "device_self_us",
                             "device_total_us"])
            for name, row in table.items():
                factor = scale if name == "aten::convolution_backward" else 1.0
                writer.writerow([name, row["# of Calls"][0], row["Self CPU"][0],
                                 row["CPU total"][0], row["Self CUDA"][0] * factor,
                                 row["CUDA total"][0]])
    write(1.005)
    assert _one(_rows(tmp_path), "per-op device self time vs key_averages",
                "oracle/cnn").verdict == "ok"
    write(1.02)
    failed = _one(_rows(tmp_path), "per-op device self time vs key_averages", "oracle/cnn")
    assert failed.verdict == "FAIL" and "aten::convolution_backward" in failed.details[0]


def _kern_sum(sqlite: Path, path: Path, scale_first: float = 1.0) -> None:
    """A cuda_gpu_kern_sum CSV as `nsys stats` writes it, from the export's kernel table."""
    with sqlite3.connect(sqlite) as con:
        rows = con.execute(
            'SELECT s.value, COUNT(*), SUM(k."end" - k."start") FROM CUPTI_ACTIVITY_KIND_KERNEL k '
            "JOIN StringIds s ON s.id = k.shortName GROUP BY s.value ORDER BY 3 DESC").fetchall()
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)",
                         "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"])
        for i, (name, count, total) in enumerate(rows):
            total = total * (scale_first if i == 0 else 1.0)
            writer.writerow([0, total, count, total / count, 0, 0, 0, 0, name])


def test_kernel_totals_equal_nsys_stats_and_the_export(tmp_path: Path) -> None:
    (tmp_path / "runs" / "cnn").mkdir(parents=True)
    (tmp_path / "nsys").mkdir()
    sqlite = tmp_path / "runs" / "cnn" / "timeline.sqlite"
    shutil.copy(H100_SQLITE, sqlite)
    _kern_sum(sqlite, tmp_path / "nsys" / "cnn_cuda_gpu_kern_sum.csv")
    rows = _rows(tmp_path)
    count = _one(rows, "kernel count vs nsys stats", "runs/cnn")
    time = _one(rows, "kernel time total vs nsys stats cuda_gpu_kern_sum", "runs/cnn")
    export = _one(rows, "kernel time total vs the export's kernel table", "runs/cnn")
    joined = _one(rows, "kernels joined to ops (nsys: NVTX ranges, graph node captures)",
                  "runs/cnn")
    assert (count.ours, count.theirs, count.verdict) == ("162", "162", "ok")
    assert time.verdict == export.verdict == joined.verdict == "ok"
    assert time.ours == time.theirs == "478.154 µs"
    _kern_sum(sqlite, tmp_path / "nsys" / "cnn_cuda_gpu_kern_sum.csv", scale_first=1.5)
    rows = _rows(tmp_path)
    assert _one(rows, "kernel time total vs nsys stats cuda_gpu_kern_sum",
                "runs/cnn").verdict == "FAIL"
    assert _one(rows, "kernel count vs nsys stats", "runs/cnn").verdict == "ok"
    assert _one(rows, "kernel time total vs the export's kernel table",
                "runs/cnn").verdict == "ok"


def _ncu_layout(folder: Path) -> None:
    (folder / "ncu").mkdir(parents=True)
    shutil.copy(BF16, folder / "ncu" / "conv.raw.csv")        # on Tensor Cores (hgmma)
    shutil.copy(FP32, folder / "ncu" / "attention.raw.csv")   # fp32, TF32 off: FFMA


def test_tensor_core_verdicts_and_roofline_equal_ncus_counters(tmp_path: Path) -> None:
    _ncu_layout(tmp_path)
    rows = _rows(tmp_path)
    on = _one(rows, "Tensor Core verdict vs tensor-pipe counters", "ncu/conv")
    off = _one(rows, "Tensor Core verdict vs tensor-pipe counters", "ncu/attention")
    assert (on.ours, on.verdict) == ("1 of 1 families on Tensor Cores", "ok")
    assert (off.ours, off.verdict) == ("0 of 1 families on Tensor Cores", "ok")
    for case in ("ncu/conv", "ncu/attention"):
        roof = _one(rows, "roofline vs hand computation from ncu raw metrics", case)
        assert roof.verdict == "ok" and roof.ours == "1 launches", roof
        util = _one(rows, "roof share vs ncu's own utilisation", case)
        assert util.verdict == "ok", util
    # the hand computation's own numbers (test_ncu_roofline.py's: 39.4 TFLOP/s, 347 FLOP/B)
    [launch] = compare.read_raw_page(FP32)
    hand = compare.hand_roofline(launch)
    assert hand["precision"] == "fp32" and hand["roof"] == "compute"
    assert hand["flop_per_s"] == pytest.approx(39.4e12, rel=2e-3)
    assert hand["intensity"] == pytest.approx(347, rel=2e-3)


def test_a_wrong_tensor_verdict_or_roofline_number_fails(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from nsbridge.model.nsight import ncu, ncu_findings

    _ncu_layout(tmp_path)
    monkeypatch.setattr(ncu_findings, "TENSOR_ON_PCT", 200.0)   # nsbridge: never "on"
    verdict = _one(_rows(tmp_path), "Tensor Core verdict vs tensor-pipe counters", "ncu/conv")
    assert verdict.verdict == "FAIL" and "the tensor-pipe counters say on" in verdict.details[0]
    monkeypatch.undo()
    real = ncu.roofline

    def five_percent_high(values: dict[str, float]) -> dict[str, Any]:
        out = real(values)
        out["flop_per_s"] = out["flop_per_s"] * 1.05
        return out
    monkeypatch.setattr(ncu, "roofline", five_percent_high)
    roof = _one(_rows(tmp_path), "roofline vs hand computation from ncu raw metrics",
                "ncu/attention")
    assert roof.verdict == "FAIL" and "flop_per_s" in roof.deviation


def test_units_as_ncu_prints_them() -> None:
    assert compare.unit_scale("Gbyte/s") == 1e9
    assert compare.unit_scale("Ghz") == 1e9
    assert compare.unit_scale("Kbyte/cycle") == 1e3
    assert compare.unit_scale("sector/ns") == pytest.approx(1e9)
    assert compare.unit_scale("us") == 1e-6 and compare.unit_scale("%") == 1.0
    assert compare.unit_scale("%/register") is None


def test_gate_answers_are_judged_by_what_each_gate_expects(tmp_path: Path) -> None:
    answers = {
        "same": {"outcome": "pass", "exit_code": 0, "ops": [], "regressions": []},
        "bf16": {"outcome": "pass", "exit_code": 0, "regressions": [],
                 "ops": [{"op": "aten::addmm", "status": "different work", "basis": "dtype",
                          "work": "now runs in bfloat16 (was float32)"}]},
        "extra": {"outcome": "regression", "exit_code": 1, "ops": [],
                  "regressions": [{"what": "aten::bmm", "basis": "new", "detail": "new op"}]},
    }

    def write(name: str, answer: dict[str, Any]) -> None:
        (tmp_path / "gates" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "gates" / name / "gate.json").write_text(json.dumps(answer))
    for name, answer in answers.items():
        write(name, answer)
    rows = compare.gate_checks(compare.Record(tmp_path, {}))
    assert [r.verdict for r in rows] == ["ok", "ok", "ok"]
    write("same", {**answers["same"], "outcome": "regression", "exit_code": 1})
    write("bf16", {**answers["bf16"], "ops": []})
    write("extra", {**answers["extra"], "outcome": "pass", "regressions": []})
    rows = compare.gate_checks(compare.Record(tmp_path, {}))
    assert [r.verdict for r in rows] == ["FAIL", "FAIL", "FAIL"]
    write("same", {**answers["same"], "outcome": "inconclusive", "exit_code": 4})
    assert compare.gate_checks(compare.Record(tmp_path, {}))[0].verdict == "check"


def test_missing_inputs_name_the_file_and_the_step(tmp_path: Path) -> None:
    steps = tmp_path / "steps.tsv"
    steps.write_text("step\tstatus\trc\twall_s\tnote\n"
                     "cnn_timeline\tfailed\t1\t3.0\t\n"
                     "ncu_conv\tskipped: no GPU\t\t0\t\n")
    rows = _rows(tmp_path)
    assert not [r for r in rows if r.verdict.split(":")[0] in ("ok", "FAIL")], rows
    timeline = _one(rows, "kernel totals vs nsys stats cuda_gpu_kern_sum", "runs/cnn")
    assert timeline.verdict == "missing: runs/cnn/*.sqlite (step cnn_timeline: failed)"
    conv = _one(rows, "Tensor Core verdict and roofline (--set full)", "ncu/conv")
    assert conv.verdict == "skipped: ncu/conv.raw.csv (step ncu_conv: skipped: no GPU)"
    gate = _one(rows, "gate on GPU: extra", "gates/extra")
    assert gate.verdict == "missing: gates/extra/gate.json (step gate_extra not in steps.tsv)"
    wanted = {"runs/cnn", "runs/bert", "runs/compile", "runs/cudagraph", "oracle/cnn",
              "oracle/bert", "ncu/conv", "ncu/attention", "gates/same", "gates/bf16",
              "gates/extra"}
    assert wanted <= {r.where for r in rows}


def test_the_returned_tarballs_read_as_the_folder_and_check_fails_on_fail(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "work"
    _ncu_layout(work)
    _h200_run(work)
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(out / "record.tar.gz", "w:gz") as tar:
        tar.add(work, arcname=".")
    (out / "steps.tsv").write_text("step\tstatus\trc\twall_s\tnote\n")
    direct = [(r.check, r.where, r.verdict) for r in _rows(work)]
    assert [(r.check, r.where, r.verdict) for r in _rows(out)] == direct
    assert compare.main([str(out), "--out", str(tmp_path / "c.md"), "--json",
                         str(tmp_path / "c.json"), "--check"]) == 0
    text = (tmp_path / "c.md").read_text()
    assert text.startswith("# GPU record: comparisons")
    assert len(json.loads((tmp_path / "c.json").read_text())) == len(direct)
    table = work / "runs" / "cnn" / "key_averages.txt"
    table.write_text(table.read_text().replace("419.674us", "440.000us"))
    assert compare.main([str(work), "--check"]) == 1
    assert "| FAIL |" in capsys.readouterr().out


def test_an_unsafe_tarball_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    data = b"x"
    with tarfile.open(out / "record.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises((ValueError, getattr(tarfile, "FilterError", ValueError))):
        _rows(out)
    assert not (tmp_path / "escaped.txt").exists()
