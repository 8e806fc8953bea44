"""The workload bench/gate_quality.py gates on: a training step where one op, aten::bmm,
holds about half the step, so a planted slowdown of it is a known share of the step.

GATE_SLOW_PCT=P runs P% more bmm calls per step (20 calls base): the same op doing P% more
work, the way a regression in one layer would.

    python bench/gate_workload.py [--steps 12]
"""

import argparse
import os

import torch
from torch import nn

BASE_CALLS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.manual_seed(0)
    calls = round(BASE_CALLS * (1 + float(os.environ.get("GATE_SLOW_PCT", "0")) / 100))
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    left, right = torch.randn(16, 128, 128), torch.randn(16, 128, 128)
    for _ in range(args.steps):
        x, y = torch.randn(512, 256), torch.randint(0, 10, (512,))
        for _ in range(calls):
            torch.bmm(left, right)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
