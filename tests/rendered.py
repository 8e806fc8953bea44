"""report.md and report.html of a report, as a run writes them (report.render.files.pages)."""

from __future__ import annotations

from typing import Any, Optional

from nsbridge import schema as S
from nsbridge.profiles import Analysis
from nsbridge.report.render.files import pages

ROWS = Analysis().top_ops    # what a run made with the default profile keeps


def report_md(report: dict[str, Any], key_averages_file: Optional[str] = None,
              top: int = ROWS) -> str:
    return dict(pages(report, key_averages_file, top))[S.REPORT_MD].decode("utf-8")


def report_html(report: dict[str, Any]) -> str:
    return dict(pages(report, None, ROWS))[S.REPORT_HTML].decode("utf-8")
