"""The Nsight Systems pass: find nsys, capture with NVTX op ranges on, import, export.

Finding nsys: ``NSBRIDGE_NSYS``, then PATH, then the places GPU machines keep it
(``/opt/nvidia/nsight-systems/*/bin``, ``/usr/local/cuda*/bin``, and the nsys that Nsight
Compute bundles in ``host/target-linux-x64``), newest version first.

Capturing: one routine, ``capture``, serves the timeline pass and ``nsbridge doctor`` so
the two cannot disagree. When nsys cannot find its own importer it leaves only a
``.qdstrm`` (Debian's package, Nsight Compute's bundled nsys); ``capture`` then imports it
with a ``QdstrmImporter`` found next to nsys: in its folder or any sibling folder, along
every hop of its symlink chain.

The timeline pass runs the script through nsbridge's bootstrap in its ``nvtx`` pass (op,
module and step ranges; no torch.profiler), so nsys sees the same ops torch.profiler named,
and exports the report to SQLite.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .. import schema as S
from ..errors import ToolFailedError, ToolNotFoundError
from ..rundir import free_stem, load_record
from ._process import ChildOutcome, honour_umask, run_captured, run_filtered, which
from .torch_profiler import bootstrap_argv, with_threads

INSTALL_HINT = ("Install Nsight Systems: on Debian/Ubuntu enable the non-free component and "
                "`apt-get install nsight-systems` (this repository's .ci/install-nsys.sh does "
                "it), or take it from the CUDA toolkit / developer.nvidia.com/nsight-systems; "
                "or point NSBRIDGE_NSYS at the nsys binary.")


def nvtx_fix() -> str:
    """How to get NVTX ranges recorded when this nsys drops the installed nvtx's ranges.

    nsys 2022.4 to 2023.4 record nvtx up to 0.2.10, whose wheels stop at CPython 3.12.
    """
    newer = "install an Nsight Systems newer than 2023.4"
    if sys.version_info >= (3, 13):
        return (f"{newer} (nvtx 0.2.10, the newest release nsys 2022.4-2023.4 record, has no "
                "wheel for this Python)")
    return f'pip install "nvtx<0.2.11" (nsys 2022.4-2023.4 drop newer nvtx ranges), or {newer}'


SEARCH_PATTERNS = ("/opt/nvidia/nsight-systems/*/bin/nsys",
                   "/usr/local/cuda*/bin/nsys",
                   "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
                   "/usr/local/cuda*/nsight-compute*/host/target-linux-x64/nsys")
IMPORTER = "QdstrmImporter"
PROGRESS = re.compile(r"\[\d+/\d+\] \[[= ]*\d+%|^Generating '.*\.qdstrm'$|^Generated:$|"
                      r"^\s+/.*\.(nsys-rep|sqlite|qdstrm)$|"
                      # nsbridge imports a leftover .qdstrm itself (capture): not an error
                      r"^Importer error status: |^Unable to retrieve the importer version")
_VERSION = re.compile(r"(\d{4}\.\d+(?:\.\d+)*)")
_VERSION_LINE = re.compile(r"Nsight Systems version (\d{4}\.\d+(?:\.\d+)*)")
_MISSING_LIB = re.compile(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file")


@dataclass(frozen=True)
class NsysInstall:
    """An nsys binary and the importer beside it."""

    path: str
    found_by: str                  # "NSBRIDGE_NSYS", "PATH" or "install folder"
    importer: Optional[str]        # a QdstrmImporter next to it, None when none was found
    searched: tuple[str, ...]      # folders searched for the importer


@dataclass(frozen=True)
class Capture:
    """What one `nsys profile` left: how it ended and its report."""

    outcome: ChildOutcome
    argv: list[str]
    report: Path                   # .nsys-rep
    imported_with: Optional[str]   # the QdstrmImporter nsbridge ran on a leftover .qdstrm


@dataclass(frozen=True)
class NsysPass:
    """What the nsys pass left in the run directory."""

    capture: Capture
    install: NsysInstall
    child: Optional[S.ChildRecord]        # nvtx-child.json (status, NVTX ranges emitted)
    sqlite: Path
    log: Path
    version: Optional[str]


def find_nsys(environ: Mapping[str, str] = os.environ,
              patterns: Sequence[str] = SEARCH_PATTERNS) -> NsysInstall:
    """nsys from NSBRIDGE_NSYS, PATH, or the usual install places (newest first).

    Raises:
        ToolNotFoundError: none found; says where nsbridge looked and how to install it.
    """
    explicit = environ.get("NSBRIDGE_NSYS")
    if explicit:
        if not Path(explicit).is_file():
            raise ToolNotFoundError(f"NSBRIDGE_NSYS={explicit} is not a file. {INSTALL_HINT}")
        return _install(explicit, "NSBRIDGE_NSYS")
    on_path = which("nsys", environ.get("PATH"))
    if on_path:
        return _install(on_path, "PATH")
    installed = [(rank, [-n for n in _version_key(p)], p)
                 for rank, pattern in enumerate(patterns) for p in glob.glob(pattern)
                 if os.access(p, os.X_OK)]
    if installed:
        return _install(min(installed)[2], "install folder")
    raise ToolNotFoundError(f"nsys (Nsight Systems) was not found on PATH or in "
                            f"{', '.join(patterns)}, so the timeline pass cannot run. "
                            f"{INSTALL_HINT}")


def find_importer(nsys: str) -> tuple[Optional[str], tuple[str, ...]]:
    """(QdstrmImporter, folders searched): nsys's own folder and its siblings, at every
    hop of its symlink chain (Debian links /usr/bin/nsys through two folders)."""
    hops, path = [], Path(os.path.abspath(nsys))
    for _ in range(16):
        hops.append(path)
        if not path.is_symlink():
            break
        path = Path(os.path.normpath(path.parent / os.readlink(path)))
    hops.append(Path(os.path.realpath(nsys)))
    searched: list[str] = []
    for hop in hops:
        folders = [hop.parent]
        if hop.parent.parent.is_dir():
            folders += sorted(d for d in hop.parent.parent.iterdir() if d.is_dir())
        for folder in folders:
            if str(folder) in searched:
                continue
            searched.append(str(folder))
            candidate = folder / IMPORTER
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate), tuple(searched)
    return None, tuple(searched)


def nsys_version(nsys: str, environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The version on nsys's own ``... Nsight Systems version X`` line of stdout (None when
    there is none); any other output around it is passed over."""
    done = run_captured([nsys, "--version"], timeout=60, env=environ)
    match = _VERSION_LINE.search(done.stdout) if done.code == 0 else None
    return match.group(1) if match else None


def profile_argv(nsys: str, *, trace: Sequence[str], output: Path, child_argv: Sequence[str],
                 extra: Sequence[str] = ()) -> list[str]:
    """The `nsys profile` command line (an argument list; never a shell string). With CUDA
    traced, graph replays are traced node by node: at nsys's default (``graph``) a replay is
    one block and none of its kernels is a kernel row."""
    graphs = ["--cuda-graph-trace", "node"] if "cuda" in trace else []
    return [nsys, "profile", "--trace", ",".join(trace), *graphs, "--sample", "none",
            "--cpuctxsw", "none", "--output", str(output), "--force-overwrite", "false",
            "--export", "none", "--stats", "false", *extra, *child_argv]


def capture(install: NsysInstall, *, trace: Sequence[str], output: Path,
            child_argv: Sequence[str], cwd: Path, env: Mapping[str, str],
            timeout: Optional[float], log: Path, echo: bool = True) -> Capture:
    """Run ``child_argv`` under `nsys profile` into ``output``.nsys-rep, importing a
    leftover .qdstrm (removed once the report exists). The child's output reaches the terminal when ``echo``; nsys's
    progress bars only the log.

    Raises:
        ToolFailedError: no report: nsys's own error lines, or why the .qdstrm could not
            be imported (no importer found, or the importer's missing library), and the log.
    """
    argv = profile_argv(install.path, trace=trace, output=output, child_argv=child_argv)
    outcome = run_filtered(argv, cwd=cwd, env=env, timeout=timeout, log=log, hide=PROGRESS,
                           echo=echo)
    report = output.with_suffix(".nsys-rep")
    if (not report.is_file() and not output.with_suffix(".qdstrm").is_file()
            and _failed_to_start(log)):   # nsys's own start-up race: the script never ran
        first = log.read_text(encoding="utf-8", errors="replace")
        outcome = run_filtered(argv, cwd=cwd, env=env, timeout=timeout, log=log, hide=PROGRESS,
                               echo=echo)
        log.write_text(f"{first}\n--- nsys failed to start (above); started it again ---\n"
                       + log.read_text(encoding="utf-8", errors="replace"), encoding="utf-8")
    honour_umask(report, output.with_suffix(".qdstrm"))   # nsys writes them 0664 or 0666
    imported_with = None
    if not report.is_file() and output.with_suffix(".qdstrm").is_file():
        imported_with = _import_qdstrm(install, output.with_suffix(".qdstrm"), log, env)
    if not report.is_file():
        raise ToolFailedError(_failure(argv, outcome.returncode, log,
                                       "nsys left no .nsys-rep report"))
    # the raw stream the report was made from: most of the run directory, read by nothing
    output.with_suffix(".qdstrm").unlink(missing_ok=True)
    return Capture(outcome=outcome, argv=argv, report=report, imported_with=imported_with)


def run_nsys_pass(*, target: str, is_module: bool, args: Sequence[str], trace: Sequence[str],
                  run_dir: Path, cwd: Path, timeout: Optional[float],
                  environ: Mapping[str, str] = os.environ,
                  threads: Optional[int] = None) -> NsysPass:
    """Run the target under nsys with NVTX ranges; return the report and its SQLite export
    (``threads``: torch's intra-op threads in the process, as triage --threads sets them).

    Raises:
        ToolNotFoundError: nsys is missing.
        ToolFailedError: nsys failed and left no report (its error lines and log path).
    """
    install = find_nsys(environ)
    version = nsys_version(install.path, environ)
    stem = free_stem(run_dir, "timeline", (".nsys-rep", ".sqlite", ".qdstrm"))
    child_argv = bootstrap_argv(run_dir, S.NVTX_CHILD_CONFIG, target=target,
                                is_module=is_module, args=args,
                                extra={"pass": "nvtx", "threads": threads})
    log = run_dir / f"{stem}.nsys.log"
    (run_dir / S.NVTX_CHILD_JSON).unlink(missing_ok=True)   # an earlier pass's record
    env = with_threads(environ, threads)
    env.setdefault("PYTHONUNBUFFERED", "1")
    result = capture(install, trace=trace, output=(run_dir / stem).resolve(),
                     child_argv=child_argv, cwd=cwd, env=env, timeout=timeout, log=log)
    child_path = run_dir / S.NVTX_CHILD_JSON
    child = load_record(child_path, S.ChildRecord) if child_path.is_file() else None
    sqlite = export_sqlite(install.path, result.report, log, environ=environ)
    return NsysPass(capture=result, install=install, child=child, sqlite=sqlite, log=log,
                    version=version)


def export_sqlite(nsys: str, report: Path, log: Path, sqlite: Optional[Path] = None,
                  environ: Mapping[str, str] = os.environ) -> Path:
    """`nsys export --type sqlite` (to ``sqlite``, default next to the report); returns the
    .sqlite path. Raises ToolFailedError with nsys's own words."""
    sqlite = sqlite or report.with_suffix(".sqlite")
    if sqlite.is_file():
        return sqlite
    argv = [nsys, "export", "--type", "sqlite", "--output", str(sqlite), str(report)]
    done = run_captured(argv, env=environ)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n{done.text}")
    honour_umask(sqlite)
    if done.code != 0 or not sqlite.is_file():
        hint = ""
        if "Version number is invalid" in done.text:
            hint = (" The report was written by a newer nsys than this one "
                    f"({nsys_version(nsys, environ) or 'unknown version'}); export it with that "
                    "nsys, or install a newer one.")
        raise ToolFailedError(_failure(argv, done.code, log, "nsys could not export SQLite")
                              + hint)
    return sqlite


def _install(path: str, found_by: str) -> NsysInstall:
    importer, searched = find_importer(path)
    return NsysInstall(path=path, found_by=found_by, importer=importer, searched=searched)


def _version_key(path: str) -> list[int]:
    match = _VERSION.search(path)
    return [int(n) for n in match.group(1).split(".")] if match else []


def _import_qdstrm(install: NsysInstall, qdstrm: Path, log: Path,
                   environ: Mapping[str, str]) -> str:
    """Import a leftover .qdstrm next to itself; returns the importer used.
    Raises ToolFailedError naming what is missing."""
    if install.importer is None:
        raise ToolFailedError(
            f"nsys left only {qdstrm.name}: it could not find its {IMPORTER}, and nsbridge "
            f"found none next to {install.path} either (searched {', '.join(install.searched)})."
            f" Install the full Nsight Systems (its host folder holds {IMPORTER}), or point "
            f"NSBRIDGE_NSYS at an nsys that has one. The raw capture is kept at {qdstrm}.")
    argv = [install.importer, "-i", str(qdstrm)]
    done = run_captured(argv, env=environ)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n{done.text}")
    if done.code != 0 or not qdstrm.with_suffix(".nsys-rep").is_file():
        missing = _MISSING_LIB.search(done.text)
        why = (f"the library {missing.group(1)} it needs is missing" if missing
               else (done.text.strip().splitlines() or ["no output"])[-1])
        raise ToolFailedError(
            f"nsys left only {qdstrm.name} and {install.importer} could not import it (exit "
            f"status {done.code}): {why}. Install the missing file or a complete Nsight Systems. "
            f"The raw capture is kept at {qdstrm}; full log: {log}.")
    return install.importer


# nsys failing before it starts the program, its agent's connection not up yet: seen with
# two nsys 2022.4 starting at once on a busy 2-core machine (the ranks of a job, each under
# its own nsys); starting again works ("Connection reset by peer" alone: one rank of a
# clean-clone CI run and of a run beside two CPU hogs, 2026-12-07)
_START_RACE = re.compile(r"Local Endpoint is not available|^End of file$|"
                         r"^Connection to the Agent lost\.?$|^Connection reset by peer$",
                         re.MULTILINE)


def _failed_to_start(log: Path) -> bool:
    """nsys's log holds nothing but one of its start-up failures (so the program never ran)."""
    if not log.is_file():
        return False
    text = log.read_text(encoding="utf-8", errors="replace")
    return bool(_START_RACE.search(text)) and len(text.splitlines()) <= 12


def _failure(argv: Sequence[str], code: int, log: Path, what: str) -> str:
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    errors = [ln.strip() for ln in text.splitlines()
              if re.search(r"error|fail|cannot|unable|exception|not available", ln,
                           re.IGNORECASE)][-5:]
    said = "; ".join(errors) if errors else "no error message"
    return (f"{what} (exit status {code}). nsys said: {said}. Command: {' '.join(argv)}. "
            f"Full log: {log}.")
