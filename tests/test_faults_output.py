"""Issue 15, faults and bad input: what the outputs print.

Every output escapes what it prints from a trace or a script (report.json keeps it raw); a
failed or empty run gets no verdict and no recommendations, only its status, its error and
what it kept; a stopped run that measured steps keeps its verdict, labelled partial; facts
that were not measured are never printed as None.
"""

from __future__ import annotations

import gzip
import html
import itertools
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

import nsbridge
from nsbridge.model.analysis import analyze_events
from nsbridge.parse.torch_trace import read_trace
from nsbridge.profiles import load_profile
from nsbridge.report.document.build import build_report
from nsbridge.report.document.escape import md_code, md_text, terminal
from nsbridge.report.render.terminal import terminal_summary
from nsbridge.report.document.head import machine_line

from builders import events, kernel, launch, op
from conftest import TORCH_DATA, flat, run_nsbridge
from rendered import report_html, report_md

TRACE = TORCH_DATA / "h200" / "input_bound_h200.json.gz"
# op name in the trace -> what it is renamed to (top ops; aten::copy_ also holds a sync)
RENAMED = {"aten::_foreach_addcdiv_": "<script>alert(1)</script>",
           "aten::addmm": "a|b`x`|c",
           "aten::copy_": "\x1b[31mred\x1b[0m\rback\nline\u202e"}
EVIL_KERNEL = "<img src=x onerror=alert(1)>|k\x1b[2J"
MD = MarkdownIt("commonmark").enable("table")
VERDICT_WORDS = ("Verdict", "-BOUND", "Recommendations", "Fix:", "torch.compile")


def _evil_trace(folder: Path) -> Path:
    """The real H200 trace with three ops and its costliest kernel renamed (so every
    output lists it), in a file whose name is itself hostile."""
    data = json.loads(gzip.open(TRACE).read())
    totals: dict[str, float] = {}
    for event in data["traceEvents"]:
        if event.get("cat") == "kernel":
            totals[event["name"]] = totals.get(event["name"], 0.0) + event.get("dur", 0.0)
    costliest = max(totals, key=totals.__getitem__)
    for event in data["traceEvents"]:
        if event.get("cat") == "cpu_op" and event.get("name") in RENAMED:
            event["name"] = RENAMED[event["name"]]
        elif event.get("cat") == "kernel" and event["name"] == costliest:
            event["name"] = EVIL_KERNEL
    path = folder / "in|put`<b>.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def evil_run(tmp_path_factory: pytest.TempPathFactory) -> nsbridge.RunResult:
    folder = tmp_path_factory.mktemp("evil")
    return nsbridge.analyze([_evil_trace(folder)], out=folder / "run")


def _md_tables(text: str) -> list[list[str]]:
    """The raw lines of each Markdown table (header, separator, rows)."""
    tables: list[list[str]] = []
    previous = ""
    for line in text.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append(line)
        previous = line
    return tables


def _columns(row: str) -> int:
    """Cells of a table row: the pipes not escaped by a backslash, less one (GFM)."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def _rendered_cells(text: str) -> list[str]:
    """Every table cell of the Markdown as markdown-it renders it (inline HTML)."""
    tokens = MD.parse(text)
    return [MD.renderer.render(tokens[i + 1].children or [], MD.options, {})
            for i, t in enumerate(tokens) if t.type in ("td_open", "th_open")]


def test_report_json_keeps_the_raw_names(evil_run: nsbridge.RunResult) -> None:
    names = {op["name"] for op in evil_run.report["ops"]}
    assert set(RENAMED.values()) <= names
    kernels = {k["name"] for op in evil_run.report["ops"] for k in op["kernels"]}
    assert EVIL_KERNEL in kernels
    saved = json.loads((evil_run.run_dir / "report.json").read_text())
    assert {op["name"] for op in saved["ops"]} == names


def test_markdown_tables_keep_their_columns_and_show_names_as_text(
        evil_run: nsbridge.RunResult) -> None:
    text = (evil_run.run_dir / "report.md").read_text()
    assert text == report_md(evil_run.report, key_averages_file="key_averages.txt"
                            if (evil_run.run_dir / "key_averages.txt").is_file() else None)
    tables = _md_tables(text)
    assert len(tables) >= 3                       # hot ops, kernels, sync points
    for table in tables:
        width = _columns(table[0])
        assert all(_columns(row) == width for row in table), table
    cells = _rendered_cells(text)
    for name in [*RENAMED.values(), EVIL_KERNEL]:
        assert f"<code>{html.escape(terminal(name), quote=False)}</code>" in cells, name
    rendered = MD.render(text).lower()
    assert "<script" not in rendered and "<img" not in rendered and "\x1b" not in text
    assert "\r" not in text and "\u202e" not in text


def test_markdown_prose_cannot_become_html_or_a_heading(evil_run: nsbridge.RunResult) -> None:
    report = json.loads(json.dumps(evil_run.report))
    report.update(status="failed", error={"type": "ValueError", "file": "a<b>|c.py", "line": 7,
                                          "message": "<script>x</script>\n# heading `y`"},
                  notes=["# not a heading <i>x</i>", "1. not a list"])
    report["sync_points"][0].update(file="sy|nc<b>.py", function="f`g", line=3, op="it|em")
    text = report_md(report)
    rendered = MD.render(text)
    assert "<script" not in rendered.lower() and "<i>" not in rendered and "<b>" not in rendered
    assert "<h1>not a heading" not in rendered and "<ol>" not in rendered
    assert "# heading" not in [line.strip() for line in text.splitlines()]
    assert "sy|nc&lt;b&gt;.py:3" in rendered and "<code>it|em</code>" in rendered
    for table in _md_tables(text):
        assert all(_columns(row) == _columns(table[0]) for row in table)


def test_terminal_shows_control_characters_as_escapes(evil_run: nsbridge.RunResult) -> None:
    report = json.loads(json.dumps(evil_run.report))
    report["notes"].append("note \x1b]0;title\x07 \x9b2J")
    report["sync_points"][0].update(file="x\x1b[1A.py", line=1)
    text = terminal_summary(report, "runs/\x1b[31mx", top=50)
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", text)
    assert "\\x1b[31mred\\x1b[0m\\rback\\nline\\u202e" in text
    assert "\\x1b]0;title\\x07 \\x9b2J" in text and "x\\x1b[1A.py:1" in text
    table = [line for line in text[text.index("Top ops by"):text.index("  (gross MiB")]
             .splitlines()[1:] if not line.startswith("  (")]     # the table, not its notes
    assert len({len(line) for line in table}) == 1   # the escaped names keep it aligned


def test_html_escapes_every_name(evil_run: nsbridge.RunResult) -> None:
    page = (evil_run.run_dir / "report.html").read_text()
    assert page == report_html(evil_run.report)
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x1b" not in page and "\u202e" not in page
    assert "in|put`&lt;b&gt;.json" in page


def _analysis() -> Any:
    return analyze_events(read_trace(TRACE).events, thresholds=load_profile("default").analysis)


def _built(status: str, analysis: Any = None) -> dict[str, Any]:
    return build_report(command="triage", target="t.py", status=status,
                        analysis=analysis or _analysis(), step_source=None, overhead=None,
                        files={"trace": "trace.json.gz"}, notes=[], has_memory=False,
                        error={"type": "ValueError", "message": "bad", "file": "t.py",
                               "line": 3})


@pytest.mark.parametrize("status", ["failed", "no-trace", "hung"])
def test_a_failed_run_has_no_verdict_in_report_json_or_any_output(status: str) -> None:
    report = _built(status)
    assert report["verdict"] is None and report["recommendations"] == []
    assert report["ops"] and report["steps"]["count"] > 0     # what was kept stays
    for text in (terminal_summary(report, "runs/x"), report_md(report), report_html(report)):
        assert "-BOUND" not in text and "Recommendations" not in text
        assert "No verdict or recommendations" in text and "ValueError: bad (at t.py:3)" in text
        assert "the partial trace (trace.json.gz)" in text and "ops." in text


def test_the_outputs_follow_a_status_set_after_the_report_was_built() -> None:
    report = _built("ok")
    assert report["verdict"] and report["recommendations"]
    report.update(status="failed", error={"type": "NsysError", "message": "nsys failed"})
    for text in (terminal_summary(report, None), report_md(report), report_html(report)):
        assert "-BOUND" not in text and "Recommendations" not in text
        assert "No verdict or recommendations: the run failed" in text


def test_a_run_stopped_after_measured_steps_keeps_a_partial_verdict() -> None:
    report = _built("timeout")
    steps = report["window"]["steps"]
    assert report["verdict"] and report["recommendations"] and steps > 0
    for text in (terminal_summary(report, None), report_md(report), report_html(report)):
        assert "Verdict (partial run)" in text and "INPUT-BOUND" in text
        assert f"rest on the {steps} complete measured steps" in text


def test_a_run_stopped_before_any_step_has_no_verdict() -> None:
    analysis = analyze_events(read_trace(TRACE).events, window="trace",
                              thresholds=load_profile("default").analysis)
    report = _built("interrupted", analysis)
    assert report["verdict"] is None and report["recommendations"] == []
    assert "before its first complete measured step" in terminal_summary(report, None)


def _ok_report(*rows: dict[str, Any]) -> dict[str, Any]:
    analysis = analyze_events(events(op("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                     op("ProfilerStep#2", 100, 100, cat="user_annotation"),
                                     *rows), thresholds=load_profile("default").analysis)
    return build_report(command="analyze", target="t.json", status="ok", analysis=analysis,
                        step_source=None, overhead=None, files={"trace_input": "t.json"},
                        notes=[], has_memory=False)


def test_a_finished_run_that_measured_nothing_has_no_verdict() -> None:
    report = _ok_report()
    assert report["ops"] == [] and report["verdict"] is None
    for text in (terminal_summary(report, None), report_md(report), report_html(report)):
        assert "-BOUND" not in text
        assert ("No verdict or recommendations: nothing was measured (no op, no GPU work). "
                "Kept: the trace (t.json), 2 complete measured steps, no op.") in " ".join(
                    text.split())      # the terminal wraps at 120 columns


def test_gpu_work_alone_is_measured() -> None:
    report = _ok_report(launch(5, 1), kernel("k", 10, 20, 1))
    assert report["ops"] == [] and report["verdict"]["label"] == "cpu-bound"
    assert "No verdict" not in terminal_summary(report, None)


MACHINE_NULLS = {
    "cores": {"logical": None, "affinity": None, "cgroup_quota": None, "usable": None},
    "threads": {"intra_op": 4, "inter_op": None, "env": {}},
    "load": {"before": None, "at_start": None, "at_end": None, "after": [float("nan")]},
    "steal_share": None, "cgroup_throttling": {"periods": None, "throttled": None},
    "measured_steps": {"n": 3, "wait_ms_per_step": 1.25, "wait_share": None,
                       "cpu_per_wall": -0.0001, "nivcsw_per_step": None},
    "gpu": [{"index": 0, "name": "H100", "sm_clock_mhz": None, "sm_clock_max_mhz": None,
             "throttle_reasons": [], "other_processes": []}],
    "contention": {"contended": False}}


def test_machine_line_leaves_out_what_was_not_measured() -> None:
    line = machine_line(MACHINE_NULLS)
    assert line == ("quiet: torch 4 intra-op threads; CPU wait 1.2 ms/step; "
                    "CPU time 0.00x wall; GPU 0 SM clock not measured")
    bare = machine_line({"cores": {"usable": None, "logical": 8}, "contention": None})
    assert bare == "quiet: 8 logical cores (usable not measured)"
    assert machine_line({"threads": {}, "gpu": []}) == "quiet: no machine facts measured"


def test_no_python_none_in_any_output_of_a_run_with_null_machine_facts() -> None:
    report = _built("ok")
    report["machine"] = MACHINE_NULLS
    for text in (terminal_summary(report, None), report_md(report), report_html(report)):
        assert not re.search(r"\bNone\b|\bnan\b|-0(?:\.0+)?(?![\d.])", text)


def test_md_text_and_md_code() -> None:
    assert md_text("# x") == "\\# x" and md_text("1. x") == "1\\. x"
    assert md_text("1.5 ms") == "1.5 ms" and md_text("- x") == "\\- x"
    assert md_code("a|b") == "`a\\|b`" and md_code("x`y") == "``x`y``"
    assert md_code("`a") == "`` `a ``" and md_code("") == ""


# -- real runs of failing scripts -----------------------------------------------------------
TWO_STEPS_THEN_RAISE = """
import torch
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(4):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"loss {loss.item():.3f}")
    if i == 2:
        raise ValueError("bad batch \\x1b[31m<script>alert(1)</script> | `x`")
"""
# case -> (script name, source, error shown, exit code)
SCRIPTS = {
    "raises at import": ("imp.py", "import torch\nraise RuntimeError('broken config')\n",
                         "RuntimeError: broken config", 1),
    "os._exit(3)": ("exit3.py", "import os, torch\nx = torch.ones(4) @ torch.ones(4)\n"
                                "os._exit(3)\n", "ended with status 3", 3),
    "two steps, then raises": ("tr|<b>ain.py", TWO_STEPS_THEN_RAISE, "ValueError: bad batch", 1),
}


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "fast.yaml"
    path.write_text("version: 1\nschedule:\n  skip_first: 0\n  wait: 0\n  warmup: 0\n"
                    "  active: 2\ncapture:\n  profile_memory: false\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SCRIPTS))
def test_a_failed_script_gets_status_error_and_what_was_kept(case: str, tmp_path: Path,
                                                             profile: Path) -> None:
    name, source, error, code = SCRIPTS[case]
    (tmp_path / name).write_text(textwrap.dedent(source))
    run = tmp_path / "run"
    proc = run_nsbridge("triage", "--profile", str(profile), "--out", str(run), name,
                        cwd=tmp_path, timeout=300)
    assert proc.returncode == code, proc.stderr
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "failed" and report["verdict"] is None
    assert report["recommendations"] == []
    md, page = (run / "report.md").read_text(), (run / "report.html").read_text()
    for text in (proc.stdout, md, page):
        assert not any(word in text for word in VERDICT_WORDS), (case, text)
        assert "No verdict or recommendations: the run failed. Kept: " in text
        assert "Status: " in text or "[status: failed]" in text
    assert error in proc.stdout
    assert "\x1b" not in proc.stdout and "<script" not in MD.render(md).lower()
    assert "<script>alert" not in page
    said = flat(proc.stdout)          # the terminal wraps sentences at 120 columns
    first, *rest = proc.stdout.split("Kept: ", 1)[1].splitlines()
    wrapped = itertools.takewhile(lambda line: line.startswith("    "), rest)   # its own
    kept = " ".join([first, *(line.strip() for line in wrapped)])
    if case == "two steps, then raises":
        assert kept.startswith("the partial trace (trace.json.gz), 2 complete measured steps")
        assert f"(at {tmp_path / name}:12)" in said                  # the script's line
        assert any(p["file"] and p["file"].endswith(name) for p in report["sync_points"])
        for table in _md_tables(md):
            assert all(_columns(row) == _columns(table[0]) for row in table)
    elif case == "os._exit(3)":
        assert kept == "no trace, no complete measured step, no op."
    else:
        assert kept.endswith(", no op.") and f"(at {tmp_path / name}:2)" in said
