"""The library API: each command is a short composition of passes into one Run.

- ``triage``: torch.profiler pass (then, optionally, the nsys and ncu passes:
  commands.measure)
- ``timeline``: nsys pass, into a new run or an earlier one
- ``deep``: ncu pass on chosen ops, into an earlier run (or a new triage first)
- ``analyze``: the passes' readers on files captured elsewhere
- ``diff``, ``gate``, ``rejudge``: commands.diff and commands.gate
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from . import schema as S
from .confine import readable
from .errors import LaunchError, RunDirError, ScriptError, TraceNotFoundError
from .model.analysis import check_window
from .collect.torch_profiler import with_threads
from .passes.ncu_pass import DeepOnRanks, DeepPass, NcuFilesPass
from .passes.nsys_pass import NsysExportsPass, TimelineOnRanks, TimelinePass
from .passes.torch_pass import TorchProfilerPass, analyse_run_dir, analyze_traces
from .pipeline import Given, Pass, preflight, run_passes
from .commands.diff import diff
from .commands.gate import gate, rejudge
from .commands.measure import ProfileArg, profiled, rerun_source
from .profiles import Profile, as_profile, with_overrides
from .result import RunResult, result_of
from .job.identity import detect as detect_rank
from .job.summary import read_summaries
from .rundir import DEFAULT_BASE, check_dir_name, check_new_out, read_run
from .run import Run, is_ranked
from .script_check import Script, checked_script

__all__ = ["RunResult", "triage", "timeline", "deep", "analyze", "diff", "gate", "rejudge",
           "load", "doctor"]

_NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
_NCU_SUFFIXES = (".ncu-rep", ".csv")
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
    prof = with_overrides(as_profile(profile), steps=steps, top=top)
    script = checked_script(target, args, module, cwd)
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
                          deep_profile=as_profile(deep_profile), deep_ranks=deep_ranks,
                          on_plan=on_plan, source=rerun_source(script, threads, environ),
                          environ=with_threads(environ, threads))

    def following(env: Mapping[str, str]) -> list[Pass]:
        passes: list[Pass] = []
        if nsys:
            passes.append(TimelinePass(prof, timeout=timeout, environ=env, threads=threads))
        if deep_top is not None:
            passes.append(DeepPass(as_profile(deep_profile).deep, top=deep_top or None,
                                   timeout=timeout, on_plan=on_plan, environ=env))
        return passes

    return profiled(script, prof, out=_path(out), timeout=timeout, threads=threads,
                    environ=environ, runs=runs, window=window, following=following)


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
        prof = as_profile(profile) if profile is not None else _recorded_profile(earlier)
        if on_plan is not None:
            on_plan(f"timeline: {rerun.plan}; profile {prof.name}")
        if is_ranked(earlier.report):
            from .distributed.fan_out import on_ranks

            return on_ranks(TimelineOnRanks(timeout=timeout), earlier,
                            profile_source=prof.source, timeout=timeout,
                            environ=rerun.environ)
        return result_of(run_passes(earlier, [TimelinePass(
            prof, timeout=timeout, environ=rerun.environ, threads=rerun.threads)]))
    prof = with_overrides(as_profile(profile if profile is not None else "default"), top=top)
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

    prof = as_profile(profile)
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
        the_run = Run.for_script(script, command="triage", profile=as_profile("default"),
                                 out=_path(out))
        return result_of(run_passes(the_run, [
            TorchProfilerPass(script, as_profile("default"), timeout=timeout, environ=environ,
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
    prof = with_overrides(as_profile(profile), top=top)
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
        passes.append(NcuFilesPass(ncu_files, as_profile(deep_profile).deep, environ=environ))
    run = Run.create(out=_path(out), label=f"analyze-{label}",
                     command="analyze", target=target, args=[], profile=prof, cwd=Path.cwd())
    return result_of(run_passes(run, passes))


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
        return as_profile("default")
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
