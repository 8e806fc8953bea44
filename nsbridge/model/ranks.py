"""Several traces (ranks of one job, or several runs) folded into one view."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .. import schema as S
from .ops import merge_shape_work



def combine_ops(tables: list[pd.DataFrame], has_device: bool) -> pd.DataFrame:
    """Sum OPS frames by op name (kernels and copies merged by name); self_pct recomputed."""
    if len(tables) == 1:
        return tables[0]
    frame = pd.concat(tables, ignore_index=True)
    numeric = frame.groupby("name", sort=False)[S.OP_SUMMED_COLUMNS].sum(min_count=1)
    shapes = frame.groupby("name", sort=False)["shapes"].first()
    kernels = frame.groupby("name", sort=False)["kernels"].apply(_merge_work)
    copies = frame.groupby("name", sort=False)["copies"].apply(_merge_work)
    spread = frame.groupby("name", sort=False)["per_step_us"].apply(_sum_steps)
    work = frame.groupby("name", sort=False)["shape_work"].apply(merge_shape_work)
    table = (numeric.join(shapes).join(kernels).join(copies).join(spread).join(work)
             .reset_index())
    rank_col = "device_self_us" if has_device else "cpu_self_us"
    total = table[rank_col].sum()
    table["self_pct"] = 100.0 * table[rank_col] / total if total > 0 else 0.0
    table = table.sort_values([rank_col, "cpu_total_us"], ascending=False, kind="stable")
    return table[S.OP_COLUMNS].reset_index(drop=True)


def slowest(summaries: list[dict[str, Any]]) -> int:
    """Index of the rank with the longest mean step: it sets the job's pace."""
    walls = [s.get("step_ms") or 0.0 for s in summaries]
    return int(np.argmax(walls)) if walls else 0


def _sum_steps(lists: pd.Series) -> list[float]:
    """Per-step times of several ranks added step by step (ranks step together)."""
    width = max((len(v) for v in lists), default=0)
    return [round(sum(v[i] for v in lists if i < len(v)), 3) for i in range(width)]


def _merge_work(lists: pd.Series) -> list[dict[str, Any]]:
    """Kernel (or copy) entries of several traces summed by name (and kind)."""
    merged: dict[tuple[str, Any], dict[str, Any]] = {}
    for entries in lists:
        for k in entries:
            fresh = {**k, "calls": 0, "device_us": 0.0}
            if "bytes" in k:
                fresh["bytes"] = None
            row = merged.setdefault((k["name"], k.get("kind")), fresh)
            row["calls"] += k["calls"]
            row["device_us"] = round(row["device_us"] + k["device_us"], 3)
            if k.get("bytes") is not None:
                row["bytes"] = (row["bytes"] or 0) + k["bytes"]
    return sorted(merged.values(), key=lambda k: -k["device_us"])
