"""The built-in views, one plain tuple (``VIEWS``), and the lookups the renderers use.

A new pass's view is one more entry here: its section, per-op columns, frame dtypes and
charts then show in every renderer (tests/test_pipeline.py adds a toy one the same way).
"""

from __future__ import annotations

from typing import Optional

from .memory_view import MEMORY_VIEW
from .ncu_view import NCU_VIEW
from .op_groups_view import OP_GROUPS_VIEW
from .ranks_view import RANKS_VIEW
from .snapshot_view import SNAPSHOT_VIEW
from .tensor_cores_view import TENSOR_CORES_VIEW
from .timeline_view import TIMELINE_VIEW
from ..document.pass_view import PassView

VIEWS: tuple[PassView, ...] = (TENSOR_CORES_VIEW, MEMORY_VIEW, SNAPSHOT_VIEW, OP_GROUPS_VIEW,
                               RANKS_VIEW, TIMELINE_VIEW, NCU_VIEW)


def view_for_key(report_key: str) -> Optional[PassView]:
    """The view of a report key, if any."""
    return next((view for view in VIEWS if view.report_key == report_key), None)


def views_by_op_key() -> dict[str, PassView]:
    """The views with per-op columns, by their ops[] key."""
    return {view.op_key: view for view in VIEWS if view.op_key}
