"""ops.csv: the op table as CSV, list columns as JSON or '; '-joined text."""

from __future__ import annotations

import json

import pandas as pd


def ops_csv(ops: pd.DataFrame) -> str:
    """The OPS frame (schema.OP_COLUMNS) as CSV text."""
    csv = ops.copy()
    csv["shapes"] = csv["shapes"].map(lambda v: "; ".join(v))
    for col in ("kernels", "copies"):
        csv[col] = csv[col].map(lambda ks: json.dumps([k["name"] for k in ks]))
    csv["per_step_us"] = csv["per_step_us"].map(json.dumps)
    csv["shape_work"] = csv["shape_work"].map(json.dumps)
    return csv.to_csv(index=False)
