"""A training loop without torch.optim, in the style of pytorch/examples word_language_model.

Parameters are updated by hand (``p.data.add_(p.grad, alpha=-lr)``), so there is no
optimizer step for nsbridge to find; the loss is read back with ``.item()`` once per
iteration, and an ``evaluate()`` between epochs reads every batch's loss back. Under
nsbridge this loop has no step boundary: it is profiled in a bounded time window and judged
in totals and rates per second (``--mark-steps`` adds ``nsbridge.step()`` for per-step
figures).

    nsbridge triage examples/train_no_optimizer.py
"""

import argparse
import time

import torch
from torch import nn

import nsbridge


class TinyLM(nn.Module):
    """Embedding, one GRU layer and a decoder: word_language_model's shape, small."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.decode = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(tokens))
        return self.decode(hidden)


def evaluate(model: nn.Module, data: torch.Tensor, bptt: int) -> float:
    """Mean loss over the held-out tokens: one .item() per batch (outside the training steps)."""
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, data.size(1) - 1 - bptt, bptt):
            out = model(data[:, i:i + bptt])
            total += nn.functional.cross_entropy(out.flatten(0, 1),
                                                 data[:, i + 1:i + 1 + bptt].flatten()).item()
    model.train()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0, help="training time per epoch")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--mark-steps", action="store_true", help="call nsbridge.step()")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    vocab, width, bptt = 500, 64, 16
    train = torch.randint(0, vocab, (8, 4096), device=device)
    valid = torch.randint(0, vocab, (8, 512), device=device)
    model = TinyLM(vocab, width).to(device)
    for epoch in range(args.epochs):
        total, batches, start = 0.0, 0, time.monotonic()
        while time.monotonic() - start < args.seconds:
            i = (batches * bptt) % (train.size(1) - 1 - bptt)
            out = model(train[:, i:i + bptt])
            loss = nn.functional.cross_entropy(out.flatten(0, 1),
                                               train[:, i + 1:i + 1 + bptt].flatten())
            model.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-args.lr)
            total += loss.item()
            batches += 1
            if args.mark_steps:
                nsbridge.step()
        print(f"epoch {epoch}: {batches} batches, train loss {total / batches:.3f}, "
              f"valid loss {evaluate(model, valid, bptt):.3f}")


if __name__ == "__main__":
    main()
