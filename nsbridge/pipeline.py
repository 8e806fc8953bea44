"""One pipeline of passes: a Run taken through a list of passes, its files written once.

A pass is any object with a ``name`` and ``run(run) -> PassOutput`` (the ``Pass`` protocol):
it plans from the Run so far (its manifest: the script, arguments and working directory;
its report: ops, steps, verdict), captures or reads, and returns its report section and
per-op columns. The pipeline adds each output to the Run, stops after a pass whose script
failed, records a pass that raised as the run's failure, and saves the Run once at the
end. Commands are lists of passes (api.py; commands/ for triage's processes, diff and
the gate):

    triage               [torch.profiler, nsys?, ncu?]
    timeline --run DIR   [nsys]            on the opened run
    deep --run DIR       [ncu]             on the opened run
    analyze FILES        [traces read, nsys exports read?, ncu reports read?]

Adding a pass is its own module plus one entry in such a list (see tests/test_pipeline.py
for a toy pass); the renderers show its section and per-op columns without an edit
(report/render/sections.py), and one entry in report/views/catalog.py's ``VIEWS`` titles and formats
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from .errors import NsbridgeError
from .model.device.tensor_cores import settle_with_ncu
from .profiles import summary_rows
from .report.render.files import data_files, pages
from .run import PassOutput, Run


class Pass(Protocol):
    """A step of the pipeline: plan, then run. Optionally also ``check(run)`` (the tools and
    devices it needs, and what it asks of ``run`` when there is one yet: raised before
    anything runs; ``preflight``) and ``skip(run, why)`` (told when it will not run: an
    earlier pass failed, or its own check or plan; the ranks waiting for a pass on a job's
    ranks hear it so)."""

    @property
    def name(self) -> str:
        """The pass's name in manifest.json and the report ("nsys", "ncu", ...)."""
        ...

    def plan(self, run: Run) -> Any:
        """Check and plan from ``run`` so far (read only), before anything runs.

        Raises:
            NsbridgeError: the pass cannot run as asked (the run is left as it was).
        """
        ...

    def run(self, run: Run, plan: Any) -> PassOutput:
        """Capture or read as planned; return the pass's contribution to the run."""
        ...


def preflight(passes: Sequence[Any], run: Optional[Run] = None) -> None:
    """Every pass's ``check`` (see Pass), in order: the first failure raises.

    Raises:
        NsbridgeError: what the check raised.
    """
    for step in passes:
        if hasattr(step, "check"):
            step.check(run)


@dataclass(frozen=True)
class Given:
    """A pass whose output was computed before the run directory existed (analyze reads
    its traces first, so a bad file leaves no directory behind)."""

    output: PassOutput

    @property
    def name(self) -> str:
        return self.output.name

    def plan(self, run: Run) -> None:
        return None

    def run(self, run: Run, plan: None) -> PassOutput:
        return self.output


def run_passes(run: Run, passes: Sequence[Pass]) -> Run:
    """On an earlier run, each pass's tools and devices checked (``preflight``; a command
    checks them before it makes a new run), then each pass in turn on
    ``run``: planned from the run so far, then run; after one
    whose script failed (a non-zero exit code) or that raised, the rest are skipped, and a
    pass that could not be planned is too (a pass with a ``skip`` method hears
    why, once the files are written). The Run's files are
    written once, at the end, also when a pass raises: a pass that could not be planned
    leaves a note, one that failed while running is the run's failure.

    Raises:
        NsbridgeError: what a pass raised (after the run is saved), or RunDirError when
            the run's files cannot be written.
    """
    planned, why = 0, None
    try:
        # a new run was checked before it was made; an earlier one is checked here
        for step in passes if run.manifest["passes"] else ():
            try:
                if hasattr(step, "check"):
                    step.check(run)
            except BaseException as exc:
                why = f"the {step.name} pass cannot start here: {exc}"
                if isinstance(exc, NsbridgeError):
                    run.report["notes"] = [*(run.report.get("notes") or []),
                                  f"the {step.name} pass did not run: {exc}"]
                raise
        for step in passes:
            try:
                plan = step.plan(run)
            except BaseException as exc:
                why = f"the {step.name} pass could not be planned: {exc}"
                if isinstance(exc, NsbridgeError):
                    run.report["notes"] = [*(run.report.get("notes") or []),
                                  f"the {step.name} pass did not run: {exc}"]
                raise
            planned += 1
            try:
                output = step.run(run, plan)
            except BaseException as exc:
                why = f"the {step.name} pass failed: {exc}"
                if isinstance(exc, NsbridgeError):
                    run.fail(step.name, exc)
                raise
            run.add(output)
            if output.exit_code != 0:
                why = f"the {step.name} pass ended with exit status {output.exit_code}"
                break
    finally:
        try:
            save(run)
        finally:   # after the save: a pass told to skip may end this process (ranks)
            for rest in passes[planned:] if why is not None else ():
                if hasattr(rest, "skip"):
                    rest.skip(run, why)
    return run


def settle(run: Run) -> None:
    """What one pass's numbers decide in another's, once every pass has run: ncu's
    tensor-pipe counters settle the Tensor Core marks triage made from kernel names and
    dtypes (model.device.tensor_cores)."""
    settle_with_ncu(run.report["ops"])


def save(run: Run) -> None:
    """Settle what passes decide in each other's numbers, then write every file of the
    run once: the data files first (report.render.files.data_files), so that if one does not fit
    the reports can still say so; then manifest.json and report.json, then the pages.

    Raises:
        RunDirError: a file cannot be written (the run is then marked failed).
    """
    settle(run)
    trace = run.close()
    try:
        run.write_files(data_files(run.report, trace))
    finally:
        run.write_records()
        table = str((run.report.get("files") or {}).get("key_averages") or "-")
        run.write_files(pages(run.report, table if (run.dir / table).is_file() else None,
                              summary_rows(run.manifest)))
