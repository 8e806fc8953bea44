"""Sync points: where the host waits for the device, with the Python line that asked.

Two sources, merged:

- the profiled process's own records (triage only): `.item()`, `.tolist()`, `.cpu()`,
  `.to("cpu")`, `torch.cuda.synchronize()` with the exact file:line and a call count over
  the whole run;
- the trace (triage and analyze): blocking runtime calls (stream/device/event
  synchronize, synchronous memcpy) and ``aten::_local_scalar_dense`` ops in the measured
  window, with the op they happened in; file:line from the innermost Python frame when
  the trace has stacks (its line is the function's first line, see facts.md).

Trace rows already explained by a process record (same op family) are not repeated.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np
import pandas as pd

from .. import schema as S
from .nesting import HostTree, build_host_tree
from .strings import name_mask

BLOCKING_CALL = re.compile(
    r"^(cuda|hip)(Stream|Device|Event)Synchronize|^cu(Stream|Ctx|Event)Synchronize"
    r"|^(cuda|hip)Memcpy(2D|3D)?(_v\d+)?$|^cuMemcpy(DtoH|HtoD|DtoD)?(_v\d+)?$")
ITEM_OP = "aten::_local_scalar_dense"
_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.*)$")
# ops through which a process-recorded call reaches the device
_COVERED_OPS = {ITEM_OP, "aten::item", "aten::_to_copy", "aten::copy_", "aten::to"}


def trace_sync_points(events: pd.DataFrame, tree: HostTree, lo: float,
                      hi: float) -> pd.DataFrame:
    """Blocking calls and item() ops in [lo, hi).

    Columns: kind, op (innermost host op, None outside ops), top_op, file, line, count,
    cost_us (time the host spent in them).
    """
    in_window = ((events[S.TS] >= lo) & (events[S.TS] < hi)).to_numpy()
    names = events[S.NAME].to_numpy()
    cats = events[S.CAT].to_numpy()
    launch = events[np.isin(cats, S.LAUNCH_CATS) & in_window
                    & name_mask(names, BLOCKING_CALL.match)]
    items = events[(cats == S.CPU_OP) & in_window & name_mask(names, ITEM_OP.__eq__)]
    frames = pd.concat([launch.assign(kind=launch[S.NAME].str.replace(r"_v\d+$", "", regex=True)),
                        items.assign(kind="item")])
    if frames.empty:
        return pd.DataFrame(columns=["kind", "op", "top_op", "file", "line", "count", "cost_us"])
    probe = frames[S.TS].to_numpy(np.float64) + np.minimum(frames[S.DUR].to_numpy(), 1e-3)
    pos = tree.enclosing(frames[S.PID], frames[S.TID], probe)
    host_names = events.loc[tree.rows, S.NAME].to_numpy()
    op, top = [], []
    for p, kind in zip(pos, frames["kind"]):
        if p >= 0 and kind == "item" and host_names[p] == ITEM_OP:
            p = tree.parent[p]  # the item op itself: report its caller
        chain = []
        while p >= 0:
            chain.append(str(host_names[p]))
            p = tree.parent[p]
        chain = [c for c in chain if not c.startswith(S.PROFILER_STEP_PREFIX)]
        op.append(chain[0] if chain else None)
        top.append(chain[-1] if chain else None)
    files, lines = _python_lines(events, frames, probe)
    table = pd.DataFrame({"kind": frames["kind"].to_numpy(), "op": op, "top_op": top,
                          "file": files, "line": lines, "cost_us": frames[S.DUR].to_numpy()})
    keys = ["kind", "op", "top_op", "file", "line"]
    table = table.fillna({"file": "", "line": -1, "op": "", "top_op": ""})
    agg = table.groupby(keys, sort=False).agg(count=("cost_us", "size"),
                                             cost_us=("cost_us", "sum")).reset_index()
    agg = agg.replace({"file": {"": None}, "op": {"": None}, "top_op": {"": None}})
    agg["line"] = agg["line"].where(agg["line"] >= 0, None)
    return agg.sort_values("cost_us", ascending=False).reset_index(drop=True)


def merge_sync_points(process_records: Optional[list[dict[str, Any]]], trace_points: pd.DataFrame,
                      n_steps: int, device_run: bool,
                      run_steps: Optional[int] = None) -> list[dict[str, Any]]:
    """The report's ``sync_points``: one dict per call site, costliest first.

    Each: kind, op, file, line, count, per_step, cost_ms, device, source. ``count`` is over
    the whole run (``run_steps`` steps) for process records and over the measured window
    (``n_steps`` steps) for trace rows.
    """
    out: list[dict[str, Any]] = []
    covered = False
    for rec in process_records or []:
        if device_run and rec["device"] == "cpu":
            continue  # a CPU tensor's .item() does not wait for the GPU
        covered = True
        out.append({"kind": rec["kind"], "op": rec["op"], "file": rec["file"],
                    "line": rec["line"], "count": rec["count"],
                    "per_step": round(rec["count"] / max(run_steps or rec["steps"], 1), 2),
                    "cost_ms": round(rec["cost_ms"], 3), "device": rec["device"],
                    "source": "nsbridge (in-process)"})
    for row in trace_points.itertuples(index=False):
        if covered and (row.op in _COVERED_OPS or row.kind == "item"
                        or (row.kind == "cudaDeviceSynchronize" and row.op is None)):
            continue
        out.append({"kind": row.kind, "op": row.op, "file": row.file,
                    "line": None if row.line is None or pd.isna(row.line) else int(row.line),
                    "count": int(row.count), "per_step": round(row.count / max(n_steps, 1), 2),
                    "cost_ms": round(float(row.cost_us) / 1e3, 3),
                    "device": "cuda" if device_run else "cpu", "source": "torch.profiler trace"})
    return sorted(out, key=lambda r: (-r["cost_ms"], -r["count"]))


def _python_lines(events: pd.DataFrame, frames: pd.DataFrame,
                  probe: np.ndarray) -> tuple[list, list]:
    """file, line of the innermost python_function around each point (trace with stacks)."""
    none = [None] * len(frames)
    if not (events[S.CAT] == S.PYTHON_FUNCTION).any():
        return none, none
    py = build_host_tree(events, (S.PYTHON_FUNCTION,))
    pos = py.enclosing(frames[S.PID], frames[S.TID], probe)
    names = events.loc[py.rows, S.NAME].to_numpy()
    files, lines = [], []
    for p in pos:
        match = _FRAME.match(str(names[p])) if p >= 0 else None
        while match and p >= 0 and ("site-packages" in match["file"] or "torch/" in match["file"]
                                    or match["file"].startswith("<")):
            p = py.parent[p]
            match = _FRAME.match(str(names[p])) if p >= 0 else None
        files.append(match["file"] if match else None)
        lines.append(int(match["line"]) if match else None)
    return files, lines
