"""The verdict: what bounds the run, with the numbers that justify it.

Checked in this order, first match wins:

1. ``input-bound``: data loading takes >= ``input_bound_share`` of step time.
2. ``gpu-bound``: the device is busy >= ``gpu_bound_busy`` of the window, whatever syncs
   there are (on a GPU-bound run the host always waits somewhere: waiting is the symptom).
3. ``sync-bound``: >= ``sync_calls_per_step`` syncs per step, or (GPU runs) the GPU idles
   after syncs for >= ``sync_bound_share`` of the step (model.syncs defines the cost).
4. ``cpu-bound``: the host cannot feed the device (launch or Python overhead); on a
   CPU-only run, the whole step is host time and the report says what it cannot tell.

Syncs that do not decide the verdict are still named as a secondary finding.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ..profiles import Analysis
from .syncs import SyncCost


def decide(*, breakdown: pd.DataFrame, busy_pct: Optional[float], cost: SyncCost,
           sync_points: list[dict[str, Any]], ops: pd.DataFrame, has_device: bool,
           kernels_per_step: float, median_kernel_us: Optional[float],
           thresholds: Analysis) -> dict[str, Any]:
    """Return {label, evidence: [str], numbers: {...}, cannot_conclude: [str]}."""
    wall = float(breakdown["wall_ms"].mean()) if len(breakdown) else 0.0
    data = float(breakdown["data_ms"].mean()) if len(breakdown) else 0.0
    data_share = data / wall if wall > 0 else 0.0
    numbers = {"step_ms": round(wall, 3), "data_share": round(data_share, 4),
               "sync_calls_per_step": round(cost.calls_per_step, 2),
               "sync_blocked_ms_per_step": _round(cost.blocked_ms),
               "sync_blocked_share": _round(cost.blocked_share, 4),
               "sync_gpu_idle_ms_per_step": _round(cost.gpu_idle_ms),
               "sync_gpu_idle_share": _round(cost.idle_share, 4),
               "device_busy_pct": _round(busy_pct, 2)}
    evidence: list[str] = []
    cannot: list[str] = []
    busy = busy_pct if has_device and busy_pct is not None else None
    many_syncs = cost.calls_per_step >= thresholds.sync_calls_per_step
    idle_share = cost.idle_share or 0.0

    if data_share >= thresholds.input_bound_share:
        label = "input-bound"
        evidence.append(f"data loading takes {data_share:.0%} of each step "
                        f"({data:.2f} ms of {wall:.2f} ms on average)")
    elif busy is not None and busy >= 100 * thresholds.gpu_bound_busy:
        label = "gpu-bound"
        evidence.append(f"the GPU is busy {busy:.0f}% of the measured window")
        evidence.extend(_top_ops_line(ops, "device_self_us", "of GPU time"))
    elif many_syncs or idle_share >= thresholds.sync_bound_share:
        label = "sync-bound"
        evidence.extend(_sync_lines(cost, wall))
        if not has_device:
            cannot.append("how long each sync would stall on a GPU: this CPU-only run "
                          "measures only the calls' host cost")
    elif has_device:
        label = "cpu-bound"
        evidence.append(f"the GPU is busy only {busy or 0:.0f}% of the measured window: "
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
    top = sync_points[0] if sync_points else None
    if top and label == "sync-bound":
        evidence.append(f"costliest: {_describe(top)}")
    elif top:
        evidence.append(f"secondary: {len(sync_points)} sync point(s), "
                        f"{cost.calls_per_step:.2g} per step"
                        + (f" (GPU idle after them {idle_share:.0%} of the step)"
                           if cost.gpu_idle_ms is not None else "")
                        + f"; the costliest is {_describe(top)}")
    if len(breakdown) == 1 and int(breakdown["step"].iloc[0]) < 0:
        cannot.append("per-step figures: no training steps were detected, so the whole "
                      "recording is treated as one step")
    return {"label": label, "evidence": evidence, "numbers": numbers, "cannot_conclude": cannot}


def _sync_lines(cost: SyncCost, wall: float) -> list[str]:
    if cost.gpu_idle_ms is None:
        return [f"{cost.calls_per_step:.0f} host-device sync calls per step; on a GPU each one "
                "blocks the host until every queued kernel has finished"]
    return [f"{cost.calls_per_step:.0f} host-device syncs per step; each drains the GPU's "
            "queue, so the GPU idles while the host prepares the next launches",
            f"the GPU sits idle after syncs {cost.gpu_idle_ms:.2f} ms per step "
            f"({cost.idle_share or 0:.0%} of the {wall:.2f} ms step) and the host is blocked "
            f"in them {cost.blocked_ms:.2f} ms per step ({cost.blocked_share or 0:.0%})"]


def _describe(point: dict[str, Any]) -> str:
    where = (f"at {point['file']}:{point['line']}" if point.get("file")
             else f"in {point['op']}" if point.get("op") else "outside any op")
    text = f"{point['kind']} {where}, {point['per_step']:g} per step"
    if point["counted_over"] == "whole run":
        text += f" ({point['count']} over the whole run)"
    if point.get("gpu_idle_ms") is not None:
        text += (f", host blocked {point['host_ms']:.2f} ms and GPU idle "
                 f"{point['gpu_idle_ms']:.2f} ms over the measured steps")
    return text


def _top_ops_line(ops: pd.DataFrame, col: str, what: str) -> list[str]:
    if ops.empty or ops[col].isna().all():
        return []
    head = ops.head(3)
    parts = [f"{n} {p:.0f}%" for n, p in zip(head["name"], head["self_pct"])]
    return [f"top ops: {', '.join(parts)} {what}"]


def _round(value: Optional[float], digits: int = 3) -> Optional[float]:
    return None if value is None else round(float(value), digits)
