"""triage of a distributed job (``triage_job``: the passes on its ranks as one pipeline),
and the torch.profiler pass on its ranks (``RankedTorchPass``): every rank
profiled into its own folder of one run directory (distributed.launch), then the reduce:
the ranks' summaries (job.summary) merged into the cross-rank section (model.ranks.cross_rank),
one rank's trace analysed in full; ``analyze`` of such a run's folder merges them again.
Ranks a launcher started mark their summary written in the job's store (job.store) and
rank 0 blocks until all have; with no store, each rank profiles itself and the merge is
``nsbridge analyze`` once the launcher's step has ended.
The run directory of a job (``job_run``) and what a rank other than 0 does
(``follow_triage``). The nsys and ncu passes on the ranks are distributed.fan_out's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .. import __version__, progress
from .. import schema as S
from ..collect.machine import usable_cores
from ..guard.confine import readable
from ..errors import DeepError, TraceError
from ..job.identity import job_id, rank_dir_name, rank_dirs, ranked_dirs
from ..job.store import JobStore, NoStore, connect
from ..job.summary import SUMMARY_WAIT_S, missing_ranks, read_summaries, unprofiled
from ..model.analysis import TraceAnalysis, analyze_events
from ..model.ranks.cross_rank import cross_rank
from ..model.host.overhead import profiler_overhead
from ..parse.torch_trace import read_trace
from ..passes.ncu_pass import DeepOnRanks
from ..passes.nsys_pass import TimelineOnRanks
from ..passes.torch_pass import has_memory, process_machine
from ..pipeline import Given, Pass, preflight, run_passes
from ..profiles import Profile
from ..report.document.build import build_report
from ..result import RunResult, follower_result, result_of
from ..run import PassOutput, Run
from ..rundir import load_record, new_run_dir
from ..script_check import Script
from ..contract.report import Error
from ..schema.records import Mark, ManifestPass, RankSummary, RunSource
from .fan_out import OnRanks, follow
from .launch import launcher_argv, one_node, profile_ranks
from .nodes import RUN_KEY, Nodes, follow_nodes, join_nodes


def triage_job(script: Script, profile: Profile, *, out: Optional[Union[str, Path]],
               timeout: Optional[float], rank: Any, launcher: dict[str, Any],
               ranks: Optional[list[int]], nsys: bool, deep_top: Optional[int],
               deep_profile: Profile, deep_ranks: Optional[list[int]],
               on_plan: Optional[Callable[[str], None]], source: RunSource,
               environ: Mapping[str, str]) -> RunResult:
    """triage of a job of several ranks: the torch.profiler pass on every rank, then nsys
    and ncu on the ranks, as one pipeline with one save (rank 0, or this process when it
    launches the ranks with ``launcher``'s torch.distributed.run options); a rank other
    than 0 runs its share of each."""
    nproc, nnodes = launcher["nproc_per_node"], launcher["nnodes"]
    argv = launcher_argv(**launcher) if nproc else []
    nodes = join_nodes(launcher, out) if argv and (nsys or deep_top is not None) else None
    world = rank.world_size if rank is not None else nodes.world if nodes else nproc
    if deep_ranks and max(deep_ranks) >= (world or 0) and (nodes or one_node(nnodes)):
        raise DeepError(f"--deep-ranks {','.join(map(str, deep_ranks))}: the job has "
                        f"ranks 0 to {(world or 1) - 1}.")
    shares: list[tuple[Any, Profile]] = []
    if nsys:
        shares.append((TimelineOnRanks(timeout=timeout), profile))
    if deep_top is not None:
        shares.append((DeepOnRanks(deep_profile.deep, top=deep_top or None, ranks=deep_ranks,
                                   timeout=timeout, on_plan=on_plan), deep_profile))
    rank_passes = [OnRanks(share, prof, rank, argv, environ, nodes) for share, prof in shares]
    preflight(rank_passes)   # on every rank, before any script runs (the job's store too)
    store, alone = None, ""
    if rank is not None:
        try:
            store = connect(rank, environ)
        except NoStore as exc:
            alone = str(exc)
    s, label = script, script.label
    if nodes is not None and nodes.node != 0:
        return follow_nodes(nodes, target=s.target, args=s.args, module=s.module,
                            profile=profile, cwd=s.cwd, timeout=timeout, ranks=ranks,
                            launcher=argv, kinds=[share.kind for share, _ in shares],
                            environ=environ)
    if rank is not None and rank.rank != 0:
        return follow_triage(target=s.target, args=s.args, module=s.module, profile=profile,
                             out=out, cwd=s.cwd, timeout=timeout, rank=rank, ranks=ranks,
                             label=label, kinds=[share.kind for share, _ in shares],
                             environ=environ, store=store)
    run = job_run(target=s.target, args=s.args, module=s.module, profile=profile, out=out,
                  cwd=s.cwd, label=label, launcher=argv, environ=environ, source=source)
    passes: list[Pass] = [RankedTorchPass(
        target=s.target, args=s.args, module=s.module, profile=profile, cwd=s.cwd,
        timeout=timeout, rank=rank, ranks=ranks, launcher=argv,
        world=nodes.world if nodes else (nproc or 0) if one_node(nnodes) else 0,
        environ=environ, store=store, no_store=alone, nodes=nodes)]
    return result_of(run_passes(run, [*passes, *rank_passes]))


def job_run(*, target: str, args: list[str], module: bool, profile: Profile,
            out: Optional[Union[str, Path]], cwd: Path, label: str, launcher: list[str],
            environ: Mapping[str, str], source: Optional[RunSource] = None) -> Run:
    """The run directory of a job's triage, made by the process that merges it: this one
    when it launches the ranks (``launcher``), else rank 0, in the directory every rank of
    the job names alike (job_id) and writes its own folder into."""
    if launcher:
        run = Run.create(out=Path(out) if out else None, label=label, command="triage",
                         target=target, args=args, profile=profile, cwd=cwd, module=module,
                         source=source)
        run.manifest["launcher"] = launcher   # `timeline`/`deep --run` start the ranks alike
        return run
    return Run.create(out=Path(out) if out else None, label=_job_label(label, environ),
                      command="triage", target=target, args=args, profile=profile, cwd=cwd,
                      module=module, shared=True, source=source)


@dataclass
class RankedTorchPass:
    """The torch.profiler pass on every rank of a job, reduced: each rank profiled into its
    folder of the run (distributed.launch), then the ranks' summaries merged into the
    cross-rank section, one rank's trace analysed in full. ``launcher``: this process
    starts the ranks through torch.distributed.run and merges once it returns; else
    ``rank`` is rank 0 of ranks a launcher started, and merges once every rank's summary
    is there."""

    target: str
    args: list[str]
    module: bool
    profile: Profile
    cwd: Path
    timeout: Optional[float]
    rank: Any
    ranks: Optional[list[int]]
    launcher: list[str]
    world: int
    environ: Mapping[str, str]
    store: Optional[JobStore] = None
    no_store: str = ""
    nodes: Optional[Nodes] = None
    name: str = "torch.profiler (ranks)"

    def plan(self, run: Run) -> None:
        return None

    def run(self, run: Run, plan: None) -> PassOutput:
        if self.rank is not None:
            forget_summary(run.dir, self.rank.rank)
        if self.nodes is not None:   # the other machines start their ranks into this run
            self.nodes.store.say(RUN_KEY, {"run_dir": str(run.dir.resolve())})
        code = profile_ranks(run.dir, target=self.target, args=self.args, module=self.module,
                             profile=self.profile, cwd=self.cwd, timeout=self.timeout,
                             ranks=self.ranks, launcher=self.launcher,
                             environ=self.environ)
        notes: list[str] = []
        if self.launcher:
            if self.nodes is not None:
                wait = (self.timeout or SUMMARY_WAIT_S) if code == 0 else 10.0
                with progress.step(f"waiting for the other {self.nodes.nnodes - 1} machine(s)"):
                    notes += self.nodes.late_note(self.nodes.wait("summary", wait),
                                                  "its torch.profiler pass", wait)
            summaries = read_summaries(run.dir)
            if self.world:   # every rank wrote here (several nodes nsbridge did not join:
                             # only this one's)
                summaries += missing_ranks(summaries, range(self.world), self.world, run.dir)
        elif self.store is None:
            summaries = [s for s in read_summaries(run.dir) if s["rank"] == 0]
            summaries += missing_ranks(summaries, [0], self.rank.world_size, run.dir)
            notes.append(f"this report is rank 0's alone: {self.no_store}, so the ranks could "
                         "not wait for each other; once the launcher's step has ended, "
                         f"`nsbridge analyze {run.dir}` merges every rank")
        else:
            self.store.mark("summary", {"exit_code": code})
            with progress.step(f"waiting for the other {self.rank.world_size - 1} rank(s)"):
                # stopped (timeout, signal): a short wait
                wait = (self.timeout or SUMMARY_WAIT_S) if code == 0 else 10.0
                marks = self.store.gather("summary", range(self.rank.world_size), Mark, wait)
            summaries = gathered(run.dir, marks, self.rank.world_size, wait)
        with progress.step("merging the ranks"):
            output, analysis = reduce(run.dir, summaries, self.profile,
                                      " ".join([self.target, *self.args]))
        output.notes.extend(notes)
        if analysis is not None:
            output.frames["analysis"] = analysis
        return replace(output, exit_code=output.exit_code or code)


def forget_summary(run_dir: Path, rank: int) -> None:
    """Remove an earlier launch's summary of ``rank`` from the folder (a run directory
    every rank names alike may be used again), so the one read is this launch's."""
    (run_dir / rank_dir_name(rank) / S.SUMMARY_JSON).unlink(missing_ok=True)


def gathered(run_dir: Path, marks: Mapping[int, Optional[Mark]], world: int,
             waited_s: float) -> list[RankSummary]:
    """Every rank's summary, by its mark in the job's store: read once for a rank that
    marked it written; a rank that marked it but wrote none failed (its child record
    says how); a rank whose mark did not come within ``waited_s`` is hung, named."""
    done = [rank for rank, mark in marks.items() if mark is not None]
    summaries = [s for s in read_summaries(run_dir) if s["rank"] in done]
    summaries += missing_ranks(summaries, done, world, run_dir)
    summaries += [unprofiled(rank, world, status="hung", exit_code=None,
                             error={"type": "Hung", "message": f"rank {rank} did not mark its "
                                    f"summary written in the job's store within {waited_s:.0f} "
                                    "s after rank 0 finished (dead, hung, or still running)"})
                  for rank, mark in marks.items() if mark is None]
    return sorted(summaries, key=lambda s: s["rank"])


def follow_triage(*, target: str, args: list[str], module: bool, profile: Profile,
                  out: Optional[Union[str, Path]], cwd: Path, timeout: Optional[float],
                  rank: Any, ranks: Optional[list[int]], label: str, kinds: Sequence[str],
                  environ: Mapping[str, str], store: Optional[JobStore]) -> RunResult:
    """A rank other than 0 of ranks a launcher started: profiled into its folder, its
    summary marked written in the job's ``store`` (None: there is none), then its share of
    each later pass (``kinds``) when rank 0 says so; rank 0 writes the report."""
    run_dir = new_run_dir(Path(out) if out else None, _job_label(label, environ), shared=True)
    forget_summary(run_dir, rank.rank)
    code = profile_ranks(run_dir, target=target, args=args, module=module, profile=profile,
                         cwd=cwd, timeout=timeout, ranks=ranks, environ=environ)
    if store is not None:
        store.mark("summary", {"exit_code": code})
    for kind in kinds:
        if code == 0:
            code = follow(kind, run_dir, rank, timeout, environ)
    return follower_result(run_dir, rank, code, "triage", " ".join([target, *args]))


def _job_label(label: str, environ: Mapping[str, str]) -> str:
    """The run directory's name every rank of one job gives alike (job_id)."""
    return f"{job_id(environ)}-{label}"


def analyze_ranks(source: Path, prof: Profile, out: Optional[Union[str, Path]]) -> RunResult:
    """A distributed run's rank summaries merged again (one rank's trace loaded)."""
    summaries = read_summaries(source)
    world = max(s["world_size"] for s in summaries)
    on_disk = [rank for rank, _ in ranked_dirs(source) if rank < world]   # never range(world)
    summaries += missing_ranks(summaries, on_disk, world, source)
    output, analysis = reduce(source, summaries, prof, str(source), command="analyze")
    if len(summaries) < world:
        output.notes.append(f"{len(summaries)} of {world} ranks present in {source}: the other "
                            f"{world - len(summaries)} left no rank folder there; only the "
                            "ranks present are compared")
    files = output.core.get("files") if output.core else None   # reduce builds them
    if files is not None:
        trace = files.get("trace")
        if isinstance(trace, str):
            files["trace_input"] = str(readable(source / trace).resolve())
            files["trace"] = None
        files["key_averages"] = None
    run = Run.create(out=Path(out) if out else None, label=f"analyze-{source.name}",
                     command="analyze", target=str(source), args=[], profile=prof,
                     cwd=Path.cwd())
    if analysis is not None:
        output.frames["analysis"] = analysis
    return result_of(run_passes(run, [Given(output)]), 0)


def reduce(run_dir: Path, summaries: list[RankSummary], profile: Profile, target: str,
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
    if summary is not None and lead is not None:
        folder = run_dir / rank_dir_name(lead)
        child_path = folder / S.CHILD_JSON
        child: Optional[S.ChildRecord] = (load_record(readable(child_path), S.ChildRecord)
                                          if child_path.is_file() else None)
        steps = child.get("steps", []) if child else []
        machine = process_machine({"cores": usable_cores()}, child.get("machine"), steps,
                                  profile) if child else None
        try:
            trace = read_trace(readable(folder / str(summary["trace"])))   # chosen for it
            analysis = analyze_events(trace.events, thresholds=profile.analysis,
                                      machine=machine)
        except TraceError as exc:
            notes.append(f"rank {lead}'s trace could not be analysed: {exc}")
    else:
        steps, machine, child = [], None, None
    failed = cross["failed"]
    status = "ok" if not failed else ("hung" if all(f["status"] == "hung" for f in failed)
                                      else "failed")
    error: Optional[Error] = None
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
                        step_source=child.get("step_source") if child else None,
                        overhead=profiler_overhead(
                            steps, bool(machine and (machine.get("contention") or {}).get("contended")),
                            ((machine or {}).get("threads") or {}).get("intra_op"))
                        if steps else None, files=files, notes=notes,
                        has_memory=has_memory(trace), error=error, version=__version__,
                        machine=machine, child_steps=steps,
                        environment=child.get("env") if child else None)
    recommendation = straggler.get("recommendation")
    manifest: ManifestPass = {
        "ranks": [{"rank": number, "host": r.get("host"), "status": r.get("status"),
                   "exit_code": r.get("exit_code")}
                  for r in cross.get("ranks") or [] if (number := r.get("rank")) is not None],
        "world_size": cross.get("world_size")}
    return PassOutput(name="torch.profiler (ranks)", manifest=manifest, status=status,
                      exit_code=_exit_code(failed), error=error, core=core,
                      section=(S.DISTRIBUTED_SECTION, cross),
                      recommendations=[recommendation] if recommendation else [],
                      sources={S.DISTRIBUTED_SECTION: "each rank's summary.json (written by the rank "
                                              "itself from its own trace) merged by rank"}), \
        analysis


def _exit_code(failed: Optional[list[Any]]) -> int:
    for f in failed or []:
        if f.get("exit_code"):
            return int(f["exit_code"])
    return 1 if failed else 0
