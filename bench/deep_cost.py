"""What the deep pass costs next to `ncu --set full` on the whole script.

Estimate (any machine): from a run's report (default: the H200 CNN triage fixture) take the
kernel launches per measured step and the steps the script runs; `ncu --set full` replays
every launch of the script, the deep pass replays one step's worth of the top N ops'
launches. Each replayed launch costs passes x seconds per pass (passes from the profile,
seconds per pass measured on an H200: 0.6 s for a 13-pass capture) plus its own duration
per pass; both runs also execute the script once. Target: deep/full <= 0.1.

Measure (GPU machine with ncu, ``--measure``): time `ncu --set full` on the script and
`nsbridge triage --deep=N` on it, side by side in the same session.

Results go to bench/results/deep_cost.json.

    python bench/deep_cost.py [--report RUN/report.json] [--steps 24] [--top 5] [--measure]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from nsbridge.api import analyze  # noqa: E402
from nsbridge.model.nsight.deep_plan import choose, plan  # noqa: E402
from nsbridge.profiles import load_profile  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "torch" / "h200" / "train_cnn_h200.json.gz"
FULL_SET_PASSES = 40          # `--set full` on Hopper/Ada (38-40 observed)


def estimate(report: dict, steps_run: int, top: int, script_s: float) -> dict:
    deep = load_profile("deep").deep
    ops = report["ops"]
    measured = max(report["steps"]["count"], 1)
    launches = sum(k["calls"] for op in ops for k in op["kernels"])
    kernel_s = sum(k["device_us"] for op in ops for k in op["kernels"]) / 1e6
    per_step, per_step_s = launches / measured, kernel_s / measured
    full_s = (per_step * steps_run * FULL_SET_PASSES * deep.seconds_per_pass
              + per_step_s * steps_run * FULL_SET_PASSES + script_s)
    chosen = choose(ops, top=top, min_kernel_us=deep.min_kernel_us)
    p = plan(chosen, ops, measured, deep, script_s)
    return {"launches_per_step": round(per_step, 1), "steps_run": steps_run,
            "full_set_launches": round(per_step * steps_run), "full_set_passes": FULL_SET_PASSES,
            "full_set_s": round(full_s, 1), "deep_ops": [c["op"] for c in chosen],
            "deep_launches": p["launch_count"], "deep_passes": p["passes_per_kernel"],
            "deep_s": p["estimate_s"], "ratio": round(p["estimate_s"] / full_s, 4),
            "target_ratio": 0.1}


def measure(script: Path, top: int) -> dict:
    ncu = shutil.which("ncu")
    if not ncu:
        return {"skipped": "no ncu on PATH (needs a GPU machine)"}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        subprocess.run([ncu, "--target-processes", "all", "--set", "full", "-o",
                        f"{tmp}/full", sys.executable, str(script)], check=False,
                       capture_output=True)
        full_s = time.perf_counter() - started
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nsbridge", "triage", f"--deep={top}", "--out",
                        f"{tmp}/deep", str(script)], check=False, capture_output=True)
        deep_s = time.perf_counter() - started
    return {"full_set_s": round(full_s, 1), "triage_deep_s": round(deep_s, 1),
            "ratio": round(deep_s / full_s, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report", type=Path, help="a run's report.json (default: the "
                                                    "H200 CNN fixture, analysed here)")
    parser.add_argument("--steps", type=int, default=24, help="steps the script runs "
                                                              "(the CNN example: 12 per epoch)")
    parser.add_argument("--script-s", type=float, default=10.0,
                        help="the script's own run time (H200 CNN triage: 10 s)")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--measure", action="store_true", help="also time both on this GPU")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "deep_cost.json")
    args = parser.parse_args()
    if args.report:
        report = json.loads(args.report.read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            report = analyze([FIXTURE], out=Path(tmp) / "run").report
    result = {"machine": platform.platform(), "python": platform.python_version(),
              "source": str(args.report or FIXTURE.relative_to(ROOT)),
              "estimate": estimate(report, args.steps, args.top, args.script_s)}
    if args.measure:
        result["measured"] = measure(ROOT / "examples" / "train_cnn.py", args.top)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
