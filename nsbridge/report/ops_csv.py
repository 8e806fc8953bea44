"""ops.csv: the op table as CSV, list columns as JSON or '; '-joined text."""

from __future__ import annotations

import json

import pandas as pd

from .. import schema as S


def ops_csv(ops: pd.DataFrame) -> str:
    """The OPS frame (schema.OP_COLUMNS) as CSV text."""
    csv = ops.copy()
    csv["shapes"] = csv["shapes"].map(lambda v: "; ".join(v))
    for col in ("kernels", "copies"):
        csv[col] = csv[col].map(lambda ks: json.dumps([k["name"] for k in ks]))
    csv[S.PER_STEP_US] = csv[S.PER_STEP_US].map(json.dumps)
    csv[S.SHAPE_WORK] = csv[S.SHAPE_WORK].map(json.dumps)
    return csv.to_csv(index=False)
