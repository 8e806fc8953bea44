"""torch.profiler run by hand, without nsbridge: the trace and torch's own key_averages.

An oracle for the GPU record: the model trains under ``torch.profiler.profile`` with a
schedule (skip 1, wait 1, warm-up 1, 3 active steps, ``prof.step()`` after each step), and
the one ``on_trace_ready`` call of that session writes both

    PREFIX.trace.json.gz        the Chrome trace (what `nsbridge analyze` reads)
    PREFIX.key_averages.csv     every row of ``prof.key_averages()`` at full precision (µs)
    PREFIX.key_averages.txt     the same as torch's printed table

so nsbridge's per-op numbers read from the trace can be checked against torch's own table
of the SAME session (bench/gpu_record/compare.py). Runs on CPU or GPU.

    python bench/gpu_record/oracle.py --model cnn --prefix /tmp/oracle/cnn
    python bench/gpu_record/oracle.py --model bert --prefix /tmp/oracle/bert
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
COLUMNS = ["name", "calls", "cpu_self_us", "cpu_total_us", "device_self_us",
           "device_total_us", "self_device_memory_bytes", "device_memory_bytes",
           "is_user_annotation", "device_type"]
WAIT, WARMUP, ACTIVE, SKIP = 1, 1, 3, 1


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cnn_step(device: str, tiny: bool) -> Callable[[], None]:
    """examples/train_cnn.py's SmallCNN and its SGD step on a random batch."""
    model = _module(EXAMPLES / "train_cnn.py").SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = 8 if tiny else 32
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return step


def bert_step(device: str, tiny: bool) -> Callable[[], None]:
    """bert_step.py's model (bert-base shape, random weights), bf16 autocast on a GPU."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(**(_module(HERE / "bert_step.py").TINY if tiny else {}))
    model = BertForSequenceClassification(config)
    nn.Module.to(model, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, seq = (2, 32) if tiny else (16, 128)
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    labels = torch.randint(0, 2, (batch,), device=device)

    def step() -> None:
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


MODELS = {"cnn": cnn_step, "bert": bert_step}


def write_table(prof: profile, prefix: Path) -> None:
    """The trace and key_averages of the finished window (on_trace_ready)."""
    trace = prefix.parent / (prefix.name + ".trace.json")
    prof.export_chrome_trace(str(trace))
    with open(trace, "rb") as raw, gzip.open(f"{trace}.gz", "wb") as packed:
        shutil.copyfileobj(raw, packed)
    trace.unlink()
    averages = prof.key_averages()
    with open(prefix.parent / (prefix.name + ".key_averages.csv"), "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for e in averages:
            writer.writerow([e.key, e.count, e.self_cpu_time_total, e.cpu_time_total,
                             _get(e, "self_device_time_total", "self_cuda_time_total"),
                             _get(e, "device_time_total", "cuda_time_total"),
                             _get(e, "self_device_memory_usage", "self_cuda_memory_usage"),
                             _get(e, "device_memory_usage", "cuda_memory_usage"),
                             int(bool(getattr(e, "is_user_annotation", False))),
                             str(getattr(e, "device_type", ""))])
    (prefix.parent / (prefix.name + ".key_averages.txt")).write_text(
        averages.table(row_limit=-1) + "\n")


def _get(event: Any, *names: str) -> Any:
    for name in names:
        if hasattr(event, name):
            return getattr(event, name)
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    parser.add_argument("--prefix", type=Path, required=True,
                        help="output path prefix (folder/name)")
    parser.add_argument("--tiny", action="store_true", help="a small batch (a CPU check)")
    args = parser.parse_args()

    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    args.prefix.parent.mkdir(parents=True, exist_ok=True)
    step = MODELS[args.model](device, args.tiny)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    written: list[Path] = []

    def ready(prof: profile) -> None:
        write_table(prof, args.prefix)
        written.append(args.prefix)

    with profile(activities=activities,
                 schedule=schedule(skip_first=SKIP, wait=WAIT, warmup=WARMUP, active=ACTIVE,
                                   repeat=1),
                 on_trace_ready=ready) as prof:
        for _ in range(SKIP + WAIT + WARMUP + ACTIVE + 1):
            step()
            prof.step()
    if not written:
        sys.exit("oracle: the profiler's window never closed: nothing written")
    print(f"oracle: {args.model} on {device}: wrote {args.prefix}.trace.json.gz, "
          f"{args.prefix}.key_averages.csv")


if __name__ == "__main__":
    main()
