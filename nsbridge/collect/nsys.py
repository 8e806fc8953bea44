"""The Nsight Systems pass: run the script under `nsys profile` with NVTX op ranges on.

The script runs through nsbridge's bootstrap in its ``nvtx`` pass (op, module and step
ranges; no torch.profiler), so nsys sees the same ops torch.profiler named. Afterwards the
``.nsys-rep`` is kept and exported to SQLite. A leftover ``.qdstrm`` (nsys could not find
its importer, seen with Debian's package and on GPU machines) is imported here with
``QdstrmImporter`` before exporting.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..errors import ToolFailedError, ToolNotFoundError
from ._process import ChildOutcome, run_captured, run_filtered, which
from .torch_profiler import bootstrap_argv

INSTALL_HINT = ("Install Nsight Systems: on Debian/Ubuntu enable the non-free component and "
                "`apt-get install nsight-systems` (this repository's .ci/install-nsys.sh does "
                "it), or take it from the CUDA toolkit / developer.nvidia.com/nsight-systems; "
                "or point NSBRIDGE_NSYS at the nsys binary.")
PROGRESS = re.compile(r"\[\d+/\d+\] \[[= ]*\d+%|^Generating '.*\.qdstrm'$|^Generated:$|^\s+/.*\.(nsys-rep|sqlite)$")
_VERSION = re.compile(r"(\d{4}\.\d+(?:\.\d+)*)")


@dataclass(frozen=True)
class NsysPass:
    """What the nsys pass left in the run directory."""

    outcome: ChildOutcome
    child: Optional[dict[str, Any]]       # nvtx-child.json (status, NVTX ranges emitted)
    report: Optional[Path]                # .nsys-rep
    sqlite: Optional[Path]
    log: Path
    version: Optional[str]
    argv: list[str]


def find_nsys(environ: Mapping[str, str] = os.environ) -> str:
    """Path of nsys (NSBRIDGE_NSYS, else PATH). Raises ToolNotFoundError with how to install."""
    explicit = environ.get("NSBRIDGE_NSYS")
    if explicit:
        if Path(explicit).is_file():
            return explicit
        raise ToolNotFoundError(f"NSBRIDGE_NSYS={explicit} is not a file. {INSTALL_HINT}")
    found = which("nsys", environ.get("PATH"))
    if not found:
        raise ToolNotFoundError(f"nsys (Nsight Systems) was not found on PATH, so the "
                                f"timeline pass cannot run. {INSTALL_HINT}")
    return found


def nsys_version(nsys: str) -> Optional[str]:
    code, out = run_captured([nsys, "--version"], timeout=60)
    match = _VERSION.search(out) if code == 0 else None
    return match.group(1) if match else None


def profile_argv(nsys: str, *, trace: Sequence[str], output: Path, child_argv: Sequence[str],
                 extra: Sequence[str] = ()) -> list[str]:
    """The `nsys profile` command line (an argument list; never a shell string)."""
    return [nsys, "profile", "--trace", ",".join(trace), "--sample", "none", "--cpuctxsw",
            "none", "--output", str(output), "--force-overwrite", "false", "--export", "none",
            "--stats", "false", *extra, *child_argv]


def run_nsys_pass(*, target: str, is_module: bool, args: Sequence[str], trace: Sequence[str],
                  run_dir: Path, cwd: Path, timeout: Optional[float],
                  environ: Mapping[str, str] = os.environ) -> NsysPass:
    """Run the target under nsys with NVTX ranges; return the report and its SQLite export.

    Raises:
        ToolNotFoundError: nsys is missing.
        ToolFailedError: nsys failed and left no report (its error lines and log path).
    """
    nsys = find_nsys(environ)
    version = nsys_version(nsys)
    stem = _free_stem(run_dir, "timeline")
    child_argv = bootstrap_argv(run_dir, "nvtx-child-config.json", target=target,
                                is_module=is_module, args=args, extra={"pass": "nvtx"})
    output = (run_dir / stem).resolve()
    argv = profile_argv(nsys, trace=trace, output=output, child_argv=child_argv)
    log = run_dir / f"{stem}.nsys.log"
    env = dict(environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    outcome = run_filtered(argv, cwd=cwd, env=env, timeout=timeout, log=log, hide=PROGRESS)
    child_path = run_dir / "nvtx-child.json"
    child = json.loads(child_path.read_text(encoding="utf-8")) if child_path.is_file() else None

    report = output.with_suffix(".nsys-rep")
    if not report.is_file():
        report = _import_qdstrm(nsys, output, log) or report
    if not report.is_file():
        raise ToolFailedError(_failure(argv, outcome.returncode, log,
                                       "nsys left no .nsys-rep report"))
    sqlite = export_sqlite(nsys, report, log)
    return NsysPass(outcome=outcome, child=child, report=report, sqlite=sqlite, log=log,
                    version=version, argv=argv)


def export_sqlite(nsys: str, report: Path, log: Path, sqlite: Optional[Path] = None) -> Path:
    """`nsys export --type sqlite` (to ``sqlite``, default next to the report); returns the
    .sqlite path. Raises ToolFailedError with nsys's own words."""
    sqlite = sqlite or report.with_suffix(".sqlite")
    if sqlite.is_file():
        return sqlite
    argv = [nsys, "export", "--type", "sqlite", "--output", str(sqlite), str(report)]
    code, out = run_captured(argv)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n{out}")
    if code != 0 or not sqlite.is_file():
        hint = ""
        if "Version number is invalid" in out:
            hint = (" The report was written by a newer nsys than this one "
                    f"({nsys_version(nsys) or 'unknown version'}); export it with that "
                    "nsys, or install a newer one.")
        raise ToolFailedError(_failure(argv, code, log, "nsys could not export SQLite") + hint)
    return sqlite


def _import_qdstrm(nsys: str, output: Path, log: Path) -> Optional[Path]:
    qdstrm = output.with_suffix(".qdstrm")
    if not qdstrm.is_file():
        return None
    importer = _find_importer(nsys)
    if importer is None:
        return None
    code, out = run_captured([importer, "-i", str(qdstrm)])
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {importer} -i {qdstrm}\n{out}")
    report = output.with_suffix(".nsys-rep")
    return report if code == 0 and report.is_file() else None


def _find_importer(nsys: str) -> Optional[str]:
    real = Path(os.path.realpath(nsys))
    candidates = [real.parent.parent / "host-linux-x64" / "QdstrmImporter",
                  real.parent / "QdstrmImporter",
                  Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")]
    return next((str(c) for c in candidates if c.is_file()), None)


def _free_stem(run_dir: Path, stem: str) -> str:
    n, name = 1, stem
    while any((run_dir / f"{name}{ext}").exists() for ext in (".nsys-rep", ".sqlite", ".qdstrm")):
        n += 1
        name = f"{stem}-{n}"
    return name


def _failure(argv: Sequence[str], code: int, log: Path, what: str) -> str:
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    errors = [ln.strip() for ln in text.splitlines()
              if re.search(r"error|fail|cannot|unable", ln, re.IGNORECASE)][-5:]
    said = "; ".join(errors) if errors else "no error message"
    return (f"{what} (exit status {code}). nsys said: {said}. Command: {' '.join(argv)}. "
            f"Full log: {log}.")
