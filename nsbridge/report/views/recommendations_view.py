"""The recommendations: what to do first, ranked (those addressing the verdict first,
then by impact), each with why and the fix."""

from __future__ import annotations

from typing import Any, Optional

from ..document.build import STOPPED
from ..document.document import Items, Section
from ..document.shown import Shown
from ...contract.report import Report


def recommendations_section(report: Report, shown: Shown) -> Optional[Section]:
    """What to do first, ranked (report.document.shown: none where the verdict is not shown)."""
    if not shown.recommendations:
        return None
    partial = " (partial run)" if report.get("status") in STOPPED else ""
    items = [f"{r['title']}: {r['why']}. Fix: {r['fix']}"
             + (f" (docs: {r['url']})" if r.get("url") else "") for r in shown.recommendations]
    return Section("recommendations", f"Recommendations{partial}",
                   [Items(items, numbered=True, brief=3)])
