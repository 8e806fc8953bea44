"""The torch.profiler pass on a distributed job's ranks: every rank profiled into its own
folder of one run directory (distributed.launch), then the reduce: the ranks' summaries
(distributed.summary) merged into the cross-rank section (model.cross_rank), one rank's
trace analysed in full; ``analyze`` of such a run's folder merges them again. The nsys and
ncu passes on the ranks are distributed.fan_out's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from .. import __version__, progress
from .. import schema as S
from ..collect.machine import usable_cores
from ..errors import TraceError
from ..model.analysis import TraceAnalysis, analyze_events
from ..model.cross_rank import cross_rank
from ..model.overhead import profiler_overhead
from ..parse.torch_trace import read_trace
from ..passes.torch_pass import has_memory, process_machine
from ..pipeline import Given, run_passes
from ..profiles import Profile
from ..report.build import build_report
from ..result import RunResult, follower_result, result_of
from ..run import PassOutput, Run
from ..rundir import new_run_dir
from .identity import job_id, rank_dir_name, rank_dirs
from .launch import profile_ranks
from .summary import SUMMARY_WAIT_S, missing_ranks, read_summaries, wait_for


def triage_ranks(target: str, args: list[str], *, module: bool, profile: Profile,
                  out: Optional[Union[str, Path]], timeout: Optional[float], cwd: Path,
                  rank: Any, ranks: Optional[list[int]], launcher: list[str], world: int,
                  label: str, environ: Mapping[str, str]) -> RunResult:
    """Every rank profiled into its own folder of one run directory, then merged: by this
    process after torch.distributed.run returns (``launcher``), or, when a launcher started
    one nsbridge per rank, by rank 0 once every rank's summary is there."""
    if launcher:
        run = Run.create(out=Path(out) if out else None, label=label, command="triage",
                         target=target, args=args, profile=profile, cwd=cwd, module=module)
        run.manifest["launcher"] = launcher   # `timeline`/`deep --run` start the ranks alike
        code = profile_ranks(run.dir, target=target, args=args, module=module,
                             profile=profile, cwd=cwd, timeout=timeout, ranks=ranks,
                             launcher=launcher, environ=environ)
        summaries = read_summaries(run.dir)
        if world:   # one node: every rank wrote here (several nodes: only this node's)
            summaries += missing_ranks(summaries, world, run.dir)
    else:
        run_dir = new_run_dir(Path(out) if out else None, f"{job_id(environ)}-{label}",
                              shared=True)
        started = time.time()
        code = profile_ranks(run_dir, target=target, args=args, module=module,
                             profile=profile, cwd=cwd, timeout=timeout, ranks=ranks,
                             environ=environ)
        if rank.rank != 0:
            return follower_result(run_dir, rank, code, "triage", " ".join([target, *args]))
        with progress.step(f"waiting for the other {rank.world_size - 1} rank(s)"):
            # stopped (timeout, signal): a short wait; summaries older than this launch
            # (an earlier run into the same --out) never count
            summaries = wait_for(run_dir, rank.world_size,
                                 (timeout or SUMMARY_WAIT_S) if code == 0 else 10.0, since=started)
        run = Run.create(out=run_dir, label=label, command="triage", target=target,
                         args=args, profile=profile, cwd=cwd, module=module, shared=True)
    with progress.step("merging the ranks"):
        output, analysis = reduce(run.dir, summaries, profile, " ".join([target, *args]))
    if analysis is not None:
        output.frames["analysis"] = analysis
    return result_of(run_passes(run, [Given(output)]), output.exit_code or code)


def analyze_ranks(source: Path, prof: Profile, out: Optional[Union[str, Path]]) -> RunResult:
    """A distributed run's rank summaries merged again (one rank's trace loaded)."""
    summaries = read_summaries(source)
    summaries += missing_ranks(summaries, max(s.get("world_size") or 0 for s in summaries),
                               source)
    output, analysis = reduce(source, summaries, prof, str(source), command="analyze")
    if output.core["files"].get("trace"):
        output.core["files"]["trace_input"] = str((source / output.core["files"]["trace"])
                                                  .resolve())
        output.core["files"]["trace"] = None
    output.core["files"]["key_averages"] = None
    run = Run.create(out=Path(out) if out else None, label=f"analyze-{source.name}",
                     command="analyze", target=str(source), args=[], profile=prof,
                     cwd=Path.cwd())
    if analysis is not None:
        output.frames["analysis"] = analysis
    return result_of(run_passes(run, [Given(output)]), 0)


def reduce(run_dir: Path, summaries: list[dict[str, Any]], profile: Profile, target: str,
           command: str = "triage") -> tuple[PassOutput, Optional[TraceAnalysis]]:
    """The cross-rank section from the summaries, and the full report of one rank (the
    straggler, else the slowest): only that rank's trace is loaded."""
    cross = cross_rank(summaries, profile.analysis.straggler_pct,
                       straggler_min_ms=profile.analysis.straggler_min_ms)
    straggler = cross.get("straggler") or {}
    lead = straggler.get("rank")
    if lead is None and cross["step"]:
        lead = cross["step"]["slowest_rank"]
    summary = next((s for s in summaries if s["rank"] == lead and s.get("trace")), None)
    analysis, trace, notes = None, None, []
    if summary is not None:
        folder = run_dir / rank_dir_name(lead)
        child_path = folder / S.CHILD_JSON
        child = json.loads(child_path.read_text(encoding="utf-8")) if child_path.is_file() else {}
        steps = child.get("steps", [])
        machine = process_machine({"cores": usable_cores()}, child, profile) if child else None
        try:
            trace = read_trace(folder / summary["trace"])
            analysis = analyze_events(trace.events, thresholds=profile.analysis,
                                      machine=machine)
        except TraceError as exc:
            notes.append(f"rank {lead}'s trace could not be analysed: {exc}")
    else:
        steps, machine, child = [], None, {}
    failed = cross["failed"]
    status = "ok" if not failed else ("hung" if all(f["status"] == "hung" for f in failed)
                                      else "failed")
    error = None
    if failed:
        first = failed[0]
        error = {"type": "RankFailed", "message": f"rank {first['rank']} ended with status "
                 f"{first['status']}" + (f": {first['error']['type']}: "
                                         f"{first['error'].get('message')}" if first.get("error")
                                         else ""), "rank": first["rank"]}
    notes.append(f"{len(summaries)} ranks: ops, steps, verdict and device figures are rank "
                 f"{lead}'s (" + ("the straggler" if straggler.get("rank") is not None
                                  else "the slowest") + "); the Ranks section compares them all"
                 if lead is not None else f"{len(summaries)} ranks, none profiled")
    cross["shown_rank"] = lead
    folder_name = rank_dir_name(lead) if lead is not None else None
    files = {"trace": f"{folder_name}/{summary['trace']}" if summary else None,
             "key_averages": f"{folder_name}/{S.KEY_AVERAGES}" if summary else None,
             "ranks": [p.name for p in rank_dirs(run_dir)]}
    core = build_report(command=command, target=target, status=status, analysis=analysis,
                        step_source=None, overhead=profiler_overhead(
                            steps, bool(machine and machine["contention"]["contended"]))
                        if steps else None, files=files, notes=notes,
                        has_memory=has_memory(trace), error=error, version=__version__,
                        machine=machine, child_steps=steps,
                        environment=child.get("env"))
    recommendation = straggler.get("recommendation")
    manifest = {"ranks": [{k: r[k] for k in ("rank", "host", "status", "exit_code")}
                          for r in cross["ranks"]], "world_size": cross["world_size"]}
    return PassOutput(name="torch.profiler (ranks)", manifest=manifest, status=status,
                      exit_code=_exit_code(failed), error=error, core=core,
                      section=(S.DISTRIBUTED_SECTION, cross),
                      recommendations=[recommendation] if recommendation else [],
                      sources={S.DISTRIBUTED_SECTION: "each rank's summary.json (written by the rank "
                                              "itself from its own trace) merged by rank"}), \
        analysis


def _exit_code(failed: list[dict[str, Any]]) -> int:
    for f in failed:
        if f.get("exit_code"):
            return int(f["exit_code"])
    return 1 if failed else 0
