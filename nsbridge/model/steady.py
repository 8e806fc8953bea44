"""Steady times per step in one process: the numbers the interleaved gate compares.

On a shared machine the noise in an op's time per step only ever adds time, in two ways
seen on this project's machines (facts.md): the process waits for a CPU another process
holds (its threads' run-queue wait, which nsbridge's step clock measures per step), and
the CPU itself runs slower for a while with no wait at all (other guests of the host).
So, per process:

1. **Clean steps.** Steps in which the process waited for a CPU for more than
   ``WAIT_LIMIT`` of its CPU time are left out (beside two busy loops about half the steps
   wait as long as they run); when fewer than half the steps are clean, the least-waited
   half is kept. GPU runs keep every step: device time does not wait for the host's CPU.
2. **Two statistics** of each op's time in those steps: the median, and the 10th
   percentile (the time the op takes when nothing slows it). Which one a comparison uses is
   decided per op by the comparison (model.paired), on both sides' processes together.

Step times are treated the same way: the unprofiled steps (nsbridge's step timer, no
profiler running) when every process has at least ``MIN_STEPS`` clean ones, else the
measured steps' wall times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from .. import schema as S

WAIT_LIMIT = 0.01      # a step waited for a CPU longer than this share of its CPU time
LOW_QUANTILE = 10      # percent: the "nothing slowed it" statistic
MIN_STEPS = 5
STATISTICS = ("median", "p10")


@dataclass
class Steady:
    """One process's steady times: per op name and for the step, {statistic: µs per step}
    (ops) or {statistic: ms} (step); which steps were used and why."""

    ops: dict[str, dict[str, float]]
    step: Optional[dict[str, float]]
    step_source: str
    steps_used: int
    steps_measured: int
    waited_steps: int
    unprofiled_used: int = 0


def statistics(values: np.ndarray) -> dict[str, float]:
    """{median, p10} of one sample."""
    return {"median": float(np.median(values)),
            "p10": float(np.percentile(values, LOW_QUANTILE))}


def clean_mask(wait_ms: Sequence[Optional[float]], cpu_ms: Sequence[Optional[float]]) -> np.ndarray:
    """Which steps count (module docstring, 1): unknown waits count as clean."""
    wait = np.array([np.nan if w is None else float(w) for w in wait_ms], dtype=np.float64)
    cpu = np.array([np.nan if c is None else float(c) for c in cpu_ms], dtype=np.float64)
    share = np.where(np.isnan(wait), 0.0, wait / np.maximum(np.nan_to_num(cpu, nan=0.0)
                                                          + np.nan_to_num(wait), 1e-9))
    clean = share <= WAIT_LIMIT
    if clean.sum() * 2 >= len(share):
        return clean
    keep = max(len(share) // 2, 1)
    return share <= np.sort(share)[keep - 1]


def process_steady(report: dict[str, Any]) -> Steady:
    """The steady times of the one process a report measured."""
    steps = (report.get("steps") or {})
    per_step = steps.get("per_step") or []
    where = list(range(len(per_step)))
    device = report.get("ranked_by") == S.DEVICE_SELF_US
    key = S.DEVICE_SELF_US if device else S.CPU_SELF_US
    chosen = [per_step[i] for i in where]
    clean = (np.ones(len(chosen), dtype=bool) if device
             else clean_mask([s.get("wait_ms") for s in chosen], [s.get("cpu_ms") for s in chosen]))
    index = np.asarray(where, dtype=np.int64)[clean]
    ops: dict[str, dict[str, float]] = {}
    for op in report.get("ops") or []:
        samples = op.get(S.PER_STEP_US) or []
        if op.get(key) is None or len(samples) != len(per_step) or not len(index):
            continue
        ops[op["name"]] = statistics(np.asarray(samples, dtype=np.float64)[index])
    step, source, bare_used = _step(steps, chosen, clean, device)
    return Steady(ops=ops, step=step, step_source=source, steps_used=int(clean.sum()),
                  steps_measured=len(chosen), waited_steps=int((~clean).sum()),
                  unprofiled_used=bare_used)


def _step(steps: dict[str, Any], chosen: list[dict[str, Any]], clean: np.ndarray,
          device: bool) -> tuple[Optional[dict[str, float]], str, int]:
    """The step's statistics (ms), where they came from, and how many unprofiled steps."""
    bare = steps.get("unprofiled_ms") or []
    waits = steps.get("unprofiled_wait_ms") or [None] * len(bare)
    mine = list(range(len(bare)))
    if mine:
        walls = np.asarray([bare[i] for i in mine], dtype=np.float64)
        wait = [waits[i] if i < len(waits) else None for i in mine]
        # wall minus wait is the CPU time of a one-thread step: waits above the limit of it
        keep = (np.ones(len(mine), dtype=bool) if device else clean_mask(
            wait, [None if w is None else max(wall - w, 0.0) for wall, w in zip(walls, wait)]))
        if keep.sum() >= MIN_STEPS:
            return statistics(walls[keep]), "unprofiled steps", int(keep.sum())
    walls = np.asarray([s["wall_ms"] for s in chosen], dtype=np.float64)[clean]
    if not len(walls):
        return None, "none", 0
    return statistics(walls), "measured steps", 0

