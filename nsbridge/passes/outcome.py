"""How a profiled process ended, as a pass's (status, exit code, error).

Shared by every pass that runs the script (torch.profiler, nsys): the child's own record
(child.json) when it wrote one, else how the process ended (a signal, os._exit, a record it
could not write).
"""

from __future__ import annotations

import signal
from typing import Optional, cast

from .. import schema as S
from ..collect._process import ChildOutcome
from ..guard.printable import printable
from ..contract.report import Error


def pass_status(outcome: ChildOutcome, child: Optional[S.ChildRecord],
                doing: Optional[str] = None) -> tuple[str, int, Optional[Error]]:
    """(status, exit code, error) of a pass from how its process ended and its own record.

    A record that says the script ended by itself (ok or failed) is the truth even when the
    timeout or a SIGTERM came later, during the process's own teardown. Otherwise nsbridge's
    timeout is 124, a SIGTERM (to nsbridge or to the profiled process) 143, Ctrl-C 130.
    ``doing``: what the profiler was doing when the process died (its PROFILER_DOING)."""
    if child is not None and child.get("status") in ("ok", "failed"):
        return child["status"], int(child["exit_code"]), recorded_error(child.get("error"))
    if outcome.timed_out:
        return "timeout", S.TIMEOUT, {"type": "Timeout", "message": "stopped by --timeout"}
    if outcome.terminated:
        return "terminated", S.TERMINATED, {"type": "Terminated", "message": "nsbridge got SIGTERM "
                                   "(a launcher or scheduler ending the job) and ended the script"}
    if outcome.interrupted or (child and child["status"] == "interrupted"):
        return "interrupted", S.INTERRUPTED, {"type": "KeyboardInterrupt",
                                              "message": "interrupted (Ctrl-C)"}
    if child is None and outcome.returncode < 0:
        return "failed", 128 - outcome.returncode, killed_by(-outcome.returncode, doing)
    if child is None and outcome.returncode == S.RECORD_NOT_WRITTEN:
        return "failed", 1, {"type": "WriteError", "message": "the profiled process could "
                             "not write its record (child.json): its reason is printed above "
                             "(a full disk, most likely)"}
    if child is None:
        return "failed", outcome.returncode or 1, {
            "type": "ChildDied", "message": f"the profiled process ended with status "
                                            f"{outcome.returncode} before writing its record "
                                            "(os._exit, or a crash in native code): there is "
                                            "no Python traceback"}
    return child["status"], int(child["exit_code"]), recorded_error(child.get("error"))


def recorded_error(error: Optional[S.RecordError]) -> Optional[Error]:
    """A process's recorded error as the report holds it (the keys report.json declares)."""
    if error is None:
        return None
    return cast(Error, {k: v for k, v in error.items() if k in Error.__annotations__})


def killed_by(signum: int, doing: Optional[str] = None) -> Error:
    """The error of a profiled process ended by signal ``signum`` (``doing``: what
    nsbridge's profiler was doing at that moment, when it was in a stop or start)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    why: dict[int, str] = {
        signal.SIGKILL: ": the kernel's OOM killer does this when memory runs out (check "
                        "`dmesg` or `journalctl -k`), as do `kill -9` and job schedulers",
        signal.SIGSEGV: ": a crash in native code (a C/C++/CUDA extension)",
        signal.SIGABRT: ": native code aborted (an assertion in C/C++ code)"}
    if doing:
        why = {**why, signal.SIGSEGV: ": a crash in native code",
               signal.SIGABRT: ": native code aborted"}
    return {"type": "Killed", "signal": signum,
            "message": f"the profiled process was killed by {name} (signal {signum})"
                       + why.get(signum, "")
                       + (f", while nsbridge was {printable(doing)}" if doing else "")}
