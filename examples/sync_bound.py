"""Sync-bound on purpose: per-sample accuracy computed with .item() inside the step.

Every .item() copies one value to the host; on a GPU each one waits until all queued
kernels have finished, so the GPU idles between them.

    nsbridge triage examples/sync_bound.py
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(args.steps, args.batch_size, 128, device=device)
    y = torch.randint(0, 10, (args.steps, args.batch_size), device=device)
    for step in range(args.steps):
        logits = model(x[step])
        loss = nn.functional.cross_entropy(logits, y[step])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        pred = logits.argmax(dim=1)
        correct = 0
        for i in range(args.batch_size):
            correct += int(pred[i].item() == y[step, i].item())  # the anti-pattern
        print(f"step {step}: loss {loss.item():.3f} acc {correct / args.batch_size:.2f}")


if __name__ == "__main__":
    main()
