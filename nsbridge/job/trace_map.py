"""Many traces of one job read as a map and a reduce. The map, ``digest_trace``, is one
pure function (a trace path in, that trace's digest out) that job.executors runs here, on
local processes or on a cluster. The reduce, ``reduce_digests``, reads the digests in the
traces' order and keeps of each its rank summary (job.summary), with the op tables summed
as they come, and the full analysis of the slowest trace only: the merging process's
memory grows by one summary per trace, never with the traces' size."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import pandas as pd

from .. import schema as S
from ..errors import TraceFormatError
from ..model.analysis import TraceAnalysis, analyze_events
from ..model.ranks.cross_rank import merge_ops, ranked_ops
from ..parse.torch_trace import read_trace
from ..schema.records import RankSummary
from .summary import summarize

MERGE_EVERY = 32   # op tables summed in batches of this many traces (one merge each)
NO_RANK = 1 << 30  # a trace without a rank sorts after those with one


@dataclass(frozen=True)
class TraceDigest:
    """One trace read and analysed, its events dropped: its rank (None when the trace
    does not say), what reading it noted, whether it recorded memory, and its analysis
    (the reduce keeps the slowest trace's only)."""

    path: Path
    rank: Optional[int]
    notes: list[str]
    has_memory: bool
    analysis: TraceAnalysis


def digest_trace(path: Path, thresholds: Any, window: str, alone: bool,
                 read_workers: Optional[int] = None) -> TraceDigest | str:
    """Read and analyse one trace; a file of several that is JSON but not a trace gives
    the note saying it was skipped. Module level, its arguments and result picklable, so
    any executor runs it; ``read_workers``: the reader's own processes.

    Raises:
        TraceNotFoundError, TraceFormatError, EmptyTraceError: the file is not a usable
            trace (of several, only when it is not JSON or not readable at all).
    """
    try:
        trace = read_trace(path, workers=read_workers)
    except TraceFormatError as exc:
        if alone or "not a torch.profiler trace" not in str(exc):
            raise
        return f"skipped {path}: JSON that is not a torch.profiler trace"
    analysis = analyze_events(trace.events, thresholds=thresholds, window=window)
    memory = bool((trace.events[S.CAT] == S.MEMORY).any())
    return TraceDigest(trace.path, trace.rank, trace.notes(), memory, analysis)


@dataclass
class ReducedTraces:
    """What the reduce keeps: every trace's summary (in rank order), the op tables summed,
    the slowest trace's digest (with its analysis), and the notes."""

    summaries: list[RankSummary] = field(default_factory=list)
    ops: Optional[pd.DataFrame] = None
    lead: Optional[TraceDigest] = None
    lead_index: int = 0
    notes: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    has_memory: bool = False
    has_device: bool = False


def reduce_digests(results: Iterable[TraceDigest | str]) -> ReducedTraces:
    """The map's results, read in order, reduced: summaries, op tables summed in batches
    (model.ranks.cross_rank.merge_ops, the same batches whatever ran the map), and the full
    analysis of the trace with the longest mean step only (ties: the lowest rank)."""
    out = ReducedTraces()
    kept: list[tuple[tuple[int, str], RankSummary, Path]] = []
    pending: list[pd.DataFrame] = []
    lead_step, lead_order = -1.0, (NO_RANK, "")
    for result in results:
        if isinstance(result, str):
            out.notes.append(result)
            continue
        analysis, order = result.analysis, (_rank_key(result.rank), str(result.path))
        kept.append((order, summarize(analysis, rank=result.rank if result.rank is not None
                                      else -1, host=None, world_size=0,
                                      trace=str(result.path)), result.path))
        out.notes.extend(result.notes)
        out.has_memory |= result.has_memory
        out.has_device |= analysis.has_device
        pending.append(analysis.ops)
        if len(pending) >= MERGE_EVERY:
            out.ops, pending = _merged(out.ops, pending), []
        step = float((analysis.verdict.get("numbers") or {}).get("step_ms") or 0.0)
        if out.lead is None or step > lead_step or (step == lead_step and order < lead_order):
            lead_step, lead_order, out.lead = step, order, result
    if not kept:
        return out
    kept.sort(key=lambda k: k[0])
    world = len(kept)
    for index, (_, summary, path) in enumerate(kept):
        if summary["rank"] < 0:
            summary["rank"] = index
        summary["world_size"] = world
        out.summaries.append(summary)
        out.paths.append(path)
    assert out.lead is not None
    out.lead_index = out.paths.index(out.lead.path)
    if world == 1:   # one trace: its own table, nothing summed
        out.ops = out.lead.analysis.ops
    else:
        out.ops = ranked_ops(_merged(out.ops, pending) if pending else out.ops, out.has_device)
    return out


def _merged(total: Optional[pd.DataFrame], tables: list[pd.DataFrame]) -> pd.DataFrame:
    return merge_ops(([total] if total is not None else []) + tables)


def _rank_key(rank: Optional[int]) -> int:
    return rank if rank is not None else NO_RANK
