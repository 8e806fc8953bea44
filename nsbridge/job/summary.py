"""The map step: one rank's small summary, written next to its trace by the process that
captured it, so the merge never needs every rank's trace in memory; and rank 0 (or the
process that launched the ranks) reading them once the job's store (job.store) or the
launcher says they are written: ``read_summaries``, ``missing_ranks``."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Sequence, cast

from .. import schema as S
from ..errors import RunDirError
from ..guard.confine import readable
from ..model.analysis import TraceAnalysis, analyze_events
from ..parse.torch_trace import read_trace
from ..profiles import Analysis
from ..rundir import load_record, write_json
from ..schema.records import ChildRecord, ChildStep, RankCollective, RankSummary, RecordError
from .identity import rank_dir_name, ranked_dirs

SUMMARY_WAIT_S = 600.0   # how long rank 0 waits for the other ranks' summaries (default)


def summarize(analysis: TraceAnalysis, *, rank: int, host: Optional[str], world_size: int,
              status: str = "ok", exit_code: int = 0, trace: Optional[str] = None,
              error: Optional[RecordError] = None,
              steps: Sequence[ChildStep] = ()) -> RankSummary:
    """What the cross-rank report needs from one rank (no per-event data). ``steps``: the
    profiled process's own step records (child.json), whose measured steps give
    ``wait_ms``, the time the training loop's thread waited for a CPU in each measured step
    (absent when they are not exactly the trace's steps)."""
    device = analysis.device or {}
    step_ms = [round(float(w), 3) for w in analysis.steps["wall_ms"]]
    summary: RankSummary = {
        "rank": rank, "host": host, "world_size": world_size, "status": status,
        "exit_code": exit_code, "error": error, "profiled": True, "trace": trace,
        "step_ms": step_ms,
        "collective_ms": [round(u / 1e3, 3) for u in analysis.comm_per_step_us or []],
        "verdict": analysis.verdict["label"], "numbers": analysis.verdict["numbers"],
        "has_device": analysis.has_device, "device_busy_pct": device.get("busy_pct"),
        "comm": device.get("comm"),
        # the report's Collective, whose keys include the summary's
        "collectives": cast(list[RankCollective], analysis.collectives),
        "ops": [{"name": r.name, "calls": int(r.calls), "cpu_self_us": float(r.cpu_self_us),
                 "device_self_us": None if r.device_self_us != r.device_self_us
                 else float(r.device_self_us)}
                for r in analysis.ops[["name", "calls", "cpu_self_us",
                                       "device_self_us"]].itertuples(index=False)]}
    waits = [s.get("loop_wait_ms") for s in steps if s.get("phase") == "active"]
    if waits and len(waits) == len(step_ms) and all(w is not None for w in waits):
        summary["wait_ms"] = [round(float(w or 0.0), 3) for w in waits]
    return summary


def write_summary(rank_dir: Path, *, trace: Optional[Path], thresholds: Analysis, rank: int,
                  host: str, world_size: int, status: str, exit_code: int,
                  error: Optional[RecordError], steps: Sequence[ChildStep] = ()) -> RankSummary:
    """Analyse this rank's trace (when there is one) and write summary.json; ``steps``:
    the process's own step records (summarize)."""
    if trace is not None and trace.is_file():
        analysis = analyze_events(read_trace(trace).events, thresholds=thresholds)
        data = summarize(analysis, rank=rank, host=host, world_size=world_size, status=status,
                         exit_code=exit_code, trace=trace.name, error=error, steps=steps)
    else:
        data = unprofiled(rank, world_size, status=status, exit_code=exit_code, error=error,
                          host=host)
    write_json(rank_dir / S.SUMMARY_JSON, data)   # atomic: whole or absent when rank 0 reads it
    return data


def read_summaries(run_dir: Path) -> list[RankSummary]:
    """The rank summaries in the run's folders (a rank that died before writing one is
    left out: the caller reports it).

    Raises:
        RunDirError: a summary is not of its declared shape (schema.records.SUMMARY_SHAPE),
            or is another rank's than its folder's.
    """
    out = []
    for rank, folder in ranked_dirs(run_dir):
        path = folder / S.SUMMARY_JSON
        if path.is_file():   # written whole (write_json)
            summary = load_record(readable(path), RankSummary)
            if summary["rank"] != rank:
                raise RunDirError(f"{path} is not a record this nsbridge reads: it is the "
                                  f"summary of rank {summary['rank']}, in the folder of rank "
                                  f"{rank}. It was moved or edited since nsbridge wrote it: "
                                  "make the run again.")
            out.append(summary)
    return out


def missing_ranks(summaries: list[RankSummary], ranks: Iterable[int], world_size: int,
                  run_dir: Path) -> list[RankSummary]:
    """Those of ``ranks`` that wrote no summary: failed before the end, with their child
    record (``ranks``: the ranks started, or the rank folders on disk; never a number
    read from a file)."""
    have = {s["rank"] for s in summaries}
    out = []
    for rank in ranks:
        if rank in have:
            continue
        child = run_dir / rank_dir_name(rank) / S.CHILD_JSON
        record = load_record(readable(child), ChildRecord) if child.is_file() else None
        out.append(unprofiled(rank, world_size,
                              status=record["status"] if record else "failed",
                              exit_code=record["exit_code"] if record else None,
                              error=(record.get("error") if record else None) or {
                                  "type": "NoSummary",
                                  "message": "the rank ended without its summary"}))
    return out


def unprofiled(rank: int, world_size: int, *, status: str, exit_code: Optional[int],
               error: Optional[RecordError], host: Optional[str] = None) -> RankSummary:
    """The summary of a rank with nothing measured: not profiled, failed, or hung (the one
    shape rank 0 merges; its rows in the report are model.ranks.cross_rank.rank_row's)."""
    return {"rank": rank, "host": host, "world_size": world_size, "status": status,
            "exit_code": exit_code, "error": error, "profiled": False, "trace": None}
