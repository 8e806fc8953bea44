"""The nsys join: every kernel, copy and runtime call mapped to the op that launched it.

Rules (each attributed row names its rule):

1. kernel/copy -> launching runtime or driver call by ``correlationId`` within the process
   (``globalPid == globalTid & ~0xFFFFFF``, as nsys's own ``nvtx_kern_sum`` does);
2. runtime call -> innermost NVTX push/pop *op* range on the same thread containing it
   (rule ``nvtx_push_pop``). Op ranges are nsbridge's own (domain ``nsbridge``) or
   PyTorch's ``emit_nvtx`` ranges (default domain, ``aten::mm, op_id = 7`` -> ``aten::mm``);
   library domains (CUB's ``CCCL``, ...) are context, never ops.

Kernels whose launch call is not in the capture (``no_launch_in_capture``: normal for a
cut window or graph launches) and launches outside any op range (``outside_op_ranges``) are
kept and counted. Backward ops run on autograd threads: matching is per thread, never by
time alone across threads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from .. import schema as S
from .nesting import build_host_tree, merge_intervals
from .syncs import BLOCKING_CALL

NVTX_PUSH_POP, NO_LAUNCH, OUTSIDE_OPS = "nvtx_push_pop", "no_launch_in_capture", "outside_op_ranges"
_OP_NAME = re.compile(r"^[A-Za-z_][\w.]*::[\w.]+")
_PID_MASK = ~0xFFFFFF


@dataclass
class Timeline:
    """The joined nsys view of one capture."""

    ops: pd.DataFrame          # per op: see op_summary
    gpu: pd.DataFrame          # one row per kernel/copy: kind, name, device, start, dur, op, module, rule
    gaps: list[dict[str, Any]]
    summary: dict[str, Any]


def classify_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """Add ``kind`` (op | module | step | other) and ``op`` (op name or None) to ranges."""
    frame = ranges.copy()
    base = frame["name"].str.split(",", n=1).str[0].str.strip()
    ours = frame["domain"] == S.NVTX_DOMAIN
    op_domain = ours | (frame["domain"] == "")
    is_op = op_domain & base.str.match(_OP_NAME)
    is_step = ours & frame["name"].str.startswith(S.NVTX_STEP_PREFIX)
    kind = np.where(is_op, "op", np.where(is_step, "step", np.where(ours, "module", "other")))
    frame["kind"] = kind
    frame["op"] = base.where(is_op, None)
    return frame


def join(export: Any, top_gaps: int = 10) -> Timeline:
    """Attribute kernels, copies and sync calls to ops; rank GPU idle gaps.

    ``export`` is a parse.nsys_sqlite.NsysExport (frames only; this module does no I/O).
    """
    ranges = classify_ranges(export.ranges[export.ranges["style"] == "push_pop"])
    nest = ranges[ranges["kind"] != "other"].reset_index(drop=True)
    events = pd.DataFrame({
        S.CAT: np.where(nest["kind"] == "op", S.CPU_OP, S.USER_ANNOTATION), S.NAME: nest["name"],
        S.PH: "X", S.PID: "0", S.TID: nest["global_tid"].astype("int64").astype(str),
        S.TS: nest["start"].astype(np.float64), S.DUR: nest["dur"].astype(np.float64)})
    tree = build_host_tree(events)
    kinds = nest["kind"].to_numpy()[tree.rows]
    ops = nest["op"].to_numpy()[tree.rows]
    names = nest["name"].to_numpy()[tree.rows]

    runtime = export.runtime.copy()
    pos = tree.enclosing(pd.Series(["0"] * len(runtime)),
                         runtime["global_tid"].astype("int64").astype(str),
                         runtime["start"].to_numpy(np.float64))
    runtime["op"] = _nearest(tree, pos, kinds, ops, "op")
    runtime["module"] = _nearest(tree, pos, kinds, names, "module")
    runtime["global_pid"] = runtime["global_tid"].astype("int64") & _PID_MASK

    gpu = pd.concat([export.kernels.assign(kind="kernel"),
                     export.memcpy.assign(name=lambda f: "Memcpy " + f["kind"], kind="memcpy"),
                     export.memset.assign(name="Memset", kind="memset")], ignore_index=True)
    gpu = gpu[["kind", "name", "device", "stream", "start", "end", "dur", "correlation",
               "global_pid"]]
    launches = runtime.drop_duplicates(["correlation", "global_pid"])[
        ["correlation", "global_pid", "start", "op", "module"]].rename(
        columns={"start": "launch_start"})
    gpu = gpu.merge(launches, on=["correlation", "global_pid"], how="left")
    gpu["rule"] = np.where(gpu["launch_start"].isna(), NO_LAUNCH,
                           np.where(gpu["op"].isna(), OUTSIDE_OPS, NVTX_PUSH_POP))
    gpu["launch_latency"] = gpu["start"] - gpu["launch_start"]
    gpu = gpu.sort_values(["device", "start"], kind="stable").reset_index(drop=True)
    prev_end = gpu.groupby("device")["end"].transform(lambda e: e.cummax().shift())
    gpu["idle_before"] = (gpu["start"] - prev_end).clip(lower=0).fillna(0)

    syncs = runtime[runtime["name"].str.match(BLOCKING_CALL)]
    op_table = op_summary(ranges, gpu, syncs)
    gaps = idle_gaps(gpu, tree, kinds, ops, names, top_gaps)
    emitted_domain = ranges[ranges["domain"] == S.NVTX_DOMAIN]
    summary = {
        "nsys_version": export.product_version, "schema_version": export.schema_version,
        "ranges": int(len(export.ranges)),
        "op_ranges": int((ranges["kind"] == "op").sum()),
        "module_ranges": int((ranges["kind"] == "module").sum()),
        "nsbridge_ranges": int(len(emitted_domain)),
        "other_domains": sorted(set(ranges.loc[ranges["kind"] == "other", "domain"]) - {""}),
        "kernels": int((gpu["kind"] == "kernel").sum()),
        "copies": int((gpu["kind"] != "kernel").sum()),
        "attribution": {k: int(v) for k, v in gpu["rule"].value_counts().items()},
        "runtime_calls": int(len(runtime)),
        "sync_calls": int(len(syncs)), "sync_us": round(float(syncs["dur"].sum()) / 1e3, 3),
        "osrt_calls": int(len(export.osrt)),
        "gpu_busy_pct": _busy_pct(gpu),
    }
    return Timeline(ops=op_table, gpu=gpu, gaps=gaps, summary=summary)


def op_summary(ranges: pd.DataFrame, gpu: pd.DataFrame, syncs: pd.DataFrame) -> pd.DataFrame:
    """Per op (microseconds): ranges, range_us, kernels, gpu_us, launch_latency_us (mean),
    idle_before_us (GPU idle just before its kernels), sync_us (blocking calls inside it)."""
    op_ranges = ranges[ranges["kind"] == "op"]
    table = op_ranges.groupby("op").agg(ranges=("dur", "size"), range_us=("dur", "sum"))
    kernels = gpu[gpu["op"].notna()]
    by_op = kernels.groupby("op").agg(kernels=("dur", "size"), gpu_us=("dur", "sum"),
                                      launch_latency_us=("launch_latency", "mean"),
                                      idle_before_us=("idle_before", "sum"))
    sync = syncs[syncs["op"].notna()].groupby("op")["dur"].sum().rename("sync_us")
    table = table.join(by_op, how="outer").join(sync, how="left")
    for col in ("range_us", "gpu_us", "launch_latency_us", "idle_before_us", "sync_us"):
        table[col] = table[col] / 1e3
    table[["ranges", "kernels"]] = table[["ranges", "kernels"]].fillna(0).astype(int)
    table[["gpu_us", "idle_before_us", "sync_us"]] = table[
        ["gpu_us", "idle_before_us", "sync_us"]].fillna(0.0)
    table = table.reset_index().rename(columns={"index": "op"})
    return table.sort_values(["gpu_us", "range_us"], ascending=False).reset_index(drop=True)


def idle_gaps(gpu: pd.DataFrame, tree: Any, kinds: np.ndarray, ops: np.ndarray,
              names: np.ndarray, top: int) -> list[dict[str, Any]]:
    """Longest GPU idle stretches between first and last activity, with the host's op,
    module and step (innermost ranges on the busiest thread at the gap's midpoint)."""
    found = []
    for device, group in gpu.groupby("device"):
        s, e = merge_intervals(group["start"].to_numpy(np.float64),
                               group["end"].to_numpy(np.float64))
        for a, b in zip(e[:-1], s[1:]):
            found.append((float(b - a), float(a), int(device)))
    found.sort(reverse=True)
    found = found[:top]
    if not found or len(tree) == 0:
        return [{"device": d, "start_ns": a, "dur_us": round(n / 1e3, 3), "op": None,
                 "module": None, "step": None} for n, a, d in found]
    busiest = int(np.bincount(tree.thread, weights=tree.dur).argmax())
    tid = next(k for k, v in tree.thread_codes.items() if v == busiest).split("/", 1)[1]
    mids = np.array([a + n / 2 for n, a, _ in found])
    pos = tree.enclosing(pd.Series(["0"] * len(mids)), pd.Series([tid] * len(mids)), mids)
    out = []
    for (n, a, d), op, module, step in zip(found, _nearest(tree, pos, kinds, ops, "op"),
                                           _nearest(tree, pos, kinds, names, "module"),
                                           _nearest(tree, pos, kinds, names, "step")):
        out.append({"device": d, "start_ns": a, "dur_us": round(n / 1e3, 3), "op": op,
                    "module": module, "step": step})
    return out


def _nearest(tree: Any, pos: np.ndarray, kinds: np.ndarray, values: np.ndarray,
             kind: str) -> list[Optional[str]]:
    """For each position, the value of the innermost enclosing range of ``kind``."""
    out: list[Optional[str]] = [None] * len(pos)
    for i, p in enumerate(pos):
        while p >= 0 and kinds[p] != kind:
            p = tree.parent[p]
        if p >= 0:
            out[i] = values[p]
    return out


def _busy_pct(gpu: pd.DataFrame) -> Optional[float]:
    if gpu.empty:
        return None
    pcts = []
    for _, group in gpu.groupby("device"):
        s, e = merge_intervals(group["start"].to_numpy(np.float64),
                               group["end"].to_numpy(np.float64))
        span = e.max() - s.min()
        pcts.append(100.0 * (e - s).sum() / span if span > 0 else 100.0)
    return round(float(np.mean(pcts)), 2)
