"""What a command returns: the run directory, its report and the report's frames."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from . import __version__
from . import schema as S
from .model.analysis import TraceAnalysis
from .report import frames
from .report.failure import failure_paragraph
from .run import Run


@dataclass
class RunResult:
    """What a command produced (or ``nsbridge.load`` read back): the run directory, the
    report dict and its frames. Renders as a summary in Jupyter."""

    run_dir: Path
    report: dict[str, Any]
    ops: pd.DataFrame      # OPS frame (schema.OP_COLUMNS), ranked; see frames.ops for load
    steps: pd.DataFrame    # per step: step, wall_ms, data/forward/backward/optimizer/other_ms
    exit_code: int         # 0, the script's own non-zero status, 124 timeout, 130 Ctrl-C
    timeline: Optional[pd.DataFrame] = None  # nsys per-op table (model.timeline.op_summary)

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
        return json.loads((self.run_dir / S.MANIFEST_JSON).read_text(encoding="utf-8"))

    @property
    def kernels(self) -> pd.DataFrame:
        """Kernels and copies per op (op, kind, name, calls, device_us, bytes)."""
        return frames.kernels(self.report)

    @property
    def sync_points(self) -> pd.DataFrame:
        return frames.sync_points(self.report)

    @property
    def gaps(self) -> pd.DataFrame:
        """GPU idle gaps in the torch trace's measured window."""
        return frames.gaps(self.report)

    @property
    def timeline_ops(self) -> Optional[pd.DataFrame]:
        return frames.timeline_ops(self.report)

    @property
    def timeline_gaps(self) -> Optional[pd.DataFrame]:
        return frames.timeline_gaps(self.report)

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


def result_of(run: Run, exit_code: int) -> RunResult:
    """The RunResult of a run: frames from this process's trace analysis when a pass made
    one (``run.frames``), else from the report (as nsbridge.load gives them)."""
    analysis: Optional[TraceAnalysis] = run.frames.get("analysis")
    if analysis is not None:
        ops, steps = analysis.ops, analysis.steps
    else:
        ops, steps = frames.ops(run.report), frames.steps(run.report)
    return RunResult(run_dir=run.dir, report=run.report, ops=ops, steps=steps,
                     exit_code=exit_code, timeline=run.frames.get("timeline"))


def follower_result(run_dir: Path, rank: Any, code: int, command: str,
                    target: str) -> RunResult:
    """What a rank other than 0 returns: where its files are (rank 0 merges)."""
    report = S.empty_report(command=command, target=target, version=__version__)
    report.update(status=S.OK if code == 0 else S.FAILED, notes=[
        f"rank {rank.rank} of {rank.world_size} on {rank.host}: its files are in "
        f"{run_dir / rank.dir_name}; rank 0 writes the merged report in {run_dir}"])
    if code != 0:
        report["error"] = {"type": "RankStopped", "message": (
            f"rank {rank.rank} ended with exit status {code} (its messages are above; rank 0's "
            "report names the rank that failed first)")}
    return RunResult(run_dir=run_dir, report=report, ops=pd.DataFrame(columns=S.OP_COLUMNS),
                     steps=pd.DataFrame(), exit_code=code)
