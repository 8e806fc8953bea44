"""A training step captured once as a CUDA graph and replayed (PyTorch's whole-network
capture: forward, loss, backward and a plain SGD update in one graph).

Each loop step copies a new batch into the graph's static input and replays the graph, then
marks the step with ``nsbridge.step()``. The update is written out (``p -= lr * grad``)
rather than an ``optimizer.step()``: a profiler that marks steps at the optimizer's step
would otherwise see one inside the capture, where no synchronization is allowed. Needs a GPU; on a CPU it says so and exits 0 after
running the same steps eagerly, so the script itself can be checked anywhere.

    python bench/gpu_record/cudagraph_model.py --steps 12
    nsbridge triage --nsys bench/gpu_record/cudagraph_model.py -- --steps 12
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch
from torch import nn


def step_marker() -> Callable[[], None]:
    try:
        import nsbridge
        return nsbridge.step
    except ImportError:       # run without nsbridge on the path: no step marks needed
        return lambda: None


def train_step(model: nn.Module, params: list[torch.Tensor], loss_fn: nn.Module,
               x: torch.Tensor, y: torch.Tensor, lr: float = 0.01) -> torch.Tensor:
    loss = loss_fn(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in params:
            p.add_(p.grad, alpha=-lr)      # type: ignore[arg-type]
    return loss


def zero_grads(params: list[torch.Tensor]) -> None:
    for p in params:
        p.grad = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--dim", type=int, default=1024)
    args = parser.parse_args()

    torch.manual_seed(0)
    mark = step_marker()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    model = nn.Sequential(nn.Linear(args.dim, 4 * args.dim), nn.ReLU(),
                          nn.Linear(4 * args.dim, args.dim), nn.ReLU(),
                          nn.Linear(args.dim, 10)).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    loss_fn = nn.CrossEntropyLoss()
    static_x = torch.randn(args.batch_size, args.dim, device=device)
    static_y = torch.randint(0, 10, (args.batch_size,), device=device)
    data = [(torch.randn(args.batch_size, args.dim, device=device),
             torch.randint(0, 10, (args.batch_size,), device=device)) for _ in range(4)]

    if not cuda:
        print("no CUDA device: running the steps eagerly (no graph)", flush=True)
        for i in range(args.steps):
            x, y = data[i % len(data)]
            zero_grads(params)
            train_step(model, params, loss_fn, x, y)
            mark()
        return

    side = torch.cuda.Stream()                  # warm-up on a side stream, as the docs ask
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            zero_grads(params)
            train_step(model, params, loss_fn, static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    zero_grads(params)             # grads allocated inside the capture, written on each replay
    with torch.cuda.graph(graph):
        static_loss = train_step(model, params, loss_fn, static_x, static_y)
    print("captured one training step as a CUDA graph", flush=True)

    for i in range(args.steps):
        x, y = data[i % len(data)]
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        mark()
    print(f"last loss {static_loss.item():.4f}")


if __name__ == "__main__":
    main()
