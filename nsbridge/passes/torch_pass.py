"""The torch.profiler pass: run the script under the profiler, or read traces, and analyse."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, cast

from .. import __version__, progress
from .. import schema as S
from ..collect._process import ChildOutcome
from ..collect.torch_profiler import TorchPass, recorded_pass, run_torch_pass
from ..contract.check import report_problem
from ..errors import ProfileError, TraceError, TraceFormatError, TraceNotFoundError
from ..job.executors import map_in_order
from ..job.trace_map import digest_trace, reduce_digests
from ..model.analysis import TraceAnalysis, analyze_events
from ..model.judging.contention import combine_runs, machine_facts
from ..model.comparing.pooled import pool_analyses
from ..model.device.snapshot_memory import snapshot_memory
from ..model.host.overhead import profiler_overhead
from ..model.ranks.cross_rank import cross_rank
from ..parse.memory_snapshot import read_snapshot
from ..parse.torch_trace import TorchTrace, read_trace
from ..profiles import SECTIONS, Profile, load_profile, profile_from_dict
from ..report.document.build import build_report
from ..run import PassOutput, Run
from ..script_check import Script
from ..rundir import read_run
from .outcome import pass_status
from ..contract.report import AllocatorSnapshot, Error, Machine, MachineCores
from ..schema.records import (Around, ChildRecord, ChildStep, Manifest, ProcessMachine,
                              Window)


def profile_script(run_dir: Path, *, target: str, args: Sequence[str], module: bool,
                   profile: Profile, cwd: Path, timeout: Optional[float],
                   environ: Mapping[str, str] = os.environ, runs: int = 1,
                   window: str = "steps", threads: Optional[int] = None
                   ) -> tuple[PassOutput, Optional[TraceAnalysis]]:
    """Run the target under torch.profiler into ``run_dir`` and analyse its trace; with
    ``runs`` > 1 the script runs that many times (the later ones into repeat-NN/) and the
    runs' steps are pooled (model.comparing.pooled). A run that fails ends the series. ``threads``:
    torch's intra-op threads in the profiled process (None: as the script and the
    environment set them), recorded in the machine facts as ``threads.requested``."""
    passes: list[TorchPass] = []
    for i in range(1, runs + 1):
        folder = run_dir / repeat_dir_name(i) if i > 1 else run_dir
        folder.mkdir(exist_ok=True)
        what = f"running {target} under torch.profiler" + (f" (run {i} of {runs})"
                                                            if runs > 1 else "")
        with progress.step(what, script_output=True):
            passes.append(run_torch_pass(target=target, is_module=module, args=args,
                                         profile=profile, run_dir=folder, cwd=cwd,
                                         timeout=timeout, environ=environ,
                                         threads=threads))
        if pass_status(passes[-1].outcome, passes[-1].child)[0] != "ok":
            break
    status, exit_code, error = pass_status(passes[-1].outcome, passes[-1].child,
                                           passes[-1].doing)
    steps = pooled_steps(passes)
    lead = passes[0].child
    machine = process_machine(combine_runs([tp.machine for tp in passes]),
                              lead.get("machine") if lead else None, steps, profile)
    if threads:
        machine["threads"] = {**(machine.get("threads") or {}), "requested": threads}
    return analyse_passes(run_dir, passes, target=target, args=args, profile=profile,
                          window=window, machine=machine, status=status,
                          exit_code=exit_code, error=error)


def _memory_snapshot(run_dir: Path, notes: list[str]
                     ) -> tuple[Optional[AllocatorSnapshot], Optional[str]]:
    """The first of the run's memory snapshots (S.SNAPSHOTS_READ: the allocator's at an
    out-of-memory, the allocator's history on a GPU, torch's of the recording) analysed,
    and its file name; a damaged one is a note."""
    for name in S.SNAPSHOTS_READ:
        path = run_dir / name
        if path.is_file():
            try:
                return snapshot_memory(read_snapshot(path)), name
            except TraceFormatError as exc:
                notes.append(f"the memory snapshot {name} could not be read: {exc}")
    return None, None


def pooled_steps(passes: Sequence[TorchPass]) -> list[ChildStep]:
    """Every step the processes timed, each with its run (1..N)."""
    return [{**step, "run": i} for i, tp in enumerate(passes, 1) if tp.child
            for step in tp.child.get("steps") or []]


def analyse_passes(run_dir: Path, passes: Sequence[TorchPass], *, target: str,
                   args: Sequence[str], profile: Profile, window: str,
                   machine: Machine, status: str, exit_code: int,
                   error: Optional[Error], command: str = "triage",
                   files: Optional[dict[str, Any]] = None
                   ) -> tuple[PassOutput, Optional[TraceAnalysis]]:
    """The report of profiled processes' records (``passes``: what each left in
    ``run_dir`` or its repeat-NN/): their traces analysed with what the processes knew
    (steps, sync records, machine facts, math settings) and pooled. Used by the pass that
    ran them and by ``analyze RUN_DIR`` (``command``, ``files``: the report's own)."""
    children = [tp.child for tp in passes]
    child = children[0]
    steps = pooled_steps(passes)
    notes = _triage_notes(passes[0], child)
    if len(passes) > 1:
        notes.append(f"{len(passes)} runs of the script pooled: ops are totals over the "
                     "measured steps of every run, intervals resample runs then steps; the "
                     "trace, key_averages and merged trace are run 1's (the others are in "
                     "repeat-NN/)")
    analyses, trace = [], None
    for i, (tp, c) in enumerate(zip(passes, children), 1):
        if not tp.traces:
            continue
        try:
            with progress.step("reading the trace" + (f" of run {i}" if len(passes) > 1
                                                      else "")):
                read = read_trace(tp.traces[0])
            notes.extend(read.notes())
            with progress.step("analysing the trace" + (f" of run {i}" if len(passes) > 1
                                                        else "")):
                analyses.append(analyze_events(read.events, thresholds=profile.analysis,
                                               process_syncs=c.get("syncs") if c else None,
                                               process_steps=steps_seen(c) or None,
                                               script=target, machine=machine,
                                               window=window, complete_steps=True,
                                               last_step_cut=bool(c and (c.get("window") or {})
                                                                  .get("stopped_by"))))
            trace = trace or read
        except TraceError as exc:
            notes.append(f"the trace of run {i} could not be analysed: {exc}")
    analysis = pool_analyses(analyses, profile.analysis, machine) if analyses else None
    if analysis is None and status == "ok":
        status = "no-trace"
    lead = passes[0]
    files = files or {"trace": lead.traces[0].name if lead.traces else None,
                      "traces": [p.name for p in lead.traces],
                      "key_averages": lead.table.name if lead.table else None,
                      "ops_csv": S.OPS_CSV if analysis else None,
                      "profiler_noise": (S.PROFILER_NOISE_LOG if (run_dir / S.PROFILER_NOISE_LOG)
                                         .is_file() else None)}
    snapshot, snapshot_file = _memory_snapshot(run_dir, notes)
    if snapshot is not None:
        files["memory_snapshot"] = snapshot_file
    if len(passes) > 1 and command == "triage":
        files["repeats"] = [str(tp.traces[0].relative_to(run_dir)) for tp in passes[1:]
                            if tp.traces]
    contended = bool((machine.get("contention") or {}).get("contended"))
    core = build_report(command=command, target=" ".join([target, *args]), status=status,
                        analysis=analysis,
                        step_source=child.get("step_source") if child else None,
                        overhead=profiler_overhead(steps, contended,
                                                   (machine.get("threads") or {}).get("intra_op"))
                        if child else None,
                        files=files, notes=notes, has_memory=has_memory(trace), error=error,
                        version=__version__, machine=machine, child_steps=steps,
                        environment=child.get("env") if child else None)
    if snapshot is not None:
        core[S.SNAPSHOT_SECTION] = snapshot
    manifest: S.ManifestPass = {
        "wall_s": round(sum(tp.outcome.wall_s for tp in passes), 3), "runs": len(passes),
        "steps_seen": sum(steps_seen(c) for c in children),
        "step_source": child.get("step_source") if child else None,
        "environment": child.get("env") if child else None,
        "machine": cast(dict[str, Any], machine)}
    return PassOutput(name="torch.profiler" if command == "triage" else command,
                      manifest=manifest, status=status,
                      exit_code=exit_code, error=error, core=core), analysis


def analyse_run_dir(run_dir: Path, profile: Optional[Profile], window: str) -> PassOutput:
    """``analyze RUN_DIR`` on a triage's run directory: its processes' records (run 1 and
    repeat-NN/) analysed again as the triage did, with what the run knew: its machine
    facts (contention), steps, sync records, math settings and status; its profile's
    analysis thresholds unless ``profile`` is given.

    Raises:
        RunDirError: the run's manifest or report cannot be read.
    """
    manifest, report = read_run(run_dir, report_problem)
    first = (manifest.get("passes") or [{}])[0]
    if profile is None:
        profile = recorded_profile(manifest)
    folders = [run_dir, *sorted(f for f in run_dir.glob("repeat-*")
                                if (f / S.CHILD_JSON).is_file())]
    outcome = ChildOutcome(returncode=int(first.get("exit_code") or 0),
                           wall_s=float(first.get("wall_s") or 0.0), timed_out=False,
                           interrupted=False, killed=False)
    passes = [recorded_pass(f, outcome, {}) for f in folders]
    traces = [tp.traces[0] for tp in passes if tp.traces]
    output, analysis = analyse_passes(
        run_dir, passes, target=str(manifest.get("target") or run_dir),
        args=list(manifest.get("args") or []), profile=profile, window=window,
        machine=report.get("machine") or cast(Machine, first.get("machine")) or Machine(),
        status=str(report.get("status") or "ok"), exit_code=int(first.get("exit_code") or 0),
        error=report.get("error"), command="analyze",
        files={"trace": None, "inputs": [str(t) for t in traces],
               "trace_input": str(traces[0].resolve()) if traces else None,
               "ops_csv": S.OPS_CSV if traces else None})
    if analysis is not None:
        output.frames["analysis"] = analysis
    return output


def recorded_profile(manifest: Manifest) -> Profile:
    """The profile a run was made with (its manifest keeps every value, each checked as a
    profile file's); the default profile where the manifest's is not one this version
    reads."""
    recorded = manifest.get("profile")
    try:
        if not isinstance(recorded, dict):
            raise ProfileError("the manifest has no profile")
        return profile_from_dict({k: v for k, v in recorded.items() if k in SECTIONS},
                                 name=str(recorded.get("name") or "recorded"),
                                 source="the run's manifest")
    except ProfileError:
        return load_profile("default")


@dataclass(frozen=True)
class TorchProfilerPass:
    """The script under torch.profiler (``runs`` processes), its trace analysed."""

    script: Script
    profile: Profile
    timeout: Optional[float] = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    runs: int = 1
    window: str = "steps"
    threads: Optional[int] = None
    name: str = "torch.profiler"

    def plan(self, run: Run) -> None:
        return None

    def run(self, run: Run, plan: None) -> PassOutput:
        s = self.script
        output, analysis = profile_script(run.dir, target=s.target, args=s.args,
                                          module=s.module, profile=self.profile, cwd=s.cwd,
                                          timeout=self.timeout, environ=self.environ,
                                          runs=self.runs, window=self.window,
                                          threads=self.threads)
        if analysis is not None:
            output.frames["analysis"] = analysis
        return output


def repeat_dir_name(run: int) -> str:
    """The folder of the ``run``-th process of ``triage --runs`` (run 1 is the run folder)."""
    return f"repeat-{run:02d}"


def analyze_traces(files: Sequence[Path], profile: Profile, target: str,
                   window: str = "steps", jobs: int = 1,
                   cluster: Optional[str] = None) -> PassOutput:
    """Analyse torch.profiler traces captured elsewhere (the ranks of one job: ops summed,
    the slowest rank's verdict, a per-rank table), each read and analysed by
    job.trace_map's map on ``jobs`` local processes or the Dask cluster at ``cluster``;
    this process keeps each trace's summary and the slowest one's analysis only.

    Raises:
        TraceNotFoundError, TraceFormatError, EmptyTraceError: a file is not a usable trace.
        ClusterError: the cluster cannot be used (job.executors).
    """
    alone = len(files) == 1
    read_workers = 1 if (jobs > 1 or cluster) and not alone else None   # a worker reads alone
    paths = [Path(f).resolve() if cluster else Path(f) for f in files]
    with progress.step(f"reading and analysing {len(files)} trace(s)"):
        reduced = reduce_digests(map_in_order(
            digest_trace, paths, (profile.analysis, window, alone, read_workers),
            jobs=jobs, cluster=cluster, what="traces"))
    notes = reduced.notes
    if reduced.lead is None:
        raise TraceNotFoundError("None of the files given is a torch.profiler trace.")
    lead = reduced.lead.analysis
    section, recommendations = None, []
    if len(reduced.summaries) > 1:   # the ranks of one job: ops summed, the cross-rank report
        lead = TraceAnalysis(**{**lead.__dict__, "ops": reduced.ops})
        summaries = reduced.summaries
        notes.append(f"{len(summaries)} traces: ops are summed over all of them; verdict, steps, "
                     f"memory, shape groups and device figures are those of the slowest (rank "
                     f"{summaries[reduced.lead_index]['rank']})")
        cross = cross_rank(summaries, profile.analysis.straggler_pct,
                           straggler_min_ms=profile.analysis.straggler_min_ms)
        section = (S.DISTRIBUTED_SECTION, cross)
        rec = (cross.get("straggler") or {}).get("recommendation")
        recommendations = [rec] if rec else []
    core = build_report(command="analyze", target=target, status="ok", analysis=lead,
                        step_source=None, overhead=None,
                        files={"trace": None, "inputs": [str(p) for p in reduced.paths],
                               "trace_input": str(Path(reduced.lead.path).resolve()),
                               "ops_csv": S.OPS_CSV},
                        notes=notes, has_memory=reduced.has_memory, version=__version__)
    return PassOutput(name="analyze", manifest={"inputs": len(reduced.summaries)}, core=core,
                      section=section, recommendations=recommendations,
                      frames={"analysis": lead})


def process_machine(around: Around, process: Optional[ProcessMachine],
                    steps: Sequence[ChildStep], profile: Profile) -> Machine:
    """The machine facts of one profiled process (``around``: collect.machine's snapshots
    taken by the process that started it; ``process``, ``steps``: what the process saw)."""
    return machine_facts(cores=around.get("cores") or MachineCores(), run=around,
                         process=process, steps=steps,
                         wait_share=profile.analysis.contention_wait_share,
                         steal_share=profile.analysis.contention_steal_share)


def steps_seen(child: Optional[ChildRecord]) -> int:
    """Steps the profiled process ran (its record keeps a bounded sample of them)."""
    if child is None:
        return 0
    return int(child.get("steps_seen") or len(child.get("steps") or []))


def has_memory(trace: Optional[TorchTrace]) -> bool:
    return trace is not None and bool((trace.events[S.CAT] == S.MEMORY).any())


def recording_note(window: Window, steps_seen: int, saved: bool) -> Optional[str]:
    """What the saved trace holds when it is not the schedule's steps, or was cut short
    (``saved``: a trace was written)."""
    kind, stopped = window.get("kind"), window.get("stopped_by")
    if kind != "steps" and window.get("seconds") is None:
        return None   # nothing was saved (the schedule note says why)
    seconds = float(window.get("seconds") or 0.0)
    mark = ("Call nsbridge.step() at the end of each iteration (or use torch.optim) to "
            "measure steady-state steps.")
    if kind == "whole-run" and stopped is None:
        return ("no training step was detected (no optimizer.step() and no nsbridge.step()): "
                f"the whole run ({seconds:.1f} s) was profiled as one window, start-up "
                f"included; figures are totals and rates per second. {mark}")
    if kind == "time-window":
        cut = (f"stopped after {seconds:.1f} s by the memory budget (the process grew "
               f"{window.get('grew_mib')} MiB; schedule.max_record_mib, at most half the free "
               "memory)" if stopped == "memory" else
               f"{seconds:.1f} s" + ("" if stopped else ", cut short by the script's end"))
        return (f"no training step came within the first {window.get('wait_for_step_s'):g} s "
                "(schedule.wait_for_step_s): that start-up was dropped as warm-up and a time "
                f"window after it was profiled ({cut}); the script then ran on unprofiled. "
                f"Figures are totals and rates per second. {mark}")
    if kind == "whole-run" and stopped == "memory":
        return (f"no training step came before the recording grew the process by "
                f"{window.get('grew_mib')} MiB (schedule.max_record_mib, at most half the free "
                f"memory): the first {seconds:.1f} s of the run, start-up included, were kept "
                f"and the script ran on unprofiled. Figures are totals and rates per second. "
                f"{mark}")
    if kind == "steps" and stopped and saved:
        return (f"the measured window was stopped early, after step {window.get('after_steps')}"
                f" of {steps_seen}: the process grew {window.get('grew_mib')} MiB while it "
                "recorded (schedule.max_record_mib); the steps recorded until then are "
                "analysed. Use a shorter schedule (schedule.active) or --profile quick (no "
                "shapes or memory) for steps this large.")
    return None


def _triage_notes(torch_pass: TorchPass, child: Optional[ChildRecord]) -> list[str]:
    notes = _record_notes(child) if child is not None else []
    if torch_pass.outcome.killed:
        notes.append("the profiled process did not stop in time and was killed; its trace "
                     "may be missing")
    if len(torch_pass.traces) > 1:
        notes.append(f"{len(torch_pass.traces)} measured windows were saved (schedule repeat); "
                     "the report analyses the first")
    return notes


def _record_notes(child: ChildRecord) -> list[str]:
    """What the process's own record says about what it recorded."""
    notes = []
    if schedule_note := child.get("schedule_note"):
        notes.append(schedule_note)
    window = child.get("window") or {}
    window_note = recording_note(window, steps_seen(child), bool(child.get("traces")))
    if window_note:
        notes.append(window_note)
    compiled = [s for s in child.get("steps") or [] if s.get("compile_ms")]
    if compiled:
        seconds = sum(s["compile_ms"] for s in compiled) / 1e3
        which = ", ".join(str(s["index"]) for s in compiled[:5]) + (
            ", ..." if len(compiled) > 5 else "")
        notes.append(f"torch.compile compiled for {seconds:.1f} s in {len(compiled)} step(s) "
                     f"(step {which}; the first call compiles, a new shape recompiles): "
                     "compile time, not step time; an unrecorded step that compiled is no "
                     "baseline for the profiler's overhead or the gate")
    if child.get("compile_wait_s"):
        notes.append(f"torch.compile was compiling when the recording was due to stop "
                     f"(schedule.wait_for_step_s or a budget): the stop waited "
                     f"{child['compile_wait_s']:.1f} s for the compile (or the first step "
                     "that compiled) to end, since stopping torch.profiler mid-compile "
                     "crashes the process")
    sampling = child.get("steps_sampling")
    if sampling:
        notes.append(f"the script ran {steps_seen(child):,} steps: the first "
                     f"{sampling['exact']:,} were timed one by one and {sampling['sampled']:,} "
                     f"of the {sampling['later']:,} after them by a uniform sample (memory "
                     "stays bounded); the unprofiled-step figures, machine laps and overhead "
                     "estimate use those records")
    if window.get("budget_error"):
        notes.append(f"the recording budget could not stop the profiler cleanly: "
                     f"{window['budget_error']}")
    return notes
