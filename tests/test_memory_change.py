"""Peak memory in diff and gate (model.comparing.memory_change): decided only where every
process agrees, and the added bytes named from the holders at each side's peak."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from nsbridge.model.comparing.memory_change import memory_change


def _report(peak: float, rows: Optional[list[dict[str, Any]]] = None,
            relative: bool = False) -> dict[str, Any]:
    return {"memory": {"device": "cuda:0", "relative": relative, "peak_mib": peak,
                       "per_step_end_mib": [peak / 2, peak / 2],
                       "holders": {"rows": rows or []}}}


def _row(kind: str, op: str, mib: float) -> dict[str, Any]:
    return {"kind": kind, "module": "Block_0", "op": op, "line": "m.py:3 forward", "mib": mib}


def test_a_rise_every_process_shows_is_a_regression_naming_the_added_bytes() -> None:
    base = [_report(p, [_row("activations", "aten::gelu", 10.0)]) for p in (100.0, 101.0)]
    new = [_report(p, [_row("activations", "aten::gelu", 10.0),
                       _row("activations", "aten::ones", 24.0)]) for p in (125.0, 124.5)]
    change = memory_change(base, new, fail_above_mib=16.0)
    assert change is not None and change["status"] == "regressed"
    assert change["rise_mib"] == pytest.approx(24.25) and change["least_rise_mib"] == 23.5
    assert change["rises"] == [{"kind": "activations", "module": "Block_0", "op": "aten::ones",
                                "line": "m.py:3 forward", "added_mib": 24.0}]
    assert change["a_peak_mib"] == [100.0, 100.5, 101.0]


def test_overlapping_processes_leave_it_undecided_and_small_rises_pass() -> None:
    base = [_report(p) for p in (100.0, 130.0)]
    new = [_report(p) for p in (120.0, 150.0)]
    assert memory_change(base, new, fail_above_mib=16.0)["status"] == "inconclusive"
    assert memory_change(base, new, fail_above_mib=30.0)["status"] == "pass"


def test_the_default_threshold_is_a_share_of_the_base_peak_with_a_floor() -> None:
    assert memory_change([_report(1000.0)], [_report(1150.0)])["status"] == "pass"
    assert memory_change([_report(1000.0)], [_report(1250.0)])["status"] == "regressed"
    small = memory_change([_report(20.0)], [_report(30.0)])
    assert small["status"] == "pass" and small["threshold_mib"] == 16.0


def test_nothing_is_compared_without_memory_on_both_sides_alike() -> None:
    assert memory_change([{"memory": None}], [_report(10.0)]) is None
    assert memory_change([_report(10.0, relative=True)], [_report(10.0)]) is None
