"""The torch.profiler pass: run the script under the profiler, or read traces, and analyse."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .. import __version__, progress
from .. import schema as S
from ..collect._process import ChildOutcome
from ..collect.torch_profiler import TorchPass, run_torch_pass
from ..errors import TraceError, TraceFormatError, TraceNotFoundError
from ..distributed.summary import summarize
from ..model.analysis import TraceAnalysis, analyze_events, profiler_overhead
from ..model.cross_rank import cross_rank
from ..model.ranks import combine_ops, slowest
from ..parse.torch_trace import TorchTrace, read_trace
from ..profiles import Profile
from ..report.build import build_report
from ..run import PassOutput


def profile_script(run_dir: Path, *, target: str, args: Sequence[str], module: bool,
                   profile: Profile, cwd: Path, timeout: Optional[float],
                   environ: Mapping[str, str] = os.environ
                   ) -> tuple[PassOutput, Optional[TraceAnalysis]]:
    """Run the target under torch.profiler into ``run_dir`` and analyse its trace."""
    with progress.step(f"running {target} under torch.profiler", script_output=True):
        torch_pass = run_torch_pass(target=target, is_module=module, args=args,
                                    profile=profile, run_dir=run_dir, cwd=cwd, timeout=timeout,
                                    environ=environ)
    status, exit_code, error = pass_status(torch_pass.outcome, torch_pass.child)
    child = torch_pass.child or {}
    notes = _triage_notes(torch_pass, child)
    analysis, trace = None, None
    if torch_pass.traces:
        try:
            with progress.step("reading the trace"):
                trace = read_trace(torch_pass.traces[0])
            with progress.step("analysing the trace"):
                analysis = analyze_events(trace.events, thresholds=profile.analysis,
                                          process_syncs=child.get("syncs"),
                                          process_steps=len(child.get("steps", [])) or None,
                                          script=target)
        except TraceError as exc:
            notes.append(f"the trace could not be analysed: {exc}")
    if analysis is None and status == "ok":
        status = "no-trace"
    files = {"trace": torch_pass.traces[0].name if torch_pass.traces else None,
             "traces": [p.name for p in torch_pass.traces],
             "key_averages": torch_pass.table.name if torch_pass.table else None,
             "ops_csv": "ops.csv" if analysis else None}
    core = build_report(command="triage", target=" ".join([target, *args]), status=status,
                        analysis=analysis, step_source=child.get("step_source"),
                        overhead=profiler_overhead(child.get("steps", [])) if child else None,
                        files=files, notes=notes, has_memory=has_memory(trace), error=error,
                        version=__version__)
    manifest = {"wall_s": torch_pass.outcome.wall_s, "steps_seen": len(child.get("steps", [])),
                "step_source": child.get("step_source"), "environment": child.get("env")}
    return PassOutput(name="torch.profiler", manifest=manifest, status=status,
                      exit_code=exit_code, error=error, core=core), analysis


def analyze_traces(files: Sequence[Path], profile: Profile, target: str
                   ) -> tuple[PassOutput, TraceAnalysis]:
    """Analyse torch.profiler traces captured elsewhere (the ranks of one job: ops summed,
    the slowest rank's verdict, a per-rank table).

    Raises:
        TraceNotFoundError, TraceFormatError, EmptyTraceError: a file is not a usable trace.
    """
    traces: list[TorchTrace] = []
    notes: list[str] = []
    for path in files:
        try:
            with progress.step(f"reading {path.name}"):
                traces.append(read_trace(path))
        except TraceFormatError as exc:
            if len(files) == 1 or "not a torch.profiler trace" not in str(exc):
                raise
            notes.append(f"skipped {path}: JSON that is not a torch.profiler trace")
    if not traces:
        raise TraceNotFoundError("None of the files given is a torch.profiler trace.")
    traces.sort(key=lambda t: (t.rank if t.rank is not None else 1 << 30, str(t.path)))
    with progress.step(f"analysing {len(traces)} trace(s)"):
        analyses = [analyze_events(t.events, thresholds=profile.analysis) for t in traces]
    ranks = [_rank_summary(i, t, a) for i, (t, a) in enumerate(zip(traces, analyses))]
    lead = analyses[slowest(ranks)] if len(analyses) > 1 else analyses[0]
    lead_path = traces[slowest(ranks) if len(analyses) > 1 else 0].path
    if len(analyses) > 1:
        has_device = any(a.has_device for a in analyses)
        lead = TraceAnalysis(**{**lead.__dict__, "ops": combine_ops([a.ops for a in analyses],
                                                                    has_device)})
        notes.append(f"{len(analyses)} traces: ops are summed over all of them; verdict, steps "
                     f"and device figures are those of the slowest (rank {ranks[slowest(ranks)]['rank']})")
    section, recommendations = None, []
    if len(analyses) > 1:   # the ranks of one job: the cross-rank report
        cross = cross_rank([summarize(a, rank=r["rank"], host=None, world_size=len(analyses),
                                      trace=str(t.path))
                            for t, a, r in zip(traces, analyses, ranks)],
                           profile.analysis.straggler_pct)
        section = ("distributed", cross)
        rec = (cross.get("straggler") or {}).get("recommendation")
        recommendations = [rec] if rec else []
    core = build_report(command="analyze", target=target, status="ok", analysis=lead,
                        step_source=None, overhead=None,
                        files={"trace": None, "inputs": [str(t.path) for t in traces],
                               "trace_input": str(Path(lead_path).resolve()),
                               "ops_csv": "ops.csv"},
                        notes=notes, has_memory=any(has_memory(t) for t in traces),
                        ranks=ranks if len(traces) > 1 else None, version=__version__)
    return PassOutput(name="analyze", manifest={"inputs": len(traces)}, core=core,
                      section=section, recommendations=recommendations), lead


def pass_status(outcome: ChildOutcome,
                child: Optional[dict[str, Any]]) -> tuple[str, int, Optional[dict[str, Any]]]:
    """(status, exit code, error) of a pass from how its process ended and its own record."""
    if outcome.timed_out:
        return "timeout", 124, {"type": "Timeout", "message": "stopped by --timeout"}
    if outcome.terminated:
        return "terminated", 143, {"type": "Terminated", "message": "nsbridge got SIGTERM "
                                   "(a launcher or scheduler ending the job) and ended the script"}
    if outcome.interrupted or (child and child["status"] == "interrupted"):
        return "interrupted", 130, {"type": "KeyboardInterrupt", "message": "interrupted (Ctrl-C)"}
    if child is None:
        return "failed", outcome.returncode or 1, {
            "type": "ChildDied", "message": f"the profiled process ended with status "
                                            f"{outcome.returncode} before writing its record"}
    return child["status"], int(child["exit_code"]), child.get("error")


def has_memory(trace: Optional[TorchTrace]) -> bool:
    return trace is not None and bool((trace.events[S.CAT] == S.MEMORY).any())


def _rank_summary(index: int, trace: TorchTrace, analysis: TraceAnalysis) -> dict[str, Any]:
    numbers = analysis.verdict["numbers"]
    return {"rank": trace.rank if trace.rank is not None else index, "file": str(trace.path),
            "verdict": analysis.verdict["label"], "step_ms": numbers["step_ms"],
            "busy_pct": numbers["device_busy_pct"], "ops": int(len(analysis.ops))}


def _triage_notes(torch_pass: TorchPass, child: dict[str, Any]) -> list[str]:
    notes = []
    if child.get("schedule_note"):
        notes.append(child["schedule_note"])
    if child.get("mode") == "whole-run":
        notes.append("no training step was detected (no optimizer.step() and no "
                     "nsbridge.step()): the whole run was profiled as one window, warm-up "
                     "included. Call nsbridge.step() at the end of each iteration to measure "
                     "steady-state steps.")
    if torch_pass.outcome.killed:
        notes.append("the profiled process did not stop in time and was killed; its trace "
                     "may be missing")
    if len(torch_pass.traces) > 1:
        notes.append(f"{len(torch_pass.traces)} measured windows were saved (schedule repeat); "
                     "the report analyses the first")
    return notes
