"""ops.csv: the ``load().ops`` frame of the report (report/frames.py) as CSV: every column of
report.json's ``ops``, each other pass's numbers as ``KEY_name`` columns (``spread_pct``,
``tensor_cores_*``, ``nsys_*``, ``ncu_*``), list columns as JSON, so each cell is the
value report.json and ``load()`` hold."""

from __future__ import annotations

import json
from typing import Any

from .frames import ops as ops_frame


def ops_csv(report: dict[str, Any]) -> str:
    """The report's ops as CSV text."""
    csv = ops_frame(report)
    for col in csv.columns:
        if csv[col].map(lambda v: isinstance(v, (list, dict))).any():
            csv[col] = csv[col].map(lambda v: json.dumps(v) if isinstance(v, (list, dict))
                                    else v)
    return csv.to_csv(index=False)
