"""The workload the GPU record gates on: an MLP's training step, one setting changed at a time.

    GPU_RECORD_DTYPE=bfloat16     the model and its data in bfloat16 (was float32): other work
    GPU_RECORD_EXTRA_KERNEL=1     one planted extra kernel per step: a batched matmul
                                  (aten::bmm, 32 x 1024^3 in float32) the base never runs

    python bench/gpu_record/gate_model.py --steps 12
    nsbridge gate --processes 2 --steps 8 . . bench/gpu_record/gate_model.py \\
        --new-env GPU_RECORD_DTYPE=bfloat16 -- --steps 12
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--extra-size", type=int, default=1024, help="the planted bmm's side")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, os.environ.get("GPU_RECORD_DTYPE", "float32"))
    extra = os.environ.get("GPU_RECORD_EXTRA_KERNEL", "0") not in ("", "0")
    model = nn.Sequential(nn.Linear(args.dim, 4 * args.dim), nn.GELU(),
                          nn.Linear(4 * args.dim, args.dim), nn.GELU(),
                          nn.Linear(args.dim, 10)).to(device=device, dtype=dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch_size, args.dim, device=device, dtype=dtype)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    planted = torch.randn(32, args.extra_size, args.extra_size, device=device) if extra else None
    for _ in range(args.steps):
        if planted is not None:
            torch.bmm(planted, planted)
        loss = nn.functional.cross_entropy(model(x).float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print(f"{dtype}, planted kernel {'on' if extra else 'off'}: last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
