"""The short text printed after a run: the head (status, verdict, steps, machine), then
each section of report/sections.py as the terminal shows it (``brief`` rows). Every line
is escaped (escape.terminal) as it is printed, so no name, path or message from a trace
or a script can drive the terminal."""

from __future__ import annotations

from typing import Any, Optional

from .document import TERMINAL, Items, Table, Text
from .escape import terminal
from .sections import sections
from .wording import (context_lines, is_number, shown_verdict, trouble_lines,
                      verdict_headline, verdict_lines, verdict_title)

PERFETTO = "https://ui.perfetto.dev"
NAME_WIDTH = 44


def terminal_summary(report: dict[str, Any], run_dir: Optional[str], top: int = 10) -> str:
    """The summary, tables cut to ``top`` rows (fewer where a block says so)."""
    lines = _head(report)
    for section in sections(report, top):
        if TERMINAL not in section.views:
            continue
        title = section.brief_title or section.title
        lines += ["", f"{title}: {section.lead}" if section.lead else f"{title}:"]
        for block in section.shown_in(TERMINAL):
            lines += _block(block)
    if run_dir:
        files = report.get("files") or {}
        trace = files.get("merged_trace") or files.get("trace")
        lines += ["", f"Run directory: {run_dir}  (report.md, report.html"
                  + (f", {trace} opens in {PERFETTO}" if trace else "") + ")"]
    return "\n".join(terminal(line) for line in lines)


def _head(report: dict[str, Any]) -> list[str]:
    """Status, error, what a stopped or failed run kept, the verdict, steps and machine."""
    lines = [f"nsbridge {report['command']}: {report['target']}  [status: {report['status']}]"]
    lines += [f"  {line}" for line in trouble_lines(report)]
    verdict = shown_verdict(report)
    if verdict:
        lines += ["", f"{verdict_title(report)}: {verdict_headline(verdict)}"]
        lines += [f"  {kind} {text}" for kind, text in verdict_lines(verdict)]
    context = [f"{label}: {text}" for label, text in context_lines(report)]
    return lines + ([""] + context if context else [])


def _block(block: Any) -> list[str]:
    if isinstance(block, Text):
        return [f"  ({block.text})" if block.note else f"  {block.text}"]
    lead = [f"  {block.lead}"] if block.lead else []
    if isinstance(block, Items):
        return lead + [f"  {f'{i}.' if block.numbered else '-'} {item}"
                       for i, item in enumerate(block.items[:block.brief], 1)]
    assert isinstance(block, Table)
    return ([""] if lead else []) + lead + aligned(block.header, block.rows[:block.brief])


def aligned(header: list[str], rows: list[list[str]], name_width: int = NAME_WIDTH) -> list[str]:
    """The lines of an aligned table, its cells escaped before they are measured and its
    first column (names) clipped to ``name_width``; columns of numbers right-aligned,
    the others left-aligned."""
    def clip(s: str) -> str:
        return s if len(s) <= name_width else s[: name_width - 1] + "…"
    rows = [[clip(terminal(r[0])), *map(terminal, r[1:])] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    numeric = [i > 0 and all(is_number(r[i]) for r in rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(c.rjust(w) if numeric[i] else c.ljust(w)
                                for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(header)] + [line(r) for r in rows]

