"""What report.html's charts draw, as data (no HTML): each built-in chart's series from the
report, with its title, and each pass's own charts as its view declares them
(report/document/pass_view.py, report/views/catalog.py). report.js draws them; compose.py
hands them to the page."""

from __future__ import annotations

from typing import Any, Optional

from ... import schema as S
from ..document.escape import terminal
from ..views.memory_view import level_text
from ..document.shown import Shown
from ..views import catalog

TOP_CHART = 15


def step_label(step: dict[str, Any]) -> str:
    """A step's bar label: 'step 3', 'run 2 step 3', or 'whole window' (no steps)."""
    name = "whole window" if step["step"] is None else f"step {step['step']}"
    return f"run {step['run']} {name}" if "run" in step else name


def chart_data(report: dict[str, Any], shown: Shown) -> dict[str, Any]:
    """What the charts draw (only what the report has; ``shown``: the ops and kernels
    the tables show, report.document.shown)."""
    out: dict[str, Any] = {}
    ranks = ranks_data(report.get(S.DISTRIBUTED_SECTION) or {})
    if ranks:
        out["ranks"] = ranks
    per_step = (report.get("steps") or {}).get("per_step") or []
    if per_step:
        out["steps"] = {"labels": [step_label(s) for s in per_step],
                        "phases": {p[:-3]: [s[p] for s in per_step] for p in
                                   ("data_ms", "forward_ms", "backward_ms", "optimizer_ms",
                                    "other_ms")}}
    ops = [op for op in shown.ops if op.get(S.CPU_SELF_US) is not None][:TOP_CHART]
    if ops:
        series = {"torch.profiler self CPU ms": [op[S.CPU_SELF_US] / 1e3 for op in ops]}
        if report.get("device"):
            series["torch.profiler self device ms"] = [(op[S.DEVICE_SELF_US] or 0) / 1e3
                                                      for op in ops]
        for key, view in catalog.views_by_op_key().items():   # each pass's own time columns
            for column in (c for c in view.op_columns if c.chart):
                values = [(op.get(key) or {}).get(column.key) for op in ops]
                if any(v is not None for v in values):
                    series[column.header] = [(v or 0) / 1e3 for v in values]
        out["ops"] = {"labels": _labels(ops), "series": series}
        memory = [op for op in ops if op.get(S.MEM_MIB) is not None]
        if memory and any(op[S.MEM_MIB] or op.get(S.MEM_NET_MIB) for op in memory):
            out["memory"] = {"labels": _labels(memory),
                             "gross": [op[S.MEM_MIB] for op in memory],
                             "net": [op.get(S.MEM_NET_MIB) for op in memory]}
    curve = (report.get(S.MEMORY_SECTION) or {})
    if curve.get("points"):
        points = curve["points"]
        out["memory_curve"] = {
            "allocated": _xy(points["t_ms"], points["allocated_mib"]),
            "reserved": _xy(points["t_ms"], points["reserved_mib"])
            if points.get("reserved_mib") else None,
            "peak": {"x": curve["peak_at_ms"], "y": curve["peak_mib"],
                     "label": terminal(f"peak {level_text(curve, curve['peak_mib'])} MiB"
                                       + (f" in {curve['peak_ops'][-1]}"
                                          if curve.get("peak_ops") else ""))},
            "device": curve["device"] + (", since the window's start" if curve["relative"]
                                         else "")}
    device = report.get("device")
    if device and device.get("idle_gaps"):
        steps = report.get("steps") or {}
        window = (steps.get("mean") or {}).get("wall_ms", 0) * (steps.get("count") or 0)
        out["gaps"] = {"window_ms": window, "busy_pct": device["busy_pct"],
                       "labels": [terminal(f"{g['dur_us'] / 1e3:.2f} ms idle, host in "
                                           f"{g['host_op'] or 'Python between ops'}")
                                  for g in device["idle_gaps"]],
                       "spans": [[g["start_us"] / 1e3, (g["start_us"] + g["dur_us"]) / 1e3]
                                 for g in device["idle_gaps"]]}
    kernels = shown.kernels[:TOP_CHART]
    if kernels:
        out["kernels"] = {"labels": [terminal(f"{w['name']} ({w['op'] or 'no op'})")
                                     for w in kernels],
                          "series": {"GPU ms": [w["device_us"] / 1e3 for w in kernels]}}
    charts = [chart for view in catalog.VIEWS if view.charts
              for chart in view.charts(report)]
    if charts:
        out["pass_charts"] = charts
    return out


def ranks_data(dist: dict[str, Any]) -> Optional[dict[str, Any]]:
    """Per rank, its median step split into compute, collectives (exposed and overlapped)
    and GPU idle (model.ranks.cross_rank.step_breakdown); the straggler marked."""
    ranks = [r for r in dist.get("ranks") or [] if r.get("breakdown_ms")]
    if len(ranks) < 2:
        return None
    straggler = dist.get("straggler") or {}
    marked = straggler.get("rank") if straggler.get("verdict") == "straggler" else None
    parts = {"compute": "compute", "overlap": "collectives overlapped with compute",
             "communication": "collectives (exposed)", "idle": "GPU idle"}
    series = {label: [r["breakdown_ms"].get(key) for r in ranks] for key, label in parts.items()
              if any(r["breakdown_ms"].get(key) is not None for r in ranks)}
    return {"labels": [f"rank {r['rank']}" + (" (straggler)" if r["rank"] == marked else "")
                       for r in ranks],
            "series": series, "straggler": [r["rank"] == marked for r in ranks]}


def _xy(xs: list[float], ys: list[float]) -> list[dict[str, float]]:
    return [{"x": x, "y": y} for x, y in zip(xs, ys)]


def _labels(ops: list[dict[str, Any]]) -> list[str]:
    """Op names for the charts, control characters shown as escapes."""
    return [terminal(op["name"]) for op in ops]


def chart_titles(span: str) -> dict[str, str]:
    """Each built-in chart's caption, in the order the page shows them (``span``: what
    the totals cover, report.document.shown)."""
    return {"ranks": "Ranks: median step split into compute, collectives and GPU idle (ms)",
            "steps": "Step time per measured step, by phase (ms)",
            "ops": f"Top ops: time {span} by source (ms)",
            "kernels": f"Top kernels: GPU time {span} (ms)",
            "gaps": "Longest GPU idle gaps over the measured window (ms from its start)",
            "memory_curve": "Memory over the measured window (MiB; ms from its start)",
            "memory": f"Memory per op {span}: gross vs net (MiB)"}
