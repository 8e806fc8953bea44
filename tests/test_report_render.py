"""Rendering escapes every name and shows what the report holds."""

from __future__ import annotations

from nsbridge.report.document.build import build_report
from nsbridge.report.render.terminal import terminal_summary
from nsbridge.model.analysis import analyze_events
from nsbridge.profiles import load_profile

from builders import events, kernel, launch, op
from conftest import ROOT
from rendered import report_html, report_md

EVIL = "void gemm<float, (int)1><script>alert(1)</script>|x&y"


def _report() -> dict:
    frame = events(op("ProfilerStep#1", 0, 100, cat="user_annotation"),
                   op("aten::mm", 5, 50), launch(6, 1), kernel(EVIL, 10, 85, 1))
    analysis = analyze_events(frame, thresholds=load_profile("default").analysis)
    return build_report(command="analyze", target="t<1>.json", status="ok", analysis=analysis,
                        step_source=None, overhead=None, files={}, notes=["a & b"],
                        has_memory=False)


def test_html_escapes_kernel_names() -> None:
    page = report_html(_report())
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "t&lt;1&gt;.json" in page and "a &amp; b" in page


def test_markdown_escapes_table_pipes() -> None:
    md = report_md(_report())
    row = next(line for line in md.splitlines() if "alert" in line)
    assert "\\|x&y" in row


def test_terminal_summary_has_verdict_ops_and_device() -> None:
    text = terminal_summary(_report(), "runs/x")
    assert "Verdict: GPU-BOUND" in text and "aten::mm" in text and "Device: busy" in text
    assert "Run directory: runs/x" in text


def test_device_fields_are_null_without_a_device() -> None:
    frame = events(op("aten::mm", 0, 10))
    analysis = analyze_events(frame, thresholds=load_profile("default").analysis)
    report = build_report(command="analyze", target="t", status="ok", analysis=analysis,
                          step_source=None, overhead=None, files={}, notes=[], has_memory=False)
    assert report["device"] is None
    assert report["ops"][0]["device_self_us"] is None and report["ops"][0]["mem_mib"] is None


def test_report_md_ends_with_the_definitions_the_docs_give() -> None:
    from nsbridge.report.document.definitions import DEFINITIONS

    text = report_md(_report())
    block = text[text.index("What each number means"):]
    page = (ROOT / "docs" / "explanation" / "numbers.md").read_text()
    for term in DEFINITIONS:
        assert f"**{term}**" in block
        assert f"**{term}**" in page, f"docs/explanation/numbers.md has no definition of {term}"


def test_op_totals_say_their_span_and_whose_they_are() -> None:
    from nsbridge.report.document.wording import span_text

    steps = {"window": {"kind": "steps", "steps": 3}}
    assert span_text(steps) == "over the 3 measured steps"
    two = [{"rank": 0}, {"rank": 1}]
    assert span_text({**steps, "distributed": {"ranks": two}}) == (
        "over the 3 measured steps, summed over 2 ranks")            # analyze of 2 traces
    assert span_text({**steps, "distributed": {"ranks": two, "shown_rank": 1}}) == (
        "over the 3 measured steps, rank 1's")                        # a job's triage
    assert span_text({"window": {"kind": "trace", "seconds": 0.5}}) == "over the 0.500 s window"


def test_memory_levels_near_zero_never_read_minus_zero() -> None:
    """Regression: '-0.0 MiB at the window's start' (a level of -0.01 MiB, relative)."""
    from nsbridge.report.views.memory_view import growth_line, memory_line

    memory = {"relative": True, "peak_mib": 3.0, "device": "cpu", "peak_at_ms": 1.0,
              "start_mib": -0.01, "end_mib": -0.04, "per_step_end_mib": [-0.02, 0.01]}
    text = memory_line(memory) + " " + (growth_line(memory) or "")
    assert "-0.0" not in text and "+0.0 MiB at its end" in text
    assert "+0.0, +0.0 MiB since the window's start" in text      # changes read as such
    absolute = {**memory, "relative": False}
    text = memory_line(absolute) + " " + (growth_line(absolute) or "")
    assert "-0.0" not in text and "0.0 MiB at the window's start" in text and "+" not in text
