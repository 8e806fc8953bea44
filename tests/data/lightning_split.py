"""A Lightning loop that times its own split (training_step, backward, the whole batch) and
writes it to argv[1]: the independent measure tests/test_framework_loops.py holds
nsbridge's phases against. Written for nsbridge's tests (no data or weights downloaded)."""
import json
import sys
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                       torch.nn.Linear(512, 10))
        self.split = []

    def on_train_batch_start(self, batch, i):
        self.split.append({"batch": time.perf_counter()})

    def training_step(self, batch, i):
        t = time.perf_counter()
        x, y = batch
        end = t + 0.004                       # 4 ms of Python in training_step
        while time.perf_counter() < end:
            pass
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.split[-1]["training_step"] = time.perf_counter() - t
        return loss

    def on_before_backward(self, loss):
        self.split[-1]["bwd0"] = time.perf_counter()

    def on_after_backward(self):
        self.split[-1]["backward"] = time.perf_counter() - self.split[-1]["bwd0"]

    def on_train_batch_end(self, out, batch, i):
        self.split[-1]["batch"] = time.perf_counter() - self.split[-1]["batch"]

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


data = TensorDataset(torch.randn(64 * 30, 256), torch.randint(0, 10, (64 * 30,)))
model = Model()
trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, DataLoader(data, batch_size=64))
json.dump([{k: v for k, v in s.items() if k != "bwd0"} for s in model.split], open(sys.argv[1], "w"))
