"""Data-parallel training on two (or more) processes, CPU (gloo) or GPU (nccl).

    torchrun --nproc-per-node 2 examples/train_ddp.py
    nsbridge triage --nproc-per-node 2 examples/train_ddp.py

NSBRIDGE_EXAMPLE_SLOW_RANK=1 makes rank 1 sleep in every step (NSBRIDGE_EXAMPLE_SLOW_MS, 20
by default): a planted straggler. NSBRIDGE_EXAMPLE_KILL_RANK=3 makes rank 3 die by SIGKILL
half-way through (as the kernel's OOM killer ends a process): a rank lost mid-job.
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else "cpu"
    slow = os.environ.get("NSBRIDGE_EXAMPLE_SLOW_RANK")
    slow_s = float(os.environ.get("NSBRIDGE_EXAMPLE_SLOW_MS", "20")) / 1e3
    killed = os.environ.get("NSBRIDGE_EXAMPLE_KILL_RANK")
    torch.manual_seed(rank)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.ReLU(),
                                                  nn.Linear(512, 10)).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        if killed is not None and rank == int(killed) and step == args.steps // 2:
            os.kill(os.getpid(), signal.SIGKILL)   # the lost rank
        x = torch.randn(args.batch_size, 256, device=device)
        y = torch.randint(0, 10, (args.batch_size,), device=device)
        if slow is not None and rank == int(slow):
            time.sleep(slow_s)                     # the planted straggler
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()                            # gradients all-reduced across ranks
        optimizer.step()
    # tear down in order: the model (its reducer holds the process group) before the group;
    # letting the last gloo work finish first avoids a teardown deadlock in torch's gloo
    dist.barrier()
    del model, optimizer
    dist.destroy_process_group()
    if rank == 0:
        print(f"done: {args.steps} steps")


if __name__ == "__main__":
    main()
