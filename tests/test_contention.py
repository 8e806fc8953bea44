"""Machine facts and the contention rule: measured in the process, named in the verdict."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from nsbridge.collect.machine import ProcessClock, throttle_names, usable_cores
from nsbridge.model.judging.contention import contention, machine_facts
from nsbridge.model.judging.verdict import qualify
from nsbridge.profiles import load_profile

from conftest import ROOT, run_nsbridge

THRESHOLDS = load_profile("default").analysis


def _laps(wall: float, wait: float, n: int = 4, phase: str = "active") -> list[dict]:
    return [{"phase": phase, "wall_ms": wall, "cpu_ms": wall, "wait_ms": wait, "nivcsw": 30}
            for _ in range(n)]


def _facts(laps: list[dict], **process) -> dict:
    return machine_facts(cores={"usable": 2, "logical": 2}, process={
        "threads": {"intra_op": 2, "inter_op": 2}, "load_at_start": [0.5, 0.5, 0.5], **process},
        run={"load_before": [4.1, 3.0, 2.0], "load_after": [4.3, 3.1, 2.0],
             "steal_share": 0.0, "seconds": 10.0}, steps=laps)


def test_threads_waiting_for_a_cpu_make_the_run_contended_with_the_numbers() -> None:
    facts = _facts(_laps(100.0, 60.0) + _laps(40.0, 0.0, 5, "unprofiled"))
    found = facts["contention"]
    assert found["contended"] and facts["measured_steps"]["wait_share"] == pytest.approx(0.6)
    assert ("waited for a CPU 60.0 ms per step on average (60% of the steps' wall time"
            in found["evidence"])
    assert "load 4.30 on 2 usable cores" in found["evidence"]
    assert "set_num_threads(1)" in found["fix"]
    # nsbridge's own option comes before an edit to the script (issue 50)
    assert found["fix"].startswith("nsbridge triage --threads 1 (or torch.set_num_threads(1)")
    assert facts["unprofiled_steps"]["n"] == 5


def test_a_quiet_run_is_not_contended() -> None:
    facts = _facts(_laps(100.0, 0.5))
    assert not facts["contention"]["contended"] and facts["contention"]["evidence"] is None


def test_more_torch_threads_than_cores_and_a_busy_gpu_are_named() -> None:
    gpu = [{"index": 0, "other_processes": [{"pid": 4242, "used_mib": 900.0}],
            "throttle_reasons": ["sw_thermal_slowdown"], "sm_clock_mhz": 1200,
            "sm_clock_max_mhz": 1980}]
    facts = _facts(_laps(100.0, 1.0), threads={"intra_op": 8, "inter_op": 8}, gpu=gpu)
    reasons = " ".join(facts["contention"]["reasons"])
    assert "8 intra-op threads on 2 usable cores" in reasons
    assert "pid 4242" in reasons and "sw_thermal_slowdown" in reasons


def test_without_a_run_queue_reading_the_load_average_decides() -> None:
    laps = [{"phase": "active", "wall_ms": 10.0, "cpu_ms": 10.0, "wait_ms": None, "nivcsw": 1}]
    busy = machine_facts(cores={"usable": 2}, process={"load_at_start": [3.5, 3, 3]},
                         run={}, steps=laps)
    assert busy["contention"]["contended"] and "load average was 3.50" in \
        busy["contention"]["evidence"]
    steal = contention({"steal_share": 0.2, "cores": {"usable": 2}}, wall_s=1.0,
                       wait_share=0.1, steal_share=0.05)
    assert steal["contended"] and "steal" in steal["evidence"]


def test_nvml_throttle_bits_are_named() -> None:
    assert throttle_names(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]


def _breakdown(data: list[float], wall: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"step": range(len(data)), "wall_ms": wall, "data_ms": data})


def _verdict(label: str, data_share: float, step_ms: float) -> dict:
    return {"label": label, "evidence": [], "cannot_conclude": [],
            "numbers": {"data_share": data_share, "step_ms": step_ms, "device_busy_pct": None,
                        "sync_gpu_idle_share": None, "sync_calls_per_step": 0.0}}


def test_a_share_whose_interval_crosses_the_line_gives_both_labels() -> None:
    steps = _breakdown([20.0, 40.0, 25.0, 38.0], [100.0] * 4)   # 20-40%, line at 30%
    verdict = qualify(_verdict("input-bound", 0.3075, 100.0), breakdown=steps,
                      thresholds=THRESHOLDS)
    assert verdict["confidence"] == "low"
    assert [a["label"] for a in verdict["alternatives"]] == ["cpu-bound"]
    low, high = verdict["numbers"]["data_share_ci"]
    assert low < 0.30 < high
    assert any("--runs" in s for s in verdict["settle"])
    # four steps: more of them, by nsbridge's own option (issue 50)
    assert "more measured steps (nsbridge triage --steps 10)" in verdict["settle"]


def test_a_clear_share_is_high_confidence() -> None:
    steps = _breakdown([70.0, 72.0, 71.0, 69.0], [100.0] * 4)
    verdict = qualify(_verdict("input-bound", 0.705, 100.0), breakdown=steps,
                      thresholds=THRESHOLDS)
    assert verdict["confidence"] == "high" and verdict["alternatives"] == []
    assert verdict["contention"] is None and verdict["settle"] == []


def test_contention_names_itself_and_what_the_wait_could_hide() -> None:
    """Host compute inflated by waiting: with the wait taken out, data loading would win."""
    steps = _breakdown([20.0, 21.0, 19.0, 20.0], [150.0, 152.0, 148.0, 150.0])
    found = {"contended": True, "evidence": "the machine was busy: ..."}
    verdict = qualify(_verdict("cpu-bound", 0.133, 150.0), breakdown=steps,
                      thresholds=THRESHOLDS,
                      machine={"contention": found, "measured_steps": {"wait_ms_per_step": 120.0}})
    assert verdict["confidence"] == "low" and verdict["contention"] == found["evidence"]
    assert [a["label"] for a in verdict["alternatives"]] == ["input-bound"]
    assert "waited for a CPU taken out" in verdict["alternatives"][0]["why"]


def test_usable_cores_is_at_most_the_logical_cores() -> None:
    cores = usable_cores()
    assert 1 <= cores["usable"] <= cores["logical"]


@pytest.mark.slow      # cpu_hogs starts busy processes
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_the_process_clock_sees_its_threads_wait_when_the_cores_are_busy(cpu_hogs) -> None:
    clock = ProcessClock()
    if not clock.has_wait:
        pytest.skip("this kernel does not expose /proc/<tid>/schedstat")
    end = time.perf_counter() + 1.5
    while time.perf_counter() < end:
        pass
    lap = clock.lap()
    clock.close()
    assert lap["wall_ms"] >= 1400 and lap["cpu_ms"] > 0
    assert lap["wait_ms"] >= 0.10 * lap["wall_ms"], lap     # more runnable threads than cores
    assert lap["nivcsw"] > 0


@pytest.mark.slow
def test_a_triage_on_a_busy_machine_records_and_names_the_contention(tmp_path: Path,
                                                                    cpu_hogs) -> None:
    proc = run_nsbridge("-q", "triage", "--out", str(tmp_path / "r"), "examples/input_bound.py",
                        cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    machine = report["machine"]
    assert machine["cores"]["usable"] >= 1 and machine["threads"]["intra_op"] >= 1
    assert machine["load"]["before"] is not None and machine["measured_steps"]["n"] >= 1
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["passes"][0]["machine"]["contention"]["reasons"] == \
        machine["contention"]["reasons"]
    verdict = report["verdict"]
    if machine["run_wait_measured"]:
        assert machine["contention"]["contended"], machine
        assert verdict["contention"] and verdict["confidence"] == "low"
        assert "contended machine" in proc.stdout and "CONTENDED" in proc.stdout
        assert "contended-machine" in [r["id"] for r in report["recommendations"]]
    # never a bare cpu-bound: input-bound, or a verdict that names the contention
    assert verdict["label"] == "input-bound" or verdict["contention"]
