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

from .errors import (DeepError, DiffInputError, DiffRefusedError, RunDirError, ScriptError,
                     TraceNotFoundError)
from .model.analysis import TraceAnalysis, check_window
from .model.deep_plan import check_ops, choose, describe, plan as make_plan
from .collect.ncu import find_ncu
from .passes.ncu_pass import capture_deep, ncu_from_files, require_gpu
from .passes.nsys_pass import capture_timeline, timeline_from_exports
from .passes.rank_passes import check_one_node, is_ranked
from .passes.ranks_pass import launcher_argv, read_summaries
from .passes.torch_pass import analyze_traces, check_module, profile_script
from .profiles import Profile, load_profile
from .ranked import analyze_ranks, on_ranks, tool_passes_on_ranks, triage_ranks
from .report import frames
from .report.escape import terminal
from .result import RunResult, result_of, write_ops_csv
from .distributed.ranks import detect as detect_rank
from .rundir import DEFAULT_BASE, read_run
from .run import Run

__all__ = ["RunResult", "triage", "timeline", "deep", "analyze", "diff", "load", "doctor"]

_NOT_TRACES = {"report.json", "manifest.json", "child.json", "child-config.json",
               "nvtx-child.json", "nvtx-child-config.json", "ncu-child-config.json",
               "summary.json", "merged.json.gz"}
_NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
_NCU_SUFFIXES = (".ncu-rep", ".csv")
ProfileArg = Union[str, Profile]


def load(run_dir: Union[str, Path]) -> RunResult:
    """Read a run directory back: the report, its frames (ops with nsys_*/ncu_* columns,
    kernels, steps, sync points, gaps, timeline and ncu tables) and the manifest. A failed
    run loads (its ``status`` and ``report["error"]`` say what happened).

    Raises:
        RunDirError: not a directory nsbridge wrote, incomplete, or still running (or cut
            off while running).
    """
    run = Run.open(Path(run_dir))
    passes = run.manifest.get("passes") or [{}]
    return RunResult(run_dir=run.dir, report=run.report, ops=frames.ops(run.report),
                     steps=frames.steps(run.report),
                     exit_code=int(passes[0].get("exit_code") or 0),
                     timeline=frames.timeline_ops(run.report))


def triage(target: str, args: Sequence[str] = (), *, module: bool = False,
           profile: ProfileArg = "default", out: Optional[Union[str, Path]] = None,
           timeout: Optional[float] = None, cwd: Optional[Union[str, Path]] = None,
           nsys: bool = False, deep_top: Optional[int] = None,
           deep_profile: ProfileArg = "deep", on_plan: Optional[Callable[[str], None]] = None,
           nproc_per_node: Optional[int] = None, nnodes: Optional[str] = None,
           node_rank: Optional[int] = None, rdzv_endpoint: Optional[str] = None,
           ranks: Optional[list[int]] = None, deep_ranks: Optional[list[int]] = None,
           runs: int = 1, window: str = "steps",
           environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run a script (or ``-m`` module) under torch.profiler and analyse it (``runs`` > 1:
    that many processes, their steps pooled so intervals include the between-process
    spread); with ``nsys``
    also the timeline pass, with ``deep_top`` the ncu pass on that many top ops, all into
    one run directory. Several ranks (``nproc_per_node``, or started by a launcher): every
    pass on every rank (``ranks`` limits torch.profiler and nsys), ncu on ``deep_ranks``
    or on the median and the slowest rank. ``window``: ``steps`` (the measured steps) or
    ``trace`` (the whole trace as one window, totals and rates per second).

    Returns:
        RunResult. A script that fails still returns one (status 'failed', its exit code).

    Raises:
        ValueError (an unknown ``window``, before the script runs), ScriptError,
        RunDirError, ProfileError; with ``nsys``: ToolNotFoundError, ToolFailedError,
        NsysExportError; with ``deep_top``: DeepError, ToolNotFoundError, ToolFailedError
        (each after the earlier passes' outputs are written).
    """
    check_window(window)
    prof = _profile(profile)
    workdir = Path(cwd) if cwd else Path.cwd()
    _check_script(target, module, workdir)
    rank = None if nproc_per_node else detect_rank(environ)
    if deep_top is not None:   # fail before the script runs, not after
        _profile(deep_profile)
        require_gpu(environ)
        find_ncu(environ)
    if runs > 1 and (nproc_per_node or rank is not None):
        raise ScriptError("--runs pools several processes of a one-process script; a job of "
                          "several ranks already measures each rank: leave --runs off.")
    if nproc_per_node or rank is not None:
        launcher = launcher_argv(nproc_per_node=nproc_per_node, nnodes=nnodes,
                                 node_rank=node_rank, rdzv_endpoint=rdzv_endpoint) \
            if nproc_per_node else []
        if launcher and (nsys or deep_top is not None):
            check_one_node(launcher)
        world = rank.world_size if rank is not None else nproc_per_node
        if deep_ranks and max(deep_ranks) >= (world or 0) and str(nnodes or "1") == "1":
            raise DeepError(f"--deep-ranks {','.join(map(str, deep_ranks))}: the job has "
                            f"ranks 0 to {(world or 1) - 1}.")
        result = triage_ranks(target, list(args), module=module, profile=prof, out=out,
                              timeout=timeout, cwd=workdir, rank=rank, ranks=ranks,
                              launcher=launcher, label=_label(target, module),
                              world=(nproc_per_node or 0) if str(nnodes or "1").split(":")[-1]
                              == "1" else 0, environ=environ)
        return tool_passes_on_ranks(result, rank=rank, launcher=launcher, nsys=nsys,
                                    deep_top=deep_top, profile=prof,
                                    deep_profile=_profile(deep_profile), deep_ranks=deep_ranks,
                                    timeout=timeout, on_plan=on_plan, environ=environ)
    run = Run.create(out=Path(out) if out else None, label=_label(target, module),
                     command="triage", target=target, args=list(args), profile=prof,
                     cwd=workdir, module=module)
    output, analysis = profile_script(run.dir, target=target, args=args, module=module,
                                      profile=prof, cwd=workdir, timeout=timeout,
                                      environ=environ, runs=runs, window=window)
    run.add(output)
    if analysis is not None:
        write_ops_csv(run, analysis.ops)
    result = result_of(run, analysis, output.exit_code)
    if output.exit_code != 0:
        return result
    if nsys:
        result = timeline(None, run=run.dir, profile=prof, timeout=timeout, environ=environ)
    if deep_top is not None and result.exit_code == 0:
        deep(run=run.dir, top=deep_top or None, profile=deep_profile, timeout=timeout,
             on_plan=on_plan, environ=environ)
        result.report = Run.open(run.dir).report
    return result


def timeline(target: Optional[str], args: Sequence[str] = (), *, module: bool = False,
             profile: ProfileArg = "default", out: Optional[Union[str, Path]] = None,
             run: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
             cwd: Optional[Union[str, Path]] = None,
             environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run the script under Nsight Systems with NVTX op ranges and join kernels to ops.

    With ``run``: add the timeline to that run (its script and arguments are reused when
    ``target`` is None); otherwise a new run directory.

    Raises:
        ScriptError, RunDirError, ProfileError; ToolNotFoundError (no nsys, with how to
        install it), ToolFailedError (nsys's own error lines and its log), NsysExportError.
    """
    prof = _profile(profile)
    if run is not None and target is None:
        earlier = Run.open(Path(run))
        if is_ranked(earlier):
            return on_ranks("timeline", earlier, profile=prof, timeout=timeout,
                            environ=environ)
    the_run, target, args, module, workdir = _run_for(run, target, args, module, cwd, prof,
                                                      "timeline", out)
    output, joined = capture_timeline(the_run.dir, target=target, args=args, module=module,
                                      profile=prof, cwd=workdir, timeout=timeout,
                                      environ=environ)
    the_run.add(output)
    result = result_of(the_run, None, output.exit_code)
    result.timeline = joined.ops
    return result


def deep(target: Optional[str] = None, args: Sequence[str] = (), *, kernels: Sequence[str] = (),
         top: Optional[int] = None, run: Optional[Union[str, Path]] = None,
         module: bool = False, profile: ProfileArg = "deep",
         out: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
         cwd: Optional[Union[str, Path]] = None, on_plan: Optional[Callable[[str], None]] = None,
         ranks: Optional[Sequence[int]] = None,
         environ: Mapping[str, str] = os.environ) -> RunResult:
    """Nsight Compute on the kernels of chosen ops, merged into the run's op rows.

    On a run of several ranks, every rank runs the script again (under the launcher that
    started nsbridge, or the triage's torch.distributed.run options), ncu on ``ranks`` or
    on the median and the slowest rank.

    Ops are ``kernels`` (checked against the run's op names first, with a did-you-mean) or
    the ``top`` ops by device time. The run is ``run``, else a triage of ``target`` made
    first, else the latest run under nsbridge-runs/. ``on_plan`` receives the plan's text
    before ncu starts.

    Raises:
        DeepError (an op the run does not have, no GPU, counters not permitted, no kernel
        matched), ToolNotFoundError (no ncu), ToolFailedError (ncu failed; log kept),
        RunDirError, ScriptError.
    """
    deep_prof = _profile(profile).deep
    if not kernels and top is None:
        top = deep_prof.top
    if run is None and target is not None:
        if detect_rank(environ) is not None:
            raise ScriptError("Under a launcher, triage and deep run together: nsbridge triage "
                              "--deep N script.py (or triage first, then deep --run-dir DIR).")
        require_gpu(environ)
        triaged = triage(target, args, module=module, out=out, timeout=timeout, cwd=cwd,
                        environ=environ)
        if triaged.exit_code != 0:
            return triaged
        run = triaged.run_dir
    the_run = Run.open(Path(run) if run is not None else _latest_run())
    report, manifest = the_run.report, the_run.manifest
    if is_ranked(the_run) and manifest.get("command") != "analyze":
        return on_ranks("deep", the_run, profile=_profile(profile), timeout=timeout,
                        kernels=kernels, top=top, ranks=ranks, on_plan=on_plan,
                        environ=environ)
    if manifest.get("command") == "analyze":
        raise DeepError(f"The run {the_run.dir} was made by `analyze` and has no script to "
                        "run under ncu. Give the script: nsbridge deep --kernel OP script.py.")
    if kernels:
        check_ops(kernels, the_run.op_names)
    require_gpu(environ)
    chosen = choose(report.get("ops", []), kernels=kernels, top=top,
                    min_kernel_us=deep_prof.min_kernel_us)
    torch_pass = next((p for p in manifest.get("passes", []) if p["name"] == "torch.profiler"),
                      {})
    the_plan = make_plan(chosen, report.get("ops", []), (report.get("steps") or {}).get(
        "count", 1), deep_prof, torch_pass.get("wall_s"))
    if on_plan is not None:
        on_plan(describe(the_plan))
    output = capture_deep(the_run.dir, plan=the_plan, target=manifest["target"],
                          args=manifest.get("args", []), module=bool(manifest.get("module")),
                          deep=deep_prof, cwd=Path(manifest.get("cwd") or Path.cwd()),
                          timeout=timeout, verdict=(report.get("verdict") or {}).get("label"),
                          op_shapes=_shapes(report), environ=environ)
    the_run.add(output)
    return result_of(the_run, None, 0)


def analyze(paths: Iterable[Union[str, Path]], *, profile: ProfileArg = "default",
            deep_profile: ProfileArg = "deep",
            out: Optional[Union[str, Path]] = None, window: str = "steps") -> RunResult:
    """Analyse files captured elsewhere: torch.profiler traces (several: the ranks of one
    job), nsys exports (.sqlite, .nsys-rep) and Nsight Compute reports (.ncu-rep, CSV),
    merged into one report keyed by op. ``window``: ``steps`` (the measured steps, in the
    torch trace and, by nsbridge's step ranges, in an nsys export) or ``trace`` (each file
    whole).

    Raises:
        ValueError: an unknown ``window``.
        TraceNotFoundError, TraceFormatError, EmptyTraceError, NsysExportError,
        NcuFormatError: a path is not usable. RunDirError (also: a run directory given
        that is incomplete or still running), ProfileError.
    """
    check_window(window)
    prof = _profile(profile)
    paths = list(paths)
    for folder in (Path(p) for p in paths):
        if (folder / "manifest.json").is_file():
            read_run(folder)   # a run directory: refused while incomplete or running
    ranked = [Path(p) for p in paths if Path(p).is_dir() and read_summaries(Path(p))]
    if ranked:
        return analyze_ranks(ranked[0], prof, out)
    files = _input_files([Path(p) for p in paths])
    nsys_files = [f for f in files if f.suffix in _NSYS_SUFFIXES]
    ncu_files = [f for f in files if f.suffix in _NCU_SUFFIXES]
    traces = [f for f in files if f not in nsys_files and f not in ncu_files]
    label = files[0].name.split(".")[0] if len(files) == 1 else f"{len(files)}-files"
    target = ", ".join(str(p) for p in paths)
    analysis: Optional[TraceAnalysis] = None
    first = None
    if traces:   # read before the run directory exists: a bad trace leaves nothing behind
        first, analysis = analyze_traces(traces, prof, target, window)
    run = Run.create(out=Path(out) if out else None, label=f"analyze-{label}",
                     command="analyze", target=target, args=[], profile=prof, cwd=Path.cwd())
    if first is not None:
        run.add(first)
        write_ops_csv(run, analysis.ops)
    result_timeline = None
    try:
        if nsys_files:
            output, joined = timeline_from_exports(nsys_files, prof, run.dir, window)
            run.add(output)
            result_timeline = joined.ops
        if ncu_files:
            run.add(ncu_from_files(ncu_files, _profile(deep_profile).deep,
                                   (run.report.get("verdict") or {}).get("label"),
                                   _shapes(run.report)))
    except Exception:
        run.manifest["status"] = run.report["status"] = "failed"
        run.write()
        raise
    result = result_of(run, analysis, 0)
    result.timeline = result_timeline
    return result


def diff(base: Union[str, Path], new: Union[str, Path], *, fail_above: float = 10.0,
         ops: Sequence[str] = (), min_step_share: float = 0.02,
         allow: Sequence[str] = ()) -> dict[str, Any]:
    """Compare two runs (directories or report.json files) and gate on the result.

    Returns model.diff.compare's dict: ``outcome`` (pass, regression, inconclusive) with its
    ``exit_code`` (0, 1, 4), ``reasons`` and ``advice`` when inconclusive, ``regressions``
    (op or step time, source, change beyond the drift with its 95% interval, ms added per
    step), the step-time and per-op comparison, the noise figures and both machines.
    ``ops`` gates only those ops; ``allow`` accepts differences of kind target (runs of
    different scripts, refused otherwise), args, torch, gpu, threads or cores (which would
    otherwise make the comparison inconclusive).

    Raises:
        DiffInputError: a path is neither a run directory nor a JSON file, or an ``ops`` or
            ``allow`` entry is unknown.
        DiffRefusedError: a run diff cannot compare (model.comparability.refusal): failed,
            still running, empty, of another schema version or shape, or of another script.
    """
    from .model.comparability import ALLOWABLE, SIDES, refusal
    from .model.diff import compare
    from .report.build import SCHEMA_VERSION

    unknown_kinds = [k for k in allow if k not in ALLOWABLE]
    if unknown_kinds:
        raise DiffInputError(terminal(f"--allow {', '.join(unknown_kinds)}: the differences "
                                      f"that can be accepted are {', '.join(ALLOWABLE)}."))
    labels = (str(base), str(new))
    reports = [_read_report(Path(p), side) for p, side in zip(labels, SIDES)]
    why = refusal(*reports, labels=labels, schema_version=SCHEMA_VERSION, allow=allow)
    if why:
        raise DiffRefusedError(terminal(why))
    known = {op["name"] for report in reports for op in report["ops"]}
    unknown = [op for op in ops if op not in known]
    if unknown:
        raise DiffInputError(terminal(f"--op {', '.join(unknown)}: neither run has such an op, "
                                      "so the gate would check nothing. Use names as the "
                                      "reports' op tables spell them."))
    result = compare(*reports, fail_above=fail_above, ops=ops, min_step_share=min_step_share,
                     allow=allow)
    result["a_label"], result["b_label"] = labels
    return result


def _read_report(path: Path, side: str) -> Any:
    """The parsed report.json of run directory ``path``, or of the file ``path``.

    Raises:
        DiffRefusedError: a run directory (it has manifest.json) without a readable
            report.json.
        DiffInputError: anything else that is not readable JSON.
    """
    from .model.comparability import no_report

    file = path / "report.json" if path.is_dir() else path
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        if (file.parent / "manifest.json").is_file():
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
             out: Optional[Union[str, Path]]) -> tuple[Run, str, Sequence[str], bool, Path]:
    """The run to add a pass to (an earlier one, or a new one) and what to execute."""
    workdir = Path(cwd) if cwd else Path.cwd()
    if run is not None:
        the_run = Run.open(Path(run))
        if target is None:
            manifest = the_run.manifest
            if manifest.get("command") == "analyze":
                raise ScriptError(f"The run {run} has no script to run (it was made by "
                                  "`analyze`); give the script too.")
            target, args = manifest["target"], manifest.get("args", [])
            module = bool(manifest.get("module"))
            workdir = Path(manifest.get("cwd") or workdir)
        return the_run, target, args, module, workdir
    if target is None:
        raise ScriptError(f"Give a script to run under {command}, or --run DIR of a triage run.")
    _check_script(target, module, workdir)
    the_run = Run.create(out=Path(out) if out else None, label=f"{command}-"
                         f"{_label(target, module)}", command=command, target=target,
                         args=list(args), profile=prof, cwd=workdir, module=module)
    return the_run, target, args, module, workdir


def _shapes(report: dict[str, Any]) -> dict[str, list[str]]:
    return {op["name"]: op.get("shapes") or [] for op in report.get("ops", [])}


def _latest_run() -> Path:
    runs = sorted((p for p in DEFAULT_BASE.glob("*") if (p / "report.json").is_file()),
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
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name not in _NOT_TRACES
                           and not p.name.startswith("child-config")
                           and p.name.endswith(suffixes) and p.suffix != ".csv")
            if not found:
                raise TraceNotFoundError(f"The folder {path} holds no .json or .json.gz trace "
                                         "files. Point analyze at torch.profiler traces.")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise TraceNotFoundError(f"{path} does not exist. Pass torch.profiler trace files "
                                     "(.json, .json.gz), nsys exports or ncu reports, or "
                                     "folders that hold them.")
    if not files:
        raise TraceNotFoundError("No trace given: pass one or more trace files or folders.")
    return files


def _check_script(target: str, module: bool, workdir: Path) -> None:
    """Fail before anything starts when the script or module cannot be found (ScriptError)."""
    if module:
        check_module(target, workdir)
        return
    script = (workdir / target) if not Path(target).is_absolute() else Path(target)
    if not script.is_file():
        what = "is a directory" if script.is_dir() else "does not exist"
        raise ScriptError(f"The script {target} {what}. Give the path of a Python file "
                          "(relative to the current directory), or use -m package.module "
                          "to run a module.")


def _label(target: str, module: bool) -> str:
    return target.split(".")[-1] if module else Path(target).stem


def _profile(profile: ProfileArg) -> Profile:
    return profile if isinstance(profile, Profile) else load_profile(profile)
