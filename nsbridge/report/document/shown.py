"""What every view of one report shows, decided once per report: the ops its tables and
charts list (autograd's wrappers left out), the span their totals cover, the
recommendations (none where the verdict is not shown) and the kernels, costliest first.
Sections and charts read these; none decides them again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .wording import model_ops, shown_recommendations, span_text
from ...contract.report import DeviceWork, Op, Recommendation, Report


@dataclass(frozen=True)
class Shown:
    ops: list[Op]                           # wording.model_ops, in the report's order
    span: str                               # wording.span_text: 'over the 3 measured steps'
    recommendations: list[Recommendation]   # wording.shown_recommendations
    kernels: list[DeviceWork]               # the window's kernels (not copies), costliest first


def shown_of(report: Report) -> Shown:
    """The choices every view of ``report`` shares."""
    return Shown(ops=model_ops(report.get("ops") or []), span=span_text(report),
                 recommendations=shown_recommendations(report),
                 kernels=[w for w in (report.get("device") or {}).get("work") or []
                          if w["kind"] == "kernel"])
