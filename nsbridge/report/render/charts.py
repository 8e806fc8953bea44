"""What report.html's charts draw, as data (no HTML): each built-in chart's series from the
report, with its title, and each pass's own charts as its view declares them
(report/document/pass_view.py, report/views/catalog.py). report.js draws them; compose.py
hands them to the page."""

from __future__ import annotations

from typing import Any, Literal, Optional

from ... import schema as S
from ..document.escape import terminal
from ..views.memory_view import level_text
from ..views.ranks_view import ALL_RANKS, shown_ranks
from ..document.shown import Shown
from ..views import catalog
from ...contract.report import Distributed, Op, Report, StepsPerStep, pass_numbers, per_step_of

TOP_CHART = 15


def step_label(step: StepsPerStep) -> str:
    """A step's bar label: 'step 3', 'run 2 step 3', or 'whole window' (no steps)."""
    name = "whole window" if step["step"] is None else f"step {step['step']}"
    return f"run {step['run']} {name}" if "run" in step else name


def chart_data(report: Report, shown: Shown) -> dict[str, Any]:
    """What the charts draw (only what the report has; ``shown``: the ops and kernels
    the tables show, report.document.shown)."""
    out: dict[str, Any] = {}
    dist = report.get(S.DISTRIBUTED_SECTION) or {}
    ranks = ranks_data(dist)
    if ranks:
        out["ranks"] = ranks
    spread = step_histogram(dist)
    if spread:
        out["rank_steps"] = spread
    heat = dist.get("heat")
    if heat and heat.get("ops") and heat.get("max_us"):
        out["rank_heat"] = {"ops": [terminal(op) for op in heat.get("ops") or []],
                            "columns": [f"rank {a}" if a == b else f"ranks {a}-{b}"
                                        for a, b in heat.get("ranks") or []],
                            "us": heat.get("max_us"), "source": heat.get("source")}
    per_step = per_step_of(report)
    if per_step:
        out["steps"] = {"labels": [step_label(s) for s in per_step],
                        "phases": {p[:-3]: [s[p] for s in per_step] for p in
                                   ("data_ms", "forward_ms", "backward_ms", "optimizer_ms",
                                    "other_ms")}}
    ops = [op for op in shown.ops if op.get(S.CPU_SELF_US) is not None][:TOP_CHART]
    if ops:
        series = {"torch.profiler self CPU ms": [(op.get(S.CPU_SELF_US) or 0.0) / 1e3 for op in ops]}
        if report.get("device"):
            series["torch.profiler self device ms"] = [(op[S.DEVICE_SELF_US] or 0) / 1e3
                                                      for op in ops]
        for key, view in catalog.views_by_op_key().items():   # each pass's own time columns
            for column in (c for c in view.op_columns if c.chart):
                values = [pass_numbers(op, key).get(column.key) for op in ops]
                if any(v is not None for v in values):
                    series[column.header] = [(v or 0) / 1e3 for v in values]
        out["ops"] = {"labels": _labels(ops), "series": series}
        memory = [op for op in ops if op.get(S.MEM_MIB) is not None]
        if memory and any(op[S.MEM_MIB] or op.get(S.MEM_NET_MIB) for op in memory):
            out["memory"] = {"labels": _labels(memory),
                             "gross": [op[S.MEM_MIB] for op in memory],
                             "net": [op.get(S.MEM_NET_MIB) for op in memory]}
    curve = (report.get(S.MEMORY_SECTION) or {})
    points = curve.get("points")
    if points:
        times, reserved, peak_ops = points.get("t_ms") or [], points.get("reserved_mib"), \
            curve.get("peak_ops")
        out["memory_curve"] = {
            "allocated": _xy(times, points.get("allocated_mib") or []),
            "reserved": _xy(times, reserved) if reserved else None,
            "peak": {"x": curve.get("peak_at_ms"), "y": curve.get("peak_mib"),
                     "label": terminal(f"peak {level_text(curve, curve.get('peak_mib') or 0.0)}"
                                       " MiB" + (f" in {peak_ops[-1]}" if peak_ops else ""))},
            "device": (curve.get("device") or "") + (", since the window's start"
                                                      if curve.get("relative") else "")}
    device = report.get("device")
    gaps = [(g, g.get("start_us") or 0.0, g.get("dur_us") or 0.0)
            for g in (device.get("idle_gaps") if device else None) or []]
    if device and gaps:
        steps = report.get("steps")
        mean = (steps.get("mean") if steps else None) or {}
        window = (mean.get("wall_ms") or 0.0) * ((steps.get("count") if steps else 0) or 0)
        out["gaps"] = {"window_ms": window, "busy_pct": device.get("busy_pct"),
                       "labels": [terminal(f"{dur / 1e3:.2f} ms idle, host in "
                                           f"{g.get('host_op') or 'Python between ops'}")
                                  for g, _, dur in gaps],
                       "spans": [[start / 1e3, (start + dur) / 1e3] for _, start, dur in gaps]}
    kernels = shown.kernels[:TOP_CHART]
    if kernels:
        out["kernels"] = {"labels": [terminal(f"{w['name']} ({w['op'] or 'no op'})")
                                     for w in kernels],
                          "series": {"GPU ms": [(w.get("device_us") or 0.0) / 1e3 for w in kernels]}}
    charts = [chart for view in catalog.VIEWS if view.charts
              for chart in view.charts(report)]
    if charts:
        out["pass_charts"] = charts
    return out


def ranks_data(dist: Distributed) -> Optional[dict[str, Any]]:
    """Per rank the table shows (every rank up to 16, else the slowest, fastest, straggler
    and failed: ranks_view.shown_ranks), its median step split into compute, collectives
    (exposed and overlapped) and GPU idle (model.ranks.cross_rank.step_breakdown); the
    straggler marked."""
    ranks = [(r, breakdown) for r in shown_ranks(dist)
             if (breakdown := r.get("breakdown_ms"))]
    if len(ranks) < 2:
        return None
    straggler = dist.get("straggler") or {}
    marked = straggler.get("rank") if straggler.get("verdict") == "straggler" else None
    parts: dict[BreakdownPart, str] = {
        "compute": "compute", "overlap": "collectives overlapped with compute",
        "communication": "collectives (exposed)", "idle": "GPU idle"}
    columns: dict[str, list[Any]] = {
        label: [b.get(key) for _, b in ranks] for key, label in parts.items()}
    series = {label: values for label, values in columns.items()
              if any(v is not None for v in values)}
    return {"labels": [f"rank {r.get('rank')}" + (" (straggler)" if r.get("rank") == marked
                                                  else "") for r, _ in ranks],
            "series": series, "straggler": [r.get("rank") == marked for r, _ in ranks]}


BreakdownPart = Literal["compute", "overlap", "communication", "idle"]
HISTOGRAM_BINS = 30


def step_histogram(dist: Distributed) -> Optional[dict[str, Any]]:
    """Past 16 ranks: how many ranks have each median step time (HISTOGRAM_BINS equal
    bins from the fastest to the slowest), the straggler's bin marked."""
    ranks = [(r.get("rank"), float(step)) for r in dist.get("ranks") or []
             if (step := r.get("step_ms")) is not None]
    if len(ranks) <= ALL_RANKS:
        return None
    low, high = min(s for _, s in ranks), max(s for _, s in ranks)
    width = (high - low) / HISTOGRAM_BINS or 1.0
    counts = [0] * HISTOGRAM_BINS
    bin_of = {rank: min(int((step - low) / width), HISTOGRAM_BINS - 1) for rank, step in ranks}
    for index in bin_of.values():
        counts[index] += 1
    straggler = (dist.get("straggler") or {})
    marked = bin_of.get(straggler.get("rank")) if straggler.get("verdict") == "straggler" else None
    return {"labels": [f"{low + i * width:.2f}" for i in range(HISTOGRAM_BINS)],
            "counts": counts, "straggler": [i == marked for i in range(HISTOGRAM_BINS)]}


def _xy(xs: list[float], ys: list[float]) -> list[dict[str, float]]:
    return [{"x": x, "y": y} for x, y in zip(xs, ys)]


def _labels(ops: list[Op]) -> list[str]:
    """Op names for the charts, control characters shown as escapes."""
    return [terminal(op["name"]) for op in ops]


def chart_titles(span: str) -> dict[str, str]:
    """Each built-in chart's caption, in the order the page shows them (``span``: what
    the totals cover, report.document.shown)."""
    return {"ranks": "Ranks: median step split into compute, collectives and GPU idle (ms)",
            "rank_steps": "Ranks by median step time (ms, each bar's lower edge): how many "
                          "(log scale)",
            "rank_heat": "Ops that differ most across ranks: time per step by rank (µs; a "
                         "column of several ranks shows its slowest; darker is slower "
                         "within the op's row)",
            "steps": "Step time per measured step, by phase (ms)",
            "ops": f"Top ops: time {span} by source (ms)",
            "kernels": f"Top kernels: GPU time {span} (ms)",
            "gaps": "Longest GPU idle gaps over the measured window (ms from its start)",
            "memory_curve": "Memory over the measured window (MiB; ms from its start)",
            "memory": f"Memory per op {span}: gross vs net (MiB)"}
