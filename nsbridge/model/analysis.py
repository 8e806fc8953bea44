"""One trace in, every finding out: the analysis shared by `triage` and `analyze`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, cast

import numpy as np
import pandas as pd

from ..schema.records import SyncRecord
from .. import schema as S
from ..profiles import Analysis as Thresholds
from .device.attribution import (LAUNCHED_BEFORE_WINDOW, attribute_gpu_events, attribution_counts,
                                 linking_generation)
from .ranks.collectives import collectives, comm_overlap, time_per_step
from .device.activity import busy_by_device, copies, gpu_work, idle_gaps, launched_before_window
from .device.kernel_origins import graph_launch_calls, kernel_origins
from .device.memory import memory_over_window
from .host.nesting import at_rows, build_host_tree
from .host.op_groups import op_groups
from .host.ops import op_calls, op_table
from .judging.rules import Facts, recommend
from .host.steps import (PHASES, drop_partial_steps, gpu_done_ms, main_thread, step_breakdown,
                         step_windows)
from .strings import name_mask, row_groups, starts_with
from .host.syncs import (blocking_calls, gpu_idle_after, implicit_syncs, sync_cost,
                         sync_points)
from .device.tensor_cores import common_input_types
from .judging.verdict import data_share_of, decide, qualify
from ..contract.report import Collective, Device, DeviceIdleGap, Machine, Memory, OpGroups, Recommendation, StepsMean, SyncPoint, Verdict, Window


WINDOWS = ("steps", "trace")


@dataclass
class TraceAnalysis:
    """Everything the report says about one trace."""

    ops: pd.DataFrame                  # OPS frame (schema.OP_COLUMNS)
    window: Window                     # what every figure covers: window_facts
    steps: pd.DataFrame                # per step: step, wall_ms, data/forward/backward/optimizer/other_ms
    has_device: bool
    device: Device                     # busy, gaps, copies, attribution counts (GPU runs)
    sync_points: list[SyncPoint]       # model.host.syncs.sync_points
    verdict: Verdict
    recommendations: list[Recommendation]
    collectives: list[Collective]      # model.ranks.collectives.collectives (distributed runs)
    facts: Optional[Facts] = None      # what the verdict and the rules read (model.comparing.pooled)
    comm_per_step_us: Optional[list[float]] = None   # collectives.time_per_step
    # per matmul/convolution/attention op: its most common "Input type" list (tensor_cores)
    input_types: dict[str, str] = field(default_factory=dict)
    memory: Optional[Memory] = None   # model.device.memory.memory_over_window
    op_groups: Optional[OpGroups] = None   # model.host.op_groups.op_groups


def analyze_events(events: pd.DataFrame, *, thresholds: Thresholds,
                   process_syncs: Optional[list[SyncRecord]] = None,
                   process_steps: Optional[int] = None,
                   script: Optional[str] = None,
                   machine: Optional[Machine] = None,
                   window: str = "steps", complete_steps: bool = False,
                   last_step_cut: bool = False) -> TraceAnalysis:
    """Analyse one EVENTS frame (see nsbridge.schema).

    ``process_syncs`` and ``process_steps`` (steps the script ran) come from triage's
    profiled process, and ``machine`` (model.judging.contention.machine_facts) from around it;
    ``analyze`` has none of them. ``window``: "steps" (the measured steps, the default) or
    "trace" (the whole trace as one window, in totals and rates per second); see
    ``measured_window``. ``complete_steps``: the trace's steps were closed at real step
    boundaries (nsbridge's own recording), so none is partial; ``last_step_cut``: nsbridge
    stopped the recording inside its last step (the memory budget).
    """
    tree = build_host_tree(events)
    host_names = tree.names   # per tree position (categorical: small codes)
    gpu = attribute_gpu_events(events, tree)
    has_device = not gpu.empty
    windows, notes = measured_window(events, tree, window, complete_steps, last_step_cut)
    lo, hi = float(windows["start"].min()), float(windows["end"].max())
    stepless = int(windows["step"].iloc[0]) < 0
    # one window asked for over a trace that has steps: advice never asks to add them
    steps_in_trace = window == "trace" and int(step_windows(events, tree)["step"].iloc[0]) >= 0
    ops_in = (tree.start >= lo) & (tree.start < hi)
    launched = gpu["op_pos"].to_numpy() >= 0
    in_window = gpu[np.where(launched, ops_in[np.maximum(gpu["op_pos"].to_numpy(), 0)]
                             if len(tree) else False,
                             (gpu["ts"] >= lo).to_numpy() & (gpu["ts"] < hi).to_numpy())]
    steps = step_breakdown(events, tree, windows)
    if has_device and not stepless:
        steps["gpu_done_ms"] = gpu_done_ms(tree, gpu, windows)
    calls_of_ops = op_calls(events, tree, in_window, has_device, ops_in)
    ops = op_table(events, tree, in_window, has_device, windows, in_window=ops_in,
                   calls=calls_of_ops)
    n_steps = len(windows)
    seconds = (hi - lo) / 1e6
    kernels = in_window[in_window["cat"] == S.KERNEL]
    device: Device = {}
    busy = pd.DataFrame(columns=["device", "busy_us", "busy_pct", "kernels"])
    gaps: list[DeviceIdleGap] = []
    if has_device and len(in_window):
        host_name_values = tree.name_values
        ends = (in_window["ts"] + in_window["dur"]).to_numpy(np.float64)
        dlo, dhi = lo, max(hi, float(ends.max()))   # work launched inside counts to its end
        if stepless:  # no steps: judge the device over the span it had work
            dlo, dhi = float(in_window["ts"].min()), float(ends.max())
        busy = busy_by_device(in_window, dlo, dhi)
        gaps = idle_gaps(in_window, dlo, dhi, events, tree, main_thread(tree, windows),
                         thresholds.top_gaps)
        device = {
            "window": ("first to last GPU activity (" + ("--window trace" if window == "trace"
                                                         else "no steps") + ")" if stepless
                       else "the measured steps, and the GPU work launched in them to its end"),
            "window_us": [round(dlo, 3), round(dhi, 3)],
            "busy_pct": round(float(busy["busy_pct"].mean()), 2) if len(busy) else 0.0,
            "per_device": busy.round(3).to_dict("records"),
            "idle_gaps": gaps,
            "copies": copies(in_window),
            "kernels": int(len(kernels)),
            "kernels_per_step": None if stepless else round(len(kernels) / max(n_steps, 1), 2),
            "kernels_per_s": round(len(kernels) / seconds, 1) if seconds > 0 else None,
            "median_kernel_us": round(float(kernels["dur"].median()), 3) if len(kernels) else None,
            "linking": linking_generation(events),
            "attribution": attribution_counts(in_window),
            LAUNCHED_BEFORE_WINDOW: launched_before_window(in_window),
            "comm": comm_overlap(in_window, dlo, dhi),
            "work": gpu_work(in_window, host_name_values),
            **kernel_origins(in_window, host_name_values,
                             graph_launch_calls(events, lo, hi)),
        }

    calls = blocking_calls(events, tree, lo, hi)
    idle_us = gpu_idle_after(calls, in_window, hi)
    implicit = [] if has_device else implicit_syncs(
        tree, lo, hi, n_steps, seconds if stepless else None)
    points = sync_points(calls=calls, idle_us=idle_us, process_records=process_syncs,
                         n_steps=n_steps, run_steps=process_steps, device_run=has_device,
                         seconds=seconds if stepless else None, implicit=implicit)
    step_ms = float(steps["wall_ms"].mean()) if len(steps) else 0.0
    cost = sync_cost(calls=calls, idle_us=idle_us, points=points, n_steps=n_steps,
                     step_ms=step_ms, device_run=has_device)
    median_kernel = device.get("median_kernel_us")
    busy_pct = float(busy["busy_pct"].mean()) if has_device and len(busy) else None
    per_step_kernels = (device.get("kernels_per_step") or 0.0) if not stepless else 0.0
    host_ops = float((at_rows(events, tree.rows, S.CAT).to_numpy() == S.CPU_OP)[ops_in].sum())
    verdict = decide(breakdown=steps, busy_pct=busy_pct, cost=cost, sync_points=points,
                     ops=ops, has_device=has_device, kernels_per_step=per_step_kernels,
                     median_kernel_us=median_kernel, thresholds=thresholds,
                     seconds=seconds if stepless else None,
                     host_ops_per_step=host_ops / max(n_steps, 1),
                     steps_in_trace=steps_in_trace)
    contention = (machine or {}).get("contention")
    verdict = qualify(verdict, breakdown=steps, thresholds=thresholds, machine=machine,
                      steps_in_trace=steps_in_trace)

    loaders = set(host_names[starts_with(host_names, "enumerate(DataLoader)#")])
    loader_kind = None
    if loaders:
        loader_kind = ("multi-process" if any("MultiProcessing" in n for n in loaders)
                       else "single-process")
    top_kernel = None
    if len(kernels) and in_window["dur"].sum() > 0:
        top_kernel = _top_kernel(kernels, float(in_window["dur"].sum()))
    facts = Facts(
        has_device=has_device, verdict=verdict["label"],
        data_share=data_share_of(verdict), dataloader_kind=loader_kind,
        pageable_h2d=int(name_mask(in_window["name"].to_numpy(),
                                   lambda n: "HtoD" in n and "Pageable" in n).sum()),
        sync_points=points, sync_cost=cost, ops=ops,
        host_ops_per_step=None if stepless else host_ops / max(n_steps, 1),
        host_ops_per_s=host_ops / seconds if seconds > 0 else 0.0,
        kernels_per_step=per_step_kernels, median_kernel_us=median_kernel,
        busy_pct=device.get("busy_pct"), gaps=gaps, top_kernel=top_kernel, script=script,
        sync_recommend_per_step=thresholds.sync_recommend_per_step, contention=contention)
    return TraceAnalysis(ops=ops, steps=steps, has_device=has_device, device=device,
                         window=window_facts(windows, window, seconds, notes),
                         sync_points=points, verdict=verdict,
                         recommendations=recommend(facts),
                         collectives=collectives(events, tree, gpu, lo, hi, n_steps), facts=facts,
                         comm_per_step_us=time_per_step(events, windows),
                         input_types=common_input_types(
                             host_names[ops_in], at_rows(events, tree.rows, S.INPUT_TYPES)[ops_in]),
                         memory=memory_over_window(events, tree, windows, has_device),
                         op_groups=op_groups(events, tree, calls_of_ops, has_device))


def _top_kernel(kernels: pd.DataFrame, total_us: float) -> dict[str, Any]:
    """The kernel name with the most GPU time, and its share of ``total_us``: summed on
    integer group codes (no string hashed per kernel), then ranked as pandas ranks
    ``groupby("name").sum()`` (names sorted, then the sums descending)."""
    names = kernels["name"]
    if names.isna().any():   # groupby leaves missing names out; row_groups would not
        by_name = kernels.groupby("name")["dur"].sum()
    else:
        groups, firsts = row_groups(names)
        sums = kernels["dur"].groupby(groups, sort=False).sum().to_numpy()
        by_name = pd.Series(sums, index=pd.Index(names.to_numpy()[firsts])).sort_index()
    by_name = by_name.sort_values(ascending=False)
    return {"name": str(by_name.index[0]), "share": float(by_name.iloc[0] / total_us)}


def measured_window(events: pd.DataFrame, tree: Any, window: str,
                    complete_steps: bool = False,
                    last_step_cut: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """The steps every per-step figure covers (partial ones left out unless
    ``complete_steps``; the last one when ``last_step_cut``, or kept with a note when it is
    the only one), or with ``window="trace"`` (and in a trace without steps) one window over
    the whole trace."""
    check_window(window)
    if window == "trace":
        start, end = events[S.TS], events[S.TS] + events[S.DUR]
        return pd.DataFrame({"step": [-1], "start": [float(start.min())],
                             "end": [float(end.max())], "pos": [-1]}), []
    steps = step_windows(events, tree)
    if last_step_cut and int(steps["step"].iloc[0]) >= 0:
        last = steps.iloc[-1]
        if len(steps) > 1:
            return steps.iloc[:-1].reset_index(drop=True), [
                f"the last step ({int(last['step'])}) was cut by the recording budget and is "
                "left out"]
        recorded_ms = (last["end"] - last["start"]) / 1e3
        return steps, [f"the only measured step ({int(last['step'])}) is partial: the "
                       f"recording budget stopped it after {recorded_ms:.2f} ms; its times "
                       "cover that part only (phases and shares still hold)"]
    return (steps, []) if complete_steps else drop_partial_steps(steps, events)


def check_window(window: str) -> None:
    """Raise ValueError unless ``window`` is one of WINDOWS."""
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, not {window!r}")


def window_facts(windows: pd.DataFrame, asked: str, seconds: float,
                 notes: list[str]) -> Window:
    """report.window: what the figures cover (docs/explanation/numbers.md)."""
    stepless = int(windows["step"].iloc[0]) < 0
    return {"kind": "trace" if stepless else "steps", "asked": asked,
            "steps": 0 if stepless else int(len(windows)),
            "start_us": round(float(windows["start"].min()), 3),
            "end_us": round(float(windows["end"].max()), 3), "seconds": round(seconds, 6),
            "per": "second" if stepless else "step", "notes": notes}


def mean_step(steps: pd.DataFrame) -> StepsMean:
    """Mean of each phase over the steps, with shares of the mean wall time."""
    if steps.empty:
        return {}
    means: dict[str, Any] = {col: round(float(steps[col].mean()), 3)
                             for col in ["wall_ms", *PHASES]}
    wall = means["wall_ms"]
    means["shares"] = {col[:-3]: round(means[col] / wall, 4) if wall else 0.0 for col in PHASES}
    return cast(StepsMean, means)     # keys: wall_ms and PHASES, as StepsMean declares
