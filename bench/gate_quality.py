"""How good is `nsbridge diff` as a gate? False alarms on unchanged code and detection of
planted slowdowns, on a quiet machine and with CPU hogs running, in the same run.

For each condition (quiet; N busy-loop processes started here and ended by PID):
  - ``--pairs``+1 unchanged triages of bench/gate_workload.py, each compared with the next:
    every exit 1 is a false alarm (0 pass and 4 inconclusive are not);
  - ``--planted`` triages per slowdown (10, 25, 50, 100% more aten::bmm work), each compared
    with an unchanged one: detected when diff exits 1 naming aten::bmm;
  - the smallest slowdown detected every time.
``--runs R`` triages each side with ``triage --runs R`` (pooled processes); ``--keep DIR``
keeps the run directories (to compare them again with another gate). Results go to
bench/results/gate_quality.json (and a Markdown table on stdout).

    python bench/gate_quality.py [--pairs 10] [--planted 5] [--hogs 2] [--runs 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOAD = HERE / "gate_workload.py"
SLOWDOWNS = (10, 25, 50, 100)
HOG = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end:\n    pass\n"


def triage(out: Path, slow_pct: int, runs: int) -> None:
    env = dict(os.environ, GATE_SLOW_PCT=str(slow_pct), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "triage", "--runs",
                           str(runs), "--out", str(out), str(WORKLOAD)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"triage failed ({proc.returncode}):\n{proc.stderr[-2000:]}")


def diff(base: Path, new: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "diff", str(base), str(new),
                           "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    result = json.loads(proc.stdout)
    return {"exit": proc.returncode, "outcome": result["outcome"],
            "named": [r["what"] for r in result["regressions"]],
            "bmm_pct": next((r["beyond_drift_pct"] for r in result["ops"]
                             if r["op"] == "aten::bmm"), None),
            "detectable_pct": result["detectable_pct"], "reasons": result["reasons"][:3]}


def make_runs(name: str, hogs: int, pairs: int, planted: int, runs: int,
              folder: Path) -> float:
    """The condition's triages into ``folder``; returns the seconds they took."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
    started = time.perf_counter()
    try:
        for i in range(pairs + 1):
            triage(folder / f"{name}-base-{i}", 0, runs)
            print(f"{name}: base {i + 1}/{pairs + 1}", file=sys.stderr)
        for pct in SLOWDOWNS:
            for i in range(planted):
                triage(folder / f"{name}-slow{pct}-{i}", pct, runs)
            print(f"{name}: +{pct}% done", file=sys.stderr)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return time.perf_counter() - started


def judge(name: str, hogs: int, pairs: int, planted: int, runs: int,
          folder: Path) -> dict[str, Any]:
    """The gate's answers on the condition's runs."""
    bases = [folder / f"{name}-base-{i}" for i in range(pairs + 1)]
    unchanged = [diff(bases[i], bases[i + 1]) for i in range(pairs)]
    detection = {pct: [diff(bases[i % len(bases)], folder / f"{name}-slow{pct}-{i}")
                       for i in range(planted)] for pct in SLOWDOWNS}
    caught = {pct: sum(r["exit"] == 1 and "aten::bmm" in r["named"] for r in rs)
              for pct, rs in detection.items()}
    every = [pct for pct in SLOWDOWNS if caught[pct] == planted]
    return {"hogs": hogs, "runs_per_side": runs, "unchanged_pairs": pairs,
            "false_alarms": sum(r["exit"] == 1 for r in unchanged),
            "inconclusive": sum(r["exit"] == 4 for r in unchanged),
            "passed": sum(r["exit"] == 0 for r in unchanged),
            "planted_per_level": planted, "caught": caught,
            "smallest_caught_every_time_pct": min(every) if every else None,
            "unchanged": unchanged, "detection": detection}


def table(results: dict[str, Any]) -> str:
    rows = ["| machine | runs per side | unchanged pairs: exit 1 / 4 / 0 | "
            + " | ".join(f"+{p}% caught" for p in SLOWDOWNS) + " | smallest caught every time |",
            "|---|---|---|" + "---|" * len(SLOWDOWNS) + "---|"]
    for name, r in results["conditions"].items():
        smallest = r["smallest_caught_every_time_pct"]
        rows.append(f"| {name} | {r['runs_per_side']} | {r['false_alarms']} / {r['inconclusive']}"
                    f" / {r['passed']} of {r['unchanged_pairs']} | "
                    + " | ".join(f"{r['caught'][p]}/{r['planted_per_level']}" for p in SLOWDOWNS)
                    + f" | {'+' + str(smallest) + '%' if smallest else 'none'} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--planted", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", metavar="DIR", help="keep the run directories here")
    parser.add_argument("--judge-only", action="store_true",
                        help="no new triages: judge the runs kept in --keep DIR again")
    parser.add_argument("--out", default=str(HERE / "results" / "gate_quality.json"))
    args = parser.parse_args()
    if args.judge_only and not args.keep:
        parser.error("--judge-only needs --keep DIR")
    plan = {"quiet": ("quiet", 0), f"{args.hogs} CPU hogs": ("hogs", args.hogs)}
    conditions = {}
    with tempfile.TemporaryDirectory(prefix="nsbridge-gate-") as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for title, (name, hogs) in plan.items():
            seconds = None if args.judge_only else make_runs(name, hogs, args.pairs,
                                                             args.planted, args.runs, folder)
            conditions[title] = judge(name, hogs, args.pairs, args.planted, args.runs, folder)
            conditions[title]["triage_seconds"] = None if seconds is None else round(seconds)
    results = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                           "python": platform.python_version()},
               "workload": "bench/gate_workload.py (aten::bmm about half the step; +P% = P% "
                           "more bmm calls)",
               "gate": "nsbridge diff defaults: --fail-above 10 --min-step-share 2",
               "conditions": conditions}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
