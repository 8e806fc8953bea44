"""How good is `nsbridge gate`? False alarms and passes on unchanged code, detection of
planted slowdowns of the same work and of a dtype switch, on a quiet machine, beside one
`nice` background process and beside two CPU hogs, with one process per side and with
interleaved pairs, all in one run.

The workload is bench/gate_workload.py: ``gatebench::busy`` (about half the step) does P%
more work per call with GATE_SLOW_PCT=P (the same calls, shapes and dtype: only timing can
see it), and GATE_DTYPE=float64 switches the MLP to float64 (different work).

Per condition the processes are made in rounds. A round runs, for each variant (unchanged,
+5, +10, +25, +50%, float64), one pair: a base process and a variant process back to back,
base first in even rounds and second in odd ones, every process a triage with the gate's
own settings (``--profile gate``: 25 measured steps; one intra-op thread). A gate of K
processes per side is K consecutive rounds' pairs of one variant, judged by the gate's own
judgement (``nsbridge gate --rejudge`` on a folder of those pairs): so K = 1, 3 and 5 are
judged on the same processes. (In a real gate the pairs follow each other at once; here
the other variants' pairs run between them, so drift has longer to act: a harder test.)
Per condition, real `nsbridge gate` commands time a whole gate (K = 1, 3, 5, unchanged).

Counted: unchanged gates that exit 1 (false alarms), 4 and 0; a run diffed against itself
(`nsbridge diff RUN RUN`, identical data); slowdowns caught (exit 1 naming
gatebench::busy); the dtype switch caught (exit 1 naming a matmul op, basis dtype); the
smallest slowdown caught every time. Results: bench/results/gate_quality.json, and the
Markdown table on stdout.

    python bench/gate_quality.py [--gates 10] [--hog-unchanged-gates 20]
        [--conditions quiet,nice,hogs] [--keep DIR] [--judge-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from nsbridge import api  # noqa: E402

WORKLOAD = "bench/gate_workload.py"
SLOWDOWNS = (5, 10, 25, 50)
VARIANTS = {"unchanged": {}, **{f"+{p}%": {"GATE_SLOW_PCT": str(p)} for p in SLOWDOWNS},
            "float64": {"GATE_DTYPE": "float64"}}
PROCESSES = (1, 3, 5)
MATMULS = {"aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm"}
HOG = "import time\nend = time.monotonic() + 4 * 3600\nwhile time.monotonic() < end:\n    pass\n"
CONDITIONS = {"quiet": (0, 0), "nice": (1, 15), "hogs": (2, 0)}   # (processes, niceness)
TITLES = {"quiet": "quiet", "nice": "one `nice -n 15` busy loop", "hogs": "2 CPU hogs"}


def background(count: int, niceness: int) -> list[subprocess.Popen]:
    """Busy loops, ended by the caller (niceness 0: as busy as anything else)."""
    prefix = ["nice", "-n", str(niceness)] if niceness else []
    return [subprocess.Popen([*prefix, sys.executable, "-c", HOG]) for _ in range(count)]


def one_process(run_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    """One triage with the gate's settings (a run left unfinished by an interrupted bench
    is made again); its report."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    result = api.triage(WORKLOAD, profile="gate", out=run_dir, cwd=ROOT, threads=1,
                        environ={**os.environ, **env, "PYTHONUNBUFFERED": "1"})
    if result.exit_code != 0 or result.status != "ok":
        raise SystemExit(f"{run_dir}: the workload failed ({result.status})")
    return dict(result.report)


def process_wall(folder: Path) -> float | None:
    """Mean wall seconds of the recorded processes (their manifests' start and finish)."""
    walls = []
    for manifest in folder.glob("r[0-9]*/manifest.json"):
        m = json.loads(manifest.read_text())
        if m.get("status") != "ok":
            continue
        start, end = (datetime.strptime(m[k], "%Y-%m-%dT%H:%M:%S%z")
                      for k in ("started_at", "finished_at"))
        walls.append((end - start).total_seconds())
    return round(sum(walls) / len(walls), 2) if walls else None


def record(folder: Path, rounds: int, variants: list[str]) -> None:
    """``rounds`` rounds of pairs (module docstring) into ``folder``."""
    for r in range(rounds):
        for name in variants:
            order = ("base", "new") if r % 2 == 0 else ("new", "base")
            for side in order:
                run = folder / f"r{r:03d}-{name}-{side}"
                if not (run / "report.json").is_file():
                    one_process(run, VARIANTS[name] if side == "new" else {})
        print(f"{folder.name}: round {r + 1}/{rounds}", file=sys.stderr)


def judge(folder: Path, name: str, first: int, k: int, into: Path) -> dict[str, Any]:
    """The gate's answer on rounds first..first+k-1 of one variant."""
    gate = into / f"{name}-k{k}-from{first:03d}"
    gate.mkdir(parents=True, exist_ok=True)
    for i in range(k):
        for side in ("base", "new"):
            link = gate / f"{side}-{i + 1:02d}"
            if not link.exists():
                link.symlink_to(folder / f"r{first + i:03d}-{name}-{side}")
    result = api.rejudge(gate)
    named = {r["what"]: r["basis"] for r in result["regressions"]}
    return {"exit": result["exit_code"], "named": named,
            "detectable_pct": result["detectable_pct"],
            "step_change_pct": (result.get("step") or {}).get("change_pct"),
            "busy_change_pct": next((r.get("change_pct") for r in result["ops"]
                                     if r["op"] == "gatebench::busy"), None),
            "reasons": result["reasons"][:2]}


def caught(name: str, answer: dict[str, Any]) -> bool:
    if answer["exit"] != 1:
        return False
    if name == "float64":
        return any(what in MATMULS and basis == "dtype" for what, basis in answer["named"].items())
    return "gatebench::busy" in answer["named"]


def self_diffs(folder: Path, count: int) -> list[int]:
    """`nsbridge diff RUN RUN` exit codes on the first base runs (identical data)."""
    codes = []
    for r in range(count):
        run = folder / f"r{r:03d}-unchanged-base"
        codes.append(api.diff(run, run)["exit_code"])
    return codes


def real_gates(folder: Path) -> dict[str, dict[str, Any]]:
    """Whole `nsbridge gate` commands on unchanged code, timed (K = 1, 3, 5); kept in
    real-gates.json in the folder and reused from there."""
    kept = folder / "real-gates.json"
    if kept.is_file():
        return json.loads(kept.read_text())
    out = {}
    for k in PROCESSES:
        target = folder / f"real-gate-k{k}"
        if target.exists():              # left by an interrupted bench
            shutil.rmtree(target)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "gate", "--processes",
                               str(k), "--max-processes", str(k), "--out", str(target), "--format", "json", str(ROOT),
                               str(ROOT), WORKLOAD], cwd=ROOT, capture_output=True, text=True,
                              timeout=3600)
        if proc.returncode not in (0, 1, 4):
            raise SystemExit(f"nsbridge gate failed (exit {proc.returncode}): {proc.stderr[-800:]}")
        out[f"K={k}"] = {"exit": proc.returncode, "wall_s": round(time.perf_counter() - started, 1)}
    kept.write_text(json.dumps(out) + "\n")
    return out


def condition(name: str, folder: Path, gates: int, unchanged_gates: int,
              judge_only: bool) -> dict[str, Any]:
    hogs, niceness = CONDITIONS[name]
    rounds = gates * max(PROCESSES)
    extra = unchanged_gates * max(PROCESSES) - rounds
    started = time.perf_counter()
    if not judge_only:
        procs = background(hogs, niceness)
        try:
            time.sleep(1.0 if procs else 0.0)
            record(folder, rounds, list(VARIANTS))
            for r in range(rounds, rounds + extra):
                record_unchanged(folder, r)
            real_gates(folder)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    judged = folder / "judged"
    results: dict[str, Any] = {}
    for k in PROCESSES:
        per_k: dict[str, Any] = {}
        for variant in VARIANTS:
            n = unchanged_gates if variant == "unchanged" else gates
            per_k[variant] = [judge(folder, variant, g * k if k > 1 else g, k, judged)
                              for g in range(n)]
        results[f"K={k}"] = summarize(per_k)
    return {"background": TITLES[name], "gates_per_level": gates,
            "unchanged_gates": unchanged_gates, "by_processes": results,
            "self_diff_exits": self_diffs(folder, gates),
            "process_wall_s": process_wall(folder),
            "real_gates": real_gates(folder) if (folder / "real-gates.json").is_file() else {},
            "judged_in_s": round(time.perf_counter() - started)}


def record_unchanged(folder: Path, r: int) -> None:
    """One more round of the unchanged pair only (for more unchanged gates)."""
    for side in (("base", "new") if r % 2 == 0 else ("new", "base")):
        run = folder / f"r{r:03d}-unchanged-{side}"
        if not (run / "report.json").is_file():
            one_process(run, {})


def summarize(per_variant: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    unchanged = per_variant["unchanged"]
    found = {name: sum(caught(name, a) for a in answers)
             for name, answers in per_variant.items() if name != "unchanged"}
    every = [p for p in SLOWDOWNS if found[f"+{p}%"] == len(per_variant[f"+{p}%"])]
    return {"false_alarms": sum(a["exit"] == 1 for a in unchanged),
            "inconclusive": sum(a["exit"] == 4 for a in unchanged),
            "passed": sum(a["exit"] == 0 for a in unchanged), "caught": found,
            "smallest_caught_every_time_pct": min(every) if every else None,
            "answers": per_variant}


def table(results: dict[str, Any]) -> str:
    head = ("| machine | processes per side | unchanged: exit 1 / 4 / 0 | run vs itself PASS | "
            + " | ".join(f"+{p}%" for p in SLOWDOWNS) + " | float64 | smallest caught every "
            "time | wall per gate |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, c in results["conditions"].items():
        for k in PROCESSES:
            r = c["by_processes"][f"K={k}"]
            n = c["gates_per_level"]
            small = r["smallest_caught_every_time_pct"]
            wall = (c["real_gates"].get(f"K={k}") or {}).get("wall_s")
            selfs = c["self_diff_exits"]
            rows.append(
                f"| {c['background']} | {k} | {r['false_alarms']} / {r['inconclusive']} / "
                f"{r['passed']} of {c['unchanged_gates']} | "
                f"{sum(e == 0 for e in selfs)}/{len(selfs)} | "
                + " | ".join(f"{r['caught'][f'+{p}%']}/{n}" for p in SLOWDOWNS)
                + f" | {r['caught']['float64']}/{n} | {'+' + str(small) + '%' if small else 'none'}"
                f" | {f'{wall:.0f} s' if wall else '-'} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gates", type=int, default=10, help="gates per variant and K")
    parser.add_argument("--hog-unchanged-gates", type=int, default=20,
                        help="unchanged gates beside the two hogs")
    parser.add_argument("--conditions", default="quiet,nice,hogs")
    parser.add_argument("--keep", metavar="DIR", help="keep the runs here (and reuse them)")
    parser.add_argument("--judge-only", action="store_true",
                        help="no new processes: judge the runs kept in --keep DIR again")
    parser.add_argument("--out", default=str(HERE / "results" / "gate_quality.json"))
    args = parser.parse_args()
    if args.judge_only and not args.keep:
        parser.error("--judge-only needs --keep DIR")
    conditions: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="nsbridge-gate-") as tmp:
        base = Path(args.keep or tmp)
        for name in args.conditions.split(","):
            folder = base / name
            folder.mkdir(parents=True, exist_ok=True)
            unchanged = args.hog_unchanged_gates if name == "hogs" else args.gates
            conditions[name] = condition(name, folder, args.gates, unchanged, args.judge_only)
            print(f"{name} done", file=sys.stderr)
    results = {"date": time.strftime("%Y-%m-%d"),
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                           "python": platform.python_version()},
               "workload": "bench/gate_workload.py: gatebench::busy about half the step; +P% "
                           "= P% more work per busy call (same calls, shapes, dtype); float64 "
                           "= the MLP in float64",
               "gate": "nsbridge gate defaults: --fail-above 10 --min-step-share 2, "
                       "--profile gate (25 measured steps), --threads 1",
               "conditions": conditions}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
