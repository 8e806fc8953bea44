"""A loop with an evaluation between epochs and a log line that formats tensors.

``accuracy`` stays a tensor and is formatted in the log line (``f"{acc:.2%}"`` calls
``Tensor.__format__``, which reads the value back: a sync on a GPU, found at the log
line); ``evaluate()`` runs between epochs with one ``.item()`` per batch, outside the
training steps, and is listed apart from the per-step syncs.

    nsbridge triage examples/train_eval_logging.py
"""

import argparse

import torch
from torch import nn


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Accuracy over the held-out batches, read back batch by batch."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in zip(x, y):
            correct += (model(xb).argmax(1) == yb).sum().item()
    model.train()
    return correct / y.numel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=6)
    parser.add_argument("--eval-batches", type=int, default=40)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(args.steps_per_epoch, 32, 64, device=device)
    y = torch.randint(0, 10, (args.steps_per_epoch, 32), device=device)
    vx = torch.randn(args.eval_batches, 32, 64, device=device)
    vy = torch.randint(0, 10, (args.eval_batches, 32), device=device)
    for epoch in range(args.epochs):
        for step in range(args.steps_per_epoch):
            logits = model(x[step])
            loss = nn.functional.cross_entropy(logits, y[step])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            acc = (logits.argmax(1) == y[step]).float().mean()
            print(f"epoch {epoch} step {step}: accuracy {acc:.2%}")
        print(f"epoch {epoch}: held-out accuracy {evaluate(model, vx, vy):.3f}")


if __name__ == "__main__":
    main()
