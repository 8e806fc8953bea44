"""Does the gate's step clock bend under contention, and does the speed probe take the
machine's speed out? A quiet machine, one `nice -n 15` busy loop, and two CPU hogs, in one
run: per condition, interleaved pairs of bench/gate_workload.py processes (each a triage
with the gate's own profile and one thread), unchanged and with pure-Python work planted
in every step, outside any op (GATE_PY_TURNS: a slowdown only the step time can see).

Per condition and variant it reports the step's paired change B/A as the gate judges it
(model.comparing.paired.compare_pairs: at one machine speed) and as timed (the same steps,
no speed taken out: ``step.unscaled``), each with its 95% interval, the spread of the
processes' raw step times and of their probe-scaled ones, and the probe's own spread. A
clock that contention does not bend measures the planted slowdown beside the hogs within a
few points of its quiet value, with an interval not much wider. Results:
bench/results/speed_probe.json, and a Markdown table on stdout.

    python bench/speed_probe.py [--pairs 6] [--turns 150000] [--conditions quiet,nice,hogs]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from gate_quality import CONDITIONS, background, one_process  # noqa: E402
from nsbridge.model.comparing.paired import compare_pairs  # noqa: E402
from nsbridge.model.comparing.steady import process_steady  # noqa: E402


def spread_pct(values: list[float]) -> float:
    """The standard deviation of the logs, in percent: how far processes disagree."""
    return round(100.0 * float(np.std(np.log(values), ddof=1)), 2)


def judge(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    result = compare_pairs(pairs)
    step = result["step"]
    raw = [process_steady(r) for pair in pairs for r in pair]
    medians = [s.step["median"] for s in raw if s.step]
    probes = [s.speed_ms for s in raw if s.speed_ms]
    scaled = [m * float(np.exp(np.mean(np.log(probes)))) / p for m, p in zip(medians, probes)]
    return {"change_pct": step["change_pct"], "ci_pct": step["ci_pct"],
            "unscaled_change_pct": (step.get("unscaled") or {}).get("change_pct"),
            "unscaled_ci_pct": (step.get("unscaled") or {}).get("ci_pct"),
            "outcome": result["outcome"], "step_ms_spread_pct": spread_pct(medians),
            "scaled_step_spread_pct": spread_pct(scaled), "probe_spread_pct": spread_pct(probes),
            "step_ms_median": round(float(np.median(medians)), 3)}


def condition(name: str, folder: Path, pairs: int, turns: int) -> dict[str, Any]:
    hogs, niceness = CONDITIONS[name]
    variants = {"unchanged": {}, "python in the step": {"GATE_PY_TURNS": str(turns)}}
    reports: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {v: [] for v in variants}
    procs = background(hogs, niceness)
    started = time.perf_counter()
    try:
        time.sleep(1.0 if procs else 0.0)
        for i in range(pairs):
            for variant, env in variants.items():
                sides = {}
                for side in (("base", "new") if i % 2 == 0 else ("new", "base")):
                    sides[side] = one_process(folder / f"{variant[:6]}-{side}-{i:02d}",
                                              env if side == "new" else {})
                reports[variant].append((sides["base"], sides["new"]))
            print(f"{name}: pair {i + 1}/{pairs}", file=sys.stderr)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return {"background": name, "pairs": pairs, "seconds": round(time.perf_counter() - started),
            **{v: judge(p) for v, p in reports.items()}}


def table(results: dict[str, Any]) -> str:
    rows = ["| machine | variant | step ms | gate's change (95%) | as timed (95%) | processes' "
            "step spread: raw / at one speed | probe spread |", "|---|---|---|---|---|---|---|"]
    for c in results["conditions"].values():
        for variant in ("unchanged", "python in the step"):
            r = c[variant]
            ci, raw = r["ci_pct"], r["unscaled_ci_pct"] or [math.nan, math.nan]
            rows.append(f"| {c['background']} | {variant} | {r['step_ms_median']:.1f} | "
                        f"{r['change_pct']:+.1f}% ({ci[0]:+.1f}..{ci[1]:+.1f}) | "
                        f"{(r['unscaled_change_pct'] or math.nan):+.1f}% ({raw[0]:+.1f}.."
                        f"{raw[1]:+.1f}) | ±{r['step_ms_spread_pct']:.1f}% / "
                        f"±{r['scaled_step_spread_pct']:.1f}% | ±{r['probe_spread_pct']:.1f}% |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--turns", type=int, default=150_000,
                        help="pure-Python loop turns planted in each new step")
    parser.add_argument("--conditions", default="quiet,nice,hogs")
    parser.add_argument("--out", default=str(HERE / "results" / "speed_probe.json"))
    args = parser.parse_args()
    conditions = {}
    with tempfile.TemporaryDirectory(prefix="nsbridge-probe-") as tmp:
        for name in args.conditions.split(","):
            folder = Path(tmp) / name
            folder.mkdir()
            conditions[name] = condition(name, folder, args.pairs, args.turns)
    results = {"date": time.strftime("%Y-%m-%d"), "turns": args.turns,
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                           "python": platform.python_version()},
               "conditions": conditions}
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
