"""The machine's speed taken out of the gate (_bootstrap.speed_probe, model.comparing.steady,
model.comparing.paired): a gate's process times a reference workload at each step
boundary, outside the step; processes that the machine ran slower throughout (all their
times and their probe alike) compare as the same code, and a real slowdown keeps its
size."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nsbridge.model.comparing.paired import compare_pairs
from nsbridge.model.comparing.steady import process_steady, with_speed
from test_paired_gate import one_process

PROBE_MS = 1.2


def at_machine_speed(report: dict, slower: float, probe: bool = True) -> dict:
    """``report`` as a machine ``slower`` times slower throughout would have recorded it:
    every op's time, every step's clock and (``probe``) the speed probe scaled alike."""
    out = copy.deepcopy(report)
    for op in out["ops"]:
        op["per_step_us"] = [v * slower for v in op["per_step_us"]]
        op["cpu_self_us"] *= slower
    for step in out["steps"]["per_step"]:
        for key in ("wall_ms", "cpu_ms", "wait_ms"):
            step[key] *= slower
        if probe:
            step["probe_ms"] = PROBE_MS * slower
    return out


def gate_on(seed: int, probe: bool, busy: float = 1.0) -> dict:
    """Five pairs whose processes ran on a machine 0.8x to 1.3x as fast (each its own)."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(5):
        a = one_process(rng, process=0.005, noise=0.01)
        b = one_process(rng, process=0.005, noise=0.01, scale={"gatebench::busy": busy})
        pairs.append((at_machine_speed(a, float(rng.uniform(0.8, 1.3)), probe),
                      at_machine_speed(b, float(rng.uniform(0.8, 1.3)), probe)))
    return compare_pairs(pairs)


def test_the_probe_is_the_process_speed_and_only_cpu_runs_use_it() -> None:
    report = at_machine_speed(one_process(np.random.default_rng(0)), 1.25)
    assert process_steady(report).speed_ms == pytest.approx(PROBE_MS * 1.25)
    report["ranked_by"] = "device_self_us"         # device time: the host's speed is not it
    assert process_steady(report).speed_ms is None
    del report["steps"]["per_step"][3]["probe_ms"]
    report["ranked_by"] = "cpu_self_us"
    assert process_steady(report).speed_ms is None   # every measured step, or none


def test_a_machine_that_ran_each_process_at_its_own_speed_is_taken_out() -> None:
    """Unchanged code: with the probe the step's interval stays within a few percent and
    the gate passes; without it the same processes cannot be told from a slowdown."""
    scaled = gate_on(1, probe=True)
    unscaled = gate_on(1, probe=False)
    assert scaled["outcome"] == "pass" and scaled["step"]["half_width_pct"] < 3.0
    assert unscaled["step"]["half_width_pct"] > 3 * scaled["step"]["half_width_pct"]
    assert scaled["speed"]["spread_pct"] > 10 and unscaled["speed"] is None
    kept = scaled["step"]["unscaled"]             # the wall-clock reading, kept beside it
    assert kept["ci_pct"][1] - kept["ci_pct"][0] > 3 * (scaled["step"]["ci_pct"][1]
                                                        - scaled["step"]["ci_pct"][0])


def test_a_real_slowdown_keeps_its_size_at_one_speed() -> None:
    result = gate_on(2, probe=True, busy=1.5)
    busy = next(r for r in result["ops"] if r["op"] == "gatebench::busy")
    assert busy["change_pct"] == pytest.approx(50.0, abs=3.0)
    assert busy["status"] == "regressed" and result["outcome"] == "regression"


def speed_changing_midway(report: dict, later: float, from_step: int) -> dict:
    """``report`` as recorded on a machine that ran ``later`` times slower from step
    ``from_step`` on (its probe slowed alike)."""
    out = copy.deepcopy(report)
    n = len(out["steps"]["per_step"])
    factors = [1.0 if i < from_step else later for i in range(n)]
    for op in out["ops"]:
        op["per_step_us"] = [v * f for v, f in zip(op["per_step_us"], factors)]
    for step, f in zip(out["steps"]["per_step"], factors):
        for key in ("wall_ms", "cpu_ms", "wait_ms"):
            step[key] *= f
        step["probe_ms"] = PROBE_MS * f
    return out


def test_a_speed_that_changes_within_a_process_is_taken_out_step_by_step() -> None:
    """A process whose machine ran 30% slower from its 11th step on: its 10th percentile
    comes from the fast steps and its probe median from the slow ones, so dividing one by
    the other makes it about 23% faster than it is; step by step each time meets its own
    probe, and it compares at one speed as the same code."""
    rng = np.random.default_rng(5)
    steady = process_steady(at_machine_speed(one_process(rng, noise=0.001, process=0.0), 1.0))
    changed = process_steady(speed_changing_midway(one_process(rng, noise=0.001, process=0.0),
                                                   1.3, 10))
    for stat in ("median", "p10"):
        even = with_speed(steady, PROBE_MS).ops["gatebench::busy"][f"{stat} at one speed"]
        moved = with_speed(changed, PROBE_MS).ops["gatebench::busy"][f"{stat} at one speed"]
        assert moved == pytest.approx(even, rel=0.01)
    # the whole-process division the gate used before is far off on the same process
    assert changed.speed_ms is not None
    even_p10 = with_speed(steady, PROBE_MS).ops["gatebench::busy"]["p10 at one speed"]
    by_process = changed.ops["gatebench::busy"]["p10"] * PROBE_MS / changed.speed_ms
    assert by_process / even_p10 == pytest.approx(1 / 1.3, rel=0.02)


@pytest.mark.slow
def test_a_gate_process_times_the_probe_outside_its_steps(tmp_path: Path) -> None:
    """A real triage with the gate's profile: every measured step carries the probe's
    time; the probe's range lies inside the profiler's step windows and is left out of
    the step's wall time; it is never an op."""
    script = tmp_path / "tiny.py"
    script.write_text("import torch\nm = torch.nn.Linear(64, 64)\n"
                      "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "for _ in range(32):\n    m(torch.randn(32, 64)).sum().backward()\n"
                      "    opt.step(); opt.zero_grad()\n")
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "triage", "--profile",
                           "gate", "--threads", "1", "--out", str(run), str(script)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((run / "report.json").read_text())
    per_step = report["steps"]["per_step"]
    assert per_step and all(s["probe_ms"] > 0 for s in per_step)
    assert "nsbridge::speed_probe" not in {op["name"] for op in report["ops"]}
    with gzip.open(run / "trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    windows = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                     if str(e.get("name", "")).startswith("ProfilerStep#"))
    probes = [(e["ts"], e["dur"]) for e in events if e.get("name") == "nsbridge::speed_probe"]
    inside = [[d for ts, d in probes if lo <= ts < hi] for lo, hi in windows]
    assert sum(len(p) for p in inside) >= len(per_step) - 1
    # the report's steps are the windows with the probe taken out (same order, same count)
    measured = [(hi - lo - sum(p)) / 1e3 for (lo, hi), p in zip(windows, inside)]
    walls = [s["wall_ms"] for s in per_step]
    assert any(p for p in inside)
    matched = [w for w in walls if any(abs(w - m) < 0.01 for m in measured)]
    assert len(matched) == len(walls)


def test_code_that_slows_the_machine_itself_is_not_scaled_away() -> None:
    """New code that slows the whole CPU (a busy thread of its own, memory bandwidth)
    slows the probe in every pair alike: scaling would hide it, so the gate compares the
    times as timed and catches it."""
    rng = np.random.default_rng(3)
    pairs = [(at_machine_speed(one_process(rng, process=0.005, noise=0.01), 1.0),
              at_machine_speed(one_process(rng, process=0.005, noise=0.01), 1.3))
             for _ in range(5)]
    result = compare_pairs(pairs)
    assert result["speed"]["scaled"] is False and "slows the machine" in result["speed"]["why"]
    assert result["outcome"] == "regression"
    assert result["step"]["change_pct"] == pytest.approx(30.0, abs=3.0)
