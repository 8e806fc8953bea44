"""The library API: each command is a short composition of passes into one Run.

- ``triage``: torch.profiler pass (then, optionally, the nsys and ncu passes)
- ``timeline``: nsys pass, into a new run or an earlier one
- ``deep``: ncu pass on chosen ops, into an earlier run (or a new triage first)
- ``analyze``: the passes' readers on files captured elsewhere
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import pandas as pd

from . import progress
from . import schema as S
from .errors import DeepError, RunDirError, ScriptError, TraceNotFoundError
from .model.analysis import TraceAnalysis
from .model.deep_plan import check_ops, choose, describe, plan as make_plan
from .collect.ncu import find_ncu
from .passes.ncu_pass import capture_deep, ncu_from_files, require_gpu
from .passes.nsys_pass import capture_timeline, timeline_from_exports
from .passes.rank_passes import (check_one_node, deep_on_ranks, driver, follow, is_ranked,
                                 tell_stop, timeline_on_ranks)
from .passes.ranks_pass import (launcher_argv, missing_ranks, profile_ranks, read_summaries,
                                reduce, wait_for)
from .passes.torch_pass import analyze_traces, profile_script
from .profiles import Profile, load_profile
from .report import frames
from .distributed.ranks import detect as detect_rank, job_id
from .rundir import DEFAULT_BASE, new_run_dir
from .run import Run, empty_report

__all__ = ["RunResult", "triage", "timeline", "deep", "analyze", "diff", "load", "doctor"]

_NOT_TRACES = {"report.json", "manifest.json", "child.json", "child-config.json",
               "nvtx-child.json", "nvtx-child-config.json", "ncu-child-config.json",
               "summary.json", "merged.json.gz"}
_NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
_NCU_SUFFIXES = (".ncu-rep", ".csv")
ProfileArg = Union[str, Profile]
WAIT_S = 600.0   # how long rank 0 waits for the other ranks' summaries (default)


@dataclass
class RunResult:
    """What a command produced (or ``nsbridge.load`` read back): the run directory, the
    report dict and its frames. Renders as a summary in Jupyter."""

    run_dir: Path
    report: dict[str, Any]
    ops: pd.DataFrame      # OPS frame (schema.OP_COLUMNS), ranked; see frames.ops for load
    steps: pd.DataFrame    # per step: step, wall_ms, data/forward/backward/optimizer/other_ms
    exit_code: int         # 0, the script's own non-zero status, 124 timeout, 130 Ctrl-C
    timeline: Optional[pd.DataFrame] = None  # nsys per-op table (model.timeline.op_summary)

    @property
    def status(self) -> str:
        return str(self.report["status"])

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "manifest.json").read_text(encoding="utf-8"))

    @property
    def kernels(self) -> pd.DataFrame:
        """Kernels and copies per op (op, kind, name, calls, device_us, bytes)."""
        return frames.kernels(self.report)

    @property
    def sync_points(self) -> pd.DataFrame:
        return frames.sync_points(self.report)

    @property
    def gaps(self) -> pd.DataFrame:
        """GPU idle gaps in the torch trace's measured window."""
        return frames.gaps(self.report)

    @property
    def timeline_ops(self) -> Optional[pd.DataFrame]:
        return frames.timeline_ops(self.report)

    @property
    def timeline_gaps(self) -> Optional[pd.DataFrame]:
        return frames.timeline_gaps(self.report)

    @property
    def ncu(self) -> Optional[pd.DataFrame]:
        """ncu's kernel table (one row per profiled launch), None without the deep pass."""
        return frames.ncu_kernels(self.report)

    def _repr_html_(self) -> str:
        return frames.summary_html(self.report, str(self.run_dir))


def load(run_dir: Union[str, Path]) -> RunResult:
    """Read a run directory back: the report, its frames (ops with nsys_*/ncu_* columns,
    kernels, steps, sync points, gaps, timeline and ncu tables) and the manifest.

    Raises:
        RunDirError: not a directory nsbridge wrote.
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
           environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run a script (or ``-m`` module) under torch.profiler and analyse it; with ``nsys``
    also the timeline pass, with ``deep_top`` the ncu pass on that many top ops, all into
    one run directory. Several ranks (``nproc_per_node``, or started by a launcher): every
    pass on every rank (``ranks`` limits torch.profiler and nsys), ncu on ``deep_ranks``
    or on the median and the slowest rank.

    Returns:
        RunResult. A script that fails still returns one (status 'failed', its exit code).

    Raises:
        ScriptError, RunDirError, ProfileError; with ``nsys``: ToolNotFoundError,
        ToolFailedError, NsysExportError; with ``deep_top``: DeepError, ToolNotFoundError,
        ToolFailedError (each after the earlier passes' outputs are written).
    """
    prof = _profile(profile)
    workdir = Path(cwd) if cwd else Path.cwd()
    _check_script(target, module, workdir)
    rank = None if nproc_per_node else detect_rank(environ)
    if deep_top is not None:   # fail before the script runs, not after
        _profile(deep_profile)
        require_gpu(environ)
        find_ncu(environ)
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
        result = _triage_ranks(target, list(args), module=module, profile=prof, out=out,
                               timeout=timeout, cwd=workdir, rank=rank, ranks=ranks,
                               launcher=launcher,
                               world=(nproc_per_node or 0) if str(nnodes or "1").split(":")[-1]
                               == "1" else 0, environ=environ)
        return _tool_passes_on_ranks(result, rank=rank, launcher=launcher, nsys=nsys,
                                     deep_top=deep_top, profile=prof,
                                     deep_profile=_profile(deep_profile), deep_ranks=deep_ranks,
                                     timeout=timeout, on_plan=on_plan, environ=environ)
    run = Run.create(out=Path(out) if out else None, label=_label(target, module),
                     command="triage", target=target, args=list(args), profile=prof,
                     cwd=workdir, module=module)
    output, analysis = profile_script(run.dir, target=target, args=args, module=module,
                                      profile=prof, cwd=workdir, timeout=timeout,
                                      environ=environ)
    run.add(output)
    if analysis is not None:
        _write_ops_csv(run.dir, analysis.ops)
    result = _result(run, analysis, output.exit_code)
    if output.exit_code != 0:
        return result
    if nsys:
        result = timeline(None, run=run.dir, profile=prof, timeout=timeout, environ=environ)
    if deep_top is not None and result.exit_code == 0:
        deep(run=run.dir, top=deep_top or None, profile=deep_profile, timeout=timeout,
             on_plan=on_plan, environ=environ)
        result.report = Run.open(run.dir).report
    return result


def _triage_ranks(target: str, args: list[str], *, module: bool, profile: Profile,
                  out: Optional[Union[str, Path]], timeout: Optional[float], cwd: Path,
                  rank: Any, ranks: Optional[list[int]], launcher: list[str], world: int,
                  environ: Mapping[str, str]) -> RunResult:
    """Every rank profiled into its own folder of one run directory, then merged: by this
    process after torch.distributed.run returns (``launcher``), or, when a launcher started
    one nsbridge per rank, by rank 0 once every rank's summary is there."""
    label = _label(target, module)
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
            return _follower_result(run_dir, rank, code, "triage", " ".join([target, *args]))
        with progress.step(f"waiting for the other {rank.world_size - 1} rank(s)"):
            # stopped (timeout, signal): a short wait; summaries older than this launch
            # (an earlier run into the same --out) never count
            summaries = wait_for(run_dir, rank.world_size,
                                 (timeout or WAIT_S) if code == 0 else 10.0, since=started)
        run = Run.create(out=run_dir, label=label, command="triage", target=target,
                         args=args, profile=profile, cwd=cwd, module=module, shared=True)
    with progress.step("merging the ranks"):
        output, analysis = reduce(run.dir, summaries, profile, " ".join([target, *args]))
    run.add(output)
    if analysis is not None:
        _write_ops_csv(run.dir, analysis.ops)
    return _result(run, analysis, output.exit_code or code)


def _tool_passes_on_ranks(result: RunResult, *, rank: Any, launcher: list[str], nsys: bool,
                          deep_top: Optional[int], profile: Profile, deep_profile: Profile,
                          deep_ranks: Optional[list[int]], timeout: Optional[float],
                          on_plan: Optional[Callable[[str], None]],
                          environ: Mapping[str, str]) -> RunResult:
    """After a distributed triage: the nsys and ncu passes on the ranks (rank 0 or the
    launching process merges; other ranks run their share when rank 0 says so)."""
    kinds = [k for k, wanted in (("timeline", nsys), ("deep", deep_top is not None)) if wanted]
    if rank is not None and rank.rank != 0:
        for kind in kinds:
            if result.exit_code == 0:
                result.exit_code = follow(kind, result.run_dir, rank, timeout, environ)
        return result
    run = Run.open(result.run_dir) if kinds else None
    for kind in kinds:
        if result.exit_code != 0:
            if rank is not None:
                tell_stop(result.run_dir, kind, f"an earlier pass ended with exit status "
                          f"{result.exit_code}", rank, environ)
            continue
        if kind == "timeline":
            output = timeline_on_ranks(run, profile=profile, timeout=timeout, rank=rank,
                                       launcher=launcher, environ=environ)
        else:
            output = deep_on_ranks(run, kernels=(), top=deep_top or None, profile=deep_profile,
                                   ranks=deep_ranks, timeout=timeout, rank=rank,
                                   launcher=launcher, on_plan=on_plan, environ=environ)
        run.add(output)
        result = _result(run, None, output.exit_code)
    return result


def _follower_result(run_dir: Path, rank: Any, code: int, command: str,
                     target: str) -> RunResult:
    """What a rank other than 0 returns: where its files are (rank 0 merges)."""
    report = empty_report(command, target)
    report.update(status="ok" if code == 0 else "failed", notes=[
        f"rank {rank.rank} of {rank.world_size} on {rank.host}: its files are in "
        f"{run_dir / rank.dir_name}; rank 0 writes the merged report in {run_dir}"])
    if code != 0:
        report["error"] = {"type": "RankStopped", "message": (
            f"rank {rank.rank} ended with exit status {code} (its messages are above; rank 0's "
            "report names the rank that failed first)")}
    return RunResult(run_dir=run_dir, report=report, ops=pd.DataFrame(columns=S.OP_COLUMNS),
                     steps=pd.DataFrame(), exit_code=code)


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
            return _on_ranks("timeline", earlier, profile=prof, timeout=timeout,
                             environ=environ)
    the_run, target, args, module, workdir = _run_for(run, target, args, module, cwd, prof,
                                                      "timeline", out)
    output, joined = capture_timeline(the_run.dir, target=target, args=args, module=module,
                                      profile=prof, cwd=workdir, timeout=timeout,
                                      environ=environ)
    the_run.add(output)
    result = _result(the_run, None, output.exit_code)
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
        return _on_ranks("deep", the_run, profile=_profile(profile), timeout=timeout,
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
    return _result(the_run, None, 0)


def _on_ranks(kind: str, the_run: Run, *, profile: Profile, timeout: Optional[float],
              kernels: Sequence[str] = (), top: Optional[int] = None,
              ranks: Optional[Sequence[int]] = None,
              on_plan: Optional[Callable[[str], None]] = None,
              environ: Mapping[str, str] = os.environ) -> RunResult:
    """`timeline --run` / `deep --run` on a run of several ranks."""
    rank, launcher = driver(the_run, detect_rank(environ))
    if kind == "deep":
        if kernels:
            check_ops(kernels, the_run.op_names)
        require_gpu(environ)
        find_ncu(environ)
    if rank is not None and rank.rank != 0:   # rank 0 writes the merged report
        return _follower_result(the_run.dir, rank,
                                follow(kind, the_run.dir, rank, timeout, environ), kind,
                                the_run.report.get("target", ""))
    if kind == "timeline":
        output = timeline_on_ranks(the_run, profile=profile, timeout=timeout, rank=rank,
                                   launcher=launcher, environ=environ)
    else:
        output = deep_on_ranks(the_run, kernels=kernels, top=top, profile=profile, ranks=ranks,
                               timeout=timeout, rank=rank, launcher=launcher, on_plan=on_plan,
                               environ=environ)
    the_run.add(output)
    return _result(the_run, None, output.exit_code)


def analyze(paths: Iterable[Union[str, Path]], *, profile: ProfileArg = "default",
            deep_profile: ProfileArg = "deep",
            out: Optional[Union[str, Path]] = None) -> RunResult:
    """Analyse files captured elsewhere: torch.profiler traces (several: the ranks of one
    job), nsys exports (.sqlite, .nsys-rep) and Nsight Compute reports (.ncu-rep, CSV),
    merged into one report keyed by op.

    Raises:
        TraceNotFoundError, TraceFormatError, EmptyTraceError, NsysExportError,
        NcuFormatError: a path is not usable. RunDirError, ProfileError.
    """
    prof = _profile(profile)
    paths = list(paths)
    ranked = [Path(p) for p in paths if Path(p).is_dir() and read_summaries(Path(p))]
    if ranked:
        return _analyze_ranks(ranked[0], prof, out)
    files = _input_files([Path(p) for p in paths])
    nsys_files = [f for f in files if f.suffix in _NSYS_SUFFIXES]
    ncu_files = [f for f in files if f.suffix in _NCU_SUFFIXES]
    traces = [f for f in files if f not in nsys_files and f not in ncu_files]
    label = files[0].name.split(".")[0] if len(files) == 1 else f"{len(files)}-files"
    target = ", ".join(str(p) for p in paths)
    analysis: Optional[TraceAnalysis] = None
    first = None
    if traces:   # read before the run directory exists: a bad trace leaves nothing behind
        first, analysis = analyze_traces(traces, prof, target)
    run = Run.create(out=Path(out) if out else None, label=f"analyze-{label}",
                     command="analyze", target=target, args=[], profile=prof, cwd=Path.cwd())
    if first is not None:
        run.add(first)
        _write_ops_csv(run.dir, analysis.ops)
    result_timeline = None
    try:
        if nsys_files:
            output, joined = timeline_from_exports(nsys_files, prof, run.dir)
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
    result = _result(run, analysis, 0)
    result.timeline = result_timeline
    return result


def diff(base: Union[str, Path], new: Union[str, Path], *, fail_above: float = 10.0,
         ops: Sequence[str] = (), min_step_share: float = 0.02) -> dict[str, Any]:
    """Compare two runs (directories or report.json files): per-op deltas judged against
    each run's noise, step time, verdict, sync points; ``regressions`` names what got
    slower than ``fail_above`` percent (only ``ops`` when given) and added at least
    ``min_step_share`` of the base step time.

    Raises:
        RunDirError: a path is neither a run directory nor a report.json.
    """
    from .model.diff import compare

    reports = [_read_report(Path(p)) for p in (base, new)]
    known = {op["name"] for report in reports for op in report.get("ops", [])}
    unknown = [op for op in ops if op not in known]
    if unknown:
        raise RunDirError(f"--op {', '.join(unknown)}: neither run has such an op, so the gate "
                          "would check nothing. Use names as the reports' op tables spell them.")
    result = compare(*reports, fail_above=fail_above, ops=ops, min_step_share=min_step_share)
    result["a_label"], result["b_label"] = str(base), str(new)
    return result


def _read_report(path: Path) -> dict[str, Any]:
    file = path / "report.json" if path.is_dir() else path
    try:
        report = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise RunDirError(f"{path} is neither an nsbridge run directory nor its report.json "
                          "(no readable report.json). Pass two run directories or two "
                          "report.json files.") from None
    if not isinstance(report, dict) or "ops" not in report:
        raise RunDirError(f"{file} is JSON but not an nsbridge report (no ops).")
    return report


def _analyze_ranks(source: Path, prof: Profile, out: Optional[Union[str, Path]]) -> RunResult:
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
    run.add(output)
    if analysis is not None:
        _write_ops_csv(run.dir, analysis.ops)
    return _result(run, analysis, 0)


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


def _result(run: Run, analysis: Optional[TraceAnalysis], exit_code: int) -> RunResult:
    if analysis is not None:
        ops, steps = analysis.ops, analysis.steps
    else:   # a pass added to a run: its frames from the report, as nsbridge.load gives them
        ops, steps = frames.ops(run.report), frames.steps(run.report)
    return RunResult(run_dir=run.dir, report=run.report, ops=ops, steps=steps,
                     exit_code=exit_code)


def _write_ops_csv(run_dir: Path, ops: pd.DataFrame) -> None:
    csv = ops.copy()
    csv["shapes"] = csv["shapes"].map(lambda v: "; ".join(v))
    for col in ("kernels", "copies"):
        csv[col] = csv[col].map(lambda ks: json.dumps([k["name"] for k in ks]))
    csv["per_step_us"] = csv["per_step_us"].map(json.dumps)
    csv.to_csv(run_dir / "ops.csv", index=False)


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
    if module:
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
