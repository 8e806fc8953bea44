"""What a command returns: the run directory, its report and the report's frames."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from . import __version__
from . import schema as S
from .guard.confine import readable
from .contract.report import Report, empty_report
from .report import frames
from .report.document.escape import terminal
from .report.document.failure import failure_paragraph
from .report.document.head import shown_verdict
from .run import Run


# the frame attributes, in the order repr lists them (columns: report/frames.py)
FRAMES = ("ops", "steps", "kernels", "sync_points", "gaps", "op_shapes", "op_sources",
          "memory", "ranks", "timeline_ops", "timeline_gaps", "timeline_ranks", "ncu",
          "ncu_ranks")


@dataclass(repr=False)
class RunResult:
    """What a command produced (or ``nsbridge.load`` read back): the run directory, the
    report dict and its frames (each frame's columns, dtypes and units: the tables in
    report/frames.py). Its repr is a few lines; it renders as a summary in Jupyter."""

    run_dir: Path
    report: Report
    ops: pd.DataFrame      # r.ops (report/frames.py)
    steps: pd.DataFrame    # r.steps: step, wall_ms, data/forward/backward/optimizer/other_ms
    exit_code: int         # 0, the script's own non-zero status, 124 timeout, 130 Ctrl-C
    timeline: Optional[pd.DataFrame] = None  # nsys per-op table (model.device.timeline.op_summary)

    @property
    def status(self) -> str:
        return str(self.report["status"])

    @property
    def failure(self) -> Optional[str]:
        """One paragraph on what went wrong and what was kept (None when the run is ok)."""
        if self.exit_code == 0 and self.status == "ok":
            return None
        return failure_paragraph(self.report, self.run_dir)

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads(readable(self.run_dir / S.MANIFEST_JSON).read_text(encoding="utf-8"))

    @property
    def kernels(self) -> pd.DataFrame:
        """Every kernel, copy and memset of the window per op, attributed or not."""
        return frames.kernels(self.report)

    @property
    def sync_points(self) -> pd.DataFrame:
        """Where the host waited for the device: one row per call site."""
        return frames.sync_points(self.report)

    @property
    def gaps(self) -> pd.DataFrame:
        """GPU idle gaps in the torch trace's measured window (no rows without a GPU)."""
        return frames.gaps(self.report)

    @property
    def op_shapes(self) -> pd.DataFrame:
        """Ops by input shape (report/frames.py)."""
        return frames.op_shapes(self.report)

    @property
    def op_sources(self) -> pd.DataFrame:
        """Ops by the script's function that called them (report/frames.py)."""
        return frames.op_sources(self.report)

    @property
    def memory(self) -> pd.DataFrame:
        """The allocator's level over the measured window (report/frames.py)."""
        return frames.memory(self.report)

    @property
    def timeline_ops(self) -> Optional[pd.DataFrame]:
        """nsys per op name; None without the nsys pass."""
        return frames.timeline_ops(self.report)

    @property
    def timeline_gaps(self) -> Optional[pd.DataFrame]:
        """nsys's GPU idle gaps; None without the nsys pass."""
        return frames.timeline_gaps(self.report)

    @property
    def ranks(self) -> Optional[pd.DataFrame]:
        """Each rank of a job (a run of several ranks): step, collectives, work, verdict."""
        return frames.ranks(self.report)

    @property
    def timeline_ranks(self) -> Optional[pd.DataFrame]:
        """nsys per rank (a run of several ranks): GPU busy, kernel and comm-kernel time."""
        return frames.pass_ranks(self.report, "timeline")

    @property
    def ncu_ranks(self) -> Optional[pd.DataFrame]:
        """ncu per profiled rank: why that rank, and its per-op numbers (OP.metric)."""
        return frames.pass_ranks(self.report, "ncu")

    @property
    def ncu(self) -> Optional[pd.DataFrame]:
        """ncu's kernel table (one row per profiled launch), None without the deep pass."""
        return frames.ncu_kernels(self.report)

    def _repr_html_(self) -> str:
        return frames.summary_html(self.report, str(self.run_dir))

    def __repr__(self) -> str:
        """A few lines, whatever the run's size: command and target, status, verdict, the
        run directory, and each frame attribute with its rows (None: the pass did not
        run). Names from the run are shown with control characters escaped."""
        report = self.report
        verdict = shown_verdict(report)
        said = "no verdict" if not verdict else f"verdict {verdict.get('label')}" + (
            f" ({verdict['confidence']} confidence)" if verdict.get("confidence") else "")
        code = f", exit code {self.exit_code}" if self.exit_code else ""
        rows, absent = [], []
        for name in FRAMES:
            frame = getattr(self, name)
            if frame is None:
                absent.append(name)
            else:
                rows.append(f"{name} {len(frame)}")
        head = (f"<RunResult {_short(report.get('command'), 20)} "
                f"{_short(report.get('target'), 120)}: {_short(report.get('status'), 20)}"
                f"{code}, {_short(said, 60)}")
        return (f"{head}\n  run_dir: {_short(self.run_dir, 200)}\n"
                f"  frames (rows): {', '.join(rows)}"
                + (f"; None: {', '.join(absent)}" if absent else "") + ">")


def _short(value: object, most: int) -> str:
    """``value`` as one line of at most ``most`` characters (control characters escaped)."""
    text = terminal(value)
    return text if len(text) <= most else text[:most - 1] + "…"


def result_of(run: Run, exit_code: Optional[int] = None) -> RunResult:
    """The RunResult of a run: its frames read from its report, as nsbridge.load gives
    them, so a command's result and a loaded run are the same. ``exit_code`` (None: the
    exit code of the run's last pass)."""
    if exit_code is None:
        passes = run.manifest.get("passes") or [{}]
        exit_code = int(passes[-1].get("exit_code") or 0)
    return RunResult(run_dir=run.dir, report=run.report, ops=frames.ops(run.report),
                     steps=frames.steps(run.report), exit_code=exit_code,
                     timeline=frames.timeline_ops(run.report))


def follower_result(run_dir: Path, rank: Any, code: int, command: str,
                    target: str) -> RunResult:
    """What a rank other than 0 returns: where its files are (rank 0 merges)."""
    report = empty_report(command=command, target=target, version=__version__)
    report["status"] = S.OK if code == 0 else S.FAILED
    report["notes"] = [
        f"rank {rank.rank} of {rank.world_size} on {rank.host}: its files are in "
        f"{run_dir / rank.dir_name}; rank 0 writes the merged report in {run_dir}"]
    if code != 0:
        report["error"] = {"type": "RankStopped", "message": (
            f"rank {rank.rank} ended with exit status {code} (its messages are above; rank 0's "
            "report names the rank that failed first)")}
    return RunResult(run_dir=run_dir, report=report, ops=frames.ops(report),
                     steps=frames.steps(report), exit_code=code)
