"""Fully sharded data parallel training (FSDP2, ``fully_shard``) on two (or more)
processes, CPU (gloo) or GPU (nccl): each block's parameters all-gathered before its
forward and backward, its gradients reduce-scattered after.

    torchrun --nproc-per-node 2 examples/train_fsdp2.py
    nsbridge triage --nproc-per-node 2 examples/train_fsdp2.py

NSBRIDGE_EXAMPLE_SLOW_RANK=1 makes rank 1 sleep in every step (NSBRIDGE_EXAMPLE_SLOW_MS,
10 by default): a planted straggler.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else "cpu"
    slow = os.environ.get("NSBRIDGE_EXAMPLE_SLOW_RANK")
    slow_s = float(os.environ.get("NSBRIDGE_EXAMPLE_SLOW_MS", "10")) / 1e3
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)]
    model = nn.Sequential(*blocks, nn.Linear(256, 10)).to(device)
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, 256, device=device)
        y = torch.randint(0, 10, (args.batch_size,), device=device)
        if slow is not None and dist.get_rank() == int(slow):
            time.sleep(slow_s)                     # the planted straggler
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()           # gradients reduce-scattered, one call per block and root
        optimizer.step()
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"done: {args.steps} steps")


if __name__ == "__main__":
    main()
