"""The gate's rule on simulated gates: how often it calls unchanged code a regression
(with its 95% Wilson interval), how often it passes, how many pairs it takes and what it
catches, beside the gate's earlier per-comparison rule, on a quiet machine and beside two
CPU hogs as simulated from what was measured here (docs/explanation/gate-rule.md).

Each simulated gate is grown a pair at a time as `nsbridge gate` grows it (3 pairs, then up
to 10), judged at every look through the gate's own functions (model.comparing.paired:
paired_change, judge_time). tests/test_gate_rule.py runs the same simulation as a test of
the rule. Results: bench/results/gate_rule_sim.json, and the Markdown table on stdout.

    python bench/gate_rule_sim.py [--gates 3000] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsbridge.model.comparing import change as C  # noqa: E402
from nsbridge.model.comparing import evidence as E  # noqa: E402
from nsbridge.model.comparing.paired import MIN_TIME_PAIRS, judge_time, paired_change  # noqa: E402

# the gated ops of a simulated gate: µs per step (the step is their sum plus 1 ms)
OPS = {"busy": 9000.0, "mm": 4000.0, "addmm": 2600.0, "relu": 400.0, "add_": 350.0,
       "sum": 300.0, "mul": 250.0, "copy_": 200.0}
FIRST, MOST = 3, 10          # the gate's defaults: 3 pairs first, grown up to 10
# per-process noise (scales of Student t, 3 degrees of freedom), set to what was measured:
# quiet, an unchanged busy op's pairs disagree by about 1.9% (bench/results/
# gate_quality.json: its 5-pair means within -2.0..+0.5%); beside two CPU hogs an
# unchanged step's 5-pair means ranged -11%..+7% (shared/facts.md, 2026-11-29): pairs
# disagreeing by about 11%, the contended processes slower in their medians
QUIET = {"shared": 0.005, "own": 0.006}
# quiet as this VM measured on 2026-12-03: the busy op's per-process median at one speed
# varied by 3.2% (6 processes one after another, bench/gate_workload.py), its pairs by
# about 4.5%
QUIET_VM = {"shared": 0.013, "own": 0.013}
HOGS = {"shared": 0.04, "own": 0.02, "contended": 0.05}


class Machine:
    """Per-process times of a simulated gate: each process has a factor shared by every
    op (its speed that run: Student t with 3 degrees of freedom, heavy tails), each op
    an offset of its own, the machine drifts through the gate, the gate's first process
    runs cold, and a contended process is slower still, more in its median than in its
    10th percentile (preemption adds time to some steps, not to the fastest)."""

    def __init__(self, rng: np.random.Generator, shared: float, own: float,
                 contended: float = 0.0) -> None:
        self.rng, self.shared, self.own, self.contended = rng, shared, own, contended

    def process(self, index: int, scale: dict[str, float]) -> dict[str, dict[str, float]]:
        rng = self.rng
        factor = self.shared * rng.standard_t(3) + 0.004 * index   # drift: +0.4% a process
        if index == 0:
            factor += 0.05                                        # the cold first process
        busy = self.contended * rng.exponential() if self.contended else 0.0
        out = {}
        for name, us in {**OPS, "step": sum(OPS.values()) + 1000.0}.items():
            own = self.own * rng.standard_t(3)
            value = us * scale.get(name, 1.0) * math.exp(factor + own)
            out[name] = {"median": value * math.exp(busy),
                         "p10": value * math.exp(0.3 * busy + 0.5 * self.own * rng.normal())}
        return out


def simulate_gate(machine: Machine, scale: dict[str, float], budget: E.Budget,
                  rule: str = "evidence") -> tuple[str, int]:
    """One gate grown a pair at a time from ``budget.first`` to ``budget.most`` pairs:
    (outcome, pairs taken). Pairs
    run A B, B A, ... (drift and the cold start fall on each side in turn). ``rule``
    "per-comparison" is the gate's rule before the bound: each quantity's own 95% interval
    (change.judge), no account of the other quantities or of the looks."""
    base: list[dict[str, dict[str, float]]] = []
    new: list[dict[str, dict[str, float]]] = []
    index = 0
    for k in range(1, budget.most + 1):
        for side in ((base, new) if k % 2 else (new, base)):
            side.append(machine.process(index, scale if side is new else {}))
            index += 1
        if k < budget.first:
            continue
        outcome, undecided = judge_look(base, new, budget, rule)
        if outcome == "regression" or (outcome == "pass" and not undecided) \
                or k == budget.most:
            return outcome, k
    raise AssertionError("unreachable")


def judge_look(base: list[dict[str, dict[str, float]]], new: list[dict[str, dict[str, float]]],
               budget: E.Budget, rule: str) -> tuple[str, bool]:
    """One look's outcome, as model.comparing.gate_answer.answer decides it (any gated
    regression, an op's or the step's, fails; else the step time's status decides), and
    whether a gated op is still undecided (the gate then grows: commands.gate.stop_reason)."""
    rows = []
    shares = op_shares(base, new)
    for name in OPS:
        row = {"op": name, "gated": True, "share": shares[name],
               **paired_change([p[name] for p in base],
                                                          [p[name] for p in new], 1.0)}
        rows.append(row)
    step = paired_change([p["step"] for p in base], [p["step"] for p in new], 1.0)
    if rule == "evidence":
        judge_time(rows, step, 10.0, 0.0, budget)
    else:
        for row in rows + [step]:
            point, low, high, _, k = row["_log"]
            status = C.judge(point, low, high, 10.0, row["added_us"], row["added_ci_us"][1],
                             0.0)
            row["status"] = "inconclusive" if status == "regressed" and k < MIN_TIME_PAIRS \
                else status
    undecided = any(r["status"] == "inconclusive" for r in rows)
    if any(r["status"] == "regressed" for r in rows + [step]):
        return "regression", undecided
    return ("inconclusive" if step["status"] == "inconclusive" else "pass"), undecided


def op_shares(base: list[dict[str, dict[str, float]]],
              new: list[dict[str, dict[str, float]]]) -> dict[str, float]:
    """Each op's share of the op time as the gate takes it (paired._shares): the larger of
    the two sides' shares of their total, from the processes' own times."""
    def side(processes: list[dict[str, dict[str, float]]]) -> dict[str, float]:
        totals = {n: sum(p[n]["median"] for p in processes) for n in OPS}
        grand = sum(totals.values())
        return {n: t / grand for n, t in totals.items()}
    a, b = side(base), side(new)
    return {n: max(a[n], b[n]) for n in OPS}


def rate(outcomes: list[str], what: str) -> float:
    return outcomes.count(what) / len(outcomes)


def run_gates(n: int, seed: int, scale: Optional[dict[str, float]] = None,
              rule: str = "evidence", first: int = FIRST, most: int = MOST,
              **noise: float) -> list[tuple[str, int]]:
    """``n`` simulated gates on one machine (``noise``: Machine's), from ``first`` pairs
    grown up to ``most``."""
    rng = np.random.default_rng(seed)
    budget = E.Budget(first=first, most=most)
    return [simulate_gate(Machine(rng, **noise), scale or {}, budget, rule)
            for _ in range(n)]


def summary(gates: list[tuple[str, int]]) -> dict[str, Any]:
    """Outcome counts, rates (the regression rate with its Wilson interval) and pairs."""
    outcomes = [o for o, _ in gates]
    n, alarms = len(outcomes), outcomes.count("regression")
    low, high = E.wilson(alarms, n)
    return {"gates": n, "regression": alarms, "pass": outcomes.count("pass"),
            "inconclusive": outcomes.count("inconclusive"),
            "regression_rate": alarms / n, "regression_rate_95": [low, high],
            "median_pairs": float(np.median([k for _, k in gates])),
            "mean_pairs": float(np.mean([k for _, k in gates]))}


CASES = {
    "unchanged": {},
    "op +10%": {"busy": 1.10, "step": 1.05},
    "step +10%": {n: 1.10 for n in [*OPS, "step"]},
    "step +25%": {n: 1.25 for n in [*OPS, "step"]},
    "step +50%": {n: 1.50 for n in [*OPS, "step"]},
    "step alone +25%": {"step": 1.25},      # outside any op: Python in the step
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gates", type=int, default=3000, help="unchanged gates per machine")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.monotonic()
    results: dict[str, Any] = {}
    for machine, noise in (("quiet", QUIET), ("quiet, noisier VM", QUIET_VM),
                           ("two CPU hogs", HOGS)):
        for case, scale in CASES.items():
            n = args.gates if case == "unchanged" else max(args.gates // 10, 50)
            results[f"{machine}: {case}"] = summary(run_gates(n, args.seed, scale, **noise))
        results[f"{machine}: unchanged, the earlier rule, 5 pairs"] = summary(run_gates(
            max(args.gates // 3, 50), args.seed, rule="per-comparison", first=5, most=5,
            **noise))
        results[f"{machine}: unchanged, the earlier rule, grown"] = summary(run_gates(
            max(args.gates // 3, 50), args.seed, rule="per-comparison", **noise))
    out = {"date": datetime.now().isoformat(timespec="seconds"), "gates": args.gates,
           "seed": args.seed,
           "noise": {"quiet": QUIET, "quiet, noisier VM": QUIET_VM, "two CPU hogs": HOGS},
           "first_look": FIRST, "max_processes": MOST, "results": results,
           "seconds": round(time.monotonic() - started, 1)}
    path = ROOT / "bench" / "results" / "gate_rule_sim.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print("| simulated gates | gates | regression (95% Wilson) | PASS | inconclusive | "
          "median pairs |\n|---|---|---|---|---|---|")
    for name, r in results.items():
        low, high = r["regression_rate_95"]
        print(f"| {name} | {r['gates']:,} | {r['regression']} ({100 * r['regression_rate']:.2f}%, "
              f"{100 * low:.2f}..{100 * high:.2f}%) | {100 * r['pass'] / r['gates']:.0f}% | "
              f"{100 * r['inconclusive'] / r['gates']:.0f}% | {r['median_pairs']:g} |")
    print(f"\n{out['seconds']} s; written to {path}")


if __name__ == "__main__":
    main()
