"""The library API: each command is a short composition of passes into one Run, one module
per command under nsbridge.commands.

- ``triage``: torch.profiler pass (then, optionally, the nsys and ncu passes)
- ``timeline``: nsys pass, into a new run or an earlier one
- ``deep``: ncu pass on chosen ops, into an earlier run (or a new triage first)
- ``analyze``: the passes' readers on files captured elsewhere
- ``diff``, ``gate``, ``rejudge``: two runs judged; both sides measured again
- ``load``, ``doctor``: a run read back; the machine's checks

What they return is typed: ``Report`` (report.json, contract.report) in a RunResult, and
``Comparison`` (what ``diff``, ``gate`` and ``rejudge`` answer, contract.comparison).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Union

from .commands.analyze import analyze
from .commands.deep import deep
from .commands.diff import diff
from .commands.gate import gate, rejudge
from .commands.timeline import timeline
from .commands.triage import triage
from .contract.comparison import Comparison
from .contract.report import Report
from .result import RunResult, result_of
from .run import Run

__all__ = ["Comparison", "Report", "RunResult", "triage", "timeline", "deep", "analyze", "diff", "gate", "rejudge",
           "load", "doctor"]


def load(run_dir: Union[str, Path]) -> RunResult:
    """Read a run directory back: the report, its frames (ops with nsys_*/ncu_* columns,
    kernels, steps, sync points, gaps, timeline and ncu tables) and the manifest, as the
    command that wrote it returned them (its exit code: the last pass's). A failed run
    loads (its ``status`` and ``report["error"]`` say what happened).

    Raises:
        RunDirError: not a directory nsbridge wrote, incomplete, or still running (or cut
            off while running).
    """
    return result_of(Run.open(Path(run_dir)))


def show_profiler_noise(on: bool = True) -> None:
    """Pass the profiler's known noise from a profiled script's stderr (kineto's USDT
    lines, the CPU allocator warning) to the terminal too; by default it goes only to the
    run directory's profiler-noise.log (collect.noise)."""
    from .collect import noise
    noise.show(on)


def doctor() -> list[Any]:
    """Machine checks for `nsbridge doctor` (collect.doctor.Check: level, name, detail, fix)."""
    from .collect.doctor import run_checks

    return run_checks()
