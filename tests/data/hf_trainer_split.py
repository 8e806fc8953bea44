"""A Hugging Face Trainer run on a tiny random GPT-2 that times its own split (the model's
forward, the backward, optimizer.step, the whole step) and writes it to argv[1]: the
independent measure tests/test_framework_loops.py holds nsbridge's phases against.
Written for nsbridge's tests (no data, tokenizer or weights downloaded)."""
import json
import sys
import tempfile
import time

import torch
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                          TrainingArguments)

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=512, n_positions=64, n_embd=128, n_layer=2,
                                   n_head=4, bos_token_id=0, eos_token_id=0))
split: list[dict] = []


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 8 * 30

    def __getitem__(self, i):
        ids = torch.randint(0, 512, (64,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone()}


def started(module, args, kwargs):
    split[-1]["fwd0"] = time.perf_counter()


def finished(module, args, kwargs, out):
    split[-1]["forward"] = time.perf_counter() - split[-1]["fwd0"]


model.register_forward_pre_hook(started, with_kwargs=True)
model.register_forward_hook(finished, with_kwargs=True)


class Clock(TrainerCallback):
    def on_step_begin(self, args, state, control, **kw):
        split.append({"step0": time.perf_counter()})

    def on_pre_optimizer_step(self, args, state, control, **kw):
        split[-1]["opt0"] = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kw):
        split[-1]["optimizer"] = time.perf_counter() - split[-1]["opt0"]

    def on_step_end(self, args, state, control, **kw):
        split[-1]["step"] = time.perf_counter() - split[-1]["step0"]


out = tempfile.mkdtemp()
args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=30,
                         report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
                         logging_strategy="no", dataloader_num_workers=0)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Clock()])
backward = trainer.accelerator.backward


def timed_backward(loss, **kwargs):
    t = time.perf_counter()
    backward(loss, **kwargs)
    split[-1]["backward"] = time.perf_counter() - t


trainer.accelerator.backward = timed_backward
trainer.train()
json.dump([{k: v for k, v in s.items() if not k.endswith("0")} for s in split],
          open(sys.argv[1], "w"))
