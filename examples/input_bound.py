"""Input-bound on purpose: a slow Dataset (decoding simulated by sleep) and num_workers=0.

The model is tiny, so the training step mostly waits for the next batch.

    nsbridge triage examples/input_bound.py
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    """Each sample costs `decode_ms` of host time, as JPEG decoding and augmentation would."""

    def __init__(self, size: int, decode_ms: float) -> None:
        self.size, self.decode_s = size, decode_ms / 1e3

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        time.sleep(self.decode_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), i % 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--decode-ms", type=float, default=2.0)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = DataLoader(SlowImages(args.steps * args.batch_size, args.decode_ms),
                        batch_size=args.batch_size, num_workers=0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(),
                          nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    print("done")


if __name__ == "__main__":
    main()
