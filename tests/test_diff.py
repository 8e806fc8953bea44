"""`nsbridge diff`: a gate with three outcomes, judged with intervals, never on a broken run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import nsbridge.api as api
from nsbridge.errors import DiffInputError
from nsbridge.model.comparing.diff import compare
from nsbridge.model.comparing.gate_answer import syncs
from nsbridge.report.render.diff_render import render_diff

from conftest import ROOT, TORCH_DATA, run_nsbridge


def _report(times: dict[str, list[float]], steps: list[float], syncs: tuple = (), *,
            runs: list[int] | None = None, calls: dict[str, int] | None = None,
            contended: bool = False, status: str = "ok", target: str = "train.py",
            threads: int = 2) -> dict:
    n = len(steps)
    ops = [{"name": name, "calls": (calls or {}).get(name, 3 * n), "cpu_self_us": sum(v),
            "device_self_us": None, "mem_mib": 0.0, "kernels": [], "shapes": ["[[8, 8]]"],
            "per_step_us": v} for name, v in times.items()]
    per_step = [{"step": i, "wall_ms": w, **({"run": runs[i]} if runs else {})}
                for i, w in enumerate(steps)]
    return {"schema_version": 1, "status": status, "target": target,
            "ranked_by": "cpu_self_us", "ops": ops,
            "verdict": {"label": "cpu-bound"}, "environment": {"torch": "2.13.0", "gpus": []},
            "machine": {"cores": {"usable": 2}, "threads": {"intra_op": threads},
                        "contention": {"contended": contended}},
            "steps": {"count": n, "per_step": per_step},
            "sync_points": [{"kind": "item", "file": "t.py", "line": k} for k in syncs]}


def _op(result: dict, name: str) -> dict:
    return next(r for r in result["ops"] if r["op"] == name)


BASE = {"aten::mm": [100.0, 102.0, 98.0, 101.0], "aten::conv": [500.0, 510.0, 490.0, 505.0],
        "aten::relu": [50.0, 51.0, 49.0, 50.5], "aten::add": [80.0, 81.0, 79.0, 80.0]}
STEPS = [1.0, 1.01, 0.99, 1.0]
TWO = [1, 1, 2, 2]          # two processes per side, two steps each
SLOW_MM = {**BASE, "aten::mm": [200.0, 204.0, 196.0, 202.0]}


def test_a_slower_op_beyond_noise_regresses_and_is_named_with_the_value_gated() -> None:
    result = compare(_report(BASE, STEPS, runs=TWO), _report(SLOW_MM, STEPS, (9,), runs=TWO))
    assert result["outcome"] == "regression" and result["exit_code"] == 1
    mm = _op(result, "aten::mm")
    assert mm["status"] == "regressed" and mm["ci_pct"][0] > 0 and mm["basis"] == "time"
    named = [r for r in result["regressions"] if r["what"] == "aten::mm"]
    assert named and named[0]["change_pct"] == mm["change_pct"]   # the value gated
    assert named[0]["source"] == "torch.profiler self CPU time" and named[0]["basis"] == "time"
    assert result["syncs"] == {"new": ["item at t.py:9"], "vanished": [], "moved": []}
    text = render_diff({**result, "a_label": "a", "b_label": "b"})
    assert f"aten::mm {mm['change_pct']:+.1f}% (95% interval" in text
    assert "Outcome: REGRESSION (exit 1)" in text


SLOW_STEPS = [s + 0.1 for s in STEPS]   # what a doubled aten::mm adds to each step


def test_with_one_process_per_side_the_same_work_slower_is_inconclusive() -> None:
    """Single ops vary between processes (2.5x seen on a quiet VM); one process per side
    cannot tell that from a regression of the same work, nor the step from drift."""
    result = compare(_report(BASE, STEPS), _report(SLOW_MM, SLOW_STEPS))
    mm = _op(result, "aten::mm")
    assert mm["ci_pct"][0] > 0 and mm["status"] == "inconclusive" and mm["basis"] == "time"
    assert result["outcome"] == "inconclusive" and not result["regressions"]
    assert any("one process per side" in r for r in result["reasons"])
    assert any("same calls, shapes and dtypes" in r and "one process per side" in r
               for r in result["reasons"])
    # the same shown slowdown keeps a step that moved less from passing
    flat = compare(_report(BASE, STEPS), _report(SLOW_MM, STEPS))
    assert flat["step"]["status"] == "within noise" and flat["outcome"] == "inconclusive"
    assert not flat["undecided"]
    assert any("nsbridge gate" in a for a in result["advice"])


def test_with_one_process_per_side_the_same_work_faster_is_not_an_improvement() -> None:
    """The mirror of the slowdown: an unchanged CNN diffed beside two CPU hogs read one op
    "improved -54%". The same work taking half the time in one process per side stays
    within noise, says why, and its row is not called faster or improved."""
    result = compare(_report(SLOW_MM, SLOW_STEPS), _report(BASE, STEPS))
    mm = _op(result, "aten::mm")
    assert mm["ci_pct"][1] < 0 and mm["status"] == "within noise"
    assert "speed-up of the same work" in mm["why"] and "one process per side" in mm["why"]
    text = render_diff({**result, "a_label": "a", "b_label": "b"})
    line = next(t for t in text.splitlines() if t.startswith("aten::mm "))
    assert "a speed-up these runs cannot confirm" in line and "improved" not in line


def test_ops_slower_for_one_cause_are_one_reason_naming_the_largest() -> None:
    """Every op of a contended side slower: one sentence for the cause, the three largest
    named with their percents as the table clips them, the rest counted, not one sentence
    per op; each op row keeps its own reason."""
    many = {f"aten::op{i}": [10.0 * (i + 1)] * 4 for i in range(6)}
    slow = {name: [v * (30.0 if name == "aten::op0" else 3.0) for v in values]
            for name, values in many.items()}
    result = compare(_report({**BASE, **many}, STEPS),
                     _report({**BASE, **slow}, SLOW_STEPS, contended=True))
    held = [r for r in result["ops"] if r.get("significant")]
    assert len(held) > 3
    same_work = [r for r in result["reasons"] if "same calls, shapes and dtypes" in r]
    assert len(same_work) == 1 and "on a contended machine (run B)" in same_work[0]
    named = [r["op"] for r in held[:3]]   # the largest first: the table's order
    assert all(f"{op} " in same_work[0] for op in named)
    assert not any(f"{r['op']} " in same_work[0] for r in held[3:])
    assert f"and {len(held) - 3} more ops (in the op table)" in same_work[0]
    op0 = _op(result, "aten::op0")
    assert op0["change_pct"] > 999 and op0["why"].startswith("aten::op0 >+999% (95% interval")
    assert "_cause" not in op0
    text = render_diff({**result, "a_label": "a", "b_label": "b"})
    assert text.count("same calls, shapes and dtypes") == 1


def test_a_faster_step_passes_saying_how_much_faster_and_whose_machine_was_busy() -> None:
    """A base measured on a busy machine, the new run on a quiet one: the step is 10x
    faster. The PASS line says so (not 'no change'), and that part of it may be the
    machine's. With one process per side a whole-process speed-up is not called improved
    (the mirror of a slowdown there, which is never a regression): the step stays within
    noise, saying it is a speed-up these runs cannot confirm; several processes per side
    confirm it."""
    fast = {name: [v / 10 for v in values] for name, values in BASE.items()}
    result = compare(_report(BASE, [10 * s for s in STEPS], contended=True),
                     _report(fast, STEPS))
    step = result["step"]
    assert result["outcome"] == "pass" and step["status"] == "within noise"
    assert step["ci_pct"][1] < 0 and "a speed-up these runs cannot confirm" in step["why"]
    text = render_diff({**result, "a_label": "a", "b_label": "b"})
    outcome = next(line for line in text.splitlines() if line.startswith("Outcome:"))
    assert "no change" not in outcome and "a speed-up these runs cannot confirm" in outcome
    assert f"step time {step['change_pct']:+.1f}%" in outcome
    assert "on a contended machine (run A)" in outcome and "improved" not in text
    quiet = compare(_report(BASE, [10 * s for s in STEPS]), _report(fast, STEPS))
    assert quiet["step"]["status"] == "within noise" and "one process per side" in \
        quiet["step"]["why"]
    assert "contended" not in render_diff({**quiet, "a_label": "a", "b_label": "b"}
                                          ).split("\n")[2]
    several = compare(_report(BASE, [10 * s for s in STEPS], runs=TWO),
                      _report(fast, STEPS, runs=TWO))
    assert several["step"]["status"] == "improved" and several["step"]["why"] is None



def test_more_calls_of_an_op_is_a_regression_whatever_the_timing_noise() -> None:
    """Twice the calls per step, timed within noise (a busy machine): the work doubled."""
    noisy = {**BASE, "aten::mm": [60.0, 300.0, 90.0, 160.0]}
    result = compare(_report(BASE, STEPS, contended=True),
                     _report(noisy, STEPS, contended=True, calls={"aten::mm": 24}))
    mm = _op(result, "aten::mm")
    assert mm["status"] == "regressed" and mm["basis"] == "calls"
    assert mm["more_work"]["calls_a"] == 3 and mm["more_work"]["calls_b"] == 6
    named = result["regressions"][-1]
    assert named["what"] == "aten::mm" and named["source"] == "torch.profiler call counts"
    text = render_diff({**result, "a_label": "a", "b_label": "b"})
    assert "aten::mm does +100.0% more work: 6 calls per step instead of 3" in text


def test_new_calls_of_another_shape_are_priced_by_that_shape() -> None:
    """The planted slowdown under load: 64 extra 256x256 matmuls per step join the model's
    own small ones; timing says nothing (huge spread), the calls per shape do."""
    noisy = {**BASE, "aten::mm": [60.0, 3000.0, 90.0, 1600.0]}
    a = _report(BASE, STEPS, contended=True)
    b = _report(noisy, STEPS, contended=True, calls={"aten::mm": 4 * 68})
    small = {"shape": "[[8, 8], [8, 8]]", "calls": 12, "us": 401.0}
    big = {"shape": "[[256, 256], [256, 256]]", "calls": 256, "us": 4000.0}
    next(op for op in a["ops"] if op["name"] == "aten::mm")["shape_work"] = [small]
    mm_b = next(op for op in b["ops"] if op["name"] == "aten::mm")
    mm_b.update(shape_work=[big, {**small, "us": 750.0}], shapes=[big["shape"], small["shape"]])
    result = compare(a, b)
    mm = _op(result, "aten::mm")
    assert mm["status"] == "regressed" and mm["basis"] == "calls"
    assert mm["more_work"]["added_us"] == pytest.approx(256 / 4 * 4000.0 / 256)   # 64 x 15.6
    assert mm["more_work"]["priced"] == "per input signature"


def test_a_runs_op_work_carries_its_own_time_per_step() -> None:
    """The signatures' prices are scaled to the row's measure by each run's recorded time
    per step (more_work): a single report's op must carry it (it read a key ops[] lacks,
    so diff priced signatures unscaled)."""
    from nsbridge.model.comparing.diff import _Side

    report = _report(BASE, STEPS)
    side = _Side(report, "cpu_self_us", False)
    mm = next(op for op in report["ops"] if op["name"] == "aten::mm")
    assert side.work["aten::mm"].us == pytest.approx(mm["cpu_self_us"] / len(STEPS))
    assert side.work["aten::mm"].calls == pytest.approx(mm["calls"] / len(STEPS))


NOISY_MM = {**BASE, "aten::mm": [60.0, 300.0, 90.0, 160.0]}   # mean +50%, all over the place


def test_an_op_the_data_cannot_decide_does_not_block_a_decided_step() -> None:
    """The step time decides the gate; an op whose interval holds both no change and the
    threshold is listed as undecided. Gated on that op alone, the gate cannot decide."""
    result = compare(_report(BASE, STEPS), _report(NOISY_MM, STEPS))
    mm = _op(result, "aten::mm")
    assert mm["change_pct"] > 10 and mm["ci_pct"][0] <= 0 and mm["status"] == "inconclusive"
    assert result["outcome"] == "pass" and result["step"]["status"] == "within noise"
    assert any(u.startswith("aten::mm") and "holds both" in u for u in result["undecided"])
    only_mm = compare(_report(BASE, STEPS), _report(NOISY_MM, STEPS), ops=["aten::mm"])
    assert only_mm["outcome"] == "inconclusive" and only_mm["exit_code"] == 4
    assert any(r.startswith("aten::mm") and "holds both" in r for r in only_mm["reasons"])
    assert only_mm["advice"]


def test_unchanged_runs_pass() -> None:
    again = {n: [v * 1.01 for v in vs] for n, vs in BASE.items()}
    result = compare(_report(BASE, STEPS), _report(again, STEPS))
    assert result["outcome"] == "pass" and result["exit_code"] == 0 and not result["reasons"]


def test_a_whole_process_running_slower_is_inconclusive_with_one_process_per_side() -> None:
    slower = {n: [v * 1.3 for v in vs] for n, vs in BASE.items()}
    result = compare(_report(BASE, STEPS), _report(slower, [s * 1.3 for s in STEPS]))
    assert result["drift_pct"] == pytest.approx(30.0, abs=0.5)
    assert all(r["status"] != "regressed" for r in result["ops"])
    assert result["step"]["status"] == "inconclusive" and result["outcome"] == "inconclusive"
    assert any("between-process drift" in reason for reason in result["reasons"])
    assert any("nsbridge gate BASE NEW" in advice for advice in result["advice"])


def test_pooled_processes_judge_the_step_beyond_the_drift() -> None:
    """Three processes per side. Steps 30% slower with every op slower alike: a slower
    machine looks the same, inconclusive. Steps 30% slower with the ops unchanged (time
    outside any op grew): a regression of the step."""
    runs = [1, 1, 2, 2, 3, 3]
    jitter = (1.0, 1.01, 0.97, 0.98, 1.03, 1.02)
    base_steps = [1.0 * f for f in jitter]
    a = {n: [v[0] * f for f in jitter] for n, v in BASE.items()}
    alike = {n: [v[0] * 1.3 * f for f in reversed(jitter)] for n, v in BASE.items()}
    slower = [s * 1.3 for s in reversed(base_steps)]
    result = compare(_report(a, base_steps, runs=runs), _report(alike, slower, runs=runs))
    assert result["samples"]["a"] == {"steps": 6, "runs": 3, "used_steps": 6,
                                      "waited_steps": 0, "scaled_processes": 0}
    assert result["step"]["status"] == "inconclusive" and result["outcome"] == "inconclusive"
    assert any("a slower machine" in reason for reason in result["reasons"])
    same_ops = {n: [v[0] * f for f in reversed(jitter)] for n, v in BASE.items()}
    outside = compare(_report(a, base_steps, runs=runs), _report(same_ops, slower, runs=runs))
    assert outside["step"]["status"] == "regressed" and outside["step"]["ci_pct"][0] > 10
    assert [r["what"] for r in outside["regressions"]] == ["step time"]


def test_what_an_op_added_is_judged_beyond_the_drift() -> None:
    """Everything 70% slower and a small op 3x: its raw delta is over 2% of the step,
    but what it added beyond the drift is not."""
    base = {"aten::conv": [5000.0, 5100.0, 4900.0], "aten::addmm": [520.0, 525.0, 515.0],
            "aten::bn": [900.0, 910.0, 890.0]}
    new = {"aten::conv": [8500.0, 8670.0, 8330.0], "aten::addmm": [1600.0, 1700.0, 1650.0],
           "aten::bn": [1530.0, 1547.0, 1513.0]}
    runs = [1, 2, 2]
    result = compare(_report(base, [55.0] * 3, runs=runs),
                     _report(new, [90.0, 91.0, 89.0], runs=runs), fail_above=75.0)
    addmm = _op(result, "aten::addmm")
    assert addmm["b_us"] - addmm["a_us"] > 0.02 * 55e3 > addmm["added_us"]
    assert addmm["status"] == "too small to matter"
    strict = compare(_report(base, [55.0] * 3, runs=runs),
                     _report(new, [90.0, 91.0, 89.0], runs=runs),
                     fail_above=75.0, min_step_share=0.005)
    assert _op(strict, "aten::addmm")["status"] == "regressed"


def test_a_new_op_that_costs_time_is_a_regression() -> None:
    new = {**BASE, "aten::extra": [300.0, 300.0, 300.0, 300.0]}
    result = compare(_report(BASE, STEPS), _report(new, STEPS))
    extra = _op(result, "aten::extra")
    assert extra["new"] and extra["status"] == "regressed"
    text = render_diff({**result, "a_label": "a", "b_label": "b"}, "text")
    assert "aten::extra (new, +0.300 ms per step, torch.profiler self CPU time)" in text


def test_op_filter_gates_only_those_ops() -> None:
    result = compare(_report(BASE, STEPS, runs=TWO), _report(SLOW_MM, STEPS, runs=TWO),
                     ops=["aten::relu"])
    assert result["regressions"] == [] and result["outcome"] == "pass"


def test_gate_on_an_op_neither_run_has_is_refused(tmp_path: Path) -> None:
    """A misspelt --op would otherwise gate nothing and always pass."""
    api.analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz"], out=tmp_path / "a")
    with pytest.raises(DiffInputError, match="neither run has such an op"):
        api.diff(tmp_path / "a", tmp_path / "a", ops=["aten::adddmm"])
    assert api.diff(tmp_path / "a", tmp_path / "a", ops=["aten::addmm"])["regressions"] == []


@pytest.mark.parametrize("status", ["failed", "running", "interrupted"])
def test_a_run_that_did_not_finish_is_never_compared_as_if_fine(status: str) -> None:
    broken = _report({"aten::mm": [1.0] * 4}, STEPS, status=status)
    for a, b in ((_report(BASE, STEPS), broken), (broken, _report(BASE, STEPS))):
        result = compare(a, b)
        assert result["outcome"] == "inconclusive" and result["exit_code"] == 4
        assert any(status in reason for reason in result["reasons"])


def test_windows_without_steps_are_not_compared() -> None:
    """Two time windows of a loop without steps need not hold the same work."""
    a, b = _report(BASE, [1.0]), _report(SLOW_MM, [1.0])
    for report, seconds in ((a, 5.0), (b, 5.2)):
        report["window"] = {"kind": "trace", "seconds": seconds}
    result = compare(a, b)
    assert result["outcome"] == "inconclusive" and result["exit_code"] == 4
    assert not result["regressions"]
    assert any("no training steps" in reason for reason in result["reasons"])


def test_different_scripts_and_threads_are_not_comparable_unless_allowed() -> None:
    a = _report(BASE, STEPS)
    b = _report(BASE, STEPS, target="other.py --fast", threads=1)
    result = compare(a, b)
    assert result["outcome"] == "inconclusive"
    kinds = {p["kind"] for p in result["comparability"]}
    assert kinds == {"target", "args", "threads"}
    assert any("--allow args,target,threads" in advice for advice in result["advice"])
    assert compare(a, b, allow=["target", "args", "threads"])["outcome"] == "pass"


def test_on_a_contended_machine_the_same_work_taking_longer_is_inconclusive() -> None:
    result = compare(_report(BASE, STEPS, contended=True, runs=TWO),
                     _report(SLOW_MM, SLOW_STEPS, contended=True, runs=TWO))
    assert _op(result, "aten::mm")["status"] == "inconclusive"
    assert result["outcome"] == "inconclusive" and result["contended"] == ["A", "B"]
    assert any("on a contended machine" in reason for reason in result["reasons"])
    # more calls per step is a change no contention makes: a regression even there
    calls = {"aten::mm": 12 * 4}
    changed = compare(_report(BASE, STEPS, contended=True, runs=TWO),
                      _report(SLOW_MM, SLOW_STEPS, contended=True, calls=calls, runs=TWO))
    mm = _op(changed, "aten::mm")
    assert mm["basis"] == "calls" and mm["more_work"]["calls_b"] == 12
    assert changed["outcome"] == "regression"


def test_between_process_noise_of_single_ops_widens_every_interval() -> None:
    """Ops scattered by ±30% between two processes: a +35% op is inside that scatter."""
    scatter = {"aten::mm": 1.35, "aten::conv": 0.75, "aten::relu": 1.3, "aten::add": 0.7}
    b = {n: [v * scatter[n] for v in vs] for n, vs in BASE.items()}
    result = compare(_report(BASE, STEPS), _report(b, STEPS))
    assert result["op_noise_pct"] > 10
    mm = _op(result, "aten::mm")
    assert mm["ci_pct"][0] <= 0 and mm["status"] != "regressed"


NOISY_STEPS = [0.9, 1.25, 0.95, 1.15]   # a step time the data cannot decide about


def _write(tmp_path: Path, name: str, report: dict) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(report))
    return path


@pytest.mark.slow
def test_exit_codes_and_inconclusive_mapping(tmp_path: Path) -> None:
    base = _write(tmp_path, "base", _report(BASE, STEPS))
    noisy = _write(tmp_path, "noisy", _report(NOISY_MM, NOISY_STEPS))
    slow = _write(tmp_path, "slow", _report(SLOW_MM, STEPS, calls={"aten::mm": 24}))
    assert run_nsbridge("diff", str(base), str(base), cwd=tmp_path).returncode == 0
    assert run_nsbridge("diff", str(base), str(slow), cwd=tmp_path).returncode == 1
    unsure = run_nsbridge("diff", str(base), str(noisy), cwd=tmp_path)
    assert unsure.returncode == 4 and "INCONCLUSIVE" in unsure.stdout
    assert "What would settle it:" in unsure.stdout
    for mapping, code in (("pass", 0), ("fail", 1), ("exit", 4)):
        proc = run_nsbridge("diff", str(base), str(noisy), "--inconclusive", mapping, cwd=tmp_path)
        assert proc.returncode == code, (mapping, proc.stdout)
    bad = run_nsbridge("diff", str(base), str(slow), "--allow", "bogus", cwd=tmp_path)
    assert bad.returncode == 2 and "--allow bogus" in bad.stderr


@pytest.mark.slow
def test_diff_of_something_that_is_not_a_run(tmp_path: Path) -> None:
    proc = run_nsbridge("diff", str(tmp_path), str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "neither an nsbridge run directory" in proc.stderr
    (tmp_path / "other.json").write_text(json.dumps({"ops": "not a list"}))
    proc = run_nsbridge("diff", str(tmp_path / "other.json"), str(tmp_path / "other.json"),
                        cwd=tmp_path)
    assert proc.returncode == 5 and "diff refused" in proc.stderr   # another shape


@pytest.mark.slow
def test_diff_gates_a_planted_slowdown(tmp_path: Path) -> None:
    """Real runs: unchanged code never exits 1 (pass, or inconclusive on a busy machine);
    64 extra matmuls per step (more aten::mm calls: a change no contention makes) do."""
    runs = {}
    for name, slow in (("a", "0"), ("b", "0"), ("slow", "64")):
        env = dict(os.environ, NSBRIDGE_EXAMPLE_SLOW_MATMULS=slow, PYTHONUNBUFFERED="1")
        out = tmp_path / name
        proc = subprocess.run([sys.executable, "-m", "nsbridge", "triage", "--out", str(out),
                               "examples/train_cnn.py"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr
        runs[name] = out
    same = run_nsbridge("diff", str(runs["a"]), str(runs["b"]), cwd=ROOT)
    assert same.returncode in (0, 4), same.stdout
    assert ("PASS:" in same.stdout) == (same.returncode == 0)
    slow = run_nsbridge("diff", str(runs["a"]), str(runs["slow"] / "report.json"), "--format",
                        "md", cwd=ROOT)
    assert slow.returncode == 1, slow.stdout
    assert "REGRESSED:" in slow.stdout and "aten::mm does" in slow.stdout
    assert "torch.profiler call counts" in slow.stdout and "| op |" in slow.stdout
    as_json = json.loads(run_nsbridge("diff", str(runs["a"]), str(runs["slow"]), "--format",
                                      "json", cwd=ROOT).stdout)
    assert "aten::mm" in [r["what"] for r in as_json["regressions"]]
    assert as_json["machine"]["a"]["cores"]["usable"] >= 1


@pytest.mark.slow
def test_make_fragment_perf_diff(tmp_path: Path) -> None:
    """The shipped fragment, included from a project's Makefile, wraps `nsbridge diff`."""
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    base = _write(tmp_path, "base", _report(BASE, STEPS))
    new = _write(tmp_path, "new", _report({**BASE, "aten::mm": [300.0, 303.0, 297.0, 301.0]},
                                          STEPS, calls={"aten::mm": 36}))
    noisy = _write(tmp_path, "noisy", _report(NOISY_MM, NOISY_STEPS))
    fragment = run_nsbridge("make-targets", cwd=tmp_path).stdout
    (tmp_path / "nsbridge.mk").write_text(fragment)
    (tmp_path / "Makefile").write_text("include nsbridge.mk\n")
    make = lambda *args: subprocess.run(  # noqa: E731
        ["make", "--no-print-directory", *args,
         f"NSBRIDGE_CMD={shlex.quote(sys.executable)} -m nsbridge"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    failed = make("perf-diff", f"BASE={base}", f"NEW={new}", "THRESHOLD=10")
    assert failed.returncode != 0 and "REGRESSED:" in failed.stdout and "aten::mm" in failed.stdout
    passed = make("perf-diff", f"BASE={base}", f"NEW={base}")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    unsure = make("perf-diff", f"BASE={base}", f"NEW={noisy}")
    assert unsure.returncode != 0 and "INCONCLUSIVE" in unsure.stdout
    waved = make("perf-diff", f"BASE={base}", f"NEW={noisy}", "INCONCLUSIVE=pass")
    assert waved.returncode == 0, waved.stdout + waved.stderr
    usage = make("profile-triage")
    assert usage.returncode != 0 and "set SCRIPT=" in usage.stdout


def test_the_table_lists_deciding_ops_then_the_largest_and_hides_autograds_wrappers() -> None:
    """A wrapper the data cannot decide (MmBackward0, noisy in B) does not make a regression
    any less of one: it is not a deciding row, and the text table leaves it out."""
    times = {**BASE, "autograd::engine::evaluate_function: MmBackward0": [900.0] * 4,
             "MmBackward0": [700.0] * 4}
    result = compare(_report(times, STEPS, runs=TWO),
                     _report({**times, "aten::mm": [200.0, 204.0, 196.0, 202.0],
                              "MmBackward0": [400.0, 1400.0, 300.0, 1200.0]}, STEPS,
                             runs=TWO))
    status = {r["op"]: r["status"] for r in result["ops"]}
    assert status["MmBackward0"] == "inconclusive" and result["outcome"] == "regression"
    assert [r["op"] for r in result["ops"] if r["decides"]] == ["aten::mm"]
    order = [r["op"] for r in result["ops"]]
    assert order[0] == "aten::mm"                                   # it decides the outcome
    rest = [r for r in result["ops"] if r["op"] != "aten::mm"]
    sizes = [max(r["a_us"], r["b_us"]) for r in rest]
    assert sizes == sorted(sizes, reverse=True)                      # then the largest
    table = render_diff({**result, "a_label": "a", "b_label": "b"})
    assert "MmBackward0" not in table and "aten::conv" in table
    assert table.index("aten::conv") < table.index("aten::add") < table.index("aten::relu")


def test_unprofiled_steps_that_waited_for_a_cpu_are_judged_by_their_running_time() -> None:
    """Regression: a run whose unprofiled steps mostly waited for a CPU (two hogs beside it)
    showed 'step time 5.02 -> 72.75 ms' against a quiet one, for the same work: the wait was
    compared, not the step. Those steps are now scaled by their running share, as the gate's
    measured steps are (model.comparing.steady)."""
    quiet = _report(BASE, STEPS, threads=1)
    busy = _report(BASE, STEPS, threads=1)
    quiet["steps"].update(unprofiled_ms=[5.0, 5.1, 4.9, 5.0, 5.05],
                          unprofiled_wait_ms=[0.0] * 5, unprofiled_runs=[1] * 5)
    busy["steps"].update(unprofiled_ms=[72.0, 75.0, 70.0, 73.0, 74.0],
                         unprofiled_wait_ms=[67.0, 70.0, 65.0, 68.0, 69.0],
                         unprofiled_runs=[1] * 5)
    step = compare(quiet, busy)["step"]
    assert step["source"].endswith("unprofiled steps (nsbridge's step timer)")
    assert step["b_us"] == pytest.approx(5000, rel=0.05)      # was 73,000
    assert abs(step["change_pct"]) < 5
    # the same steps without the wait recorded are compared as they are
    bare = {**busy, "steps": {k: v for k, v in busy["steps"].items()
                              if k != "unprofiled_wait_ms"}}
    assert compare(quiet, bare)["step"]["b_us"] == pytest.approx(73000, rel=0.01)


def test_a_sync_point_is_matched_by_its_code_when_an_edit_moves_its_line() -> None:
    """The first-triage tutorial's fix deletes two lines above the untouched loss.item():
    it moves from line 37 to 35 and is neither new nor vanished."""
    def point(line: int, code: str) -> dict:
        return {"kind": "item", "file": "train.py", "line": line, "function": "<module>",
                "code": code}
    a = {"sync_points": [point(37, "total += loss.item()"), point(30, "print(x.tolist())")]}
    b = {"sync_points": [point(35, "total += loss.item()"), point(30, "print(y.tolist())")]}
    assert syncs(a, b) == {"new": ["item at train.py:30"], "vanished": ["item at train.py:30"],
                           "moved": ["item at train.py:35 (was line 37)"]}
    # a report without the statement's text (an older run, a trace alone): by line
    assert syncs({"sync_points": [{"kind": "item", "file": "t.py", "line": 37}]},
                 {"sync_points": [{"kind": "item", "file": "t.py", "line": 35}]})["new"] == [
        "item at t.py:35"]


def test_a_noisy_pass_on_a_contended_machine_says_whose_machine_was_busy() -> None:
    """Unchanged code diffed beside two CPU hogs (one process per side, both contended)
    read 'Step time ... -57.6%: improved' under a PASS line that only said how far up the
    interval reached: the PASS line now says the machine was contended, so part of any
    change is the machine's."""
    noisy = [1.0, 1.3, 0.9, 1.2]
    result = compare(_report(BASE, noisy, contended=True),
                     _report(BASE, [s / 2 for s in noisy], contended=True))
    text = render_diff({**result, "a_label": "a", "b_label": "b"})
    outcome = next(line for line in text.splitlines() if line.startswith("Outcome:"))
    assert result["outcome"] == "pass" and "no slowdown beyond" in outcome, outcome
    assert "run A and B ran on a contended machine" in outcome
