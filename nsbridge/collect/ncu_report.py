"""NVIDIA's report reader (PyPI ``ncu-report``) run on one `.ncu-rep`, in a child process.

The reader is native code, and a damaged report can abort it (SIGABRT from a failed
protobuf check): ``_ncu_report_child`` reads the report in a process of its own and prints
what it found as JSON; a crash there is an error about the file, never the end of
nsbridge. ``parse.ncu.report_data`` checks what comes back.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
from pathlib import Path
from typing import Any

from ..errors import NcuFormatError, ToolNotFoundError, TraceNotFoundError
from ._process import run_captured

READ_TIMEOUT_S = 1800.0    # a --set full report of thousands of launches takes minutes


def extract_report(path: Path) -> dict[str, Any]:
    """The launches and metrics of the report at ``path`` (``_ncu_report_child``'s JSON
    document), with ``warning``: the reader's first complaint about the file, or "".

    Raises:
        TraceNotFoundError: no such file.
        ToolNotFoundError: the ``ncu-report`` package is not installed.
        NcuFormatError: the reader refused the file, crashed on it or printed no document.
    """
    if not path.is_file():
        raise TraceNotFoundError(f"Nsight Compute file {path} does not exist.")
    if importlib.util.find_spec("ncu_report") is None:
        raise ToolNotFoundError(
            f"Reading {path.name} needs NVIDIA's report reader: `pip install ncu-report` "
            "(proprietary licence, no GPU needed). Or export it as CSV with `ncu --import "
            f"{path.name} --csv --page raw --print-units base` and pass the CSV.")
    done = run_captured([sys.executable, "-m", "nsbridge.collect._ncu_report_child",
                         str(path)], timeout=READ_TIMEOUT_S)
    warning = _reader_said(done.stderr)
    try:
        document = json.loads(done.stdout) if done.code == 0 else None
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise NcuFormatError(
            f"{path} could not be read as an Nsight Compute report ("
            f"{_failure(done.code, done.stdout, done.stderr, warning)}); it may be "
            "damaged or truncated, or written by an ncu newer than the installed ncu-report "
            "package (pip install -U ncu-report). Capture or copy it again, or export it as "
            "CSV with `ncu --import` and pass that.")
    document["warning"] = warning
    return document


def _reader_said(stderr: str) -> str:
    """The native reader's first complaint (protobuf's log lines), without the log prefix."""
    for line in stderr.splitlines():
        if "] " in line and ("message_lite" in line or "Check failed" in line):
            return line.split("] ", 1)[1].strip()[:300]
    return ""


def _failure(returncode: int, stdout: str, stderr: str, said: str) -> str:
    if returncode < 0:
        signum = -returncode
        name = signal.Signals(signum).name if signum in signal.valid_signals() else \
            f"signal {signum}"
        return f"NVIDIA's report reader crashed ({name}){': ' + said if said else ''}"
    if returncode == 124:
        return stderr.strip()
    try:
        return str(json.loads(stdout)["error"])
    except (ValueError, KeyError, TypeError):
        return f"the report reader exited with status {returncode}" + (
            f": {said}" if said else "")
