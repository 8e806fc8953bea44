"""The op table grouped finer: by (op, input shapes) and by (op, the script's function that
called it: its innermost frame in the trace's stacks, ``forward (train.py:31)``),
TensorBoard's "group by input shape" and "by call stack" views."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from ... import schema as S
from .nesting import HostTree
from .python_lines import has_stacks, python_frames
from ...contract.report import OpGroup, OpGroups, OpGroupsByShape, OpGroupsBySource

TOP = 200   # rows kept per grouping, costliest first
NO_STACKS = ("the trace has no Python stacks: record with --profile memory (with_stack) "
             "to group ops by the line that called them")
NO_SHAPES = "the trace has no input shapes (record_shapes off)"
_NUMBERS = (S.CPU_SELF_US, S.CPU_TOTAL_US, S.DEVICE_SELF_US, S.DEVICE_TOTAL_US)


def op_groups(events: pd.DataFrame, tree: HostTree, calls: pd.DataFrame,
              has_device: bool) -> OpGroups:
    """``by_shape`` and ``by_source`` rows ({name, shape or source, calls, cpu_self_us,
    cpu_total_us, device_self_us, device_total_us}, the TOP costliest by the op table's
    ranking column), and ``notes`` saying why a grouping is empty.

    ``calls`` is model.host.ops.op_calls' frame (index: tree position)."""
    rank = S.DEVICE_SELF_US if has_device else S.CPU_SELF_US
    notes = []
    shaped = calls[calls["shape"].notna()]
    if shaped.empty:
        notes.append(NO_SHAPES)
    by_source: list[OpGroupsBySource] = []
    if has_stacks(events):
        pos = calls.index.to_numpy()
        rows = events.loc[tree.rows[pos]]
        frames = python_frames(events, rows[S.PID].to_numpy(), rows[S.TID].to_numpy(),
                               tree.start[pos])
        source = np.array([f"{f[2]} ({f[0]}:{f[1]})" if f else None for f in frames],
                          dtype=object)
        by_source = [{**group, "source": value} for group, value in
                     _grouped(calls.assign(source=source), "source", rank, has_device)]
    else:
        notes.append(NO_STACKS)
    by_shape: list[OpGroupsByShape] = [{**group, "shape": value} for group, value in
                                       _grouped(shaped, "shape", rank, has_device)]
    return {"by_shape": by_shape, "by_source": by_source, "notes": notes}


def _grouped(calls: pd.DataFrame, key: str, rank: str,
             has_device: bool) -> list[tuple[OpGroup, str]]:
    """The TOP costliest (op, ``key``) groups: each its calls and times, and its key's
    value."""
    known = calls[calls[key].notna()]
    if known.empty:
        return []
    agg = known.groupby([S.NAME, key], sort=False).agg(
        calls=(S.NAME, "size"), **{c: (c, "sum") for c in _NUMBERS}).reset_index()
    agg = agg.sort_values([rank, S.CPU_TOTAL_US], ascending=False, kind="stable").head(TOP)
    if not has_device:
        agg[[S.DEVICE_SELF_US, S.DEVICE_TOTAL_US]] = np.nan
    def time(value: float) -> Optional[float]:
        return None if np.isnan(value) else round(float(value), 3)
    return [({S.NAME: r[S.NAME], S.CALLS: int(r[S.CALLS]),
              S.CPU_SELF_US: time(r[S.CPU_SELF_US]), S.CPU_TOTAL_US: time(r[S.CPU_TOTAL_US]),
              S.DEVICE_SELF_US: time(r[S.DEVICE_SELF_US]),
              S.DEVICE_TOTAL_US: time(r[S.DEVICE_TOTAL_US])}, str(r[key]))
            for r in agg.to_dict("records")]
