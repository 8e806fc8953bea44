"""ops.csv: the ``load().ops`` frame of the report (report/frames.py) as CSV, and ranks.csv:
its ``load().ranks`` frame, one row per rank of a job. ops.csv has every column of
report.json's ``ops``, each other pass's numbers as ``KEY_name`` columns (``spread_pct``,
``tensor_cores_*``, ``nsys_*``, ``ncu_*``), list columns as JSON, so each cell is the
value report.json and ``load()`` hold. It is RFC 4180 CSV (CRLF rows, quoted where
needed) and safe to open in a spreadsheet: text cells, headers included, pass through
report.document.escape.csv_cell (control characters escaped, a formula's first character quoted);
numbers are written as they are."""

from __future__ import annotations

import json
from typing import Optional

import pandas as pd

from ..document.escape import csv_cell
from ..frames import ops as ops_frame, ranks as ranks_frame
from ...contract.report import Report


def ops_csv(report: Report) -> str:
    """The report's ops as CSV text."""
    return csv_text(ops_frame(report))


def ranks_csv(report: Report) -> Optional[str]:
    """The report's ranks as CSV text; None for a report of one process."""
    frame = ranks_frame(report)
    return csv_text(frame) if frame is not None else None


def csv_text(frame: pd.DataFrame) -> str:
    """A frame of the report as CSV text: lists and mappings as JSON, text cells escaped."""
    csv = frame.copy()
    for col in csv.columns:
        if csv[col].map(lambda v: isinstance(v, (list, dict))).any():
            csv[col] = csv[col].map(lambda v: json.dumps(v) if isinstance(v, (list, dict))
                                    else v)
        elif csv[col].map(lambda v: isinstance(v, str)).any():
            csv[col] = csv[col].map(csv_cell)
    csv.columns = [csv_cell(str(col)) for col in csv.columns]
    return csv.to_csv(index=False, lineterminator="\r\n")
