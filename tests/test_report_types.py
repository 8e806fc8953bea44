"""The report's shape is declared once, in nsbridge/contract/report.py: the reference page,
the skeleton every report starts from and the strict check of written reports all follow
it, so a field added in one place only fails here."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from nsbridge.contract.check import report_problem, undeclared_keys, undeclared_problem
from nsbridge.contract.introspect import declared_paths, hints
from nsbridge.contract.report import Report, empty_report
from nsbridge.schema import report as S

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "report-json.md"
TINY = ROOT / "tests" / "data" / "runs" / "triage_tiny" / "report.json"   # a real CPU triage


def _section_rows() -> dict[str, str]:
    """The prose table of report-json.md: each key its first cell names -> its row."""
    text = PAGE.read_text(encoding="utf-8").split("## Every key")[0]
    rows: dict[str, str] = {}
    for line in text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) > 1:
            for key in re.findall(r"`([^`]+)`", cells[0]):
                rows[key] = line
    return rows


def _row_for(path: str, rows: dict[str, str]) -> str:
    """The row that explains ``path``: the longest section key it starts with."""
    owners = [key for key in rows
              if path == key or path.startswith((f"{key}.", f"{key}[]"))
              or (key.endswith("[]") and (path == key[:-2] or path.startswith(f"{key[:-2]}.")))]
    assert owners, f"{path}: no row of report-json.md covers it"
    return rows[max(owners, key=len)]


def _named_in(key: str, row: str) -> bool:
    """Whether ``row`` names ``key`` (``name`` or, for a list, ``name[]``)."""
    bare = key.replace("[]", "")
    return f"`{bare}`" in row or f"`{bare}[]`" in row


def test_every_declared_key_is_explained_in_its_sections_row() -> None:
    rows = _section_rows()
    unexplained = [path for path, _ in declared_paths(Report)
                   if path not in rows and f"{path}[]" not in rows
                   and not _named_in(path.split(".")[-1], _row_for(path, rows))]
    assert unexplained == []


def test_the_rows_name_only_top_level_keys_the_types_declare() -> None:
    top = set(hints(Report))
    named = {key.split("[")[0].split(".")[0] for key in _section_rows()}
    assert named - top == set()
    assert top - named == set()


def test_the_skeleton_and_the_passes_sections_are_the_declared_top_level_keys() -> None:
    sections = {S.TIMELINE_SECTION, S.NCU_SECTION, S.DISTRIBUTED_SECTION,
                S.TENSOR_CORES_SECTION, S.MEMORY_SECTION, S.SNAPSHOT_SECTION, S.OP_GROUPS_SECTION}
    assert set(S.REPORT_KEYS) | sections == set(hints(Report))
    assert tuple(empty_report(command="triage", target="x.py", version="0")) == S.REPORT_KEYS


def test_the_golden_report_matches_the_types_with_nothing_undeclared() -> None:
    report = json.loads(TINY.read_text(encoding="utf-8"))
    assert report_problem(report) is None
    assert undeclared_keys(report) == []


def test_a_key_added_in_one_place_only_is_named() -> None:
    report = json.loads(TINY.read_text(encoding="utf-8"))
    grown = copy.deepcopy(report)
    grown["ops"][0]["kernels"] = [{"name": "k", "calls": 1, "occupancy": 0.5}]
    grown["steps"]["warmup_ms"] = 3.0
    assert undeclared_keys(grown) == ["ops[0].kernels[0].occupancy", "steps.warmup_ms"]
    assert undeclared_problem(grown) == ("ops[0].kernels[0].occupancy, steps.warmup_ms not "
                                         "declared in nsbridge/contract/report.py")


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda r: r["ops"][0].update(calls="9"), 'ops[0].calls is "9", not a number of 0 or more'),
    (lambda r: r.update(ranked_by="wall"),
     'ranked_by is "wall", not "cpu_self_us" or "device_self_us"'),
    (lambda r: r["ops"][0].pop("name"), "ops[0].name is missing"),
    (lambda r: r.update(ops=None), "ops is missing"),
])
def test_a_wrong_field_is_named_with_what_it_should_be(edit, problem) -> None:
    report = json.loads(TINY.read_text(encoding="utf-8"))
    edit(report)
    assert report_problem(report) == problem
