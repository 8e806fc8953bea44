"""The workload bench/gate_quality.py gates on: a small MLP's training step beside one op,
``gatebench::busy``, that holds about half the step and does a set amount of work.

``gatebench::busy`` is a custom op (torch.library) whose CPU kernel runs numpy's sin over
a fixed array a set number of times: torch.profiler sees one call of the same shape and
dtype whatever that number is, so a slowdown planted in it is the same work made slower,
the kind of regression only timing can catch.

    GATE_SLOW_PCT=P     the busy op does P% more work per call (same calls, shapes, dtype)
    GATE_DTYPE=float64  the MLP and its data in float64 (different work: another dtype)
    GATE_EXTRA_CALLS=N  N more busy calls per step (more work of the same op)
    GATE_PY_TURNS=N     N turns of a pure-Python loop in each step, outside any op (a
                        slower data transform, bookkeeping): only the step time can see it

    python bench/gate_workload.py [--steps 32]
"""

import argparse
import os

import numpy as np
import torch
from torch import nn

BUSY_REPS = 1500     # sin passes per busy call: about half the MLP step on one thread


@torch.library.custom_op("gatebench::busy", mutates_args=())
def busy(x: torch.Tensor) -> torch.Tensor:
    """A set amount of CPU work, invisible to the profiler but as one op call."""
    reps = round(BUSY_REPS * (1 + float(os.environ.get("GATE_SLOW_PCT", "0")) / 100))
    out = x.detach().numpy().copy()
    for _ in range(reps):
        np.sin(out, out=out)
    return torch.from_numpy(out)


def python_work(turns: int) -> int:
    """A set amount of pure-Python CPU work (``turns`` loop turns): no torch op runs in it,
    and a slower machine gets the same work, not the same time."""
    total = 0
    for i in range(turns):
        total += i * i % 7
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    dtype = getattr(torch, os.environ.get("GATE_DTYPE", "float32"))
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10)).to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    side = torch.randn(64, 256)
    calls = 1 + int(os.environ.get("GATE_EXTRA_CALLS", "0"))
    python_turns = int(os.environ.get("GATE_PY_TURNS", "0"))
    for _ in range(args.steps):
        x, y = torch.randn(512, 256, dtype=dtype), torch.randint(0, 10, (512,))
        if python_turns:
            python_work(python_turns)
        for _ in range(calls):
            busy(side)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
