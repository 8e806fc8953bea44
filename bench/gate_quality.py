"""How good is `nsbridge gate`, run as a CI job runs it? Whole gates with the gate's
defaults (3 pairs first, one more pair at a time up to 10, a 600 s budget, one intra-op
thread, ``--fail-above 10``), on unchanged code and on planted slowdowns, on a quiet
machine, beside one `nice -n 15` busy loop and beside two CPU hogs, all in one run.

The workloads are bench/gate_workload.py's three models: an MLP beside a custom op
``gatebench::busy`` (the workload the rule was tuned on), a small CNN and a small
transformer LM (workloads it was not tuned on). Planted (on the new side only):

- ``op +P%``: the busy op does P% more work per call (the same calls, shapes, dtype:
  only its time can see it);
- ``python +P%``, ``data +P%``, ``optimizer +P%``: pure-Python work outside any aten op in
  the step, in making the batch, or in a pre-step hook of the optimizer, sized to P% of the
  model's quiet step (STEP_MS, measured on this kind of machine; TURNS_PER_MS);
- ``float64``: the model in float64 (different work);
- ``itself``: a triage run gated against itself (`nsbridge gate RUN RUN`).

Counted per condition and case: exits 1 / 4 / 0; on unchanged code the false-alarm rate
with its Wilson 95% interval and the PASS rate; on planted slowdowns the share caught (exit
1 naming what was planted: the step time or an op for Python work, gatebench::busy for the
op, an op judged on its dtype for float64) and the step's measured change (median and range: the
clock that contention must not bend); the pairs each gate took and its wall time. Each
gate's answer is appended to answers.jsonl in the folder as it ends, so an interrupted
bench goes on where it stopped (--keep DIR). Results: bench/results/gate_quality.json, and
the Markdown table on stdout.

    python bench/gate_quality.py [--conditions quiet,nice,hogs] [--cases CASE,...]
        [--scale 1.0] [--keep DIR] [--judge-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from nsbridge import api  # noqa: E402
from nsbridge.model.comparing.evidence import wilson  # noqa: E402

WORKLOAD = "bench/gate_workload.py"
HOG = "import time\nend = time.monotonic() + 4 * 3600\nwhile time.monotonic() < end:\n    pass\n"
CONDITIONS = {"quiet": (0, 0), "nice": (1, 15), "hogs": (2, 0)}   # (processes, niceness)
TITLES = {"quiet": "quiet", "nice": "one `nice -n 15` busy loop", "hogs": "2 CPU hogs"}
# each model's median step on a quiet 2-core VM of this project's kind (gate profile, one
# thread; 2026-12-01) and pure-Python loop turns per millisecond there: a planted +P% is
# P% of that step's time in turns, the same work on every machine
STEP_MS = {"mlp": 34.0, "cnn": 15.5, "transformer": 45.0}
TURNS_PER_MS = 11_700
PLANTED_IN = {"python": "GATE_PY_TURNS", "data": "GATE_DATA_TURNS",
              "optimizer": "GATE_OPT_TURNS"}


def turns(model: str, pct: float) -> str:
    return str(round(STEP_MS[model] * pct / 100 * TURNS_PER_MS))


def case(name: str, model: str) -> dict[str, str]:
    """The new side's variables for a case ('unchanged', 'op +10%', 'python +50%', ...)."""
    if name in ("unchanged", "itself"):
        return {}
    if name == "float64":
        return {"GATE_DTYPE": "float64"}
    kind, pct = name.split(" +")
    pct_value = float(pct.rstrip("%"))
    if kind == "op":
        return {"GATE_SLOW_PCT": str(pct_value)}
    return {PLANTED_IN[kind]: turns(model, pct_value)}


# per condition: (case, models, gates over all those models), for --scale 1
PLAN: dict[str, list[tuple[str, tuple[str, ...], int]]] = {
    "quiet": [("unchanged", ("mlp", "cnn", "transformer"), 30), ("itself", ("mlp",), 2),
              ("float64", ("mlp", "cnn"), 10), ("op +10%", ("mlp",), 10),
              ("python +50%", ("mlp", "cnn"), 6),      # the step clock's quiet value
              ("python +25%", ("mlp", "cnn"), 6), ("data +25%", ("cnn",), 3),
              ("optimizer +25%", ("transformer",), 3)],
    "nice": [("unchanged", ("mlp", "cnn", "transformer"), 30),
             ("python +25%", ("mlp", "cnn"), 6)],
    "hogs": [("unchanged", ("cnn", "transformer"), 20), ("python +50%", ("mlp", "cnn"), 10),
             ("python +25%", ("mlp", "cnn"), 10), ("data +25%", ("cnn",), 3),
             ("optimizer +25%", ("transformer",), 3), ("unchanged", ("mlp",), 6)],
}


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


def one_gate(folder: Path, name: str, model: str, index: int) -> dict[str, Any]:
    """One whole gate with the defaults; its answer in a line."""
    target = folder / f"{name.replace(' +', '-').replace('%', '')}-{model}-{index:02d}"
    if target.exists():                  # left by an interrupted bench
        shutil.rmtree(target)
    environ = {**os.environ, "GATE_MODEL": model, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    if name == "itself":
        run = folder / f"itself-run-{index:02d}"
        one_process(run, {})
        result = api.gate(run, run, out=target, environ=environ, trust=[ROOT, folder])
    else:
        result = api.gate(ROOT, ROOT, WORKLOAD, out=target, environ=environ,
                          new_env=case(name, model), trust=[ROOT])
    step = result.get("step") or {}
    return {"case": name, "model": model, "index": index, "exit": result["exit_code"],
            "outcome": result["outcome"],
            "named": {r["what"]: r["basis"] for r in result["regressions"]},
            "step_change_pct": step.get("change_pct"), "step_ci_pct": step.get("ci_pct"),
            "pairs": result["gate"]["processes"], "stopped": result["gate"]["stopped"],
            "wall_s": round(time.monotonic() - started, 1)}


def caught(answer: dict[str, Any]) -> bool:
    """Exit 1, naming what was planted."""
    if answer["exit"] != 1:
        return False
    named = answer["named"]
    if answer["case"] == "float64":
        return any(basis == "dtype" for basis in named.values())
    if answer["case"].startswith("op "):
        return "gatebench::busy" in named
    return bool(named)


def gates_of(plan: list[tuple[str, tuple[str, ...], int]], scale: float,
             cases: set[str] | None) -> list[tuple[str, str, int]]:
    """The plan's gates in the order they run: the models of a case taken in turn."""
    out: list[tuple[str, str, int]] = []
    for name, models, count in plan:
        if cases and name not in cases:
            continue
        n = max(1, round(count * scale))
        out += [(name, models[i % len(models)], i) for i in range(n)]
    return out


def condition(name: str, folder: Path, gates: list[tuple[str, str, int]],
              judge_only: bool) -> list[dict[str, Any]]:
    """Every gate of the condition (answers kept in answers.jsonl are not run again)."""
    kept = folder / "answers.jsonl"
    answers = ([json.loads(line) for line in kept.read_text().splitlines() if line.strip()]
               if kept.is_file() else [])
    done = {(a["case"], a["model"], a["index"]) for a in answers}
    todo = [g for g in gates if g not in done]
    if judge_only or not todo:
        return answers
    hogs, niceness = CONDITIONS[name]
    procs = background(hogs, niceness)
    try:
        time.sleep(1.0 if procs else 0.0)
        for i, (case_name, model, index) in enumerate(todo):
            answer = one_gate(folder, case_name, model, index)
            answers.append(answer)
            with kept.open("a") as f:
                f.write(json.dumps(answer) + "\n")
            print(f"{name}: {i + 1}/{len(todo)} {case_name} {model}: exit {answer['exit']}"
                  f" at {answer['pairs']} pairs, {answer['wall_s']} s", file=sys.stderr)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return answers


def summarize(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Per case: exits, rates with intervals, step changes, pairs and wall times."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(a["case"] for a in answers):
        mine = [a for a in answers if a["case"] == name]
        n = len(mine)
        exits = {code: sum(a["exit"] == code for a in mine) for code in (1, 4, 0)}
        row: dict[str, Any] = {"gates": n, "models": sorted({a["model"] for a in mine}),
                               "exit_1": exits[1], "exit_4": exits[4], "exit_0": exits[0],
                               "pairs_median": statistics.median(a["pairs"] for a in mine),
                               "pairs_max": max(a["pairs"] for a in mine),
                               "wall_s_median": round(statistics.median(a["wall_s"]
                                                                        for a in mine), 1)}
        if name in ("unchanged", "itself"):
            low, high = wilson(exits[1], n)
            row |= {"false_alarm_pct": round(100 * exits[1] / n, 2),
                    "false_alarm_ci_pct": [round(100 * low, 2), round(100 * high, 2)],
                    "pass_pct": round(100 * exits[0] / n, 1)}
        else:
            found = sum(caught(a) for a in mine)
            low, high = wilson(found, n)
            row |= {"caught": found, "caught_ci_pct": [round(100 * low, 1), round(100 * high, 1)]}
        changes = [a["step_change_pct"] for a in mine if a["step_change_pct"] is not None]
        if changes:
            row["step_change_pct"] = {"median": round(statistics.median(changes), 1),
                                      "min": min(changes), "max": max(changes)}
        out[name] = row
    return out


def table(results: dict[str, Any]) -> str:
    head = ("| machine | case | gates | exit 1 / 4 / 0 | false alarms (95% interval) or "
            "caught | step change, median (range) | pairs, median (most) | wall per gate |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for cond, c in results["conditions"].items():
        for name, r in c["cases"].items():
            if "false_alarm_pct" in r:
                low, high = r["false_alarm_ci_pct"]
                rate = f"{r['exit_1']}/{r['gates']} ({low:g}..{high:g}%); PASS {r['pass_pct']:g}%"
            else:
                low, high = r["caught_ci_pct"]
                rate = f"caught {r['caught']}/{r['gates']} ({low:g}..{high:g}%)"
            change = r.get("step_change_pct")
            change_text = (f"{change['median']:+.1f}% ({change['min']:+.1f}..{change['max']:+.1f})"
                           if change else "-")
            rows.append(f"| {c['background']} | {name} ({', '.join(r['models'])}) | {r['gates']}"
                        f" | {r['exit_1']} / {r['exit_4']} / {r['exit_0']} | {rate} | "
                        f"{change_text} | {r['pairs_median']:g} ({r['pairs_max']}) | "
                        f"{r['wall_s_median']:.0f} s |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conditions", default="quiet,nice,hogs")
    parser.add_argument("--cases", help="only these cases (comma-separated, as in PLAN)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="gates per case times this (at least one each)")
    parser.add_argument("--keep", metavar="DIR", help="keep the gates here (and go on there)")
    parser.add_argument("--judge-only", action="store_true",
                        help="no new gates: summarize the answers kept in --keep DIR")
    parser.add_argument("--out", default=str(HERE / "results" / "gate_quality.json"))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # the hogs end with the bench
    if args.judge_only and not args.keep:
        parser.error("--judge-only needs --keep DIR")
    cases = set(args.cases.split(",")) if args.cases else None
    conditions: dict[str, Any] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nsbridge-gate-") as tmp:
        base = Path(args.keep or tmp)
        for name in args.conditions.split(","):
            folder = base / name
            folder.mkdir(parents=True, exist_ok=True)
            answers = condition(name, folder, gates_of(PLAN[name], args.scale, cases),
                                args.judge_only)
            conditions[name] = {"background": TITLES[name], "cases": summarize(answers),
                                "answers": answers}
            print(f"{name} done", file=sys.stderr)
    results = {"date": time.strftime("%Y-%m-%d"),
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                           "python": platform.python_version()},
               "workload": "bench/gate_workload.py (GATE_MODEL mlp, cnn, transformer); "
                           f"planted Python sized from STEP_MS {STEP_MS} at {TURNS_PER_MS} "
                           "turns/ms",
               "gate": "nsbridge gate defaults: --processes 3 --max-processes 10 --budget "
                       "600 --fail-above 10 --min-step-share 2, --profile gate (25 measured "
                       "steps), one thread",
               "wall_s": round(time.monotonic() - started), "conditions": conditions}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
