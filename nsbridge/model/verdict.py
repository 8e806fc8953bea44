"""The verdict: what bounds the run, with the numbers that justify it.

Checked in this order, first match wins:

1. ``input-bound``: data loading takes >= ``input_bound_share`` of step time.
2. ``sync-bound``: on a GPU run, the host spends >= ``sync_bound_share`` of step time in
   blocking calls; on a CPU-only run (where nothing really waits) a training loop making
   >= ``sync_calls_per_step`` sync calls per step, each of which would drain the GPU queue.
3. GPU runs: ``gpu-bound`` when the device is busy >= ``gpu_bound_busy`` of the window,
   else ``cpu-bound`` (the host cannot feed the device: launch or Python overhead).
4. CPU-only runs: ``cpu-bound``; the report says what a CPU run cannot tell.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ..profiles import Analysis


def decide(*, breakdown: pd.DataFrame, busy: pd.DataFrame, sync_points: list[dict[str, Any]],
           trace_sync_us: float, ops: pd.DataFrame, has_device: bool, kernels_per_step: float,
           median_kernel_us: Optional[float], thresholds: Analysis) -> dict[str, Any]:
    """Return {label, evidence: [str], numbers: {...}, cannot_conclude: [str]}."""
    wall = float(breakdown["wall_ms"].mean()) if len(breakdown) else 0.0
    data = float(breakdown["data_ms"].mean()) if len(breakdown) else 0.0
    n_steps = max(len(breakdown), 1)
    data_share = data / wall if wall > 0 else 0.0
    sync_share = (trace_sync_us / 1e3 / n_steps) / wall if wall > 0 else 0.0
    calls_per_step = sum(p["per_step"] for p in sync_points)
    busy_pct = float(busy["busy_pct"].mean()) if has_device and len(busy) else None
    numbers = {"step_ms": round(wall, 3), "data_share": round(data_share, 4),
               "sync_share": round(sync_share, 4), "sync_calls_per_step": round(calls_per_step, 2),
               "device_busy_pct": None if busy_pct is None else round(busy_pct, 2)}
    evidence: list[str] = []
    cannot: list[str] = []
    top_sync = sync_points[0] if sync_points else None

    if data_share >= thresholds.input_bound_share:
        label = "input-bound"
        evidence.append(f"data loading takes {data_share:.0%} of each step "
                        f"({data:.2f} ms of {wall:.2f} ms on average)")
    elif has_device and sync_share >= thresholds.sync_bound_share:
        label = "sync-bound"
        evidence.append(f"the host waits in blocking sync calls for {sync_share:.0%} of each "
                        f"step ({trace_sync_us / 1e3 / n_steps:.2f} ms of {wall:.2f} ms)")
    elif not has_device and calls_per_step >= thresholds.sync_calls_per_step:
        label = "sync-bound"
        evidence.append(f"{calls_per_step:.0f} host-device sync calls per step; on a GPU each "
                        "one blocks the host until every queued kernel has finished")
        cannot.append("how long each sync would stall on a GPU: this CPU-only run measures "
                      "only the calls' host cost")
    elif has_device:
        if busy_pct is not None and busy_pct >= 100 * thresholds.gpu_bound_busy:
            label = "gpu-bound"
            evidence.append(f"the GPU is busy {busy_pct:.0f}% of the measured window")
            evidence.extend(_top_ops_line(ops, "device_self_us", "of GPU time"))
        else:
            label = "cpu-bound"
            evidence.append(f"the GPU is busy only {busy_pct or 0:.0f}% of the measured window: "
                            "the host does not issue work fast enough")
            if median_kernel_us is not None:
                evidence.append(f"{kernels_per_step:.0f} kernels per step, median "
                                f"{median_kernel_us:.1f} µs each: launch overhead dominates "
                                "short kernels")
    else:
        label = "cpu-bound"
        evidence.append(f"no GPU in this run: all {wall:.2f} ms of a step is host time")
        evidence.extend(_top_ops_line(ops, "cpu_self_us", "of CPU self time"))
        cannot.append("whether the script would be GPU-bound or launch-bound on a GPU: "
                      "run it on one (nsbridge triage picks CUDA up automatically)")
    if top_sync and label != "sync-bound":
        evidence.append(f"{len(sync_points)} sync point(s); the costliest is {top_sync['kind']} at "
                        f"{_where(top_sync)} ({top_sync['per_step']:g} per step)")
    elif top_sync:
        evidence.append(f"costliest: {top_sync['kind']} at {_where(top_sync)}, "
                        f"{top_sync['per_step']:g} per step, {top_sync['count']} in all")
    if len(breakdown) == 1 and int(breakdown["step"].iloc[0]) < 0:
        cannot.append("per-step figures: no training steps were detected, so the whole "
                      "recording is treated as one step")
    return {"label": label, "evidence": evidence, "numbers": numbers, "cannot_conclude": cannot}


def _top_ops_line(ops: pd.DataFrame, col: str, what: str) -> list[str]:
    if ops.empty or ops[col].isna().all():
        return []
    head = ops.head(3)
    parts = [f"{n} {p:.0f}%" for n, p in zip(head["name"], head["self_pct"])]
    return [f"top ops: {', '.join(parts)} {what}"]


def _where(point: dict[str, Any]) -> str:
    if point.get("file"):
        return f"{point['file']}:{point['line']}"
    return point.get("op") or "an unknown line"
