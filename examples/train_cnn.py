"""A small CNN trained on synthetic CIFAR-sized images. Runs on CPU or GPU.

    python examples/train_cnn.py --epochs 1
    nsbridge triage examples/train_cnn.py -- --epochs 1
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


# A planted slowdown, to try `nsbridge gate`: this many extra 256x256 matmuls per forward.
SLOW_MATMULS = int(os.environ.get("NSBRIDGE_EXAMPLE_SLOW_MATMULS", "0"))
# A planted memory rise, to try `nsbridge gate --fail-above-mib`: an extra activation of this
# many MiB, made at the start of forward and saved for backward until its very end.
EXTRA_ACTIVATION_MIB = float(os.environ.get("NSBRIDGE_EXAMPLE_EXTRA_ACTIVATION_MIB", "0"))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.slow = nn.Parameter(torch.randn(256, 256), requires_grad=False) if SLOW_MATMULS else None
        self.keep = nn.Parameter(torch.zeros(())) if EXTRA_ACTIVATION_MIB else None
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(),
                                        nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(SLOW_MATMULS):
            torch.matmul(self.slow, self.slow)
        if self.keep is not None:   # mul saves `extra` for keep's gradient: live to the end
            extra = torch.ones(int(EXTRA_ACTIVATION_MIB * 2**20) // 4, device=x.device)
            x = x + (extra * self.keep).sum()
        return self.classifier(self.features(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12, help="batches per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = args.steps * args.batch_size
    data = TensorDataset(torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True,
                        pin_memory=device == "cuda")
    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        running = torch.zeros((), device=device)
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            running += loss.detach()
        print(f"epoch {epoch}: mean loss {(running / len(loader)).item():.4f}")


if __name__ == "__main__":
    main()
