"""The one list of sections every renderer shows, built from report.json.

The torch.profiler pass's sections come first (ops, device, sync points,
recommendations); then one section per other top-level key of the report, each drawn
by the ``PassView`` of that key (report/views/catalog.py: ranks, the nsys timeline, ncu) or, for
a key no view knows, by ``generic_section``; then profiler overhead, notes and sources.
The op table likewise takes each pass's per-op columns from its view (``op_columns``),
or every scalar under an ops[] key no view knows.

A new pass needs no edit here: its section and per-op columns show as they are; one entry
in report/views/catalog.py's ``VIEWS`` gives them titles and formats (tests/test_pipeline.py).
"""

from __future__ import annotations

from typing import Any, Optional

from ... import schema as S
from ..views import catalog
from ..views.device_view import device_section
from ..document.document import Section
from ..views.generic_view import generic_section
from ..views.kernels_view import kernel_section
from ..views.ops_view import ops_section
from ..views.recommendations_view import recommendations_section
from ..views.run_view import notes_section, overhead_section, sources_section
from ..document.shown import Shown
from ..views.syncs_view import syncs_section
from ...contract.report import Report


def sections(report: Report, shown: Shown, limit: Optional[int] = None
             ) -> list[Section]:
    """Every section the report has, in order (``shown``: what the views share, see
    report.document.shown); tables of ops, sync points and kernels keep at most ``limit`` rows
    (None: all)."""
    first = [S.DISTRIBUTED_SECTION]   # a job's ranks right under the verdict
    built = [view.section(report, limit) for key in first if report.get(key)
             for view in [catalog.view_for_key(key)] if view]
    built += [ops_section(report, shown, limit), device_section(report),
              kernel_section(report, shown, limit), syncs_section(report),
              recommendations_section(report, shown)]
    for key, value in report.items():
        if key in S.REPORT_KEYS or key in first or not value:
            continue
        view = catalog.view_for_key(key)
        built.append(view.section(report, limit) if view else generic_section(key, value, limit))
    built += [overhead_section(report), notes_section(report), sources_section(report)]
    return [section for section in built if section is not None]
