"""Steady times per step in one process: the numbers the gate compares.

On a shared machine the noise in an op's time per step only ever adds time, in two ways
seen on this project's machines (facts.md): the process waits for a CPU another process
holds (its threads' run-queue wait, which nsbridge's step clock measures per step), and
the CPU itself runs slower for a while with no wait at all (other guests of the host).
So, per process:

1. **Steps that did not wait.** A step in which the process waited for a CPU for more than
   ``WAIT_LIMIT`` of its CPU time is left out, as long as ``MIN_CLEAN_STEPS`` steps (or
   half of them) did not wait: beside two busy loops on two cores, 13 to 20 of a process's
   25 measured steps waited about as long as they ran, and an op's time in them is mostly
   that wait. When fewer did not wait (a process that shared a core with a busy loop from
   start to end), every step counts, its times scaled by the step's running share: wall
   time minus the wait (per intra-op thread), over the wall time. That is rough (sharing a
   core also slows the CPU time itself, by 10-20% in bench/gate_workload.py), so such a
   process is named in the samples line. GPU runs keep every step as it is: device time
   does not wait for the host's CPU.
2. **Two statistics** of each op's time in those steps: the median, and the 10th
   percentile (the time the op takes when nothing slows it). Which one a comparison uses is
   decided per op by the comparison (model.comparing.paired), on both sides' processes together.

3. **The machine's speed.** Where the profile timed its speed probe at each step
   boundary (_bootstrap.speed_probe, the gate's profile), ``speed_ms`` is the probe's median
   over the measured steps, and every step's times are also taken per millisecond of its
   own probe (``per_probe``): a CPU that runs slower for a while (another guest on the
   host, memory bandwidth taken) slows the probe beside the step as much as the step, so
   the comparison can divide it out step by step (``with_speed``; model.comparing.paired).
   The host's speed changes within a process too: in one quiet gate of
   bench/gate_workload.py a process's probe median was 1.28 ms while its busy op ran at
   the speed of 1.13 ms probes. Over two sets of six quiet gates of 6 to 10 pairs (the
   medians of each set), dividing each process's median by its probe median left the
   busy op's pairs 5.9% and 6.0% apart and the step's 7.7% and 5.3%; step by step, 4.8%
   and 3.3%, 4.7% and 2.8%. Each statistic then also comes at one speed, and the
   comparison picks among the four as it picks between the two.

The step time is treated the same way, on the same measured steps (their wall time, from
the process's own step clock). The unprofiled steps are too few in a gate's process, and
the first ones after the profiler stops run slower for a while (23, 21, 20.5, 20 ms against
21 ms measured, in bench/gate_workload.py): they would judge the profiler's wake.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ... import schema as S
from ...contract.report import Report, Steps, StepsPerStep, per_step_of

WAIT_LIMIT = 0.01      # a step waited for a CPU longer than this share of its CPU time
LOW_QUANTILE = 10      # percent: the "nothing slowed it" statistic
MIN_CLEAN_STEPS = 5
MIN_RUNNING_SHARE = 0.05
STATISTICS = ("median", "p10")


@dataclass
class Steady:
    """One process's steady times: per op name {statistic: µs per step}, the step's
    {statistic: ms}, and which steps gave them."""

    ops: dict[str, dict[str, float]]
    step: Optional[dict[str, float]]
    steps_used: int
    steps_measured: int
    waited_steps: int
    scaled: bool          # most steps waited: all used, scaled by their running share
    speed_ms: Optional[float] = None   # the speed probe's median, ms (None: not timed)
    # the same statistics of each step's times over that step's probe (per probe ms;
    # empty and None when the probe was not timed)
    ops_per_probe: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    step_per_probe: Optional[dict[str, float]] = None


@dataclass
class StepWeights:
    """Which measured steps a process's times are taken from, and the factor each step's
    times are multiplied by (1, or its running share)."""

    index: np.ndarray
    scale: np.ndarray
    waited: int

    @property
    def scaled(self) -> bool:
        return bool((self.scale < 1.0).any())


def statistics(values: np.ndarray) -> dict[str, float]:
    """{median, p10} of one sample."""
    return {"median": float(np.median(values)),
            "p10": float(np.percentile(values, LOW_QUANTILE))}


def step_weights(per_step: list[StepsPerStep], threads: int, device: bool) -> StepWeights:
    """The steps a process's times come from (module docstring, 1); a step without a
    known wait counts as one that did not wait."""
    n = len(per_step)
    wall = np.array([float(s.get("wall_ms") or 0.0) for s in per_step], dtype=np.float64)
    wait = np.array([float(s.get("wait_ms") or 0.0) for s in per_step], dtype=np.float64)
    cpu = np.array([float(s.get("cpu_ms") or 0.0) for s in per_step], dtype=np.float64)
    waited = wait > WAIT_LIMIT * np.maximum(cpu, 1e-9)
    if device or not waited.any():
        return StepWeights(np.arange(n), np.ones(n), 0)
    if (~waited).sum() >= min(MIN_CLEAN_STEPS, (n + 1) // 2):
        return StepWeights(np.flatnonzero(~waited), np.ones(int((~waited).sum())),
                           int(waited.sum()))
    running = (wall - wait / max(threads, 1)) / np.maximum(wall, 1e-9)
    return StepWeights(np.arange(n), np.clip(running, MIN_RUNNING_SHARE, 1.0), int(waited.sum()))


def unprofiled_samples(steps: Steps, threads: int,
                       device: bool) -> tuple[np.ndarray, list[int]]:
    """A report's unprofiled step times (ms) by the same rule as the measured ones
    (step_weights), with the process (run) of each; a step's CPU time is not recorded
    there, so a step waited when its wait exceeds WAIT_LIMIT of its wall time."""
    walls = [float(v) for v in steps.get("unprofiled_ms") or []]
    waits = steps.get("unprofiled_wait_ms") or []
    runs = steps.get("unprofiled_runs") or [1] * len(walls)
    records: list[StepsPerStep] = [{"wall_ms": w, "cpu_ms": w,
                "wait_ms": float(waits[i] or 0.0) if i < len(waits) else 0.0}
               for i, w in enumerate(walls)]
    weights = step_weights(records, threads, device)
    values = np.asarray(walls, dtype=np.float64)[weights.index] * weights.scale
    return values, [int(runs[i]) for i in weights.index]


def process_steady(report: Report) -> Steady:
    """The steady times of the one process a report measured."""
    per_step = per_step_of(report)
    device = report.get("ranked_by") == S.DEVICE_SELF_US
    key = S.DEVICE_SELF_US if device else S.CPU_SELF_US
    weights = step_weights(per_step, intra_op_threads(report), device)
    probes = _probes(per_step) if not device else None
    per_probe = (weights.scale / probes[weights.index]) if probes is not None else None
    ops: dict[str, dict[str, float]] = {}
    ops_per_probe: dict[str, dict[str, float]] = {}
    for op in report.get("ops") or []:
        samples = op.get(S.PER_STEP_US) or []
        if op.get(key) is None or len(samples) != len(per_step) or not len(weights.index):
            continue
        chosen = np.asarray(samples, dtype=np.float64)[weights.index]
        ops[op["name"]] = statistics(chosen * weights.scale)
        if per_probe is not None:
            ops_per_probe[op["name"]] = statistics(chosen * per_probe)
    walls = np.asarray([step_length_ms(s) for s in per_step], dtype=np.float64)
    used = len(weights.index) > 0
    return Steady(ops=ops, step=statistics(walls[weights.index] * weights.scale) if used
                  else None, steps_used=len(weights.index),
                  steps_measured=len(per_step), waited_steps=weights.waited,
                  scaled=weights.scaled,
                  speed_ms=float(np.median(probes)) if probes is not None else None,
                  ops_per_probe=ops_per_probe,
                  step_per_probe=statistics(walls[weights.index] * per_probe)
                  if per_probe is not None and used else None)


def _probes(per_step: list[StepsPerStep]) -> Optional[np.ndarray]:
    """Each measured step's speed probe (ms), or None unless every step timed one."""
    probes = [s.get("probe_ms") for s in per_step]
    if not probes or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                             and v > 0 for v in probes):
        return None
    return np.asarray(probes, dtype=np.float64)


AT_SPEED = " at one speed"
STATISTICS_AT_SPEED = STATISTICS + tuple(f"{s}{AT_SPEED}" for s in STATISTICS)


def with_speed(steady: Steady, reference_ms: float) -> Steady:
    """``steady`` with each statistic also at one reference speed (``"median at one
    speed"``, ...): each step's times over its own probe, times ``reference_ms``, the
    times as they would have been had every step's probe taken that long. Only for a
    process that timed its probe at every measured step (``speed_ms`` set)."""
    if steady.speed_ms is None:
        raise ValueError("with_speed needs a process that timed its speed probe")

    def both(stats: dict[str, float], per_probe: dict[str, float]) -> dict[str, float]:
        return {**stats, **{f"{k}{AT_SPEED}": per_probe[k] * reference_ms
                            for k in STATISTICS}}
    return dataclasses.replace(
        steady, ops={n: both(v, steady.ops_per_probe[n]) for n, v in steady.ops.items()},
        step=both(steady.step, steady.step_per_probe)
        if steady.step and steady.step_per_probe else None)


def step_length_ms(step: StepsPerStep) -> float:
    """A step's length for comparisons: the slower of the host's loop (its wall time) and
    the GPU (``gpu_done_ms``, how long after the previous step's work the GPU finished
    this step's). A GPU that runs behind makes the host's steps short and the last one, or
    the one that syncs, absorb the queue: the GPU's cadence is the step then."""
    wall = float(step["wall_ms"])
    done = step.get("gpu_done_ms")
    return max(wall, float(done)) if isinstance(done, (int, float)) and done == done else wall





def intra_op_threads(report: Report) -> int:
    """torch's intra-op threads in the run's process (1 when not recorded)."""
    threads = ((report.get("machine") or {}).get("threads") or {}).get("intra_op")
    return int(threads) if isinstance(threads, int) and threads > 0 else 1
