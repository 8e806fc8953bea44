"""One truth in every view: over a corpus of runs made here (a CPU example, --runs, a window
without steps, a failed run, a timeout, a job of two ranks, a triage with the nsys pass)
and of real GPU and nsys fixtures, every number the terminal, report.md, report.html, ops.csv and `load()` show
equals report.json's, step numbers agree across the views, the head says the same status
and verdict everywhere, and the terminal fits 120 columns."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import nsbridge
from nsbridge.report.render.charts import chart_data, step_label
from nsbridge.report.document.escape import csv_cell
from nsbridge.report.document.shown import shown_of

from conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.slow

H200 = ROOT.parent / "shared" / "fixtures" / "gpu-h200" / "torch" / "train_cnn_h200.json.gz"
NSYS = ROOT / "tests" / "data" / "nsys" / "nsbridge_sync_bound_h100_nsys2025.3.sqlite"
PROFILE = ("version: 1\nschedule:\n  skip_first: 1\n  wait: 1\n  warmup: 1\n  active: 3\n"
           "capture:\n  record_shapes: true\n  profile_memory: true\n")
FAILS = """
import torch
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(12):
    opt.zero_grad()
    model(torch.ones(8, 16)).sum().backward()
    opt.step()
    if step == 8:
        raise ValueError("bad batch")
"""
FOREVER = """
import torch
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
while True:
    opt.zero_grad()
    model(torch.ones(8, 16)).sum().backward()
    opt.step()
"""


def _nsbridge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsbridge", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """name -> (run directory, what the command printed)."""
    tmp = tmp_path_factory.mktemp("views")
    profile = tmp / "views.yaml"
    profile.write_text(PROFILE)
    (tmp / "fails.py").write_text(FAILS)
    (tmp / "forever.py").write_text(FOREVER)
    cnn = [str(EXAMPLES / "train_cnn.py"), "--", "--epochs", "1"]
    commands = {
        "cpu": ["triage", "--profile", str(profile), *cnn],
        "runs": ["triage", "--profile", str(profile), "--runs", "2", *cnn],
        "window": ["triage", "--profile", str(profile), "--window", "trace", *cnn],
        "failed": ["triage", "--profile", str(profile), str(tmp / "fails.py")],
        "timeout": ["triage", "--profile", str(profile), "--timeout", "25",
                    str(tmp / "forever.py")],
        "ranks": ["triage", "--profile", "quick", "--nproc-per-node", "2", "--timeout", "300",
                  str(EXAMPLES / "train_ddp.py")],
        "with-nsys": ["triage", "--profile", str(profile), "--nsys", *cnn],
        "h200": ["analyze", str(H200)],
        "nsys": ["analyze", str(NSYS)],
    }
    runs = {}
    for name, args in commands.items():
        if (name == "h200" and not H200.is_file()) or (name == "with-nsys"
                                                         and not shutil.which("nsys")):
            continue
        out = tmp / name
        proc = _nsbridge(args[0], "--out", str(out), *args[1:], cwd=tmp)
        assert (out / "report.json").is_file(), (name, proc.stderr[-2000:])
        runs[name] = (out, proc.stdout)
    return runs


LISTS = ("kernels", "copies", "per_step_us")
NUMBER = re.compile(r"[±+-]?[\d,]+(\.\d+)?%?")
NAMES = ["cpu", "runs", "window", "failed", "timeout", "ranks", "with-nsys", "h200", "nsys"]


def _run(corpus: dict[str, tuple[Path, str]], name: str) -> tuple[Path, str, dict[str, Any]]:
    if name not in corpus:
        pytest.skip(f"{name}: its fixture is not on this machine")
    run, stdout = corpus[name]
    return run, stdout, json.loads((run / "report.json").read_text())


# -- ops.csv, load() and report.json -----------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_ops_csv_and_load_hold_report_jsons_values(corpus: dict, name: str) -> None:
    run, _, report = _run(corpus, name)
    frame = nsbridge.load(run).ops
    assert len(frame) == len(report["ops"])
    for op, (_, row) in zip(report["ops"], frame.iterrows()):
        for key, value in op.items():      # each pass's numbers under KEY_name
            if value is None and key in ("nsys", "ncu", "tensor_cores"):
                continue                       # that pass has nothing on this op
            pairs = ([(f"{key}_{k}", v) for k, v in value.items()
                      if not isinstance(v, (list, dict))] if isinstance(value, dict)
                     else [(key, value)])
            for col, v in pairs:
                if isinstance(v, (list, dict)) or col in ("shapes", "shape_work"):
                    continue   # parsed from torch's text in the frame (test_load checks it)
                assert col in frame.columns, (name, col)
                if v is None and col in LISTS:   # an op torch did not see: [] (frames.py)
                    assert list(row[col]) == [], (name, op["name"], col)
                    continue
                _same(row[col], v, (name, op["name"], col))
    csv_path = run / "ops.csv"
    if not report["ops"]:
        return
    assert csv_path.is_file(), name
    csv = pd.read_csv(csv_path, keep_default_na=False, na_values=[""])
    assert list(csv.columns) == [csv_cell(c) for c in frame.columns], name
    assert {"spread_pct"} <= set(csv.columns) or report.get("ranked_by") is None
    for (_, a), (_, b) in zip(csv.iterrows(), frame.iterrows()):
        for col in frame.columns:
            want = b[col]      # a text cell as csv_cell writes it (spreadsheet-safe)
            got = json.loads(a[csv_cell(col)]) if isinstance(want, (list, dict)) \
                else a[csv_cell(col)]
            want = csv_cell(want)
            _same(got, want, (name, b["name"], col))


def _same(got: Any, want: Any, where: Any) -> None:
    missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v)) \
        or v is pd.NA  # noqa: E731
    if missing(want) or missing(got):
        assert missing(want) and missing(got), (where, got, want)
    elif isinstance(want, (int, float)) and not isinstance(want, bool):
        assert float(got) == pytest.approx(float(want), rel=1e-12, abs=1e-9), (where, got, want)
    else:
        assert got == want or str(got) == str(want), (where, got, want)


# -- the op tables of the terminal, report.md and report.html ----------------------------------
def _md_table(md: str, title: str) -> tuple[list[str], dict[str, list[str]]]:
    section = md[md.index(title):]
    lines = [line for line in section.splitlines()[1:] if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows[cells[0].strip("`")] = cells
        if not section[section.index(line) + len(line):].startswith("\n|"):
            break
    return header, rows


@pytest.mark.parametrize("name", ["cpu", "runs", "window", "timeout", "ranks", "with-nsys",
                                  "h200"])
def test_every_view_shows_report_jsons_op_numbers(corpus: dict, name: str) -> None:
    run, stdout, report = _run(corpus, name)
    md = (run / "report.md").read_text()
    header, rows = _md_table(md, "## Top ops by")
    by_name = {op["name"]: op for op in report["ops"]}
    ranked = report["ranked_by"]
    time_col = header.index("self device ms" if ranked == "device_self_us" else "self CPU ms")
    assert rows, name
    for op_name, cells in rows.items():
        op = by_name[op_name.replace("\\_", "_")]
        assert int(cells[header.index("calls")].replace(",", "")) == op["calls"], (name, op_name)
        assert float(cells[time_col]) == pytest.approx(op[ranked] / 1e3, abs=5.1e-4), (
            name, op_name)      # shown to 3 decimals
        # the terminal's row of the same op: the same cells, in the same order
        line = next((ln for ln in stdout.splitlines() if ln.startswith("  ")
                     and _names(ln.split()[0], op["name"])
                     and sum(_names(ln.split()[0], o) for o in by_name) == 1), None)
        if line is not None:
            numbers = [c for c in cells[1:] if NUMBER.fullmatch(c)]
            shown = [t for t in line.split() if NUMBER.fullmatch(t)]
            assert shown == numbers, (name, line, numbers)
    page = _HtmlTables((run / "report.html").read_text())
    head, html_rows = page.tables["op-table"]
    col = head.index("self device ms" if ranked == "device_self_us" else "self CPU ms")
    for op_name, cells in html_rows.items():
        op = by_name[op_name]
        assert float(cells[col]) == pytest.approx(op[ranked] / 1e3, abs=5.1e-4), (name, op_name)
    assert set(html_rows) <= set(by_name)


def _names(shown: str, name: str) -> bool:
    """Whether a terminal cell shows ``name`` (whole, or cut in the middle with '…')."""
    head, cut, tail = shown.partition("…")
    return shown == name or (bool(cut) and name.startswith(head) and name.endswith(tail)
                             and len(name) > len(shown))


class _HtmlTables(HTMLParser):
    """The page's tables with an id: id -> (header cells, {row name: cells})."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tables: dict[str, tuple[list[str], dict[str, list[str]]]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._name: str | None = None
        self._cell: list[str] | None = None
        self._head: list[str] = []
        self._depth = 0
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._table, self._head = a["id"], []
            self.tables[self._table] = (self._head, {})
        elif self._table and tag == "tr":
            self._row, self._name = [], a.get("data-name")
        elif self._table and tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif self._table and tag in ("details", "ul"):
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif self._table and tag in ("details", "ul"):
            self._depth -= 1
        elif self._table and tag in ("td", "th") and self._cell is not None:
            assert self._row is not None
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif self._table and tag == "tr" and self._row is not None:
            head, rows = self.tables[self._table]
            if self._name is not None:
                rows[self._name] = self._row
            elif not head or len(self._row) == len(head) or not rows:
                head[:] = self._row
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None and self._depth == 0:
            self._cell.append(data)


# -- the head, steps, spans and widths ---------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_the_head_says_the_same_everywhere(corpus: dict, name: str) -> None:
    run, stdout, report = _run(corpus, name)
    md = (run / "report.md").read_text()
    page = (run / "report.html").read_text()
    status = report["status"]
    assert f"[status: {status}]" in stdout and f"Status: **{status}**" in md
    assert f"Status: <b>{status}</b>" in page
    verdict = report.get("verdict") if status in ("ok", "timeout", "terminated",
                                                   "interrupted") else None
    shown = [v for v in (stdout, md, page) if "-BOUND" in v]
    if verdict and "Verdict" in stdout:
        assert len(shown) == 3, name
        for view in shown:
            assert verdict["label"].upper() in view, name
    else:
        assert not shown, name


@pytest.mark.parametrize("name", NAMES)
def test_step_numbers_agree_across_views(corpus: dict, name: str) -> None:
    run, _, report = _run(corpus, name)
    per_step = (report.get("steps") or {}).get("per_step") or []
    frame = nsbridge.load(run).steps
    assert [None if pd.isna(s) else int(s) for s in frame["step"]] == [s["step"] for s in
                                                                      per_step]
    assert (chart_data(report, shown_of(report)).get("steps") or {}).get("labels", []) == [
        step_label(s) for s in per_step]
    assert all(s["step"] is None or s["step"] >= 0 for s in per_step)   # no "step -1"
    memory = report.get("memory") or {}
    if memory.get("peak_step") is not None:
        assert memory["peak_step"] in {s["step"] for s in per_step}, name
    timeline = report.get("timeline") or {}
    if name == "with-nsys":    # the nsys pass's step ranges are the steps torch measured
        assert (timeline.get("window") or {}).get("kind") == "steps", timeline.get("window")
    if per_step and (timeline.get("window") or {}).get("kind") == "steps":
        assert timeline["window"]["steps"] == [s["step"] for s in per_step]


def test_pooled_runs_say_what_they_total_over(corpus: dict) -> None:
    run, stdout, report = _run(corpus, "runs")
    steps = report["steps"]["count"]
    assert report["window"]["steps"] == steps and report["window"]["runs"] == 2
    title = f"totals over the {steps} measured steps of 2 processes"
    assert title in stdout and title in (run / "report.md").read_text()
    calls = {op["name"]: op["calls"] for op in report["ops"]}
    per_step = {op["name"]: len(op["per_step_us"]) for op in report["ops"]}
    assert set(per_step.values()) == {steps}
    assert calls["aten::mm"] % steps == 0          # the same calls in every pooled step


@pytest.mark.parametrize("name", NAMES)
def test_the_terminal_fits_120_columns(corpus: dict, name: str) -> None:
    _, stdout, _ = _run(corpus, name)
    own = stdout[stdout.index("nsbridge "):] if "nsbridge " in stdout else stdout
    wide = [line for line in own.splitlines()
            if len(line) > 120 and not line.startswith("Run directory:")]
    assert not wide, (name, wide[:3])


def test_a_real_trace_keeps_the_tensor_core_count_per_family(corpus: dict) -> None:
    run, _, report = _run(corpus, "h200")
    marked = [op["name"] for op in report["ops"] if op.get("tensor_cores")]
    counts = report.get("tensor_cores") or {}
    assert counts.get("ops", 0) == len(marked)
    assert all(op.get("kernels") for op in report["ops"] if op.get("tensor_cores"))


@pytest.mark.parametrize("name", ["cpu", "runs"])
def test_analyze_of_a_run_directory_keeps_what_the_run_knew(corpus: dict, name: str,
                                                            tmp_path: Path) -> None:
    """analyze RUN_DIR: the same machine facts, confidence, steps, environment (Tensor Core
    marks) and ops as the triage that made the run."""
    run, _, triage = _run(corpus, name)
    again = nsbridge.analyze([run], out=tmp_path / "again").report
    assert again["command"] == "analyze"
    for key in ("machine", "environment", "window", "ops", "sync_points", "tensor_cores"):
        assert again.get(key) == triage.get(key), key
    assert again["verdict"] == triage["verdict"]
    assert again["steps"]["per_step"] == triage["steps"]["per_step"]
