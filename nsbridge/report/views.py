"""How a pass's section and per-op columns are shown: ``PassView``s, registered by the
report key of the section they draw (report/sections.py registers the built-in ones)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from .document import Section

SectionBuilder = Callable[[dict[str, Any], Optional[int]], Optional[Section]]


@dataclass(frozen=True)
class OpColumn:
    """One per-op column of a pass: its header, its key under the pass's ops[] key, and
    its format ("ms" from µs, "pct", "text")."""

    header: str
    key: str
    kind: str


@dataclass(frozen=True)
class PassView:
    """How the renderers show one pass: the section under its report key (``section``
    builds it from the report and a row limit) and its columns in the op table."""

    report_key: str                       # "timeline"
    section: SectionBuilder
    op_key: Optional[str] = None          # its key in ops[]: "nsys"
    source: Optional[str] = None          # its columns' source: "Nsight Systems"
    op_columns: tuple[OpColumn, ...] = ()


_VIEWS: dict[str, PassView] = {}


def register_view(view: PassView) -> None:
    """Show ``view.report_key`` (and its per-op columns) with ``view`` from now on."""
    _VIEWS[view.report_key] = view


def view_for_key(report_key: str) -> Optional[PassView]:
    """The view registered for a report key, if any."""
    return _VIEWS.get(report_key)


def views_by_op_key() -> dict[str, PassView]:
    """The registered views with per-op columns, by their ops[] key."""
    return {view.op_key: view for view in _VIEWS.values() if view.op_key}
