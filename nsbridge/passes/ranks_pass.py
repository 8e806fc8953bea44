"""The distributed torch.profiler pass: every rank profiled into its own folder, then the
reduce: rank summaries merged into the cross-rank report, one trace analysed in full.

Two ways in: nsbridge starts the ranks through torch.distributed.run (``launch``), or a
launcher (torchrun, srun, mpirun) started one nsbridge per rank, each of which profiles
its own rank, and rank 0 merges once every rank's summary is there (``wait_for``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .. import __version__, progress
from ..collect.machine import usable_cores
from ..collect.torch_profiler import run_torch_pass
from ..distributed.ranks import rank_dir_name, rank_dirs
from ..distributed.summary import SUMMARY
from ..errors import TraceError
from ..model.analysis import TraceAnalysis, analyze_events
from ..model.overhead import profiler_overhead
from ..model.cross_rank import cross_rank
from ..parse.torch_trace import read_trace
from ..profiles import Profile
from ..report.build import build_report
from ..run import PassOutput
from .torch_pass import has_memory, process_machine

POLL_S = 0.5   # how often a waiting rank looks for the others' files


def launcher_argv(*, nproc_per_node: int, nnodes: Optional[str], node_rank: Optional[int],
                  rdzv_endpoint: Optional[str]) -> list[str]:
    """torch.distributed.run's options (torchrun's own module does the launching)."""
    argv = ["--nproc-per-node", str(nproc_per_node)]
    if nnodes:
        argv += ["--nnodes", str(nnodes)]
    if node_rank is not None:
        argv += ["--node-rank", str(node_rank)]
    if rdzv_endpoint:
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint]
    else:
        argv += ["--standalone"] if not nnodes or str(nnodes) == "1" else []
    return argv


def profile_ranks(run_dir: Path, *, target: str, args: Sequence[str], module: bool,
                  profile: Profile, cwd: Path, timeout: Optional[float],
                  ranks: Optional[list[int]], launcher: Sequence[str] = (),
                  environ: Mapping[str, str] = os.environ) -> int:
    """Run this process's rank (or, with ``launcher``, all local ranks through
    torch.distributed.run) into rank folders; returns the exit status."""
    label = "the ranks" if launcher else "this rank"
    with progress.step(f"running {target} under torch.profiler ({label})", script_output=True):
        result = run_torch_pass(target=target, is_module=module, args=args, profile=profile,
                                run_dir=run_dir, cwd=cwd, timeout=timeout, environ=environ,
                                distributed={"ranks": ranks}, launcher=launcher)
    outcome = result.outcome
    if outcome.timed_out:
        return 124
    if outcome.interrupted:
        return 130
    return outcome.returncode


def wait_for(run_dir: Path, world_size: int, timeout_s: float,
             since: float = 0.0) -> list[dict[str, Any]]:
    """Every rank's summary written after ``since`` (epoch seconds); a rank whose summary
    does not come within ``timeout_s`` is reported as hung (what it wrote is kept)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(read_summaries(run_dir, since)) < world_size:
        time.sleep(POLL_S)
    found = {s["rank"]: s for s in read_summaries(run_dir, since)}
    for rank in range(world_size):
        if rank not in found:
            found[rank] = {"rank": rank, "host": None, "world_size": world_size,
                           "status": "hung", "exit_code": None, "profiled": False,
                           "error": {"type": "Hung", "message": f"no summary from rank {rank} "
                                     f"within {timeout_s:.0f} s after rank 0 finished"}}
    return [found[r] for r in sorted(found)]


def read_summaries(run_dir: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """The rank summaries written so far, after ``since`` (a rank that died before writing
    one is left out: the caller reports it)."""
    out = []
    for folder in rank_dirs(run_dir):
        path = folder / SUMMARY
        if path.is_file() and path.stat().st_mtime >= since:
            try:
                out.append(json.loads(path.read_text(encoding="utf-8")))
            except ValueError:   # being written right now
                continue
    return out


def missing_ranks(summaries: list[dict[str, Any]], world_size: int,
                  run_dir: Path) -> list[dict[str, Any]]:
    """Ranks that wrote no summary: failed before the end, with their child record."""
    have = {s["rank"] for s in summaries}
    out = []
    for rank in range(world_size):
        if rank in have:
            continue
        child = run_dir / rank_dir_name(rank) / "child.json"
        record = json.loads(child.read_text(encoding="utf-8")) if child.is_file() else {}
        out.append({"rank": rank, "host": None, "world_size": world_size,
                    "status": record.get("status", "failed"),
                    "exit_code": record.get("exit_code"), "profiled": False,
                    "error": record.get("error") or {"type": "NoSummary", "message":
                                                     "the rank ended without its summary"}})
    return out


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
        child_path = folder / "child.json"
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
                                  else "the slowest") + "); the cross-rank numbers are under "
                 "`distributed`" if lead is not None else f"{len(summaries)} ranks, none profiled")
    cross["shown_rank"] = lead
    folder_name = rank_dir_name(lead) if lead is not None else None
    files = {"trace": f"{folder_name}/{summary['trace']}" if summary else None,
             "key_averages": f"{folder_name}/key_averages.txt" if summary else None,
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
                      section=("distributed", cross),
                      recommendations=[recommendation] if recommendation else [],
                      sources={"distributed": "each rank's summary.json (written by the rank "
                                              "itself from its own trace) merged by rank"}), \
        analysis


def _exit_code(failed: list[dict[str, Any]]) -> int:
    for f in failed:
        if f.get("exit_code"):
            return int(f["exit_code"])
    return 1 if failed else 0
