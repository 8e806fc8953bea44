"""How well `nsbridge triage --nproc-per-node 2` tells a straggler from noise, run as a user
runs it: whole multi-rank triages of the bundled examples, with nothing planted and with
rank 1 planted to sleep in every step, alternating, beside ``--hogs`` busy processes (two
by default: the contended machine where the rule used to follow the noise).

Per script and case: how many runs called a straggler (which rank), how many said balanced,
and how many of the undecided ones said how many measured steps would decide; the step and
the planted sleep's share of it. Results: bench/results/straggler_quality.json, and the
Markdown table on stdout.

    python bench/straggler_quality.py [--runs 10] [--scripts fsdp2,ddp] [--hogs 2]
        [--slow-ms 10] [--steps N]
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
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPTS = {"fsdp2": "examples/train_fsdp2.py", "ddp": "examples/train_ddp.py"}
HOG = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end:\n    pass\n"


def one_run(folder: Path, script: str, planted: bool, slow_ms: float,
            steps: int | None) -> dict[str, Any]:
    """One multi-rank triage; what its report says of a straggler."""
    env = {**os.environ, "NSBRIDGE_EXAMPLE_SLOW_MS": str(slow_ms)}
    env.pop("NSBRIDGE_EXAMPLE_SLOW_RANK", None)
    if planted:
        env["NSBRIDGE_EXAMPLE_SLOW_RANK"] = "1"
    argv = [sys.executable, "-m", "nsbridge", "-q", "triage", "--nproc-per-node", "2",
            "--timeout", "600", "--out", str(folder)]
    argv += ["--steps", str(steps)] if steps else []
    script_args = ["--", "--steps", str(steps + 4)] if steps else []   # the warm-up's 3, and 1
    started = time.monotonic()
    proc = subprocess.run([*argv, SCRIPTS[script], *script_args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{folder}: nsbridge exited {proc.returncode}: {proc.stderr[-2000:]}")
    report = json.loads((folder / "report.json").read_text())
    dist = report["distributed"]
    straggler = dist.get("straggler") or {}
    return {"script": script, "planted": planted, "verdict": straggler.get("verdict"),
            "rank": straggler.get("rank"), "excess_ms": straggler.get("excess_ms"),
            "excess_ci_ms": straggler.get("excess_ci_ms"),
            "steps_advised": any("would decide it" in e for e in straggler.get("evidence") or []),
            "step_ms": (dist.get("step") or {}).get("median_ms"),
            "measured_steps": report["steps"]["count"],
            "wall_s": round(time.monotonic() - started, 1)}


def summarize(runs: list[dict[str, Any]], slow_ms: float) -> dict[str, Any]:
    """Per script and case: calls, right calls, balanced, advised, the step."""
    out: dict[str, Any] = {}
    for script in dict.fromkeys(r["script"] for r in runs):
        for planted in (False, True):
            mine = [r for r in runs if r["script"] == script and r["planted"] == planted]
            if not mine:
                continue
            steps = [r["step_ms"] for r in mine if r["step_ms"]]
            step = statistics.median(steps) if steps else None
            out[f"{script} {'planted' if planted else 'unplanted'}"] = {
                "runs": len(mine),
                "straggler": sum(r["verdict"] == "straggler" for r in mine),
                "rank_1": sum(r["verdict"] == "straggler" and r["rank"] == 1 for r in mine),
                "balanced": sum(r["verdict"] == "balanced" for r in mine),
                "steps_advised": sum(r["steps_advised"] for r in mine),
                "step_ms_median": None if step is None else round(step, 2),
                "planted_share_pct": round(100 * slow_ms / step, 1)
                if planted and step else None,
                "measured_steps": statistics.median(r["measured_steps"] for r in mine)}
    return out


def table(results: dict[str, Any]) -> str:
    lines = ["| case | runs | straggler called (rank 1) | balanced (steps advised) | "
             "median step | planted share |", "|---|---|---|---|---|---|"]
    for name, row in results["cases"].items():
        share = f"{row['planted_share_pct']}%" if row["planted_share_pct"] else "-"
        lines.append(f"| {name} | {row['runs']} | {row['straggler']} ({row['rank_1']}) | "
                     f"{row['balanced']} ({row['steps_advised']}) | {row['step_ms_median']} ms "
                     f"| {share} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per script and case")
    parser.add_argument("--scripts", default="fsdp2,ddp")
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the runs")
    parser.add_argument("--slow-ms", type=float, default=10.0,
                        help="the planted sleep, ms per step")
    parser.add_argument("--steps", type=int,
                        help="measured steps (the profile's default); the script runs 4 more")
    parser.add_argument("--out", default=str(HERE / "results" / "straggler_quality.json"))
    parser.add_argument("--append", action="store_true",
                        help="add this run's cases to the results file's (another --steps)")
    args = parser.parse_args()
    scripts = [s for s in args.scripts.split(",") if s]
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="straggler-") as tmp:
            for i in range(args.runs):
                for script in scripts:
                    for planted in (False, True):
                        folder = Path(tmp) / f"{script}-{'p' if planted else 'u'}-{i:02d}"
                        runs.append(one_run(folder, script, planted, args.slow_ms,
                                            args.steps))
                        print(f"{script} {'planted' if planted else 'unplanted'} {i + 1}/"
                              f"{args.runs}: {runs[-1]['verdict']} {runs[-1]['rank']}",
                              file=sys.stderr)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    results = {"date": time.strftime("%Y-%m-%d"),
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                           "python": platform.python_version()},
               "hogs": args.hogs, "slow_ms": args.slow_ms, "steps": args.steps,
               "wall_s": round(time.monotonic() - started), "cases": summarize(runs, args.slow_ms),
               "runs": runs}
    out = Path(args.out)
    if args.append and out.is_file():      # one file, one row per (script, case, steps)
        results = {"date": results["date"], "machine": results["machine"],
                   "runs_sets": json.loads(out.read_text()).get("runs_sets", []) + [results]}
    else:
        results = {**{k: results[k] for k in ("date", "machine")}, "runs_sets": [results]}
    out.write_text(json.dumps(results, indent=1) + "\n")
    for one in results["runs_sets"]:
        print(f"\n{one['hogs']} hogs of its own, {one['steps'] or 'default'} measured steps, "
              f"{one['wall_s']} s:\n" + table(one))


if __name__ == "__main__":
    main()
