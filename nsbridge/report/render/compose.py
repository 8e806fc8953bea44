"""The report composed once, for every renderer to format: the head (title, status, what
went wrong, the verdict with its lines, steps and machine: report.document.head's sentences) and
the sections. The terminal, report.md and report.html only lay these out, so
they cannot disagree on a word."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .charts import chart_data, chart_titles
from ..document.document import Section
from ..document.head import (context_lines, shown_verdict, trouble_lines, verdict_headline,
                   verdict_lines, verdict_title)
from .sections import sections
from ..document.shown import shown_of
from ...contract.report import Report


@dataclass(frozen=True)
class Head:
    """What every view shows above its sections."""

    command: str
    target: str
    status: str
    trouble: list[str]                    # the error, what a stopped or failed run kept
    verdict: Optional[tuple[str, str]]    # (its title, its headline); None: none shown
    verdict_lines: list[tuple[str, str]]  # (kind mark, text): evidence, alternatives, ...
    context: list[tuple[str, str]]        # (label, text): steps, machine, window
    trace: Optional[str]                  # the trace file that opens in Perfetto, if any


@dataclass(frozen=True)
class Composed:
    head: Head
    sections: list[Section]
    charts: dict[str, Any] = field(default_factory=dict)        # charts.chart_data
    chart_titles: dict[str, str] = field(default_factory=dict)  # charts.chart_titles


def compose(report: Report, limit: Optional[int] = None,
            charts: bool = False) -> Composed:
    """The head and every section of ``report``; tables keep at most ``limit`` rows;
    ``charts``: report.html's chart data and titles too."""
    shown = shown_of(report)
    verdict = shown_verdict(report)
    head = Head(command=str(report["command"]), target=str(report["target"]),
                status=str(report["status"]), trouble=list(trouble_lines(report)),
                verdict=((verdict_title(report), verdict_headline(verdict, report))
                         if verdict else None),
                verdict_lines=list(verdict_lines(verdict)) if verdict else [],
                context=list(context_lines(report)), trace=_trace(report))
    built = sections(report, shown, limit)
    if not charts:
        return Composed(head, built)
    return Composed(head, built, chart_data(report, shown), chart_titles(shown.span))


def _trace(report: Report) -> Optional[str]:
    files = report.get("files") or {}
    trace = files.get("merged_trace") or files.get("trace")
    return str(trace) if trace else None
