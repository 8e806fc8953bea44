"""The profiler-overhead line: what it says depends on where the ratio's interval lies."""

from __future__ import annotations

import re

import pytest

from nsbridge.model.host.overhead import profiler_overhead


def _steps(active: list[float], bare: list[float]) -> list[dict]:
    return ([{"phase": "first", "wall_ms": 500.0}]
            + [{"phase": "active", "wall_ms": w} for w in active]
            + [{"phase": "unprofiled", "wall_ms": w} for w in bare])


def test_a_clear_slowdown_is_the_profilers_with_its_interval() -> None:
    result = profiler_overhead(_steps([12.0, 12.2, 11.9, 12.1], [10.0, 10.1, 9.9, 10.0, 10.2]))
    assert result["kind"] == "slower" and result["ratio"] == pytest.approx(1.2, abs=0.02)
    low, high = result["ratio_ci"]
    assert 1.0 < low <= result["ratio"] <= high
    assert re.search(r"slowed the measured steps by 2[01]%", result["note"])
    assert "95% interval" in result["note"]


def test_an_interval_around_one_is_not_measurable_never_inflated() -> None:
    result = profiler_overhead(_steps([10.0, 12.0, 9.0, 11.5], [11.0, 9.5, 12.0, 10.0, 10.5]))
    assert result["kind"] == "not-measurable"
    assert result["ratio_ci"][0] < 1.0 < result["ratio_ci"][1]
    assert "not measurable within ±" in result["note"] and "inflated" not in result["note"]


def test_measured_steps_faster_than_unprofiled_ones_say_the_machine_changed() -> None:
    result = profiler_overhead(_steps([7.3, 7.4, 7.2], [10.0, 10.1, 9.9, 10.2]))
    assert result["kind"] == "faster" and result["ratio"] == pytest.approx(0.73, abs=0.01)
    assert "speed changed" in result["note"] and "inflated" not in result["note"]


def test_on_a_contended_machine_the_overhead_is_not_attributed() -> None:
    result = profiler_overhead(_steps([40.0, 41.0, 39.0], [10.0, 10.1, 9.9]), contended=True)
    assert result["kind"] == "contended" and "contended" in result["note"]
    assert "inflated" not in result["note"]
    assert "nsbridge triage --threads 1" in result["note"]
    # a run that already had one thread is not told to use one (issue 50)
    one = profiler_overhead(_steps([40.0, 41.0, 39.0], [10.0, 10.1, 9.9]), contended=True,
                            threads=1)
    assert "--threads 1" not in one["note"] and "a quieter machine" in one["note"]


def test_without_unprofiled_steps_nothing_is_claimed() -> None:
    result = profiler_overhead([{"phase": "active", "wall_ms": 1.0}])
    assert result["ratio"] is None and result["kind"] == "too-few"
    assert "not enough unprofiled steps" in result["note"]
