"""What a run that did not finish says to its user: one paragraph from its report.

The CLI prints it on stderr (and exits with the run's code); a library user gets the same
text from ``RunResult.failure``.
"""

from __future__ import annotations

from typing import Any

from .escape import terminal
from ...contract.report import Report


def failure_paragraph(report: Report, run_dir: Any) -> str:
    """One paragraph on a run that did not finish: what happened, what was kept (control
    characters in the script's own message shown escaped)."""
    return terminal(_failure_text(report, run_dir))


def _failure_text(report: Report, run_dir: Any) -> str:
    status, err = report["status"], report.get("error") or {}
    kept = (f"What was recorded is kept in {run_dir} (report.json has status '{status}'"
            + (", the partial trace is there" if (report.get("files") or {}).get("trace") else "")
            + ").")
    if status == "timeout":
        return f"The script did not finish within --timeout and was stopped. {kept}"
    if status == "interrupted":
        return f"Interrupted with Ctrl-C. {kept}"
    if status == "terminated":
        return ("Stopped by SIGTERM (a launcher or scheduler ending the job); the script was "
                f"ended too. {kept}")
    if err.get("type") in ("RankFailed", "RankStopped"):
        return f"{err.get('message')}. {kept}"
    if err.get("pass"):   # a pass that failed while running (a tool), not the script
        return f"The {err['pass']} pass failed with {err.get('type')}: {err.get('message')} {kept}"
    if err.get("type") in ("Killed", "ChildDied", "WriteError"):
        message = str(err.get("message") or "")
        return f"{message[:1].upper()}{message[1:]}. {kept}"
    if err.get("type") == "SystemExit":
        return (f"The script exited with {err.get('message')}, so nsbridge exits non-zero too. "
                f"{kept}")
    where = f" at {err['file']}:{err['line']}" if err.get("file") else ""
    return (f"The script failed{where} with {err.get('type')}: {err.get('message')} (its "
            f"traceback is above). {kept}")
