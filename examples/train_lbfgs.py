"""LBFGS with a closure, in the style of pytorch/examples time_sequence_prediction.

``optimizer.step(closure)`` runs the closure (forward and backward) up to ``max_iter``
times inside one step, so one training step holds many forwards and backwards; nsbridge
counts them in the step's forward and backward phases, and the rest of LBFGS's own work
as optimizer. The loss is printed once per step (one sync per step).

    nsbridge triage examples/train_lbfgs.py
"""

import argparse

import torch
from torch import nn


class Sequence(nn.Module):
    """Two LSTM cells unrolled over a sine wave, then a linear read-out."""

    def __init__(self, width: int = 24) -> None:
        super().__init__()
        self.width = width
        self.cell1 = nn.LSTMCell(1, width)
        self.cell2 = nn.LSTMCell(width, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = c1 = torch.zeros(x.size(0), self.width, device=x.device)
        h2 = c2 = torch.zeros(x.size(0), self.width, device=x.device)
        outputs = []
        for value in x.split(1, dim=1):
            h1, c1 = self.cell1(value, (h1, c1))
            h2, c2 = self.cell2(h1, (h2, c2))
            outputs.append(self.out(h2))
        return torch.cat(outputs, dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--length", type=int, default=40)
    parser.add_argument("--max-iter", type=int, default=6, help="closures per LBFGS step")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t = torch.arange(args.length + 1, dtype=torch.float32, device=device)
    phase = torch.rand(16, 1, device=device) * 6.28
    wave = torch.sin(t / 4.0 + phase)
    inputs, targets = wave[:, :-1], wave[:, 1:]
    model = Sequence().to(device)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=args.max_iter)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        return loss

    for step in range(args.steps):
        loss = optimizer.step(closure)
        print(f"step {step}: loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
