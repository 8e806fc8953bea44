"""How fast this CPU runs right now: a fixed reference workload, timed in the profiled
process at every step boundary when the profile asks for it (``schedule.speed_probe``,
on in the ``gate`` profile).

On a shared machine the CPU itself runs slower for a while with no wait at all (another
guest of the host on the same core, memory bandwidth taken): a step's CPU time moved by
±10% between processes beside a busy test suite on this project's machines, and its
median over 40 steps with it. The same work then takes longer in the step and in the
probe alike: times divided by the probe's, process by process, stay put (model.comparing
.steady, model.comparing.paired). The probe is a fixed amount of interpreted Python and of
vectorised numeric work (what a training step's host side is made of), timed by the
thread's own CPU clock (a preemption in it costs no CPU time), inside an
``nsbridge::speed_probe`` range that the step's time leaves out.
"""

from __future__ import annotations

import time

from nsbridge.schema import SPEED_PROBE_RANGE

PYTHON_TURNS = 12_000      # about 1 ms of interpreted work on this project's machines
VECTOR = 2048              # float64 elements the numeric part passes over
VECTOR_PASSES = 12


def probe_ms() -> float:
    """The thread CPU time (ms) of the reference workload, run once now."""
    import numpy as np   # not at import: the profiled process loads only torch up front
    import torch

    with torch.profiler.record_function(SPEED_PROBE_RANGE):
        start = time.thread_time_ns()
        total = 0
        for i in range(PYTHON_TURNS):
            total += i * i % 7
        values = np.linspace(0.0, 1.0, VECTOR)
        for _ in range(VECTOR_PASSES):
            np.sin(values, out=values)
        return (time.thread_time_ns() - start) / 1e6
