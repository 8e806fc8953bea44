"""Golden texts of the report: the terminal summary, report.md and the gate's answer for
fixed inputs, as torch's own profiler tests hold their key_averages tables. A wording or
number change then shows as a reviewed diff of tests/golden/: after a deliberate change,
rewrite them with NSBRIDGE_UPDATE_GOLDEN=1 pytest tests/test_golden.py and commit the diff.

Inputs: the stored triage run (tests/data/runs/triage_tiny), the H200 sync-bound trace
analysed here, and the H200 unchanged gate pair (tests/data/gpu_record/gate_same) judged
again; paths that depend on the machine read <tmp> and <repo>.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nsbridge.api import analyze, rejudge
from nsbridge.report.render.diff_render import render_diff
from nsbridge.report.render.terminal import terminal_summary

from conftest import DATA, ROOT, TORCH_DATA
from rendered import ROWS, report_md

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("NSBRIDGE_UPDATE_GOLDEN") == "1"


def _holds(name: str, text: str, tmp: Path) -> None:
    text = text.replace(str(tmp), "<tmp>").replace(str(ROOT), "<repo>")
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"{path} is missing: NSBRIDGE_UPDATE_GOLDEN=1 writes it"
    assert text == path.read_text(encoding="utf-8"), (
        f"{name} differs from its golden text: review the change; if it is meant, rewrite "
        "with NSBRIDGE_UPDATE_GOLDEN=1 and commit tests/golden/")


def _both(stem: str, report: dict[str, Any], tmp: Path) -> None:
    _holds(f"{stem}.terminal.txt", terminal_summary(report, "RUN", top=ROWS) + "\n", tmp)
    _holds(f"{stem}.report.md", report_md(report), tmp)


def test_a_cpu_triage_reads_as_its_golden_text(tmp_path: Path) -> None:
    report = json.loads((DATA / "runs" / "triage_tiny" / "report.json").read_text())
    _both("triage_tiny", report, tmp_path)


def test_a_gpu_sync_bound_analysis_reads_as_its_golden_text(tmp_path: Path) -> None:
    trace = TORCH_DATA / "h200" / "sync_bound_h200.json.gz"
    _both("h200_sync_bound", analyze([trace], out=tmp_path / "run", jobs=1).report, tmp_path)


def test_an_unchanged_gpu_gate_reads_as_its_golden_text(tmp_path: Path) -> None:
    folder = tmp_path / "gate"
    for side in ("base", "new"):
        for n in (1, 2, 3):
            analyze([DATA / "gpu_record" / "gate_same" / f"{side}-0{n}.trace.json.gz"],
                    out=folder / f"{side}-0{n}", jobs=1)
    answer = {**rejudge(folder, allow=["target"]), "a_label": "base-NN", "b_label": "new-NN"}
    _holds("gate_same.answer.txt", render_diff(answer) + "\n", tmp_path)
    _holds("gate_same.gate.md", render_diff(answer, "md") + "\n", tmp_path)


@pytest.mark.skipif(UPDATE, reason="rewriting the golden texts")
def test_every_golden_text_has_its_test() -> None:
    """No golden text is left behind by a test that no longer writes it."""
    written = {p.name for p in GOLDEN.iterdir()}
    stems = {"triage_tiny", "h200_sync_bound"}
    expected = {f"{s}.{kind}" for s in stems for kind in ("terminal.txt", "report.md")} | {
        "gate_same.answer.txt", "gate_same.gate.md"}
    assert written == expected
