"""What the triage pass costs: the CNN example bare, under a hand-written torch.profiler
loop with the same settings as the default profile, and under `nsbridge triage`.

Reported per mode (medians over interleaved ``--runs``):
  step_ms      median wall time of the measured (active) steps, boundary to boundary (data
               loading included, the profiler's own step() excluded); for bare, the same steps
  process_s    wall time of the process that ran the training (for nsbridge: its profiled
               child, from manifest.json), i.e. training + profiler export
  command_s    nsbridge only: the whole command, including analysis and report writing
Ratios are against the hand-written loop. Results go to bench/results/triage_overhead.json.

    python bench/triage_overhead.py [--steps 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

LOOP = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[4])
from train_cnn import SmallCNN
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
n = steps * 32
loader = DataLoader(TensorDataset(torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))),
                    batch_size=32, shuffle=True)
model, loss_fn = SmallCNN(), nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
prof = None
if mode == "hand":
    from torch.profiler import ProfilerActivity, profile, schedule
    def ready(p):
        p.export_chrome_trace(out + ".trace.json.gz")
        open(out + ".table.txt", "w").write(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
    # the default profile's effective schedule: first step skipped, wait 1, warmup 1, active 3
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                   schedule=schedule(skip_first=1, wait=1, warmup=1, active=3, repeat=1),
                   on_trace_ready=ready)
    prof.start()
times = []
start = last = time.perf_counter()
for images, labels in loader:   # a step runs from one boundary to the next, data included,
    optimizer.zero_grad(set_to_none=True)                 # as nsbridge times its steps
    loss = loss_fn(model(images), labels)
    loss.backward()
    optimizer.step()
    times.append((time.perf_counter() - last) * 1e3)
    if prof is not None:
        prof.step()
    last = time.perf_counter()
if prof is not None:
    prof.stop()
json.dump({"steps_ms": times, "wall_s": time.perf_counter() - start}, open(out, "w"))
"""
ACTIVE = slice(3, 6)  # steps 3..5: the active window of the schedule above (and nsbridge's)


def run_loop(mode: str, steps: int, tmp: Path) -> dict:
    out = tmp / f"{mode}.json"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", LOOP, mode, str(steps), str(out),
                    str(ROOT / "examples")], check=True, capture_output=True)
    process_s = time.perf_counter() - started
    data = json.loads(out.read_text())
    return {"step_ms": statistics.median(data["steps_ms"][ACTIVE]), "process_s": process_s}


def run_nsbridge(steps: int, tmp: Path) -> dict:
    run = tmp / f"run-{time.time_ns()}"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nsbridge", "triage", "--out", str(run),
                    str(ROOT / "examples" / "train_cnn.py"), "--", "--steps", str(steps)],
                   check=True, capture_output=True, cwd=ROOT)
    command_s = time.perf_counter() - started
    child = json.loads((run / "child.json").read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    active = [s["wall_ms"] for s in child["steps"] if s["phase"] == "active"]
    return {"step_ms": statistics.median(active), "process_s": manifest["passes"][0]["wall_s"],
            "command_s": command_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "triage_overhead.json")
    args = parser.parse_args()
    samples: dict[str, list[dict]] = {"bare": [], "hand": [], "nsbridge": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            samples["bare"].append(run_loop("bare", args.steps, Path(tmp)))
            samples["hand"].append(run_loop("hand", args.steps, Path(tmp)))
            samples["nsbridge"].append(run_nsbridge(args.steps, Path(tmp)))
    rows = {}
    for mode, runs in samples.items():
        rows[mode] = {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}
    hand = rows["hand"]
    for mode, row in rows.items():
        row["step_vs_hand"] = round(row["step_ms"] / hand["step_ms"], 3)
        row["process_vs_hand"] = round(row["process_s"] / hand["process_s"], 3)
        print(f"{mode:<9} step {row['step_ms']:7.2f} ms (x{row['step_vs_hand']:.3f})  process "
              f"{row['process_s']:6.2f} s (x{row['process_vs_hand']:.3f})"
              + (f"  command {row['command_s']:.2f} s" if "command_s" in row else ""))
    result = {"benchmark": "triage_overhead", "date": time.strftime("%Y-%m-%d"),
              "machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count()},
              "steps": args.steps, "runs": args.runs, "results": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
