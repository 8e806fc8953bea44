"""The verdict: what bounds the run, with the numbers that justify it.

Checked in this order, first match wins:

1. ``input-bound``: data loading takes >= ``input_bound_share`` of step time.
2. ``gpu-bound``: the device is busy >= ``gpu_bound_busy`` of the window, whatever syncs
   there are (on a GPU-bound run the host always waits somewhere: waiting is the symptom).
3. ``sync-bound``: on GPU runs, where the cost is measured, the GPU idles after syncs for
   >= ``sync_bound_share`` of the step and that is at least half of all its idle time
   (model.host.syncs defines the cost; a GPU idle for other reasons is not starved by syncs);
   on CPU-only runs, which cannot measure it, >= ``sync_calls_per_step`` syncs per step
   with at most ``sync_max_ops_between`` host ops between two of them on average (an LBFGS
   step printing the loss in each of its 20 closures runs thousands of ops between
   syncs: a GPU would stay busy through them).
   A window without steps is judged on shares only (data, busy, idle after syncs): a
   count of calls over a whole window says nothing per iteration.
4. ``cpu-bound``: the host cannot feed the device (launch or Python overhead); on a
   CPU-only run, the whole step is host time and the report says what it cannot tell.

Syncs that do not decide the verdict are still named as a secondary finding.

``qualify`` then says how sure the verdict is. The data share is judged with its 95%
interval over the measured steps (hierarchical over processes when ``triage --runs``
pooled several); every label the ladder above gives anywhere in that interval is an
alternative. On a contended machine (model.judging.contention) the host's compute is inflated by
the time its threads waited for a CPU, so the label the ladder gives with that wait taken
out of the step (the threads' summed wait divided by torch's intra-op threads) is an
alternative too. Confidence is ``low`` with an alternative or
contention, ``medium`` with fewer than three measured steps, else ``high``; ``settle``
says what would decide it.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from ... import schema as S
from ...profiles import Analysis
from ..stats import LEVEL, resample_indices
from ..host.syncs import SyncCost
from ...contract.report import Machine, SyncPoint, Verdict, VerdictAlternative, VerdictNumbers

MIN_STEPS = 3


STEPS_ASKED_AWAY = "the trace has steps: leave --window trace off for per-step figures"


def decide(*, breakdown: pd.DataFrame, busy_pct: Optional[float], cost: SyncCost,
           sync_points: list[SyncPoint], ops: pd.DataFrame, has_device: bool,
           kernels_per_step: float, median_kernel_us: Optional[float],
           thresholds: Analysis, seconds: Optional[float] = None,
           host_ops_per_step: Optional[float] = None,
           steps_in_trace: bool = False) -> Verdict:
    """Return {label, evidence: [str], numbers: {...}, cannot_conclude: [str]}.

    ``seconds``: the length of a window without steps (None when there are steps);
    ``steps_in_trace``: the trace has steps, but one window over it all was asked for;
    ``host_ops_per_step``: the host ops of a step, against which CPU-only syncs are counted."""
    wall = float(breakdown["wall_ms"].mean()) if len(breakdown) else 0.0
    data = float(breakdown["data_ms"].mean()) if len(breakdown) else 0.0
    data_share = data / wall if wall > 0 else 0.0
    numbers: VerdictNumbers = {"step_ms": round(wall, 3), "data_share": round(data_share, 4),
               "sync_calls_per_step": round(cost.calls_per_step, 2),
               "sync_blocked_ms_per_step": _round(cost.blocked_ms),
               "sync_blocked_share": _round(cost.blocked_share, 4),
               "sync_gpu_idle_ms_per_step": _round(cost.gpu_idle_ms),
               "sync_gpu_idle_share": _round(cost.idle_share, 4),
               "device_busy_pct": _round(busy_pct, 2)}
    evidence: list[str] = []
    cannot: list[str] = []
    busy = busy_pct if has_device and busy_pct is not None else None
    stepless = seconds is not None
    ops_between = (host_ops_per_step / cost.calls_per_step
                   if host_ops_per_step is not None and cost.calls_per_step else None)
    many_syncs = (not stepless and not has_device
                  and cost.calls_per_step >= thresholds.sync_calls_per_step
                  and (ops_between is None or ops_between <= thresholds.sync_max_ops_between))
    numbers["host_ops_per_sync"] = _round(ops_between, 1)
    numbers["syncs_decide"] = many_syncs
    idle_share = sync_idle_share(cost.idle_share, busy)
    unit = "of the window" if stepless else "of each step"
    if seconds is not None:
        numbers.update({"sync_calls_per_step": None, "sync_blocked_ms_per_step": None,
                        "sync_gpu_idle_ms_per_step": None, "window_s": round(seconds, 3),
                        "sync_calls": round(cost.calls_per_step, 0)})

    label = label_for(data_share=data_share, busy=busy, many_syncs=many_syncs,
                      idle_share=idle_share, thresholds=thresholds)
    if label == "input-bound":
        evidence.append(f"data loading takes {data_share:.0%} {unit} "
                        f"({data:.2f} ms of {wall:.2f} ms"
                        + (")" if stepless else " on average)"))
    elif label == "gpu-bound":
        evidence.append(f"the GPU is busy {busy:.0f}% of the measured window")
        evidence.extend(_top_ops_line(ops, S.DEVICE_SELF_US, "of GPU time"))
    elif label == "sync-bound":
        evidence.extend(_sync_lines(cost, wall, seconds))
        if not has_device:
            cannot.append("how long each sync would stall on a GPU: this CPU-only run "
                          "measures only the calls' host cost")
    elif has_device:
        evidence.append(f"the GPU is busy only {busy or 0:.0f}% of the measured window: "
                        "the host does not issue work fast enough")
        if median_kernel_us is not None and not stepless:
            evidence.append(f"{kernels_per_step:.0f} kernels per step, median "
                            f"{median_kernel_us:.1f} µs each: launch overhead dominates "
                            "short kernels")
    else:
        evidence.append(f"no GPU in this run: all {wall:.2f} ms of "
                        + ("the window" if stepless else "the mean step") + " is host time")
        evidence.extend(_top_ops_line(ops, S.CPU_SELF_US, "of CPU self time"))
        cannot.append("whether the script would be GPU-bound or launch-bound on a GPU: "
                      "run it on one (nsbridge triage picks CUDA up automatically)")
    top = sync_points[0] if sync_points else None
    if top and label == "sync-bound":
        evidence.append(f"costliest: {_describe(top)}")
    elif top and stepless:
        evidence.append(f"secondary: {len(sync_points)} sync point(s) in the window"
                        + (f" (GPU idle after them {cost.idle_share or 0.0:.0%} of it)"
                           if cost.gpu_idle_ms is not None else "")
                        + f"; the costliest is {_describe(top)}")
    elif top and top.get("placement") == "outside":   # the steps have none: sorted first
        evidence.append(f"no sync point in the training steps; {len(sync_points)} outside "
                        f"them: {_describe(top)}")
    elif top:
        evidence.append(f"secondary: {len(sync_points)} sync point(s), "
                        f"{_per_step(cost.calls_per_step)} per step"
                        + (f" (GPU idle after them {cost.idle_share or 0.0:.0%} of the step)"
                           if cost.gpu_idle_ms is not None else "")
                        + f"; the costliest is {_describe(top)}")
    if stepless:
        cannot.append(f"per-step figures: no training steps in this window ({seconds:.2f} s); "
                      "figures are totals and rates per second, and syncs are judged by the "
                      "GPU idle time they cause, never by their count ("
                      + (STEPS_ASKED_AWAY if steps_in_trace else "mark steps with "
                         "nsbridge.step()") + ")")
    return {"label": label, "evidence": evidence, "numbers": numbers, "cannot_conclude": cannot}


def sync_idle_share(idle_share: Optional[float], busy_pct: Optional[float]) -> float:
    """The GPU idle share after syncs that can make a run sync-bound: all of it when it is
    at least half of the GPU's idle time in the window, else none."""
    share = idle_share or 0.0
    idle = 1.0 - (busy_pct or 0.0) / 100.0
    return share if share >= 0.5 * idle else 0.0


def label_for(*, data_share: float, busy: Optional[float], many_syncs: bool, idle_share: float,
              thresholds: Analysis) -> str:
    """The ladder of the module docstring: first match wins."""
    if data_share >= thresholds.input_bound_share:
        return "input-bound"
    if busy is not None and busy >= 100 * thresholds.gpu_bound_busy:
        return "gpu-bound"
    if many_syncs or idle_share >= thresholds.sync_bound_share:
        return "sync-bound"
    return "cpu-bound"


def qualify(verdict: Verdict, *, breakdown: pd.DataFrame, thresholds: Analysis,
            machine: Optional[Machine] = None,
            steps_in_trace: bool = False) -> Verdict:
    """The verdict with confidence, confidence_reasons, alternatives[], contention and
    settle (see the module docstring). ``breakdown`` may carry a ``run`` column (pooled
    processes); ``machine`` is model.judging.contention.machine_facts (None: not measured);
    ``steps_in_trace`` as for decide."""
    numbers: VerdictNumbers = verdict.get("numbers") or {}
    label = verdict["label"]
    contention = (machine or {}).get("contention")
    wait_ms_per_step = ((machine or {}).get("measured_steps") or {}).get("wait_ms_per_step")
    busy = numbers.get("device_busy_pct")
    idle_share = sync_idle_share(numbers.get("sync_gpu_idle_share"), busy)
    many_syncs = bool(numbers.get("syncs_decide"))
    again = lambda share: label_for(data_share=share, thresholds=thresholds,  # noqa: E731
                                    busy=busy, idle_share=idle_share, many_syncs=many_syncs)
    n = len(breakdown)
    whole_run = n == 1 and int(breakdown["step"].iloc[0]) < 0
    alternatives: list[VerdictAlternative] = []
    reasons: list[str] = []

    def consider(share: float, why: str) -> None:
        other = again(share)
        if other != label and other not in [a.get("label") for a in alternatives]:
            alternatives.append({"label": other, "why": why})

    low, high = data_share_interval(breakdown)
    if low is not None and high is not None:
        numbers["data_share_ci"] = [round(low, 4), round(high, 4)]
        for end in (low, high):
            consider(end, f"data loading is {numbers.get('data_share') or 0.0:.0%} of the "
                          "step, 95% "
                          f"interval {low:.0%}-{high:.0%} over {n} steps, and the "
                          f"{thresholds.input_bound_share:.0%} line that separates them lies "
                          "inside it")
    contended = bool(contention and contention.get("contended"))
    if contended:
        reasons.append("the machine was contended")
        step = numbers.get("step_ms") or 0.0
        data = (numbers.get("data_share") or 0.0) * step
        threads = max(int(((machine or {}).get("threads") or {}).get("intra_op") or 1), 1)
        if wait_ms_per_step and step > 0:   # summed over threads: about 1/threads of it on
            unwaited = max(step - wait_ms_per_step / threads, data, 1e-9)   # the clock
            consider(data / unwaited, f"with the {wait_ms_per_step:.1f} ms per step its "
                                      "threads waited for a CPU taken out, data loading would "
                                      f"be {min(data / unwaited, 1.0):.0%} of the step")
    if alternatives:
        reasons.append("the data cannot tell " + " from ".join(
            [label, *(str(a.get("label")) for a in alternatives)]))
    if whole_run:
        reasons.append("no training steps: one window without per-step spread")
    elif n < MIN_STEPS:
        reasons.append(f"only {n} measured step(s)")
    confidence = ("low" if contended or alternatives else
                  "medium" if whole_run or n < MIN_STEPS else "high")
    settle = []
    if confidence != "high":
        if whole_run:
            settle.append(STEPS_ASKED_AWAY if steps_in_trace else
                          "steps marked with nsbridge.step() at the end of each iteration")
        elif n < 10:
            settle.append("more measured steps (nsbridge triage --steps 10)")
        settle.append("several processes pooled (nsbridge triage --runs 5)")
        if contended:
            intra_op = ((machine or {}).get("threads") or {}).get("intra_op")
            settle.append("a quieter machine" + ("" if intra_op == 1 else
                                                 ", or one thread on this one (nsbridge "
                                                 "triage --threads 1)"))
    verdict.update({"confidence": confidence, "confidence_reasons": reasons,
                    "alternatives": alternatives,
                    "contention": (contention or {}).get("evidence") if contended else None,
                    "settle": settle})
    return verdict


def data_share_interval(breakdown: pd.DataFrame) -> tuple[Optional[float], Optional[float]]:
    """95% bootstrap interval of data time / wall time over the steps (ratio of means, as
    the verdict computes it); hierarchical over the ``run`` column when present."""
    if len(breakdown) < 2:
        return None, None
    data = breakdown["data_ms"].to_numpy(np.float64)
    wall = breakdown["wall_ms"].to_numpy(np.float64)
    groups = breakdown["run"].to_numpy() if "run" in breakdown else None
    idx = resample_indices(len(data), groups)
    walls = wall[idx].sum(axis=1)
    shares = np.divide(data[idx].sum(axis=1), walls, out=np.zeros(len(idx)), where=walls > 0)
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(shares, [tail, 100 - tail])
    return float(low), float(high)


def _sync_lines(cost: SyncCost, wall: float, seconds: Optional[float] = None) -> list[str]:
    if seconds is not None:
        return [f"{cost.calls_per_step:.0f} host-device syncs in the {seconds:.2f} s window "
                f"({cost.calls_per_step / seconds:.1f} per second); the GPU sits idle after "
                f"them {cost.gpu_idle_ms or 0:.2f} ms ({cost.idle_share or 0:.0%} of the "
                f"window) and the host is blocked in them {cost.blocked_ms or 0:.2f} ms"]
    if cost.gpu_idle_ms is None:
        return [f"{_per_step(cost.calls_per_step)} host-device sync calls per step; on a GPU "
                "each one blocks the host until every queued kernel has finished"]
    return [f"{_per_step(cost.calls_per_step)} host-device syncs per step; each drains the GPU's "
            "queue, so the GPU idles while the host prepares the next launches",
            f"the GPU sits idle after syncs {cost.gpu_idle_ms:.2f} ms per step "
            f"({cost.idle_share or 0:.0%} of the {wall:.2f} ms step) and the host is blocked "
            f"in them {cost.blocked_ms:.2f} ms per step ({cost.blocked_share or 0:.0%})"]


def _per_step(count: float) -> str:
    """A count per step as people write it: 129, 12, 2.3, 0.19 (two significant digits
    below ten, whole numbers above; a sync every few steps is not 0)."""
    return f"{count:.0f}" if count >= 10 else f"{float(f'{count:.2g}'):g}"


def _describe(point: SyncPoint) -> str:
    where = (f"at {point['file']}:{point['line']}" if point.get("file")
             else f"in {point['op']}" if point.get("op") else "outside any op")
    text = f"{point['kind']} {where}, " + rate(point)
    if point.get("per_step") is not None and point["counted_over"] == "whole run":
        text += f" ({point['count']} over the whole run)"
    if point.get("gpu_idle_ms") is not None:
        text += (f", host blocked {point['host_ms']:.2f} ms and GPU idle "
                 f"{point['gpu_idle_ms']:.2f} ms over the "
                 + ("window" if point.get("per_s") is not None else "measured steps"))
    return text


def rate(point: SyncPoint) -> str:
    """How often a sync site runs, in the unit its window has."""
    if point.get("per_step") is not None:
        return f"{point['per_step']:g} per step"
    if point.get("per_s") is not None:
        return f"{point['count']} in the window ({point['per_s']:g}/s)"
    if point.get("placement") == "outside":
        return (f"{point['count']} outside the training steps"
                + (f" ({point['placement_why']})" if point.get("placement_why") else ""))
    return f"{point['count']} over the whole run"


def _top_ops_line(ops: pd.DataFrame, col: str, what: str) -> list[str]:
    if ops.empty or ops[col].isna().all():
        return []
    head = ops.head(3)
    parts = [f"{n} {p:.0f}%" for n, p in zip(head["name"], head[S.SELF_PCT])]
    return [f"top ops: {', '.join(parts)} {what}"]


def _round(value: Optional[float], digits: int = 3) -> Optional[float]:
    return None if value is None else round(float(value), digits)


def data_share_of(verdict: Verdict) -> float:
    """The share of the step spent loading data, as the verdict measured it."""
    return (verdict.get("numbers") or {}).get("data_share") or 0.0
