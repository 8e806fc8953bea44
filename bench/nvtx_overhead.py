"""Cost of nsbridge's NVTX instrumentation (the timeline pass's op/module/step ranges).

Runs the same training loop three ways in fresh processes, interleaved and repeated
(`--repeats`, since a 2-core machine is noisy), and records the median step time of each:

  bare        nothing installed (what `triage` and a plain run see: instrumentation off)
  nvtx        nsbridge's NvtxInstrumentation installed (what runs under nsys)
  nvtx+nsys   the same under `nsys profile -t nvtx` (skipped when nsys is missing)

    python bench/nvtx_overhead.py [--steps 30] [--out bench/results/nvtx_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = r"""
import json, sys, time, torch
from torch import nn
mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "nvtx":
    from nsbridge._bootstrap.nvtx_ranges import NvtxInstrumentation
    inst = NvtxInstrumentation(); inst.install()
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
times = []
for i in range(steps):
    t = time.perf_counter()
    opt.zero_grad(); nn.functional.cross_entropy(model(x), y).backward(); opt.step()
    if mode == "nvtx":
        inst.boundary()
    times.append(time.perf_counter() - t)
emitted = inst.summary()["total"] if mode == "nvtx" else 0
json.dump({"step_s": times[3:], "ranges": emitted}, open(out, "w"))
"""


def run(mode: str, steps: int, nsys: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        argv = [sys.executable, "-c", WORKLOAD, "nvtx" if mode != "bare" else "bare",
                str(steps), str(out)]
        if mode == "nvtx+nsys":
            argv = [nsys, "profile", "--trace", "nvtx", "--sample", "none", "--cpuctxsw", "none",
                    "--output", str(Path(tmp) / "t"), "--export", "none", *argv]
        subprocess.run(argv, check=True, capture_output=True)
        data = json.loads(out.read_text())
    median = statistics.median(data["step_s"])
    return {"mode": mode, "median_step_ms": round(median * 1e3, 3),
            "ranges_per_step": round(data["ranges"] / steps, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "nvtx_overhead.json"))
    args = parser.parse_args()
    nsys = shutil.which("nsys")
    modes = ["bare", "nvtx"] + (["nvtx+nsys"] if nsys else [])
    samples: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(args.repeats):
        for mode in modes:
            samples[mode].append(run(mode, args.steps, nsys))
    rows = [{"mode": m, "median_step_ms": statistics.median(r["median_step_ms"] for r in runs),
             "runs_ms": [r["median_step_ms"] for r in runs],
             "ranges_per_step": runs[0]["ranges_per_step"]} for m, runs in samples.items()]
    base = rows[0]["median_step_ms"]
    for row in rows:
        row["vs_bare"] = round(row["median_step_ms"] / base, 3)
        print(f"{row['mode']:<10} {row['median_step_ms']:8.3f} ms/step  x{row['vs_bare']:.3f}  "
              f"({row['ranges_per_step']} ranges/step)")
    result = {"benchmark": "nvtx_overhead", "date": time.strftime("%Y-%m-%d"),
              "machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": __import__("os").cpu_count()},
              "steps": args.steps, "repeats": args.repeats, "results": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
