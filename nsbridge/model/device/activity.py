"""GPU activity over the measured window: busy share, idle gaps and their host context, copies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ... import schema as S
from .attribution import LAUNCHED_BEFORE_WINDOW
from ..host.nesting import HostTree, clipped_union, longest_gaps
from ..strings import first_and_distinct, per_value, row_groups
from ...contract.report import DeviceCopy, DeviceIdleGap, DeviceLaunchedBeforeWindow, DeviceWork


def busy_by_device(gpu: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
    """Per device: busy_us (union of kernels, copies, memsets in [lo, hi]), busy_pct, kernels."""
    rows = []
    for device, group in gpu.groupby("device", sort=True):
        start = group["ts"].to_numpy(np.float64)
        busy = clipped_union(start, start + group["dur"].to_numpy(np.float64), lo, hi)
        rows.append({"device": int(device), "busy_us": busy,
                     "busy_pct": 100.0 * busy / (hi - lo) if hi > lo else 0.0,
                     "kernels": int((group["cat"] == S.KERNEL).sum())})
    return pd.DataFrame(rows, columns=["device", "busy_us", "busy_pct", "kernels"])


def idle_gaps(gpu: pd.DataFrame, lo: float, hi: float, events: pd.DataFrame, tree: HostTree,
              main_thread: int, top: int) -> list[DeviceIdleGap]:
    """The longest stretches in [lo, hi] with no GPU activity on a device, longest first.

    Each gap says what the training thread was doing at its midpoint: the innermost host
    op there (``host_op``) and its top-level op (``host_top_op``); None means Python code
    between ops.
    """
    start = gpu["ts"].to_numpy(np.float64)
    gaps = longest_gaps(gpu["device"].to_numpy(), start, start + gpu["dur"].to_numpy(np.float64),
                        top, lo, hi)
    if not gaps:
        return []
    mids = np.array([a + n / 2 for n, a, _ in gaps])
    names = tree.name_values
    thread_key = next((k for k, v in tree.thread_codes.items() if v == main_thread), None)
    if thread_key is None:
        pos = np.full(len(mids), -1)
    else:
        pid, tid = thread_key.split("/", 1)
        pos = tree.enclosing(pd.Series([pid] * len(mids)), pd.Series([tid] * len(mids)), mids)
    out: list[DeviceIdleGap] = []
    for (n, a, device), p in zip(gaps, pos):
        top_pos = p
        while top_pos >= 0 and tree.parent[top_pos] >= 0 and not str(
                names[tree.parent[top_pos]]).startswith(S.PROFILER_STEP_PREFIX):
            top_pos = tree.parent[top_pos]
        host = None if p < 0 or str(names[p]).startswith(S.PROFILER_STEP_PREFIX) else str(names[p])
        host_top = None if host is None else str(names[top_pos])
        out.append({"device": device, "start_us": round(a - lo, 3), "dur_us": round(n, 3),
                    "host_op": host, "host_top_op": host_top})
    return out


def copies(gpu: pd.DataFrame) -> list[DeviceCopy]:
    """Memcpy/memset totals by kind and direction (e.g. 'Memcpy HtoD (Pageable -> Device)')."""
    moves = gpu[gpu["cat"].isin([S.MEMCPY, S.MEMSET])]
    if moves.empty:
        return []
    agg = moves.groupby("name").agg(n=("dur", "size"), total_us=("dur", "sum"),
                                    total_bytes=("bytes", "sum")).reset_index()
    agg = agg.sort_values("total_us", ascending=False)
    return [{"name": name, "count": int(n), "total_us": round(float(t), 3),
             "bytes": None if np.isnan(b) else int(b)}
            for name, n, t, b in zip(agg["name"], agg["n"], agg["total_us"], agg["total_bytes"])]


def launched_before_window(gpu: pd.DataFrame) -> DeviceLaunchedBeforeWindow:
    """GPU events in the window whose launch came before it: counts and GPU time by kind."""
    early = gpu[gpu["rule"] == LAUNCHED_BEFORE_WINDOW]
    kernels, copied, memsets = (early[early["cat"] == cat]
                                for cat in (S.KERNEL, S.MEMCPY, S.MEMSET))
    out: DeviceLaunchedBeforeWindow = {
        "kernels": int(len(kernels)), "kernel_us": round(float(kernels["dur"].sum()), 3),
        "copies": int(len(copied)), "copy_us": round(float(copied["dur"].sum()), 3),
        "memsets": int(len(memsets)), "memset_us": round(float(memsets["dur"].sum()), 3)}
    out["explanation"] = (
        "launched before the measured window opened (no launch call in the trace): the GPU "
        "runs behind the host, so work queued in the previous step still runs inside the "
        "window. Counted in the device's busy time, left out of every op's totals.")
    return out


_KINDS = {S.KERNEL: "kernel", S.MEMCPY: "memcpy", S.MEMSET: "memset"}


def gpu_work(gpu: pd.DataFrame, op_names: np.ndarray) -> list[DeviceWork]:
    """Every kernel, copy and memset of the window by (name, op): kind, name, op (None when
    no op launched it), attribution (the rule: external_id, launch_containment,
    outside_ops, launched_before_window), via (cuda_graph or None), source (a Triton
    kernel's generated file or None), calls, device_us, bytes (copies and memsets), launch
    (a kernel's first launch configuration in the trace, or None) and launch_configs (how
    many different ones it had)."""
    if gpu.empty:
        return []
    pos = gpu["op_pos"].to_numpy()
    keys = {"kind": per_value(gpu["cat"], lambda c: _KINDS.get(c, c)),
            "name": gpu["name"].astype(str).to_numpy(),
            "op": np.where(pos >= 0, op_names[np.maximum(pos, 0)] if len(op_names) else "",
                           ""),
            "attribution": gpu["rule"].to_numpy(), "via": gpu["via"].fillna("").to_numpy(),
            "source": gpu["source"].fillna("").to_numpy()}
    keys["op"] = np.where(pd.isna(keys["op"]), "", keys["op"]).astype(object)
    groups, firsts = row_groups(*keys.values())   # integer keys: no string hashed per row
    frame = pd.DataFrame({"dur": gpu["dur"].to_numpy(np.float64),
                          "bytes": gpu["bytes"].to_numpy(np.float64)}, copy=False)
    agg = frame.groupby(groups, sort=False).agg(
        calls=("dur", "size"), device_us=("dur", "sum"), bytes=("bytes", "sum"),
        has_bytes=("bytes", "count")).reset_index(drop=True)
    agg["launch"], agg["launch_configs"] = first_and_distinct(gpu["launch"].to_numpy(),
                                                              groups, len(agg))
    for key, values in keys.items():
        agg[key] = values[firsts]
    agg = agg.sort_values("device_us", ascending=False, kind="stable")
    return [{"kind": r.kind, "name": r.name, "op": r.op or None, "attribution": r.attribution,
             "via": r.via or None, "source": r.source or None, "calls": int(r.calls),
             "device_us": round(float(r.device_us), 3),
             "bytes": int(r.bytes) if r.has_bytes and r.kind != "kernel" else None,
             "launch": r.launch if isinstance(r.launch, str) else None,
             "launch_configs": int(r.launch_configs)}
            for r in agg.itertuples(index=False)]
