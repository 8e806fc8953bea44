"""The library API: `triage` and `analyze` wire collect -> parse -> model -> report."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import pandas as pd

from . import __version__
from . import schema as S
from .collect._process import ChildOutcome
from .collect.nsys import run_nsys_pass
from .collect.torch_profiler import TorchPass, run_torch_pass
from .errors import (NsbridgeError, RunDirError, ScriptError, TraceError, TraceFormatError,
                     TraceNotFoundError)
from .model.analysis import TraceAnalysis, analyze_events, profiler_overhead
from .model.ranks import combine_ops, slowest
from .model.timeline import join as join_timeline
from .parse.nsys_sqlite import read_nsys_sqlite
from .parse.torch_trace import TorchTrace, read_trace
from .profiles import Profile, load_profile
from .report.build import add_timeline, build_report, timeline_section
from .report.render import html_page, markdown
from .rundir import new_run_dir, write_json

_NOT_TRACES = {"report.json", "manifest.json", "child.json", "child-config.json"}


@dataclass
class RunResult:
    """What a command produced: the run directory, the report dict and its frames."""

    run_dir: Path
    report: dict[str, Any]
    ops: pd.DataFrame      # OPS frame (schema.OP_COLUMNS), all ops, ranked
    steps: pd.DataFrame    # per step: step, wall_ms, data/forward/backward/optimizer/other_ms
    exit_code: int         # 0, the script's own non-zero status, 124 timeout, 130 Ctrl-C
    timeline: Optional[pd.DataFrame] = None  # nsys per-op table (model.timeline.op_summary)

    @property
    def status(self) -> str:
        return str(self.report["status"])


def triage(target: str, args: Sequence[str] = (), *, module: bool = False,
           profile: Union[str, Profile] = "default", out: Optional[Union[str, Path]] = None,
           timeout: Optional[float] = None, cwd: Optional[Union[str, Path]] = None,
           nsys: bool = False, environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run a script (or ``-m`` module) under torch.profiler and analyse it.

    Args:
        target: path of the script, or a module name when ``module`` is true.
        args: the script's own arguments.
        profile: a built-in profile name, a YAML path, or a loaded Profile.
        out: the run directory to create (must not exist); default nsbridge-runs/<time>-<name>.
        timeout: seconds before the script is stopped (its partial trace is kept).
        cwd: working directory of the script (default: the current one).
        nsys: also run the Nsight Systems timeline pass into the same run directory.

    Returns:
        RunResult. A script that fails still returns one (status 'failed', its exit code).

    Raises:
        ScriptError: the script does not exist. RunDirError: ``out`` is unusable.
        ProfileError: the profile is invalid. With ``nsys``: ToolNotFoundError,
        ToolFailedError, NsysExportError (after the triage outputs are written).
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    workdir = Path(cwd) if cwd else Path.cwd()
    _check_script(target, module, workdir)
    label = target.split(".")[-1] if module else Path(target).stem
    run_dir = new_run_dir(Path(out) if out else None, label)
    manifest = _manifest("triage", target, list(args), prof, workdir, module)
    write_json(run_dir / "manifest.json", manifest)

    torch_pass = run_torch_pass(target=target, is_module=module, args=args, profile=prof,
                                run_dir=run_dir, cwd=workdir, timeout=timeout, environ=environ)
    status, exit_code, error = _pass_status(torch_pass.outcome, torch_pass.child)
    child = torch_pass.child or {}
    manifest["environment"] = child.get("env")
    manifest["passes"].append({"name": "torch.profiler", "status": status,
                               "exit_code": exit_code,
                               "wall_s": torch_pass.outcome.wall_s,
                               "steps_seen": len(child.get("steps", [])),
                               "step_source": child.get("step_source")})
    notes = _triage_notes(torch_pass, child)
    analysis, trace = None, None
    if torch_pass.traces:
        try:
            trace = read_trace(torch_pass.traces[0])
            analysis = analyze_events(trace.events, thresholds=prof.analysis,
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
    report = build_report(command="triage", target=" ".join([target, *args]), status=status,
                          analysis=analysis, step_source=child.get("step_source"),
                          overhead=profiler_overhead(child.get("steps", [])) if child else None,
                          files=files, notes=notes, has_memory=_has_memory(trace),
                          error=error, version=__version__)
    manifest["status"] = status
    manifest["finished_at"] = _now()
    write_json(run_dir / "manifest.json", manifest)
    result = _write_outputs(run_dir, report, analysis, exit_code)
    if nsys and exit_code == 0:
        return timeline(target, args, module=module, profile=prof, run=run_dir, timeout=timeout,
                        cwd=workdir, environ=environ)
    return result


def timeline(target: Optional[str], args: Sequence[str] = (), *, module: bool = False,
             profile: Union[str, Profile] = "default", out: Optional[Union[str, Path]] = None,
             run: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
             cwd: Optional[Union[str, Path]] = None,
             environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run the script under Nsight Systems with NVTX op ranges and join kernels to ops.

    With ``run``: add the timeline to that existing triage run (its script and arguments
    are reused when ``target`` is None); otherwise a new run directory.

    Raises:
        ScriptError, RunDirError, ProfileError; ToolNotFoundError (no nsys, with how to
        install it), ToolFailedError (nsys's own error lines and its log), NsysExportError.
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    workdir = Path(cwd) if cwd else Path.cwd()
    if run is not None:
        run_dir = Path(run)
        if not (run_dir / "manifest.json").is_file() or not (run_dir / "report.json").is_file():
            raise RunDirError(f"--run {run_dir} is not an nsbridge run directory (no "
                              "manifest.json and report.json). Pass a directory that "
                              "`nsbridge triage` wrote, or leave --run off.")
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
        report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
        if target is None:
            target, args = manifest["target"], manifest.get("args", [])
            module = bool(manifest.get("module"))
            workdir = Path(manifest.get("cwd") or workdir)
    else:
        if target is None:
            raise ScriptError("Give a script to run under nsys, or --run DIR of a triage run.")
        _check_script(target, module, workdir)
        label = target.split(".")[-1] if module else Path(target).stem
        run_dir = new_run_dir(Path(out) if out else None, f"timeline-{label}")
        manifest = _manifest("timeline", target, list(args), prof, workdir, module)
        write_json(run_dir / "manifest.json", manifest)
        report = build_report(command="timeline", target=" ".join([target, *args]),
                              status="running", analysis=None, step_source=None,
                              overhead=None, files={}, notes=[], has_memory=False,
                              version=__version__)
        write_json(run_dir / "report.json", report)
    nsys_pass = run_nsys_pass(target=target, is_module=module, args=args,
                              trace=prof.timeline.trace, run_dir=run_dir, cwd=workdir,
                              timeout=timeout, environ=environ)
    capture = nsys_pass.capture
    status, exit_code, error = _pass_status(capture.outcome, nsys_pass.child)
    manifest["passes"].append({"name": "nsys", "status": status, "exit_code": exit_code,
                               "wall_s": capture.outcome.wall_s,
                               "nsys_version": nsys_pass.version,
                               "nsys": nsys_pass.install.path,
                               "nsys_found_by": nsys_pass.install.found_by,
                               "qdstrm_imported_with": capture.imported_with,
                               "argv": capture.argv})
    manifest.setdefault("environment", (nsys_pass.child or {}).get("env"))
    export = read_nsys_sqlite(nsys_pass.sqlite)
    joined = join_timeline(export, prof.timeline.top_gaps)
    emitted = ((nsys_pass.child or {}).get("nvtx") or {}).get("total", 0)
    section = timeline_section(joined, nvtx_check(emitted, joined.summary["nsbridge_ranges"],
                                                  nsys_pass.version),
                               {"nsys_rep": capture.report.name,
                                "sqlite": nsys_pass.sqlite.name, "log": nsys_pass.log.name})
    report = add_timeline(report, section)
    if report.get("status") in (None, "running", "ok") and status != "ok":
        report["status"], report["error"] = status, error
    elif report.get("status") == "running":
        report["status"] = "ok"
    if section["nvtx"].get("warning"):
        report["notes"] = [*report.get("notes", []), section["nvtx"]["warning"]]
    manifest["status"] = report["status"]
    manifest["finished_at"] = _now()
    write_json(run_dir / "manifest.json", manifest)
    result = _write_report_files(run_dir, report)
    ops_frame = (pd.read_csv(run_dir / "ops.csv") if (run_dir / "ops.csv").is_file()
                 else pd.DataFrame(columns=S.OP_COLUMNS))
    return RunResult(run_dir=run_dir, report=result, ops=ops_frame, steps=pd.DataFrame(),
                     exit_code=exit_code, timeline=joined.ops)


def doctor() -> list[Any]:
    """Machine checks for `nsbridge doctor` (collect.doctor.Check: level, name, detail, fix)."""
    from .collect.doctor import run_checks

    return run_checks()


def nvtx_check(emitted: int, recorded: int, nsys_version: Optional[str]) -> dict[str, Any]:
    """Compare NVTX ranges nsbridge pushed with those in the export; warn with the cause."""
    check: dict[str, Any] = {"emitted": emitted, "recorded": recorded, "warning": None}
    if emitted and recorded < 0.5 * emitted:
        try:
            from importlib.metadata import version

            nvtx_version = version("nvtx")
        except Exception:
            nvtx_version = "unknown"
        check["warning"] = (
            f"nsys recorded {recorded} of the {emitted} NVTX ranges nsbridge emitted, so ops "
            f"cannot be joined. Likely cause: the nvtx package ({nvtx_version}) is newer than "
            f"this nsys ({nsys_version or 'unknown'}) records; nsys 2022.4 records nvtx up to "
            "0.2.10. Fix: pip install nvtx==0.2.10, or use a newer Nsight Systems.")
    return check


def analyze(paths: Iterable[Union[str, Path]], *, profile: Union[str, Profile] = "default",
            out: Optional[Union[str, Path]] = None) -> RunResult:
    """Analyse torch.profiler traces captured elsewhere (files or folders of them).

    Several traces (the ranks of one job) give one report: ops summed over ranks, the
    verdict of the slowest rank, and a per-rank table.

    Raises:
        TraceNotFoundError, TraceFormatError, EmptyTraceError: a path is not a usable trace.
        RunDirError: ``out`` is unusable. ProfileError: the profile is invalid.
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    files = _trace_files([Path(p) for p in paths])
    nsys_files = [f for f in files if f.suffix in (".sqlite", ".nsys-rep", ".qdrep")]
    files = [f for f in files if f not in nsys_files]
    if nsys_files and not files:
        return _analyze_nsys(nsys_files, prof, out)
    traces: list[TorchTrace] = []
    notes: list[str] = []
    for path in files:
        try:
            traces.append(read_trace(path))
        except TraceFormatError as exc:
            if len(files) == 1 or "not a torch.profiler trace" not in str(exc):
                raise
            notes.append(f"skipped {path}: JSON that is not a torch.profiler trace")
    if not traces:
        raise TraceNotFoundError("None of the files given is a torch.profiler trace.")
    traces.sort(key=lambda t: (t.rank if t.rank is not None else 1 << 30, str(t.path)))
    analyses = [analyze_events(t.events, thresholds=prof.analysis) for t in traces]
    label = files[0].name.split(".")[0] if len(files) == 1 else f"{len(files)}-traces"
    run_dir = new_run_dir(Path(out) if out else None, f"analyze-{label}")
    manifest = _manifest("analyze", ", ".join(map(str, files)), [], prof, Path.cwd(), False)
    ranks = [_rank_summary(i, t, a) for i, (t, a) in enumerate(zip(traces, analyses))]
    lead = analyses[slowest(ranks)] if len(analyses) > 1 else analyses[0]
    if len(analyses) > 1:
        has_device = any(a.has_device for a in analyses)
        lead = TraceAnalysis(**{**lead.__dict__, "ops": combine_ops([a.ops for a in analyses],
                                                                    has_device)})
        notes.append(f"{len(analyses)} traces: ops are summed over all of them; verdict, steps "
                     f"and device figures are those of the slowest (rank {ranks[slowest(ranks)]['rank']})")
    files_info = {"trace": None, "inputs": [str(t.path) for t in traces], "ops_csv": "ops.csv"}
    report = build_report(command="analyze", target=", ".join(str(p) for p in paths),
                          status="ok", analysis=lead, step_source=None, overhead=None,
                          files=files_info, notes=notes,
                          has_memory=any(_has_memory(t) for t in traces),
                          ranks=ranks if len(traces) > 1 else None, version=__version__)
    manifest["status"] = "ok"
    manifest["passes"].append({"name": "analyze", "status": "ok", "inputs": len(traces)})
    manifest["finished_at"] = _now()
    write_json(run_dir / "manifest.json", manifest)
    result = _write_outputs(run_dir, report, lead, 0)
    if nsys_files:
        joined, section = _nsys_section(nsys_files, prof, run_dir)
        result.report = _write_report_files(run_dir, add_timeline(result.report, section))
        result.timeline = joined.ops
    return result


def _analyze_nsys(files: list[Path], prof: Profile, out: Optional[Union[str, Path]]) -> RunResult:
    run_dir = new_run_dir(Path(out) if out else None, f"analyze-{files[0].stem}")
    manifest = _manifest("analyze", ", ".join(map(str, files)), [], prof, Path.cwd(), False)
    try:
        joined, section = _nsys_section(files, prof, run_dir)
    except NsbridgeError:
        manifest["status"] = "failed"
        write_json(run_dir / "manifest.json", manifest)
        raise
    report = build_report(command="analyze", target=", ".join(map(str, files)), status="ok",
                          analysis=None, step_source=None, overhead=None,
                          files={"inputs": [str(f) for f in files]}, notes=[],
                          has_memory=False, version=__version__)
    report = add_timeline(report, section)
    manifest["status"] = "ok"
    manifest["finished_at"] = _now()
    write_json(run_dir / "manifest.json", manifest)
    return RunResult(run_dir=run_dir, report=_write_report_files(run_dir, report),
                     ops=pd.DataFrame(columns=S.OP_COLUMNS), steps=pd.DataFrame(), exit_code=0,
                     timeline=joined.ops)


def _nsys_section(files: list[Path], prof: Profile, run_dir: Path) -> tuple[Any, dict[str, Any]]:
    """Join the first nsys export (a .nsys-rep is exported into the run directory)."""
    from .collect.nsys import export_sqlite, find_nsys

    source = files[0]
    sqlite = source
    if source.suffix != ".sqlite":
        sqlite = export_sqlite(find_nsys().path, source, run_dir / "nsys-export.log",
                               run_dir / f"{source.stem}.sqlite")
    joined = join_timeline(read_nsys_sqlite(sqlite), prof.timeline.top_gaps)
    section = timeline_section(joined, {"emitted": None, "recorded": joined.summary[
        "nsbridge_ranges"], "warning": None}, {"input": str(source), "sqlite": str(sqlite)})
    if len(files) > 1:
        section["note"] = f"{len(files)} nsys files given; the timeline shows {source.name}"
    return joined, section


def _trace_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name not in _NOT_TRACES
                           and p.name.endswith((".json", ".json.gz", ".sqlite", ".nsys-rep")))
            if not found:
                raise TraceNotFoundError(f"The folder {path} holds no .json or .json.gz trace "
                                         "files. Point analyze at torch.profiler traces.")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise TraceNotFoundError(f"{path} does not exist. Pass torch.profiler trace files "
                                     "(.json, .json.gz) or folders that hold them.")
    if not files:
        raise TraceNotFoundError("No trace given: pass one or more trace files or folders.")
    return files


def _rank_summary(index: int, trace: TorchTrace, analysis: TraceAnalysis) -> dict[str, Any]:
    numbers = analysis.verdict["numbers"]
    return {"rank": trace.rank if trace.rank is not None else index, "file": str(trace.path),
            "verdict": analysis.verdict["label"], "step_ms": numbers["step_ms"],
            "busy_pct": numbers["device_busy_pct"], "ops": int(len(analysis.ops))}


def _check_script(target: str, module: bool, workdir: Path) -> None:
    if module:
        return
    script = (workdir / target) if not Path(target).is_absolute() else Path(target)
    if not script.is_file():
        what = "is a directory" if script.is_dir() else "does not exist"
        raise ScriptError(f"The script {target} {what}. Give the path of a Python file "
                          "(relative to the current directory), or use -m package.module "
                          "to run a module.")


def _write_report_files(run_dir: Path, report: dict[str, Any]) -> dict[str, Any]:
    write_json(run_dir / "report.json", report)
    (run_dir / "report.md").write_text(markdown(report), encoding="utf-8")
    (run_dir / "report.html").write_text(html_page(report), encoding="utf-8")
    return report


def _write_outputs(run_dir: Path, report: dict[str, Any], analysis: Optional[TraceAnalysis],
                   exit_code: int) -> RunResult:
    ops = analysis.ops if analysis else pd.DataFrame(columns=S.OP_COLUMNS)
    steps = analysis.steps if analysis else pd.DataFrame()
    if analysis is not None:
        csv = ops.copy()
        csv["shapes"] = csv["shapes"].map(lambda v: "; ".join(v))
        for col in ("kernels", "copies"):
            csv[col] = csv[col].map(lambda ks: json.dumps([k["name"] for k in ks]))
        csv.to_csv(run_dir / "ops.csv", index=False)
    _write_report_files(run_dir, report)
    return RunResult(run_dir=run_dir, report=report, ops=ops, steps=steps, exit_code=exit_code)


def _pass_status(outcome: ChildOutcome,
                 child: Optional[dict[str, Any]]) -> tuple[str, int, Optional[dict[str, Any]]]:
    """(status, exit code, error) of a pass from how its process ended and its own record."""
    if outcome.timed_out:
        return "timeout", 124, {"type": "Timeout", "message": "stopped by --timeout"}
    if outcome.interrupted or (child and child["status"] == "interrupted"):
        return "interrupted", 130, {"type": "KeyboardInterrupt", "message": "interrupted (Ctrl-C)"}
    if child is None:
        return "failed", outcome.returncode or 1, {
            "type": "ChildDied", "message": f"the profiled process ended with status "
                                            f"{outcome.returncode} before writing its record"}
    return child["status"], int(child["exit_code"]), child.get("error")


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


def _has_memory(trace: Optional[TorchTrace]) -> bool:
    return trace is not None and bool((trace.events[S.CAT] == S.MEMORY).any())


def _manifest(command: str, target: str, args: list[str], prof: Profile, cwd: Path,
              module: bool) -> dict[str, Any]:
    return {"nsbridge_version": __version__, "command": command, "argv": sys.argv,
            "target": target, "module": module, "args": args, "cwd": str(cwd),
            "profile": prof.to_dict(), "host": socket.gethostname(),
            "platform": platform.platform(), "python": platform.python_version(),
            "started_at": _now(), "status": "running", "passes": []}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
