"""The workloads bench/gate_quality.py gates on: a small training loop of one of three
models, with slowdowns that can be planted by environment variable.

    GATE_MODEL=mlp          an MLP with SGD beside ``gatebench::busy`` (the default; the
                            workload the gate's rule was tuned on)
    GATE_MODEL=cnn          a small CNN on 32x32 images with SGD and momentum (no busy op)
    GATE_MODEL=transformer  a 2-layer transformer encoder LM with AdamW (no busy op)

``gatebench::busy`` is a custom op (torch.library) whose CPU kernel runs numpy's sin over
a fixed array a set number of times: torch.profiler sees one call of the same shape and
dtype whatever that number is, so a slowdown planted in it is the same work made slower,
the kind of regression only timing can catch.

    GATE_SLOW_PCT=P     the busy op does P% more work per call (same calls, shapes, dtype)
    GATE_DTYPE=float64  the model and its data in float64 (different work: another dtype)
    GATE_EXTRA_CALLS=N  N more busy calls per step (more work of the same op)
    GATE_PY_TURNS=N     N turns of a pure-Python loop in each step, outside any op (a
                        slower data transform, bookkeeping): only the step time can see it
    GATE_DATA_TURNS=N   N turns of pure Python in making each batch (a slower data loader:
                        a Python transform per sample)
    GATE_OPT_TURNS=N    N turns of pure Python in each optimizer step (a pre-step hook: a
                        slower optimizer, inside its profiler range but in no aten op)

    python bench/gate_workload.py [--steps 32]
"""

import argparse
import os

import numpy as np
import torch
from torch import nn

BUSY_REPS = 1500     # sin passes per busy call: about half the MLP step on one thread


@torch.library.custom_op("gatebench::busy", mutates_args=())
def busy(x: torch.Tensor) -> torch.Tensor:
    """A set amount of CPU work, invisible to the profiler but as one op call."""
    reps = round(BUSY_REPS * (1 + float(os.environ.get("GATE_SLOW_PCT", "0")) / 100))
    out = x.detach().numpy().copy()
    for _ in range(reps):
        np.sin(out, out=out)
    return torch.from_numpy(out)


def python_work(turns: int) -> int:
    """A set amount of pure-Python CPU work (``turns`` loop turns): no torch op runs in it,
    and a slower machine gets the same work, not the same time."""
    total = 0
    for i in range(turns):
        total += i * i % 7
    return total


class TinyLM(nn.Module):
    """A 2-layer transformer encoder over a 512-token vocabulary (causal mask)."""

    def __init__(self, dtype: torch.dtype, vocab: int = 512, width: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width,
                                           batch_first=True, dropout=0.0)
        self.body = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        self.to(dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, dtype=self.head.weight.dtype)
        return self.head(self.body(self.embed(tokens), mask=mask, is_causal=True))


def model_and_data(name: str, dtype: torch.dtype):
    """The model, its optimizer, and a function making one batch (inputs, targets)."""
    if name == "mlp":
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                              nn.Linear(256, 10)).to(dtype)
        return (model, torch.optim.SGD(model.parameters(), lr=0.01),
                lambda: (torch.randn(512, 256, dtype=dtype), torch.randint(0, 10, (512,))))
    if name == "cnn":
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(32 * 8 * 8, 10)).to(dtype)
        return (model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                lambda: (torch.randn(32, 3, 32, 32, dtype=dtype), torch.randint(0, 10, (32,))))
    if name == "transformer":
        model = TinyLM(dtype)
        tokens = lambda: torch.randint(0, 512, (8, 65))   # noqa: E731
        return (model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                lambda: (lambda t: (t[:, :-1], t[:, 1:]))(tokens()))
    raise SystemExit(f"GATE_MODEL={name}: one of mlp, cnn, transformer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    name = os.environ.get("GATE_MODEL", "mlp")
    dtype = getattr(torch, os.environ.get("GATE_DTYPE", "float32"))
    model, optimizer, batch = model_and_data(name, dtype)
    side = torch.randn(64, 256)
    calls = (1 if name == "mlp" else 0) + int(os.environ.get("GATE_EXTRA_CALLS", "0"))
    python_turns = int(os.environ.get("GATE_PY_TURNS", "0"))
    data_turns = int(os.environ.get("GATE_DATA_TURNS", "0"))
    opt_turns = int(os.environ.get("GATE_OPT_TURNS", "0"))
    if opt_turns:
        optimizer.register_step_pre_hook(lambda *_: python_work(opt_turns))
    for _ in range(args.steps):
        x, y = batch()
        if data_turns:
            python_work(data_turns)
        if python_turns:
            python_work(python_turns)
        for _ in range(calls):
            busy(side)
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
