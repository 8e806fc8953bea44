"""How a pass's results are shown: the ``PassView`` type (report/views/catalog.py lists the
built-in views, one per report key of the section it draws). A view declares its
section, its columns in the op table, the dtypes of its per-op columns in ``load().ops`` and
ops.csv, its charts in report.html and which per-op fields go onto merged.json.gz's op
slices; every renderer reads these, and a pass without a view is still shown as it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from .document import Section
from ...contract.report import Report

SectionBuilder = Callable[[Report, Optional[int]], Optional[Section]]
# report -> its charts: each {"id", "title", "kind" ("bar" or "roofline"), and the kind's
# data: "labels", "series" ({name: values}), "unit" or "range" ({"min", "max"}) for a bar}
ChartBuilder = Callable[[Report], list[dict[str, Any]]]


@dataclass(frozen=True)
class OpColumn:
    """One per-op column of a pass: its header, its key under the pass's ops[] key, and
    its format ("ms" from µs, "pct", "text")."""

    header: str
    key: str
    kind: str
    chart: bool = False     # also a series of report.html's top-ops chart ("ms" columns)


@dataclass(frozen=True)
class PassView:
    """How the renderers show one pass: the section under its report key (``section``
    builds it from the report and a row limit) and its columns in the op table."""

    report_key: str                       # "timeline"
    section: SectionBuilder
    op_key: Optional[str] = None          # its key in ops[]: "nsys"
    source: Optional[str] = None          # its columns' source: "Nsight Systems"
    op_columns: tuple[OpColumn, ...] = ()
    frame_dtypes: tuple[tuple[str, str], ...] = ()   # (name under op_key, pandas dtype)
    frame_default: str = ""               # the dtype of its other columns ("": pandas')
    charts: Optional[ChartBuilder] = None
    trace_fields: Optional[tuple[str, ...]] = None   # None: every scalar under op_key
