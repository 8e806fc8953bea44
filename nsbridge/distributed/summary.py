"""The map step: one rank's small summary, written next to its trace by the process that
captured it, so the merge never needs every rank's trace in memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..model.analysis import TraceAnalysis, analyze_events
from ..parse.torch_trace import read_trace
from ..profiles import Analysis
from ..rundir import write_json

SUMMARY = "summary.json"


def summarize(analysis: TraceAnalysis, *, rank: int, host: Optional[str], world_size: int,
              status: str = "ok", exit_code: int = 0, trace: Optional[str] = None,
              error: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """What the cross-rank report needs from one rank (no per-event data)."""
    device = analysis.device or {}
    return {"rank": rank, "host": host, "world_size": world_size, "status": status,
            "exit_code": exit_code, "error": error, "profiled": True, "trace": trace,
            "step_ms": [round(float(w), 3) for w in analysis.steps["wall_ms"]],
            "collective_ms": [round(u / 1e3, 3) for u in analysis.comm_per_step_us or []],
            "verdict": analysis.verdict["label"], "numbers": analysis.verdict["numbers"],
            "has_device": analysis.has_device, "device_busy_pct": device.get("busy_pct"),
            "comm": device.get("comm"), "collectives": analysis.collectives,
            "ops": [{"name": r.name, "calls": int(r.calls), "cpu_self_us": float(r.cpu_self_us),
                     "device_self_us": None if r.device_self_us != r.device_self_us
                     else float(r.device_self_us)}
                    for r in analysis.ops[["name", "calls", "cpu_self_us",
                                           "device_self_us"]].itertuples(index=False)]}


def write_summary(rank_dir: Path, *, trace: Optional[Path], thresholds: Analysis, rank: int,
                  host: str, world_size: int, status: str, exit_code: int,
                  error: Optional[dict[str, Any]]) -> dict[str, Any]:
    """Analyse this rank's trace (when there is one) and write summary.json."""
    if trace is not None and trace.is_file():
        analysis = analyze_events(read_trace(trace).events, thresholds=thresholds)
        data = summarize(analysis, rank=rank, host=host, world_size=world_size, status=status,
                         exit_code=exit_code, trace=trace.name, error=error)
    else:
        data = {"rank": rank, "host": host, "world_size": world_size, "status": status,
                "exit_code": exit_code, "error": error, "profiled": False, "trace": None}
    write_json(rank_dir / SUMMARY, data)   # atomic: rank 0 polls for it
    return data
