"""A small transformer-style block trained under torch.compile (inductor: Triton kernels).

The model is compiled once, before the loop, and warmed up (forward and backward) so the
compile happens before the first optimizer step; the loop's steps then run the compiled
graphs. Runs on CPU or GPU (inductor needs a C compiler on CPU).

    python bench/gpu_record/compile_model.py --steps 12
    nsbridge triage bench/gpu_record/compile_model.py -- --steps 12
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 8, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--mode", default="default", help="torch.compile mode")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(Block(args.dim), Block(args.dim), nn.Linear(args.dim, 10)).to(device)
    compiled = torch.compile(model, mode=args.mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch_size, args.seq, args.dim, device=device)
    y = torch.randint(0, 10, (args.batch_size, args.seq), device=device)
    loss_fn = nn.CrossEntropyLoss()

    began = time.perf_counter()
    warm = loss_fn(compiled(x).flatten(0, 1), y.flatten())    # compiles forward and backward
    warm.backward()
    model.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"compiled in {time.perf_counter() - began:.1f} s (mode {args.mode}, {device})",
          flush=True)

    for _ in range(args.steps):
        loss = loss_fn(compiled(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print(f"last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
