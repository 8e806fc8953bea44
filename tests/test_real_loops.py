"""The loop shapes of real public training scripts, end to end under `nsbridge triage`:
no optimizer (word_language_model), LBFGS closures (time_sequence_prediction), an
evaluation between epochs and a log line that formats tensors (imagenet's ProgressMeter).
Real child processes, CPU torch; budgets are set small through a profile file so each
test takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, run_nsbridge

pytestmark = pytest.mark.slow


def _profile(tmp_path: Path, **schedule: float) -> str:
    lines = ["version: 1", "schedule:"] + [f"  {k}: {v}" for k, v in schedule.items()]
    path = tmp_path / "budget.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _triage(tmp_path: Path, *args: str) -> tuple:
    run = tmp_path / "run"
    proc = run_nsbridge("triage", "--out", str(run), *args, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((run / "report.json").read_text())
    child = json.loads((run / "child.json").read_text())
    return proc, report, child


def _line_of(script: str, text: str) -> int:
    lines = (EXAMPLES / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_loop_without_optimizer_gets_a_bounded_time_window(tmp_path: Path) -> None:
    # dropping the start-up recording costs torch seconds of post-processing on the
    # script's thread (11 s once on a loaded machine), so the script trains long enough to
    # reach the window's end
    profile = _profile(tmp_path, wait_for_step_s=1, window_s=1)
    proc, report, child = _triage(tmp_path, "--profile", profile,
                                  "examples/train_no_optimizer.py", "--", "--epochs", "1",
                                  "--seconds", "20")
    window = child["window"]
    assert child["mode"] == "bounded" and window["kind"] == "time-window"
    # bounded: a 1 s window of a 20 s script stays far below 20 s even on a loaded machine
    assert window["stopped_by"] == "time" and 1 <= window["seconds"] < 8
    assert report["window"]["kind"] == "trace" and report["window"]["seconds"] < 8
    assert report["verdict"]["label"] != "sync-bound"
    assert report["verdict"]["numbers"]["sync_calls_per_step"] is None
    assert "remove-syncs" not in [r["id"] for r in report["recommendations"]]
    assert not any(p["per_step"] for p in report["sync_points"])
    assert any("time window after it was profiled" in n for n in report["notes"])
    assert "/step" not in proc.stdout.split("Sync points")[-1].split("Recommendations")[0]


def test_memory_budget_stops_a_recording_and_keeps_it(tmp_path: Path) -> None:
    # the script runs long enough to reach the budget beside two busy loops too
    profile = _profile(tmp_path, wait_for_step_s=60, max_record_mib=30)
    _, report, child = _triage(tmp_path, "--profile", profile,
                               "examples/train_no_optimizer.py", "--", "--epochs", "1",
                               "--seconds", "16")
    window = child["window"]
    assert window["kind"] == "whole-run" and window["stopped_by"] == "memory"
    assert window["grew_mib"] > 30      # stopped by the budget, not by the script's end
    assert report["status"] == "ok" and report["window"]["kind"] == "trace"
    assert any("grew the process by" in n for n in report["notes"])


def test_lbfgs_closures_counted_in_the_step_phases(tmp_path: Path) -> None:
    _, report, _ = _triage(tmp_path, "examples/train_lbfgs.py")
    steps = report["steps"]
    assert steps["detected_by"] == "optimizer" and steps["count"] == 3
    for row in steps["per_step"]:
        phases = [row[k] for k in ("data_ms", "forward_ms", "backward_ms", "optimizer_ms",
                                   "other_ms")]
        assert sum(phases) == pytest.approx(row["wall_ms"], abs=5e-3)   # each rounded to µs
        assert row["forward_ms"] > 0 and row["backward_ms"] > 0 and row["optimizer_ms"] > 0
    line = _line_of("train_lbfgs.py", "loss.item()")
    point = next(p for p in report["sync_points"] if p["line"] == line)
    assert point["placement"] == "steps" and point["per_step"] == 1
    assert report["verdict"]["label"] != "sync-bound"


def test_evaluation_syncs_outside_the_steps_and_formatted_tensors_at_their_line(
        tmp_path: Path) -> None:
    proc, report, _ = _triage(tmp_path, "examples/train_eval_logging.py")
    log_line = _line_of("train_eval_logging.py", "accuracy {acc:.2%}")
    eval_line = _line_of("train_eval_logging.py", "correct += ")
    by_line = {p["line"]: p for p in report["sync_points"]}
    logged = by_line[log_line]
    assert logged["kind"] == "format" and logged["placement"] == "steps"
    assert logged["per_step"] == 1
    evaluation = by_line[eval_line]
    assert evaluation["placement"] == "outside" and evaluation["per_step"] is None
    assert evaluation["counted_over"] == "outside the steps"
    assert evaluation["function"] == "evaluate" and evaluation["count"] == 3 * 40
    fix = next(r for r in report["recommendations"] if r["id"] == "remove-syncs")
    assert f"train_eval_logging.py:{log_line}" in fix["why"]
    assert f":{eval_line}" not in fix["why"]
    assert f"evaluate() at examples/train_eval_logging.py:{eval_line}" in proc.stdout
    assert "outside the training steps" in proc.stdout
