"""`analyze`: the passes' readers on files captured elsewhere (torch traces, nsys exports,
ncu reports, a triage's run directory, a job's rank summaries), merged by op."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Mapping, Optional, Union

from .. import schema as S
from ..guard.confine import readable
from ..contract.check import report_problem
from ..errors import TraceNotFoundError
from ..job.summary import read_summaries
from ..model.analysis import check_window
from ..passes.ncu_pass import NcuFilesPass
from ..passes.nsys_pass import NsysExportsPass
from ..passes.snapshot_pass import snapshot_output
from ..passes.torch_pass import analyse_run_dir, analyze_traces
from ..pipeline import Given, Pass, run_passes
from ..profiles import as_profile, with_overrides
from ..result import RunResult, result_of
from ..run import Run
from ..rundir import check_new_out, read_run
from .measure import ProfileArg
from .runs import out_path

NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
NCU_SUFFIXES = (".ncu-rep", ".csv")
SNAPSHOT_SUFFIXES = (".pickle", ".pkl")


def analyze(paths: Union[str, Path, Iterable[Union[str, Path]]], *, profile: ProfileArg = "default",
            deep_profile: ProfileArg = "deep",
            out: Optional[Union[str, Path]] = None, window: str = "steps",
            environ: Mapping[str, str] = os.environ, jobs: Optional[int] = None,
            top: Optional[int] = None, cluster: Optional[str] = None) -> RunResult:
    """Analyse files captured elsewhere: torch.profiler traces (several: the ranks of one
    job), nsys exports (.sqlite, .nsys-rep), Nsight Compute reports (.ncu-rep, CSV) and
    CUDA allocator snapshots (.pickle: torch.cuda.memory._dump_snapshot's),
    merged into one report keyed by op (``paths``: one path, or several). ``window``: ``steps`` (the measured steps, in the
    torch trace and, by nsbridge's step ranges, in an nsys export) or ``trace`` (each file
    whole). ``environ`` is where nsys and ncu are looked up (to export a .nsys-rep, or a
    .ncu-rep without the ncu-report package). ``jobs``: worker processes for several
    torch traces (default: one per CPU), each holding one trace at a time; ``cluster``:
    the address of a Dask distributed scheduler to run them on instead (its workers read
    the traces by their absolute paths). ``top``: op rows in the summaries (the profile's
    ``analysis.top_ops``).

    Raises:
        ValueError: an unknown ``window``.
        TraceNotFoundError: a path does not exist.
        TraceFormatError: a file is not a trace, export or report nsbridge reads.
        EmptyTraceError: a trace holds no event nsbridge can read.
        NsysExportError: an nsys export is damaged.
        NcuFormatError: an ncu CSV or report is damaged.
        ClusterError: ``cluster`` cannot be used (no Dask here, no scheduler there, workers
            without this nsbridge).
        RunDirError: the output cannot be written, or a run directory given is incomplete
            or still running.
        ProfileError: the profile is not valid.
    """
    check_window(window)
    check_new_out(out_path(out))    # before minutes of reading, not after
    prof = with_overrides(as_profile(profile), top=top)
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    for folder in (Path(p) for p in paths):
        if (folder / S.MANIFEST_JSON).is_file():
            read_run(folder, report_problem)   # a run directory: refused while incomplete or running
    ranked = [Path(p) for p in paths if Path(p).is_dir() and read_summaries(Path(p))]
    if ranked:
        from ..distributed.triage import analyze_ranks

        return analyze_ranks(ranked[0], prof, out)
    if len(paths) == 1 and _is_triage_run(Path(paths[0])):
        # the run's own records: its machine, steps, syncs and settings are kept
        folder = Path(paths[0])
        given = Given(analyse_run_dir(folder, None if profile == "default" else prof, window))
        run = Run.create(out=out_path(out), label=f"analyze-{folder.name}",
                         command="analyze", target=str(folder), args=[], profile=prof,
                         cwd=Path.cwd())
        return result_of(run_passes(run, [given]))
    files = _input_files([Path(p) for p in paths])
    nsys_files = [f for f in files if f.suffix in NSYS_SUFFIXES]
    ncu_files = [f for f in files if f.suffix in NCU_SUFFIXES]
    snapshots = [f for f in files if f.suffix in SNAPSHOT_SUFFIXES]
    traces = [f for f in files if f not in nsys_files + ncu_files + snapshots]
    label = files[0].name.split(".")[0] if len(files) == 1 else f"{len(files)}-files"
    target = ", ".join(str(p) for p in paths)
    passes: list[Pass] = []
    if traces:   # read before the run directory exists: a bad trace leaves nothing behind
        passes.append(Given(analyze_traces(traces, prof, target, window,
                                           jobs=jobs or os.cpu_count() or 1, cluster=cluster)))
    if nsys_files:
        passes.append(NsysExportsPass(nsys_files, prof, window, environ=environ))
    if ncu_files:
        passes.append(NcuFilesPass(ncu_files, as_profile(deep_profile).deep, environ=environ))
    if snapshots:   # read first, as the traces are: a bad snapshot leaves nothing behind
        passes.append(Given(snapshot_output(snapshots)))
    run = Run.create(out=out_path(out), label=f"analyze-{label}",
                     command="analyze", target=target, args=[], profile=prof, cwd=Path.cwd())
    return result_of(run_passes(run, passes))


def _input_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    suffixes = (".json", ".json.gz", *NSYS_SUFFIXES, *NCU_SUFFIXES)
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
