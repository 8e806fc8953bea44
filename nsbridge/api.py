"""The library API: each command is a short composition of passes into one Run.

- ``triage``: torch.profiler pass (then, optionally, the nsys and ncu passes)
- ``timeline``: nsys pass, into a new run or an earlier one
- ``deep``: ncu pass on chosen ops, into an earlier run (or a new triage first)
- ``analyze``: the passes' readers on files captured elsewhere
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from . import schema as S
from .confine import readable
from .errors import (DiffInputError, DiffRefusedError, GateRunError, LaunchError,
                     RunDirError, ScriptError, Stopped, TraceNotFoundError)
from .model.analysis import check_window
from .collect.ncu import gpu_names
from .collect.source import git_state, recorded_env
from .collect.torch_profiler import with_threads
from .passes.ncu_pass import DeepOnRanks, DeepPass, NcuFilesPass
from .passes.nsys_pass import NsysExportsPass, TimelineOnRanks, TimelinePass
from .passes.torch_pass import TorchProfilerPass, analyse_run_dir, analyze_traces
from .pipeline import Given, Pass, preflight, run_passes
from .profiles import Profile, load_profile, with_overrides
from .report.escape import terminal
from .result import RunResult, result_of
from .job.identity import detect as detect_rank
from .job.summary import read_summaries
from .rundir import DEFAULT_BASE, check_dir_name, check_new_out, load_record, read_run
from .run import Run, is_ranked
from .script_check import Script, checked_script

__all__ = ["RunResult", "triage", "timeline", "deep", "analyze", "diff", "gate", "rejudge",
           "load", "doctor"]

_NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
_NCU_SUFFIXES = (".ncu-rep", ".csv")
ProfileArg = Union[str, Profile]


def load(run_dir: Union[str, Path]) -> RunResult:
    """Read a run directory back: the report, its frames (ops with nsys_*/ncu_* columns,
    kernels, steps, sync points, gaps, timeline and ncu tables) and the manifest, as the
    command that wrote it returned them (its exit code: the last pass's). A failed run
    loads (its ``status`` and ``report["error"]`` say what happened).

    Raises:
        RunDirError: not a directory nsbridge wrote, incomplete, or still running (or cut
            off while running).
    """
    return result_of(Run.open(Path(run_dir)))


def triage(target: str, args: Sequence[str] = (), *, module: bool = False,
           profile: ProfileArg = "default", out: Optional[Union[str, Path]] = None,
           timeout: Optional[float] = None, cwd: Optional[Union[str, Path]] = None,
           nsys: bool = False, deep_top: Optional[int] = None,
           deep_profile: ProfileArg = "deep", on_plan: Optional[Callable[[str], None]] = None,
           nproc_per_node: Optional[int] = None, nnodes: Optional[str] = None,
           node_rank: Optional[int] = None, rdzv_endpoint: Optional[str] = None,
           ranks: Optional[list[int]] = None, deep_ranks: Optional[list[int]] = None,
           runs: int = 1, window: str = "steps", threads: Optional[int] = None,
           steps: Optional[int] = None, top: Optional[int] = None,
           environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run a script (or ``-m`` module) under torch.profiler and analyse it (``runs`` > 1:
    that many processes, their steps pooled so intervals include the between-process
    spread; ``threads``: torch's intra-op threads in the profiled process, recorded in the
    machine facts); with ``nsys``
    also the timeline pass, with ``deep_top`` the ncu pass on that many top ops, all into
    one run directory. Several ranks (``nproc_per_node``, or started by a launcher): every
    pass on every rank (``ranks`` limits torch.profiler and nsys), ncu on ``deep_ranks``
    or on the median and the slowest rank. ``window``: ``steps`` (the measured steps) or
    ``trace`` (the whole trace as one window, totals and rates per second). ``steps``:
    how many steps to measure (the profile's ``schedule.active``; None: as the profile
    says); ``top``: op rows in the summaries (the profile's ``analysis.top_ops``).

    Returns:
        RunResult. A script that fails still returns one (status 'failed', its exit code).

    Raises:
        ValueError: an unknown ``window``, before the script runs.
        ScriptError: the script or module cannot be found or compiled.
        LaunchError: ``runs`` with a job of ranks.
        RunDirError: the run directory cannot be made or written.
        ProfileError: the profile is not valid.
        ToolNotFoundError: with ``nsys``/``deep_top``, the tool is missing (how to install it).
        ToolFailedError: the tool failed (its own error lines and its log).
        NsysExportError: with ``nsys``, the capture cannot be exported.
        DeepError: with ``deep_top``, the deep pass cannot run as asked. The tool errors
            come after the earlier passes' outputs are written.
    """
    check_window(window)
    if out:     # before git or the script starts (the ranks of a job share one --out)
        check_dir_name(Path(out))
    prof = with_overrides(_profile(profile), steps=steps, top=top)
    script = checked_script(target, args, module, cwd)
    source = {"threads": threads, "env": recorded_env(environ), "git": git_state(script.cwd)}
    environ = with_threads(environ, threads)
    rank = None if nproc_per_node else detect_rank(environ)
    if runs > 1 and (nproc_per_node or rank is not None):
        raise LaunchError("--runs pools several processes of a one-process script; a job of "
                          "several ranks already measures each rank: leave --runs off.")
    if nproc_per_node or rank is not None:
        launcher = {"nproc_per_node": nproc_per_node, "nnodes": nnodes,
                    "node_rank": node_rank, "rdzv_endpoint": rdzv_endpoint}
        from .distributed.triage import triage_job

        return triage_job(script, prof, out=out, timeout=timeout, rank=rank,
                          launcher=launcher, ranks=ranks, nsys=nsys, deep_top=deep_top,
                          deep_profile=_profile(deep_profile), deep_ranks=deep_ranks,
                          on_plan=on_plan, source=source, environ=environ)
    passes: list[Pass] = [TorchProfilerPass(script, prof, timeout=timeout, environ=environ,
                                            runs=runs, window=window, threads=threads)]
    if nsys:
        passes.append(TimelinePass(prof, timeout=timeout, environ=environ, threads=threads))
    if deep_top is not None:
        passes.append(DeepPass(_profile(deep_profile).deep, top=deep_top or None,
                               timeout=timeout, on_plan=on_plan, environ=environ))
    preflight(passes)   # fail before the script runs, not after
    run = Run.for_script(script, command="triage", profile=prof, out=_path(out), source=source)
    return result_of(run_passes(run, passes))


def timeline(target: Optional[str], args: Sequence[str] = (), *, module: bool = False,
             profile: Optional[ProfileArg] = None, out: Optional[Union[str, Path]] = None,
             run: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
             cwd: Optional[Union[str, Path]] = None, threads: Optional[int] = None,
             trust: Optional[Sequence[Union[str, Path]]] = None,
             on_plan: Optional[Callable[[str], None]] = None, top: Optional[int] = None,
             environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run the script under Nsight Systems with NVTX op ranges and join kernels to ops
    (``threads``: torch's intra-op threads in the process, as triage --threads; ``top``:
    op rows in a new run's summaries, its profile's ``analysis.top_ops``).

    With ``run``: add the timeline to that run (its script and arguments are reused when
    ``target`` is None, only when they lie in ``trust``, as for ``deep``, with the threads,
    the checked variables and the profile the run recorded, unless ``threads`` or
    ``profile`` are given; ``on_plan`` receives what will run); otherwise a new run
    directory (``profile`` None: the default profile).

    Raises:
        ScriptError: the script or module cannot be found or compiled.
        RunDirError: ``run`` is not a usable run directory, or one cannot be made.
        ProfileError: the profile is not valid.
        ToolNotFoundError: no nsys (with how to install it).
        ToolFailedError: nsys failed (its own error lines and its log).
        NsysExportError: the capture cannot be exported.
        UntrustedRunError: ``run``'s manifest names a script or folder outside ``trust``,
            or a variable it may not set.
    """
    from .trust import rerun_plan, trusted_folders

    if out:     # before nsys is looked for or the script starts, as triage checks it
        check_dir_name(Path(out))
    if run is not None and target is None:
        earlier = Run.open(Path(run))
        rerun = rerun_plan(str(earlier.dir), earlier.manifest, trusted_folders(trust),
                           environ, threads)
        prof = _profile(profile) if profile is not None else _recorded_profile(earlier)
        if on_plan is not None:
            on_plan(f"timeline: {rerun.plan}; profile {prof.name}")
        if is_ranked(earlier.report):
            from .distributed.fan_out import on_ranks

            return on_ranks(TimelineOnRanks(timeout=timeout), earlier,
                            profile_source=prof.source, timeout=timeout,
                            environ=rerun.environ)
        return result_of(run_passes(earlier, [TimelinePass(
            prof, timeout=timeout, environ=rerun.environ, threads=rerun.threads)]))
    prof = with_overrides(_profile(profile if profile is not None else "default"), top=top)
    if run is None:   # a new run: nothing is left behind when nsys is missing
        preflight([TimelinePass(prof, environ=environ)])
    the_run, script = _run_for(run, target, args, module, cwd, prof, "timeline", out)
    return result_of(run_passes(the_run, [TimelinePass(prof, script=script, timeout=timeout,
                                                       environ=with_threads(environ, threads),
                                                       threads=threads)]))


def deep(target: Optional[str] = None, args: Sequence[str] = (), *, kernels: Sequence[str] = (),
         top: Optional[int] = None, run: Optional[Union[str, Path]] = None,
         module: bool = False, profile: ProfileArg = "deep",
         out: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
         cwd: Optional[Union[str, Path]] = None, on_plan: Optional[Callable[[str], None]] = None,
         ranks: Optional[Sequence[int]] = None, threads: Optional[int] = None,
         trust: Optional[Sequence[Union[str, Path]]] = None,
         environ: Mapping[str, str] = os.environ) -> RunResult:
    """Nsight Compute on the kernels of chosen ops, merged into the run's op rows
    (``threads``: torch's intra-op threads in the process; a run's own by default).

    On a run of several ranks, every rank runs the script again (under the launcher that
    started nsbridge, or the triage's torch.distributed.run options), ncu on ``ranks`` or
    on the median and the slowest rank.

    Ops are ``kernels`` (checked against the run's op names first, with a did-you-mean) or
    the ``top`` ops by device time. The run is ``run``, else a triage of ``target`` made
    first, else the latest run under nsbridge-runs/. An earlier run's script runs again
    only when it and its folder lie in ``trust`` (None: the current directory;
    nsbridge.trust), in this process's environment with the threads and the checked
    variables the run recorded (nsbridge.trust.rerun_plan). ``on_plan`` receives what will
    run and the plan's text before ncu starts.

    Raises:
        DeepError: an op the run does not have, no GPU, counters not permitted, no kernel
            matched.
        ToolNotFoundError: no ncu.
        ToolFailedError: ncu failed (its log is kept).
        RunDirError: ``run`` is not a usable run directory.
        ScriptError: the script cannot be found or compiled.
        LaunchError: a script given under a launcher.
        UntrustedRunError: the run's manifest names a script or folder outside ``trust``,
            a module, or launcher options triage does not write (nothing has run).
    """
    from .trust import rerun_plan, trusted_folders

    prof = _profile(profile)
    deep_prof = prof.deep
    if run is None and target is not None:
        if detect_rank(environ) is not None:
            raise LaunchError("Under a launcher, triage and deep run together: nsbridge triage "
                              "--deep N script.py (or triage first, then deep --run-dir DIR).")
        environ = with_threads(environ, threads)
        ncu = DeepPass(deep_prof, kernels=kernels, top=top, timeout=timeout, on_plan=on_plan,
                       environ=environ)
        preflight([ncu])
        script = checked_script(target, args, module, cwd)
        the_run = Run.for_script(script, command="triage", profile=_profile("default"),
                                 out=_path(out))
        return result_of(run_passes(the_run, [
            TorchProfilerPass(script, _profile("default"), timeout=timeout, environ=environ,
                              threads=threads),
            ncu]))
    the_run = Run.open(Path(run) if run is not None else _latest_run())
    if the_run.manifest.get("command") != "analyze":
        rerun = rerun_plan(str(the_run.dir), the_run.manifest, trusted_folders(trust),
                           environ, threads)
        environ = rerun.environ
        if on_plan is not None:
            on_plan(f"deep: {rerun.plan}")
    if is_ranked(the_run.report) and the_run.manifest.get("command") != "analyze":
        from .distributed.fan_out import on_ranks

        share = DeepOnRanks(deep_prof, kernels=kernels, top=top, ranks=ranks,
                            timeout=timeout, on_plan=on_plan)
        return on_ranks(share, the_run, profile_source=prof.source,
                        timeout=timeout, environ=environ)
    return result_of(run_passes(the_run, [DeepPass(deep_prof, kernels=kernels, top=top,
                                                   timeout=timeout, on_plan=on_plan,
                                                   environ=environ)]))


def show_profiler_noise(on: bool = True) -> None:
    """Pass the profiler's known noise from a profiled script's stderr (kineto's USDT
    lines, the CPU allocator warning) to the terminal too; by default it goes only to the
    run directory's profiler-noise.log (collect.noise)."""
    from .collect import noise
    noise.show(on)


def analyze(paths: Iterable[Union[str, Path]], *, profile: ProfileArg = "default",
            deep_profile: ProfileArg = "deep",
            out: Optional[Union[str, Path]] = None, window: str = "steps",
            environ: Mapping[str, str] = os.environ, jobs: Optional[int] = None,
            top: Optional[int] = None) -> RunResult:
    """Analyse files captured elsewhere: torch.profiler traces (several: the ranks of one
    job), nsys exports (.sqlite, .nsys-rep) and Nsight Compute reports (.ncu-rep, CSV),
    merged into one report keyed by op. ``window``: ``steps`` (the measured steps, in the
    torch trace and, by nsbridge's step ranges, in an nsys export) or ``trace`` (each file
    whole). ``environ`` is where nsys and ncu are looked up (to export a .nsys-rep, or a
    .ncu-rep without the ncu-report package). ``jobs``: worker processes for several
    torch traces (default: one per CPU), each holding one trace at a time. ``top``: op
    rows in the summaries (the profile's ``analysis.top_ops``).

    Raises:
        ValueError: an unknown ``window``.
        TraceNotFoundError: a path does not exist.
        TraceFormatError: a file is not a trace, export or report nsbridge reads.
        EmptyTraceError: a trace holds no event nsbridge can read.
        NsysExportError: an nsys export is damaged.
        NcuFormatError: an ncu CSV or report is damaged.
        RunDirError: the output cannot be written, or a run directory given is incomplete
            or still running.
        ProfileError: the profile is not valid.
    """
    check_window(window)
    check_new_out(_path(out))    # before minutes of reading, not after
    prof = with_overrides(_profile(profile), top=top)
    paths = list(paths)
    for folder in (Path(p) for p in paths):
        if (folder / S.MANIFEST_JSON).is_file():
            read_run(folder)   # a run directory: refused while incomplete or running
    ranked = [Path(p) for p in paths if Path(p).is_dir() and read_summaries(Path(p))]
    if ranked:
        from .distributed.triage import analyze_ranks

        return analyze_ranks(ranked[0], prof, out)
    if len(paths) == 1 and _is_triage_run(Path(paths[0])):
        # the run's own records: its machine, steps, syncs and settings are kept
        folder = Path(paths[0])
        given = Given(analyse_run_dir(folder, None if profile == "default" else prof, window))
        run = Run.create(out=_path(out), label=f"analyze-{folder.name}",
                         command="analyze", target=str(folder), args=[], profile=prof,
                         cwd=Path.cwd())
        return result_of(run_passes(run, [given]))
    files = _input_files([Path(p) for p in paths])
    nsys_files = [f for f in files if f.suffix in _NSYS_SUFFIXES]
    ncu_files = [f for f in files if f.suffix in _NCU_SUFFIXES]
    traces = [f for f in files if f not in nsys_files and f not in ncu_files]
    label = files[0].name.split(".")[0] if len(files) == 1 else f"{len(files)}-files"
    target = ", ".join(str(p) for p in paths)
    passes: list[Pass] = []
    if traces:   # read before the run directory exists: a bad trace leaves nothing behind
        passes.append(Given(analyze_traces(traces, prof, target, window,
                                           jobs=jobs or os.cpu_count() or 1)))
    if nsys_files:
        passes.append(NsysExportsPass(nsys_files, prof, window, environ=environ))
    if ncu_files:
        passes.append(NcuFilesPass(ncu_files, _profile(deep_profile).deep, environ=environ))
    run = Run.create(out=_path(out), label=f"analyze-{label}",
                     command="analyze", target=target, args=[], profile=prof, cwd=Path.cwd())
    return result_of(run_passes(run, passes))


def diff(base: Union[str, Path], new: Union[str, Path], *, fail_above: float = 10.0,
         ops: Sequence[str] = (), min_step_share: float = 0.02,
         allow: Sequence[str] = ()) -> dict[str, Any]:
    """Compare two runs (directories or report.json files) and gate on the result.

    Returns model.comparing.diff.compare's dict: ``outcome`` (pass, regression, inconclusive) with its
    ``exit_code`` (0, 1, 4), ``reasons`` and ``advice`` when inconclusive, ``regressions``
    (op or step time, source, change beyond the drift with its 95% interval, ms added per
    step), the step-time and per-op comparison, the noise figures and both machines.
    ``ops`` gates only those ops; ``allow`` accepts differences of kind target (runs of
    different scripts, refused otherwise), args, torch, gpu, threads or cores (which would
    otherwise make the comparison inconclusive).

    Raises:
        DiffInputError: a path is neither a run directory nor a JSON file, an ``ops`` or
            ``allow`` entry is unknown, or a threshold is NaN, infinite or negative.
        DiffRefusedError: a run diff cannot compare (model.comparing.comparability.refusal): failed,
            still running, empty, of another schema version or shape, or of another script.
    """
    from .model.comparing.comparability import SIDES, refusal
    from .model.comparing.diff import compare
    from .report.build import SCHEMA_VERSION

    _check_thresholds(fail_above, min_step_share)
    _check_allow(allow)
    labels = (str(base), str(new))
    reports = [_read_report(Path(p), side) for p, side in zip(labels, SIDES)]
    why = refusal(*reports, labels=labels, schema_version=SCHEMA_VERSION, allow=allow)
    if why:
        raise DiffRefusedError(terminal(why))
    _check_gated_ops(ops, reports)
    result = compare(*reports, fail_above=fail_above, ops=ops, min_step_share=min_step_share,
                     allow=allow)
    result["a_label"], result["b_label"] = labels
    return result


def gate(base: Union[str, Path], new: Union[str, Path], script: Optional[str] = None,
         args: Sequence[str] = (), *, module: bool = False, processes: int = 3,
         max_processes: Optional[int] = None, budget_s: Optional[float] = 600.0,
         threads: Optional[int] = None, steps: int = 25, fail_above: float = 10.0,
         min_step_share: float = 0.02, ops: Sequence[str] = (), allow: Sequence[str] = (),
         out: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
         base_env: Optional[Mapping[str, str]] = None,
         new_env: Optional[Mapping[str, str]] = None, profile: ProfileArg = "gate",
         on_progress: Optional[Callable[[str], None]] = None,
         trust: Optional[Sequence[Union[str, Path]]] = None,
         environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Measure BASE and NEW again, interleaved, and judge them: ``processes`` pairs of
    processes (A B, B A, ...; nsbridge.interleave), each a triage with the ``profile``
    (``steps`` measured steps) into one gate folder, judged on paired changes
    (model.comparing.paired; with one pair, as `diff` judges two runs). While the answer
    is inconclusive, one more pair is run and judged again, up to ``max_processes`` pairs
    (default: 10, or ``processes`` if more) and while the next pair fits in ``budget_s``
    seconds from the start (None: no limit); the false-alarm bound holds over all those
    looks (model.comparing.evidence). BASE and NEW are run
    directories (run again as their manifests recorded them) or checkouts (``script`` run
    in each). ``threads``: torch's intra-op threads in every process (default: 1 when no
    GPU is visible, where two threads on a busy machine wait for each other; else as the
    script sets them). ``base_env``/``new_env``: variables set for one side only.
    ``trust``: the folders a run directory's script and folder must lie in (None: the
    current directory; nsbridge.trust says what else a manifest may not ask). What each
    side runs goes to ``on_progress`` before the first process starts.

    Returns the comparison (model.comparing.diff.compare's keys, ``mode`` "interleaved") with
    ``gate``: its folder, processes (the pairs it took), the first look's and the most
    pairs, the budget, each look's answer, why it stopped, threads, steps, the order run,
    wall seconds, notes. gate.json and gate.md are written into the folder.

    Raises:
        DiffInputError: a side is neither a run directory nor a checkout (with a script),
            an ``ops``/``allow`` entry is unknown, or a threshold is NaN, infinite or
            negative.
        GateRunError: a process failed (the runs made so far are kept).
        UntrustedRunError: a run directory names a script or folder outside ``trust``, a
            module, or a variable it may not set; a checkout's script lies outside it
            (nothing has run).
        DiffRefusedError: two run directories of different scripts or arguments, which
            ``allow`` does not accept (nothing has run: interleave.judged_apart).
        ScriptError: a side's script cannot be found or compiled.
        ProfileError: the gate's profile is not valid.
        RunDirError: the gate's folder cannot be written.
    """
    import time

    from .interleave import (DEFAULT_MAX_PROCESSES, SIDES, applied_env, describe,
                             judged_apart, order, resolve_side, run_pairs)
    from .model.comparing.evidence import Budget
    from .report.diff_render import render_diff
    from .rundir import new_run_dir, write_json

    _check_thresholds(fail_above, min_step_share)
    _check_allow(allow)
    sides = {name: resolve_side(name, str(given), script, args, module, env or {}, trust,
                                environ)
             for name, given, env in zip(SIDES, (base, new), (base_env, new_env))}
    apart = judged_apart(sides, allow)
    if apart:
        raise DiffRefusedError(terminal(apart))
    prof = with_overrides(_profile(profile), steps=steps)
    threads_from = "--threads"
    if threads is None:
        recorded = {s.threads for s in sides.values()}
        threads, threads_from = ((recorded.pop(), "recorded by both runs")
                                 if len(recorded) == 1 and None not in recorded
                                 else (None, "a GPU is visible") if gpu_names(environ)
                                 else (1, "no GPU visible: one intra-op thread is steadier"))
    checked = [checked_script(side.target, side.args, side.module, side.cwd)
               for side in sides.values()]
    if on_progress:
        on_progress(describe(sides, threads, threads_from))
    folder = new_run_dir(_path(out), f"gate-{checked[-1].label}")

    def run_one(side: Any, run_dir: Path) -> dict[str, Any]:
        result = triage(side.target, side.args, module=side.module, profile=prof,
                        out=run_dir, timeout=timeout, cwd=side.cwd, threads=threads,
                        environ={**environ, **side.env})
        if result.status == "interrupted":     # Ctrl-C: the whole gate stops, as asked
            raise KeyboardInterrupt
        if result.status == "terminated":
            raise Stopped()
        if result.exit_code != 0 or result.status != "ok":
            raise GateRunError(terminal(
                f"the gate's {side.name} process in {run_dir} did not finish cleanly "
                f"(status '{result.status}'), so nothing was compared: "
                f"{result.failure or 'see its report.md'} The runs made so far are kept in "
                f"{folder}."))
        return result.report

    most = max(max_processes or DEFAULT_MAX_PROCESSES, processes)
    looks = Budget(first=processes, most=most)
    started = time.monotonic()
    reports = run_pairs(sides, processes, folder, run_one, on_progress, most=most)
    history: list[dict[str, Any]] = []
    while True:
        pairs = list(zip(reports["base"], reports["new"]))
        result = _judge_pairs(pairs, fail_above=fail_above, ops=ops,
                              min_step_share=min_step_share, allow=allow, budget=looks)
        history.append(_look(result))
        elapsed = time.monotonic() - started
        stopped = _stop_reason(result, len(pairs), most, elapsed, budget_s)
        if stopped:
            break
        more = run_pairs(sides, len(pairs) + 1, folder, run_one, on_progress, most=most,
                         first=len(pairs) + 1)
        for side in SIDES:
            reports[side] += more[side]
    k = len(pairs)
    result["a_label"], result["b_label"] = str(base), str(new)
    result["gate"] = {
        "dir": str(folder), "processes": k, "first_look": processes, "max_processes": most,
        "budget_s": budget_s, "looks": history, "stopped": stopped,
        "threads": threads, "steps": steps,
        "order": [f"{side}-{i:02d}" for i, side in order(k)],
        "wall_s": round(time.monotonic() - started, 1),
        "threads_from": threads_from,
        "sides": {name: {"given": s.given, "target": s.target, "args": s.args,
                         "module": s.module, "cwd": str(s.cwd),
                         "env": {k: v for k, (v, _) in applied_env(s, threads).items()},
                         "env_from": {k: f for k, (_, f) in applied_env(s, threads).items()}}
                  for name, s in sides.items()},
        "notes": [note for s in sides.values() for note in s.notes]}
    write_json(folder / S.GATE_JSON, result)
    (folder / S.GATE_MD).write_text(render_diff(result, "md") + "\n", encoding="utf-8")
    return result


def rejudge(folder: Union[str, Path], *, fail_above: float = 10.0,
            min_step_share: float = 0.02, ops: Sequence[str] = (),
            allow: Sequence[str] = ()) -> dict[str, Any]:
    """Judge the processes of an earlier gate folder again (other thresholds, other ops):
    its base-NN and new-NN run directories, paired by NN; nothing runs. Returns what
    ``gate`` returns, with ``gate.rejudged`` true; the folder is not written to.

    Raises:
        DiffInputError: not a gate folder (no base-01 and new-01), a pair missing a side,
            an ``ops``/``allow`` entry that is unknown, or a threshold that is NaN,
            infinite or negative.
        DiffRefusedError: a run in it cannot be compared (failed, still running, of another
            shape).
    """
    from .model.comparing.comparability import SIDES, refusal
    from .report.build import SCHEMA_VERSION

    _check_thresholds(fail_above, min_step_share)
    path = Path(folder)
    numbers = sorted({int(p.name.split("-")[1]) for p in path.glob("*-[0-9][0-9]")
                      if p.name.split("-")[0] in SIDES and p.is_dir()})
    missing = [f"{side}-{n:02d}" for n in numbers for side in SIDES
               if not (path / f"{side}-{n:02d}").is_dir()]
    if not numbers or missing:
        raise DiffInputError(terminal(f"{path} is not a gate folder nsbridge can judge: "
                                      + (f"it lacks {', '.join(missing)}" if numbers else
                                         "it holds no base-01 and new-01 run directories")
                                      + ". Give the folder `nsbridge gate` wrote (--out)."))
    _check_allow(allow)
    pairs = [(_read_report(path / f"base-{n:02d}", "base"),
              _read_report(path / f"new-{n:02d}", "new")) for n in numbers]
    for n, (a, b) in zip(numbers, pairs):
        why = refusal(a, b, labels=(str(path / f"base-{n:02d}"), str(path / f"new-{n:02d}")),
                      schema_version=SCHEMA_VERSION, allow=allow)
        if why:
            raise DiffRefusedError(terminal(why))
    earlier = _read_gate(path)
    result = _judge_pairs(pairs, fail_above=fail_above, ops=ops,
                          min_step_share=min_step_share, allow=allow,
                          budget=_budget_of(earlier))
    result["a_label"] = earlier.get("a_label") or str(path / "base-NN")
    result["b_label"] = earlier.get("b_label") or str(path / "new-NN")
    result["gate"] = {**(earlier.get("gate") or {}), "dir": str(path),
                      "processes": len(numbers), "rejudged": True}
    return result


def _judge_pairs(pairs: list[tuple[dict[str, Any], dict[str, Any]]], *, fail_above: float,
                 ops: Sequence[str], min_step_share: float, allow: Sequence[str],
                 budget: Any = None) -> dict[str, Any]:
    """The gate's answer on its pairs of reports: paired from two pairs on (at ``budget``,
    model.comparing.evidence.Budget: one look by default), as `diff` judges two runs with
    one."""
    from .model.comparing.diff import compare
    from .model.comparing.evidence import Budget
    from .model.comparing.paired import compare_pairs

    _check_gated_ops(ops, [r for pair in pairs for r in pair])
    if len(pairs) >= 2:
        return compare_pairs(pairs, fail_above=fail_above, ops=ops,
                             min_step_share=min_step_share, allow=allow,
                             budget=budget or Budget())
    return compare(*pairs[0], fail_above=fail_above, ops=ops, min_step_share=min_step_share,
                   allow=allow)


def _look(result: dict[str, Any]) -> dict[str, Any]:
    """One look of a growing gate, as gate.json keeps it: the pairs, the answer, the step
    time's change and interval."""
    step = result.get("step") or {}
    return {"pairs": result.get("pairs"), "outcome": result["outcome"],
            "step_change_pct": step.get("change_pct"), "step_ci_pct": step.get("ci_pct")}


def _stop_reason(result: dict[str, Any], pairs: int, most: int, elapsed_s: float,
                 budget_s: Optional[float]) -> Optional[str]:
    """Why a growing gate stops after this look (None: run one more pair): it decided
    (a regression, or a pass that leaves no gated op undecided that ``most`` pairs could
    decide: a pass on the step time alone would stop before a slower op had the pairs to
    show it, and an op too noisy for ``most`` pairs would only spend them), more pairs
    cannot make it comparable, it has ``most`` pairs, or the next pair (as long as the
    mean pair so far) would end past ``budget_s``."""
    unsure = set(result.get("inconclusive") or [])
    settles = any(row["op"] in unsure and (row.get("pairs_to_decide") or most + 1) <= most
                  for row in result.get("ops") or [])
    if result["outcome"] == "regression" or (result["outcome"] == "pass" and not settles):
        return "decided"
    if result.get("comparability"):
        return "not comparable"
    if pairs >= most:
        return "max processes"
    if budget_s is not None and elapsed_s + elapsed_s / pairs > budget_s:
        return "budget"
    return None


def _budget_of(earlier: dict[str, Any]) -> Any:
    """The false-alarm budget an earlier gate spent over its looks (one look when its
    gate.json does not say)."""
    from .model.comparing.evidence import Budget

    gate = earlier.get("gate") or {}
    first, most = gate.get("first_look"), gate.get("max_processes")
    if isinstance(first, int) and isinstance(most, int) and 1 <= first <= most:
        return Budget(first=first, most=most)
    return Budget()


def _read_gate(folder: Path) -> dict[str, Any]:
    """The earlier gate's gate.json ({} when there is none).

    Raises:
        DiffInputError: it is not of its declared shape (schema.records.GATE_SHAPE).
    """
    if not (folder / S.GATE_JSON).is_file():
        return {}
    try:
        return load_record(readable(folder / S.GATE_JSON), S.GATE_SHAPE)
    except RunDirError as exc:
        raise DiffInputError(terminal(str(exc))) from None


def _check_thresholds(fail_above: float, min_step_share: float) -> None:
    """DiffInputError for a threshold outside the CLI's range (limits): a NaN compares
    false with every change, so it would pass any slowdown."""
    from .limits import FAIL_ABOVE_PCT, MIN_STEP_SHARE_PCT

    share = min_step_share
    pct = share * 100 if isinstance(share, (int, float)) and not isinstance(share, bool) \
        else share
    why = (FAIL_ABOVE_PCT.refusal(fail_above, "fail_above")
           or MIN_STEP_SHARE_PCT.refusal(pct, "min_step_share (as a percentage)"))
    if why:
        raise DiffInputError(terminal(f"{why}. A threshold that is not a number in its "
                                      "range would judge every change wrongly."))


def _check_allow(allow: Sequence[str]) -> None:
    """DiffInputError for an ``--allow`` kind that is not one."""
    from .model.comparing.comparability import ALLOWABLE

    unknown = [k for k in allow if k not in ALLOWABLE]
    if unknown:
        raise DiffInputError(terminal(f"--allow {', '.join(unknown)}: the differences that can "
                                      f"be accepted are {', '.join(ALLOWABLE)}."))


def _check_gated_ops(ops: Sequence[str], reports: Sequence[dict[str, Any]]) -> None:
    """DiffInputError for an ``--op`` no report has: the gate would check nothing."""
    known = {op["name"] for report in reports for op in report.get("ops") or []}
    unknown = [op for op in ops if op not in known]
    if unknown:
        raise DiffInputError(terminal(f"--op {', '.join(unknown)}: neither run has such an op, "
                                      "so the gate would check nothing. Use names as the "
                                      "reports' op tables spell them."))


def _read_report(path: Path, side: str) -> Any:
    """The parsed report.json of run directory ``path``, or of the file ``path``.

    Raises:
        DiffRefusedError: a run directory (it has manifest.json) without a readable
            report.json.
        DiffInputError: anything else that is not readable JSON.
    """
    from .model.comparing.comparability import no_report

    file = path / S.REPORT_JSON if path.is_dir() else path
    try:
        return json.loads(readable(file).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        if (file.parent / S.MANIFEST_JSON).is_file():
            raise DiffRefusedError(terminal(no_report(side, str(path)))) from None
        raise DiffInputError(terminal(f"{path} is neither an nsbridge run directory nor its "
                                      "report.json (no readable report.json). Pass two run "
                                      "directories or two report.json files.")) from None


def doctor() -> list[Any]:
    """Machine checks for `nsbridge doctor` (collect.doctor.Check: level, name, detail, fix)."""
    from .collect.doctor import run_checks

    return run_checks()


def _run_for(run: Optional[Union[str, Path]], target: Optional[str], args: Sequence[str],
             module: bool, cwd: Optional[Union[str, Path]], prof: Profile, command: str,
             out: Optional[Union[str, Path]]) -> tuple[Run, Script]:
    """The run to add a pass to (an earlier one, or a new one) and the script it runs."""
    if target is None:
        raise ScriptError(f"Give a script to run under {command}, or --run DIR of a triage run.")
    script = checked_script(target, args, module, cwd)
    if run is None:
        return Run.for_script(script, command=command, profile=prof, out=_path(out)), script
    return Run.open(Path(run)), script


def _recorded_profile(run: Run) -> Profile:
    """The profile a run's manifest recorded (the default profile when it has none).

    Raises:
        ProfileError: what it recorded is not a profile this version reads.
    """
    from .profiles import profile_from_dict

    recorded = run.manifest.get("profile")
    if not isinstance(recorded, dict):
        return _profile("default")
    return profile_from_dict(recorded, name=str(recorded.get("name") or "recorded"),
                             source=f"{run.dir}'s manifest")


def _path(out: Optional[Union[str, Path]]) -> Optional[Path]:
    return Path(out) if out else None


def _latest_run() -> Path:
    runs = sorted((p for p in DEFAULT_BASE.glob("*") if (p / S.REPORT_JSON).is_file()),
                  key=lambda p: p.stat().st_mtime) if DEFAULT_BASE.is_dir() else []
    if not runs:
        raise RunDirError(f"No earlier run under {DEFAULT_BASE}/ to take the ops from. Give "
                          "--run DIR, or a script to triage first (nsbridge deep --top 5 "
                          "train.py).")
    return runs[-1]


def _input_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    suffixes = (".json", ".json.gz", *_NSYS_SUFFIXES, *_NCU_SUFFIXES)
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name not in S.NOT_TRACES
                           and not p.name.startswith("child-config")
                           and p.name.endswith(suffixes) and p.suffix != ".csv")
            if not found:
                raise TraceNotFoundError(f"The folder {path} holds no .json or .json.gz trace "
                                         "files. Point analyze at torch.profiler traces.")
            files.extend(readable(f) for f in found)   # a member may be a symlink out
        elif path.is_file():
            files.append(readable(path))
        else:
            raise TraceNotFoundError(f"{path} does not exist. Pass torch.profiler trace files "
                                     "(.json, .json.gz), nsys exports or ncu reports, or "
                                     "folders that hold them.")
    if not files:
        raise TraceNotFoundError("No trace given: pass one or more trace files or folders.")
    return files


def _is_triage_run(path: Path) -> bool:
    """A one-process triage's run directory (its profiled process's record is in it)."""
    manifest = path / S.MANIFEST_JSON
    if not (manifest.is_file() and (path / S.CHILD_JSON).is_file()):
        return False
    try:
        return json.loads(readable(manifest).read_text(encoding="utf-8")).get("command") == "triage"
    except (OSError, ValueError, AttributeError):
        return False


def _profile(profile: ProfileArg) -> Profile:
    return profile if isinstance(profile, Profile) else load_profile(profile)
