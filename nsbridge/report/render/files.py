"""The run's files rendered from its report, in the order the save writes them: the data
files (ops.csv, ranks.csv for a job, and merged.json.gz where the torch trace was small enough to annotate
whole), then the pages (report.md, report.html). Each comes as (file name, bytes), made
when it is asked for, so a file written before a later one fails to render is kept."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any, Iterator, Optional

from ... import schema as S
from ...parse.torch_trace import read_inflated
from .compose import compose
from .html import html_page
from .markdown import markdown
from .merged_trace import merged_trace_json
from .ops_csv import ops_csv, ranks_csv
from ...contract.report import Report


def data_files(report: Report, trace: Optional[Path]) -> Iterator[tuple[str, bytes]]:
    """ops.csv (when the report has ops), ranks.csv (when it is a job's) and merged.json.gz
    (``trace``: the torch trace to annotate; None: none), gzipped at level 1 (a merged trace
    is rewritten on every run)."""
    if report.get("ops"):
        yield S.OPS_CSV, ops_csv(report).encode("utf-8")
    ranks = ranks_csv(report)
    if ranks is not None:
        yield S.RANKS_CSV, ranks.encode("utf-8")
    if trace is not None:
        merged = merged_trace_json(read_inflated(trace), report)
        yield S.MERGED_TRACE, gzip.compress(merged, compresslevel=1)


def pages(report: Report, key_averages: Optional[str],
          top: int) -> Iterator[tuple[str, bytes]]:
    """report.md (``key_averages``: the file name of torch's own table, which it links, or
    None; ``top``: rows its tables keep, as the terminal summary) and report.html (every
    row)."""
    brief = compose(report, top)
    yield S.REPORT_MD, markdown(brief, key_averages_file=key_averages).encode("utf-8")
    full = compose(report, charts=True)
    yield S.REPORT_HTML, html_page(full).encode("utf-8")
