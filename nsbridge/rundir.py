"""Run directories: where every command writes, never over an earlier run."""

from __future__ import annotations

import errno
import json
import os
import socket
import time
import unicodedata
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TypeVar, Union, cast

from . import schema as S
from .guard.confine import readable
from .errors import RunDirError
from .guard.printable import printable
from .schema.records import MANIFEST_SHAPE, Manifest, record_problem, shape_for

RecordT = TypeVar("RecordT")

DEFAULT_BASE = Path("nsbridge-runs")
RECORD_LIMIT = 64 << 20   # bytes: a record nsbridge wrote is far smaller (summaries list ops)


def check_new_out(out: Optional[Path], base: Path = DEFAULT_BASE) -> None:
    """Refuse an ``--out`` that exists with files in it (before any work is done).

    Raises:
        RunDirError: ``out`` exists and is not an empty directory, or its path holds a
            character a run directory cannot (check_dir_name).
    """
    if out is not None:
        check_dir_name(out)
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunDirError(
            f"--out {out} already exists and is not an empty directory; nsbridge never "
            "overwrites an earlier run. Choose a new directory, or leave --out off to get "
            f"a fresh one under {base}/.")


def new_run_dir(out: Optional[Path], label: str, base: Path = DEFAULT_BASE,
                shared: bool = False, manifest: Optional[Manifest] = None) -> Path:
    """Create and return a fresh run directory, with ``manifest`` written into it as
    manifest.json when given (a run's first record: status running).

    With ``out``: that directory, which must not exist yet (or be empty). Without: ``base/
    <YYYYmmdd-HHMMSS>-<label>``, with ``-2``, ``-3``... when two runs start in one second.
    ``shared``: the ranks of one job write into one directory (``out``, or ``base/label``),
    each into its own rank folder, so the directory may already exist.

    Raises:
        RunDirError: ``out`` exists with files in it, or the directory cannot be created
            or written.
    """
    if shared:
        path = Path(out) if out is not None else base / _safe(label)
    elif out is not None:
        path = Path(out)
        check_new_out(path, base)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = base / f"{stamp}-{_safe(label)}"
        n = 2
        while path.exists():
            path = base / f"{stamp}-{_safe(label)}-{n}"
            n += 1
    check_dir_name(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".nsbridge-write-test-{os.getpid()}"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise RunDirError(
            f"Cannot create or write the run directory {path}: {exc.strerror or exc}. Pick a "
            "writable location with --out DIR (or run from a writable working directory)."
        ) from exc
    if manifest is not None:
        write_json(path / S.MANIFEST_JSON, manifest)
    return path


def check_dir_name(path: Path) -> None:
    """Refuse a run directory whose absolute path holds a backslash or a control
    character (a newline, a tab, ESC, ...), before any script runs: torch.profiler's
    trace writer reads a backslash as a separator and drops a newline, so the trace would
    be lost after the whole script had run.

    Raises:
        RunDirError: naming the character and where it is.
    """
    full = str(Path(path).absolute())
    odd = next((ch for ch in full if ch == "\\" or unicodedata.category(ch) == "Cc"), None)
    if odd is not None:
        what = "a backslash" if odd == "\\" else f"the control character {printable(odd)}"
        raise RunDirError(
            f"The run directory {printable(full)} holds {what} (character "
            f"{full.index(odd) + 1} of its path), which torch.profiler cannot write a trace "
            "under, so nothing was run. Choose --out without backslashes or control "
            "characters (and run from a folder without them).")


def read_run(path: Path, report_problem: Callable[[dict[str, Any]], Optional[str]]
             ) -> tuple[Manifest, dict[str, Any]]:
    """(manifest, report) of a finished run directory (its status may be failed), its
    report checked by ``report_problem`` (contract.check's: the contract is msgspec's, which
    the profiled process, a user of this module, does not import).

    Raises:
        RunDirError: not a run directory; incomplete (a report.json missing, cut off or of
            another shape or schema version: ``report_problem`` names the field); or still
            running, or cut off while running (its status is
            ``running`` and the nsbridge process that wrote it is gone).
    """
    path = Path(path)
    found = _read_object(path / S.MANIFEST_JSON)
    if found is None:
        raise RunDirError(f"{path} is not an nsbridge run directory (no readable manifest.json "
                          "and report.json). Pass a directory that an nsbridge command wrote.")
    problem = record_problem(found, MANIFEST_SHAPE)
    if problem:
        raise RunDirError(_not_a_record(path / S.MANIFEST_JSON, problem))
    manifest = cast(Manifest, found)
    report = _read_object(path / S.REPORT_JSON)
    running = manifest.get("status") == "running" and (report is None or report.get(
        "status") in ("running", None))
    if not running and (report is None or not isinstance(report.get("status"), str)):
        raise RunDirError(
            f"{path} is an incomplete run directory: its report.json is missing, cut off or "
            "not a report. The nsbridge that wrote it was killed or ran out of disk before it "
            "finished; its other files are kept. Run the command again.")
    if running:
        pid, host = manifest.get("pid"), manifest.get("host")
        if isinstance(pid, int) and host == socket.gethostname() and _alive(pid):
            raise RunDirError(f"{path} is still being written (nsbridge process {pid} is "
                              "running). Wait for it to finish, then read it.")
        raise RunDirError(
            f"{path} was cut off while running: the nsbridge process that wrote it is gone "
            "(killed, or stopped by a full disk) and its report was never finished. What it "
            "recorded is partial; a trace file in it can still be read with `nsbridge analyze "
            f"{path}/<trace file>`, or run the command again.")
    assert report is not None   # a report is missing only while running (raised above)
    if manifest.get("status") == "failed" and report.get("status") == "ok" and isinstance(
            manifest.get("error"), dict):   # the disk filled after report.json was written
        report = {**report, "status": "failed", "error": manifest["error"]}
    problem = report_problem(report)
    if problem:
        raise RunDirError(f"{path / S.REPORT_JSON} is not a report this nsbridge reads: "
                          f"{problem}. It was edited, damaged, or written by another nsbridge "
                          "version: make the run again (or read it with the version that "
                          "wrote it).")
    return manifest, report


def load_record(path: Path, kind: type[RecordT],
                check: Optional[Callable[[object], Optional[str]]] = None) -> RecordT:
    """A record nsbridge wrote (manifest.json, child.json, summary.json, ...), read back
    as its declaration ``kind`` (a TypedDict of schema.records) and checked against the
    shape derived from it, or by ``check`` when given (what is wrong, or None: gate.json
    against contract.comparison): a file of that folder is untrusted, whoever wrote it.

    Raises:
        RunDirError: it cannot be read, is larger than RECORD_LIMIT, is not JSON, or a field
            is missing, of the wrong type or out of range (named).
    """
    try:
        if path.stat().st_size > RECORD_LIMIT:
            raise RunDirError(_not_a_record(path, f"it is larger than {RECORD_LIMIT >> 20} MiB"))
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunDirError(f"Cannot read {path}: {exc.strerror or exc}. Check the file and its "
                          "permissions, or make the run again.") from None
    except (ValueError, RecursionError):
        raise RunDirError(_not_a_record(path, "it is not JSON (cut off, or nested too "
                                              "deep)")) from None
    problem = check(value) if check else record_problem(value, shape_for(kind))
    if problem:
        raise RunDirError(_not_a_record(path, problem))
    return cast(RecordT, value)


def _not_a_record(path: Path, problem: str) -> str:
    return (f"{path} is not a record this nsbridge reads: {problem}. nsbridge wrote it, but "
            "it was edited, damaged, or written by another nsbridge version since: make the "
            "run again (or read it with the version that wrote it).")


def _read_object(path: Path) -> Optional[dict[str, Any]]:
    try:
        value = json.loads(readable(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_stem(run_dir: Path, stem: str, suffixes: tuple[str, ...]) -> str:
    """``stem``, or ``stem-2``, ``stem-3``... : the first name no file with these suffixes
    uses yet (a pass run twice into one run directory keeps both outputs)."""
    n, name = 1, stem
    while any((run_dir / f"{name}{ext}").exists() for ext in suffixes):
        n += 1
        name = f"{stem}-{n}"
    return name


def json_text(data: Any) -> str:
    """``data`` as the JSON nsbridge writes: indented, one value per line, a newline at the
    end, values JSON cannot hold as their str()."""
    return json.dumps(data, indent=2, default=str) + "\n"


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (see write_atomic)."""
    write_atomic(path, json_text(data))


def write_atomic(path: Path, data: Union[str, bytes]) -> None:
    """Write a whole file or nothing: text (UTF-8) or bytes (see atomic_path).

    Raises:
        RunDirError: the write failed (a full disk, an I/O error); no temp file is left.
    """
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8", errors="backslashreplace")
        else:
            tmp.write_bytes(data)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block
    ends, so readers see the whole file or none. Created with the user's umask (like any
    file they write), removed when anything fails.

    Raises:
        RunDirError: an OSError while writing or renaming (the disk is full, ...).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise RunDirError(write_failure(path, exc)) from exc
    finally:
        tmp.unlink(missing_ok=True)


def write_failure(path: Path, exc: OSError) -> str:
    """One paragraph for a failed write: what, why, what to do."""
    why = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = ("The disk (or your quota) is full: free space there or choose another "
                  "directory with --out.")
    else:
        advice = "Check the disk and the permissions there, or choose another directory with --out."
    return f"Cannot write {path}: {why}. {advice} Files written before this one are kept whole."


def _safe(label: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)
    return keep.strip("-.") or "run"
