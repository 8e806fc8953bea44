"""report.md and report.html of a report, as a run writes them (report.files.pages)."""

from __future__ import annotations

from typing import Any, Optional

from nsbridge import schema as S
from nsbridge.report.files import pages


def report_md(report: dict[str, Any], key_averages_file: Optional[str] = None) -> str:
    return dict(pages(report, key_averages_file))[S.REPORT_MD].decode("utf-8")


def report_html(report: dict[str, Any]) -> str:
    return dict(pages(report, None))[S.REPORT_HTML].decode("utf-8")
