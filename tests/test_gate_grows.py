"""`nsbridge.gate` adds pairs only when they are needed (commands.gate, interleave.run_pairs):
each process is a triage, replaced here at the process boundary by a fake that returns a
one-process report built to a known truth (test_paired_gate.one_process), so the loop is
tested on its own: a quiet unchanged gate decides at the first look, a noisy one grows to
--max-processes or stops at --budget, a clear slowdown stops as soon as the data show it,
and gate.json and the printed answer say how many pairs it took."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import pytest

from nsbridge import api
from nsbridge.commands import gate as gate_command
from nsbridge.report.render.diff_render import render_diff
from test_paired_gate import one_process


def fake_triage(monkeypatch: pytest.MonkeyPatch, *, process: float, noise: float,
                slower: Optional[dict[str, float]] = None, seconds: float = 0.0) -> list[str]:
    """commands.measure.profiled replaced in the gate: every call returns the next process's report (the new side's
    ops scaled by ``slower``), after ``seconds``; returns the run folders made, in order."""
    rng = np.random.default_rng(0)
    made: list[str] = []

    def profiled(script: Any, profile: Any, **kwargs: Any) -> SimpleNamespace:
        out = Path(kwargs["out"])
        out.mkdir(parents=True)
        made.append(out.name)
        time.sleep(seconds)
        new = out.name.startswith("new")
        report = one_process(rng, process=process, noise=noise,
                             scale=slower if new else None)
        return SimpleNamespace(status="ok", exit_code=0, report=report, failure=None)

    monkeypatch.setattr(gate_command, "profiled", profiled)
    return made


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('never run here')\n")
    return tmp_path


def gate(checkout: Path, **options: Any) -> dict[str, Any]:
    return api.gate(checkout, checkout, "train.py", out=checkout / "gate", **options)


def test_a_quiet_unchanged_gate_decides_at_the_first_look(monkeypatch: pytest.MonkeyPatch,
                                                          checkout: Path) -> None:
    made = fake_triage(monkeypatch, process=0.005, noise=0.005)
    result = gate(checkout)
    assert result["outcome"] == "pass" and result["pairs"] == 3
    assert result["gate"]["processes"] == 3 and result["gate"]["stopped"] == "decided"
    assert [look["pairs"] for look in result["gate"]["looks"]] == [3]
    assert made == ["base-01", "new-01", "new-02", "base-02", "base-03", "new-03"]
    assert result["false_alarm"]["looks"] == 8          # 3 to 10 pairs, budgeted over all


def test_a_noisy_gate_grows_a_pair_at_a_time_to_max_processes(
        monkeypatch: pytest.MonkeyPatch, checkout: Path) -> None:
    made = fake_triage(monkeypatch, process=0.25, noise=0.05)
    result = gate(checkout, max_processes=6)
    assert result["outcome"] == "inconclusive" and result["exit_code"] == 4
    assert result["gate"]["stopped"] == "max processes" and result["pairs"] == 6
    assert [look["pairs"] for look in result["gate"]["looks"]] == [3, 4, 5, 6]
    assert all(look["outcome"] == "inconclusive" for look in result["gate"]["looks"])
    assert made[6:] == ["new-04", "base-04", "base-05", "new-05", "new-06", "base-06"]
    assert result["gate"]["order"] == made                # A B, B A, ... kept throughout
    written = json.loads((checkout / "gate" / "gate.json").read_text())
    assert written["gate"]["looks"] == result["gate"]["looks"]
    text = render_diff(result)
    assert "6 interleaved pairs" in text and "grown from 3 after 3 inconclusive look(s)" in text
    assert "stopped at --max-processes 6" in text
    assert any("--max-processes" in line for line in result["advice"])


def test_the_budget_stops_a_gate_before_a_pair_that_would_overrun_it(
        monkeypatch: pytest.MonkeyPatch, checkout: Path) -> None:
    fake_triage(monkeypatch, process=0.25, noise=0.05, seconds=0.1)
    result = gate(checkout, budget_s=0.9)        # 3 pairs take 0.6 s; a fourth would end at 0.8
    assert result["gate"]["stopped"] == "budget" and result["pairs"] in (3, 4)
    assert "stopped by --budget 0.9 s" in render_diff(result)


def test_a_clear_slowdown_stops_the_gate_as_soon_as_it_is_significant(
        monkeypatch: pytest.MonkeyPatch, checkout: Path) -> None:
    fake_triage(monkeypatch, process=0.01, noise=0.01,
                slower={"gatebench::busy": 1.5, "aten::mm": 1.5})
    result = gate(checkout)
    assert result["outcome"] == "regression" and result["gate"]["stopped"] == "decided"
    assert 3 < result["pairs"] < 10
    assert "gatebench::busy" in [r["what"] for r in result["regressions"]]
    busy = next(r for r in result["ops"] if r["op"] == "gatebench::busy")
    assert busy["significant_change"] and busy["p_value"] < result["false_alarm"]["look_alpha"]


def test_exactly_k_pairs_when_max_processes_is_k(monkeypatch: pytest.MonkeyPatch,
                                                  checkout: Path) -> None:
    made = fake_triage(monkeypatch, process=0.25, noise=0.05)
    result = gate(checkout, processes=4, max_processes=4)
    assert len(made) == 8 and result["pairs"] == 4 and result["false_alarm"]["looks"] == 1


def test_a_pass_grows_only_for_an_op_that_the_remaining_pairs_could_decide() -> None:
    """A step that passes stops the gate unless a gated op still undecided would decide
    within --max-processes pairs (its pairs_to_decide, from its own pairs' spread): an op
    too noisy for that (beside two CPU hogs, aten::threshold_backward -53%..+130% at 5
    pairs) would only spend the pairs left."""
    def passing(pairs_to_decide: Optional[int]) -> dict[str, Any]:
        return {"outcome": "pass", "inconclusive": ["aten::conv"],
                "ops": [{"op": "aten::conv", "pairs_to_decide": pairs_to_decide},
                        {"op": "aten::relu", "pairs_to_decide": 4}]}   # decided: no matter
    assert gate_command.stop_reason(passing(7), 5, 10, 1.0, None) is None
    assert gate_command.stop_reason(passing(22), 5, 10, 1.0, None) == "decided"
    assert gate_command.stop_reason(passing(None), 5, 10, 1.0, None) == "decided"
    inconclusive = {**passing(22), "outcome": "inconclusive", "comparability": []}
    assert gate_command.stop_reason(inconclusive, 5, 10, 1.0, None) is None


def test_an_undecided_op_says_how_many_pairs_would_decide_it() -> None:
    from test_paired_gate import pairs
    from nsbridge.model.comparing.paired import compare_pairs

    result = compare_pairs(pairs(4, k=4, process=0.08, noise=0.05))
    unsure = [r for r in result["ops"] if r["status"] == "inconclusive"]
    counts = [r["pairs_to_decide"] for r in unsure]
    assert any(isinstance(n, int) for n in counts)
    assert all(n > 4 for n in counts if n is not None)      # more than it has
    assert all("pairs_to_decide" not in r for r in result["ops"] if r["status"] != "inconclusive")
