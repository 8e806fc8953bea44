"""How a pass's results are shown: ``PassView``s, registered by the report key of the
section they draw (report/sections.py registers the built-in ones). A view declares its
section, its columns in the op table, the dtypes of its per-op columns in ``load().ops`` and
ops.csv, its charts in report.html and which per-op fields go onto merged.json.gz's op
slices; every renderer reads these, and a pass without a view is still shown as it is."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable, Optional

from .document import Section

SectionBuilder = Callable[[dict[str, Any], Optional[int]], Optional[Section]]
# report -> its charts: each {"id", "title", "kind" ("bar" or "roofline"), and the kind's
# data: "labels", "series" ({name: values}), "unit" or "range" ({"min", "max"}) for a bar}
ChartBuilder = Callable[[dict[str, Any]], list[dict[str, Any]]]


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


_VIEWS: dict[str, PassView] = {}


def register_view(view: PassView) -> None:
    """Show ``view.report_key`` (and its per-op columns) with ``view`` from now on."""
    _VIEWS[view.report_key] = view


def view_for_key(report_key: str) -> Optional[PassView]:
    """The view registered for a report key, if any."""
    return registered().get(report_key)


def views_by_op_key() -> dict[str, PassView]:
    """The registered views with per-op columns, by their ops[] key."""
    return {view.op_key: view for view in registered().values() if view.op_key}


def registered() -> dict[str, PassView]:
    """Every registered view by report key, the built-in ones included."""
    import_module(".sections", __package__)   # registers the built-in views on import
    return _VIEWS
