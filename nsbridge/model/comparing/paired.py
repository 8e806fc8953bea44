"""The interleaved gate's judgement: K pairs of processes, base and new run back to back
(A, B, then B, A, ...), judged on paired changes so that machine drift cancels.

For each op (and the step), in each process, its steady time per step (model.comparing.steady: the
steps the process did not spend waiting for a CPU, their median or 10th percentile); of
the two statistics the comparison takes the one that varies less between the processes of
each side (decided on both sides alike, blind to which is which). Pair i's change is
log(B_i / A_i); the change is their mean and its 95% interval Student's t over the K pairs
(K - 1 degrees of freedom): between-process spread, drift within a pair and the noise of
the steps all show in how the pairs disagree. Whether there is a change at all is asked
once for the step and every gated op together, at the gate's false-alarm budget
(model.comparing.evidence: Holm over the quantities, the statistic's choice and the looks
accounted for); the threshold then sizes a significant change
(model.comparing.change.judge_evidence; docs/explanation/gate-rule.md).

Work is judged before time, as in `diff`: an op that now runs in another dtype or layout,
or on other input shapes, is different work (regressed when it takes more than the
threshold longer, whatever the noise), and more calls per step are priced per signature
(model.comparing.work, model.comparing.gate_answer.judge_work). An op only the new side has regresses when it costs
the floor.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

import numpy as np

from ... import schema as S
from . import change as C
from . import evidence as E
from .comparability import problems
from .gate_answer import answer, as_op, judge_work
from .memory_change import memory_change
from .steady import (AT_SPEED, STATISTICS, STATISTICS_AT_SPEED, Steady, process_steady,
                     with_speed)
from .work import pooled_work
from ...contract.comparison import (Blocker, ComparedRow, ComparedStep, Comparison, FalseAlarm,
                                    SideSamples, Speed)
from ...contract.report import Report

_MEDIAN = "median"
# a speed probe this much slower or faster on one side, this surely, is the code's doing
PROBE_SHIFT, PROBE_P = 0.05, 0.001
# the fewest pairs a time-only regression rests on: with two, both new processes landing
# on a slow memory layout (an unchanged op +74% in both pairs, seen in CI) looks like a
# steady change that Student's t cannot tell from luck; work changes need no such count
MIN_TIME_PAIRS = 3


def compare_pairs(pairs: Sequence[tuple[Report, Report]], *,
                  fail_above: float = 10.0, ops: Sequence[str] = (), min_share: float = 0.01,
                  min_step_share: float = 0.02, allow: Iterable[str] = (),
                  budget: E.Budget = E.Budget(),
                  fail_above_mib: Optional[float] = None) -> Comparison:
    """The gate's answer on K >= 2 pairs of one-process reports (base, new), in the order
    they ran: the same keys as model.comparing.diff.compare, ``mode`` "interleaved", and
    ``false_alarm`` (the budget this look spent and what it found significant).
    ``budget``: the gate's false-alarm bound and the looks it is shared by;
    ``fail_above_mib``: the peak memory's threshold (model.comparing.memory_change)."""
    base, new = [a for a, _ in pairs], [b for _, b in pairs]
    allow = list(allow)
    blockers = _blockers(pairs, allow)
    device = all(r.get("ranked_by") == S.DEVICE_SELF_US for r in base + new)
    raw_a = [process_steady(r) for r in base]
    raw_b = [process_steady(r) for r in new]
    steady_a, steady_b, speed = _at_one_speed(raw_a, raw_b)
    candidates = STATISTICS_AT_SPEED if speed and speed["scaled"] else STATISTICS
    shares = _shares(base, new)
    base_step_us = 1e3 * float(np.mean([s.step[_MEDIAN] for s in steady_a if s.step])) \
        if all(s.step for s in steady_a) else None
    floor = min_step_share * base_step_us if base_step_us else 0.0
    work_a, work_b = pooled_work(base), pooled_work(new)
    gate = set(ops)
    rows = []
    for name in sorted(shares):
        if not any(name in s.ops for s in steady_a + steady_b):
            continue   # no time in any step on either side (a 0 µs op): nothing to judge
        in_a = all(name in s.ops for s in steady_a)
        in_b = all(name in s.ops for s in steady_b)
        row: ComparedRow = {"op": name, "share": round(shares[name], 4),
                               "gated": (not gate or name in gate) and shares[name] >= min_share}
        if in_a and in_b:
            row.update(paired_change([s.ops[name] for s in steady_a],
                                     [s.ops[name] for s in steady_b], scale=1.0,
                                     statistics=candidates))
            if row["gated"]:
                judge_work(row, work_a.get(name), work_b.get(name), row["_log"][0],
                           fail_above, floor)
        elif in_b:
            b_us = float(np.mean([s.ops[name][_MEDIAN] for s in steady_b]))
            row.update({"a_us": None, "b_us": C.rounded(b_us), "added_us": C.rounded(b_us),
                        "new": True, "basis": "new",
                        "status": "regressed" if floor and b_us >= floor else "new"})
            row["gated"] = not gate or name in gate
        else:
            a_us = float(np.mean([s.ops[name][_MEDIAN] for s in steady_a
                                  if name in s.ops] or [0.0]))
            row.update({"a_us": C.rounded(a_us), "b_us": None, "added_us": C.rounded(-a_us),
                        "status": "vanished", "basis": "time"})
        rows.append(row)
    step = _step(steady_a, steady_b, candidates)
    if step is not None:
        step["source"] = _step_source(str(step["statistic"]))
        step["samples"] = [sum(s.steps_used for s in side) for side in (steady_a, steady_b)]
    if step is not None and speed is not None and speed["scaled"]:
        unscaled = _step(raw_a, raw_b, STATISTICS)
        step["unscaled"] = {"change_pct": unscaled.get("change_pct"),
                            "ci_pct": unscaled.get("ci_pct")} if unscaled else None
    false_alarm = judge_time(rows, step, fail_above, floor, budget)
    for row in rows:
        if row.get("status") == "inconclusive" and row.get("_log"):
            row["pairs_to_decide"] = pairs_to_decide(row, fail_above)
    rows.sort(key=lambda r: -abs(r.get("added_us") or 0.0))
    return answer(base[0], new[0], rows=rows, step=step, blockers=blockers,
                  fail_above=fail_above, min_step_share=min_step_share, ops=ops,
                  device=device, mode="interleaved",
                  samples={"a": _samples(steady_a), "b": _samples(steady_b)},
                  advice=_advice(rows, step, steady_a, steady_b, fail_above, bool(ops)),
                  reasons=[],
                  noise={"pairs": len(pairs), "contended": _contended(base, new),
                         "drift_pct": None, "op_noise_pct": None,
                         "false_alarm": false_alarm, "speed": speed},
                  memory=memory_change(base, new, fail_above_mib))


def _at_one_speed(sa: list[Steady], sb: list[Steady]
                  ) -> tuple[list[Steady], list[Steady], Optional[Speed]]:
    """Every process's times also at one machine speed, where each timed its speed probe
    (model.comparing.steady, 3): each step's times over its own probe, times the probes'
    geometric mean, so a process (or a stretch of steps) the machine ran 10% slower is not
    10% slower code. Each
    comparison then picks among the statistics as timed and at one speed, blind to the
    change (choose_statistic; the choice is paid for in its p-value): a 10th percentile is
    often already immune to a slow machine, and scaling it by the probe only adds the
    probe's own noise. Returns the steady times to compare and what was done (None: not
    every process timed it).

    The probe is nsbridge's code, the same on both sides: a probe that the pairs show
    consistently slower on one side (beyond ``PROBE_SHIFT`` at p < ``PROBE_P``) means the
    code under test slows the machine itself (a thread of its own, memory bandwidth), which
    scaling would hide; then nothing is scaled, and ``speed`` says why."""
    speeds = [s.speed_ms for s in sa + sb]
    if not speeds or any(v is None for v in speeds):
        return sa, sb, None
    logs = np.log(np.asarray(speeds, dtype=np.float64))
    reference = float(np.exp(logs.mean()))
    shift = logs[len(sa):] - logs[:len(sa)]
    point = float(shift.mean())
    p = 2 * min(E.slowdown_p(point, float(shift.std(ddof=1)) if len(shift) > 1 else 0.0,
                             len(shift)),
                E.slowdown_p(-point, float(shift.std(ddof=1)) if len(shift) > 1 else 0.0,
                             len(shift)))
    moved = len(shift) > 1 and p < PROBE_P and abs(point) > math.log1p(PROBE_SHIFT)
    speed: Speed = {"reference_ms": round(reference, 4),
             "a_ms": [round(float(s.speed_ms or 0.0), 4) for s in sa],
             "b_ms": [round(float(s.speed_ms or 0.0), 4) for s in sb],
             "spread_pct": round(100.0 * float(logs.std(ddof=1)), 2) if len(logs) > 1
             else 0.0, "change_pct": C.pct(point), "scaled": not moved,
             "why": (f"the speed probe ran {C.pct(point):+.1f}% on B in every pair alike: "
                     "the new code slows the machine itself, so times are compared as "
                     "timed") if moved else None}
    if moved:
        return sa, sb, speed

    def scaled(side: list[Steady]) -> list[Steady]:
        return [with_speed(s, reference) for s in side]
    return scaled(sa), scaled(sb), speed


def judge_time(rows: list[ComparedRow], step: Optional[ComparedStep],
               fail_above: float, floor_us: float, budget: E.Budget) -> FalseAlarm:
    """Give every time-judged row and the step its status (in place): which of them
    changed at all is decided together, Holm over the step and the gated ops at this
    look's share of the budget, the step weighted as all the ops together and each op by
    its share of the op time (evidence.significant), for a slowdown and, alike, for a
    speed-up; rows that do not gate are each asked at that share alone (they fail
    nothing). Returns what the look spent and found."""
    timed = [r for r in rows if r.get("basis") == "time" and r.get("_p") is not None]
    judged = timed + ([step] if step is not None else [])
    pairs = max((row["_log"][4] for row in judged), default=0)
    level = budget.at(pairs)
    shares = {r["op"]: float(r.get("share") or 0.0) for r in timed if r["gated"]}
    changed, faster = (_significant(timed, step, speed_up, budget, pairs, shares)
                       for speed_up in (False, True))
    for row in judged:
        name = "step time" if row is step else row["op"]
        point, _, high, _, k = row["_log"]
        found = changed if point > 0 else faster
        shown = name in found if (row is step or row["gated"]) else _p_of(row, point <= 0) <= level
        floor = 0.0 if row is step else floor_us
        status = C.judge_evidence(point, high, shown, fail_above,
                                  row["added_us"] or 0.0, row["added_ci_us"][1] or 0.0, floor)
        if status == "regressed" and k < MIN_TIME_PAIRS:
            status = "inconclusive"
        row.update({"status": status, "p_value": _p_shown(row["_p"]),
                    "significant_change": shown and point > 0})
    return {"bound_pct": round(100.0 * budget.alpha, 3), "looks": budget.looks,
            "look_alpha": float(f"{level:.3g}"), "spent": float(f"{budget.spent_by(pairs):.3g}"),
            "tests": len(shares) + (step is not None), "significant": sorted(changed)}


def _significant(timed: list[ComparedRow], step: Optional[ComparedRow], speed_up: bool,
                 budget: E.Budget, pairs: int, shares: dict[str, float]) -> set[str]:
    """The gated ops and the step whose p-value of a slowdown (of a speed-up with
    ``speed_up``) Holm finds significant at this look."""
    family = {r["op"]: _p_of(r, speed_up) for r in timed if r["gated"]}
    if step is not None:
        family["step time"] = _p_of(step, speed_up)
    return E.significant(family, budget, pairs, primary="step time", shares=shares)


def _p_of(row: ComparedRow, speed_up: bool) -> float:
    """A row's one-sided p-value of a slowdown, or with ``speed_up`` of a speed-up."""
    return row["_p_faster"] if speed_up else row["_p"]


def _p_shown(p: float) -> float:
    """A p-value as reports show it: 3 significant digits."""
    return float(f"{p:.3g}")


def paired_change(a: list[dict[str, float]], b: list[dict[str, float]], scale: float,
                  statistics: Sequence[str] = STATISTICS) -> ComparedRow:
    """One quantity's paired comparison: values per process (``scale`` turns them into
    µs), the statistic chosen from ``statistics``, each side's geometric mean, the change,
    its 95% interval, the µs added per step, ``_p``, the one-sided p-value of a slowdown,
    and ``_p_faster``, of a speed-up (valid whatever chose the statistic:
    model.comparing.evidence.chosen_p). Its status
    comes later, with the other quantities' (judge_time)."""
    stat = choose_statistic(a, b, statistics)
    va = np.array([max(x[stat], 1e-9) for x in a]) * scale
    vb = np.array([max(x[stat], 1e-9) for x in b]) * scale
    logs = np.log(vb) - np.log(va)
    k = len(logs)
    point = float(logs.mean())
    spread = float(logs.std(ddof=1)) if k > 1 else 0.0
    half = C.t975(k - 1) * spread / math.sqrt(k)
    low, high = point - half, point + half
    # geometric means: their ratio is exactly the mean paired change
    a_us, b_us = float(np.exp(np.log(va).mean())), float(np.exp(np.log(vb).mean()))
    added = b_us - a_us
    added_high = a_us * math.expm1(high)
    choices = len(statistics) if k > 1 else 1
    return {"a_us": C.rounded(a_us), "b_us": C.rounded(b_us), "statistic": stat,
            "raw_pct": C.pct(point), "change_pct": C.pct(point),
            "ci_pct": C.interval_pct(low, high), "half_width_pct": C.half_width_pct(low, high),
            "added_us": C.rounded(added),
            "added_ci_us": [C.rounded(a_us * math.expm1(low)), C.rounded(added_high)],
            "pair_sd_pct": C.pct(spread), "new": False, "basis": "time",
            "status": None, "_p": E.chosen_p(E.slowdown_p(point, spread, k), choices),
            "_p_faster": E.chosen_p(E.slowdown_p(-point, spread, k), choices),
            "_log": (point, low, high, spread, k)}


def choose_statistic(a: list[dict[str, float]], b: list[dict[str, float]],
                     statistics: Sequence[str] = STATISTICS) -> str:
    """The statistic whose log varies less between the processes of each side (pooled over
    both sides, each around its own mean: blind to the change between them)."""
    def spread(stat: str) -> float:
        total = 0.0
        for side in (a, b):
            logs = np.log([max(x[stat], 1e-9) for x in side])
            total += float(((logs - logs.mean()) ** 2).sum())
        return total
    return min(statistics, key=spread) if min(len(a), len(b)) > 1 else _MEDIAN


def _step(sa: list[Steady], sb: list[Steady], statistics: Sequence[str] = STATISTICS
          ) -> Optional[ComparedStep]:
    """The step time's paired change (None when a process has no steady step)."""
    steps_a = [s.step for s in sa if s.step is not None]
    steps_b = [s.step for s in sb if s.step is not None]
    if len(steps_a) < len(sa) or len(steps_b) < len(sb):
        return None
    return {**paired_change(steps_a, steps_b, scale=1e3, statistics=statistics)}


def _step_source(statistic: str) -> str:
    """How the step time was measured, in words."""
    return ("median" if statistic.startswith(_MEDIAN) else "10th percentile") + (
        " of the measured steps' lengths (each the slower of its wall time and the GPU's "
        "time to finish its work), waits for a CPU left out (nsbridge's step clock)") + (
        ", at one machine speed (each process's speed probe)" if statistic.endswith(AT_SPEED)
        else "")


def _blockers(pairs: Sequence[tuple[Report, Report]],
              allow: list[str]) -> list[Blocker]:
    """What makes any pair not comparable, each text once."""
    found: dict[str, Blocker] = {}
    for a, b in pairs:
        for problem in problems(a, b, allow):
            found.setdefault(problem["text"], problem)
    return list(found.values())


def _shares(base: list[Report], new: list[Report]) -> dict[str, float]:
    """Each op's largest share of a side's op time (either side), over its processes."""
    def side(reports: list[Report]) -> dict[str, float]:
        totals: dict[str, float] = {}
        for report in reports:
            key = report.get("ranked_by") or S.CPU_SELF_US
            for op in report.get("ops") or []:
                time = op.get(key)
                if time is not None and op.get("name"):
                    totals[op["name"]] = totals.get(op["name"], 0.0) + float(time)
        grand = sum(totals.values()) or 1.0
        return {n: t / grand for n, t in totals.items()}
    sa, sb = side(base), side(new)
    return {n: max(sa.get(n, 0.0), sb.get(n, 0.0)) for n in set(sa) | set(sb)}


def _samples(side: list[Steady]) -> SideSamples:
    return {"runs": len(side), "steps": sum(s.steps_measured for s in side),
            "used_steps": sum(s.steps_used for s in side),
            "waited_steps": sum(s.waited_steps for s in side),
            "scaled_processes": sum(s.scaled for s in side)}


def _contended(base: list[Report], new: list[Report]) -> list[str]:
    def any_contended(side: list[Report]) -> bool:
        return any(((r.get("machine") or {}).get("contention") or {}).get("contended")
                   for r in side)
    return [w for w, side in (("A", base), ("B", new)) if any_contended(side)]


def pairs_to_decide(row: ComparedRow, fail_above: float) -> Optional[int]:
    """About how many pairs an inconclusive quantity's interval needs to leave out no
    change or +T, near its change so far, at its pairs' spread (None: more than 50)."""
    point, spread = row["_log"][0], row["_log"][3] or 0.0
    threshold = math.log1p(fail_above / 100.0)
    return processes_needed(spread, max(threshold - point, point))


def processes_needed(spread: float, target: float, limit: int = 50) -> Optional[int]:
    """The fewest pairs whose t interval, at this pair-to-pair spread (log), is at most
    ``target`` (log) half-wide; None past ``limit``."""
    for k in range(2, limit + 1):
        if C.t975(k - 1) * spread / math.sqrt(k) <= target:
            return k
    return None


def _advice(rows: list[ComparedRow], step: Optional[ComparedStep], sa: list[Steady],
            sb: list[Steady], fail_above: float, only_ops: bool) -> list[str]:
    """What would settle an inconclusive answer (the step time, or with ``only_ops`` or
    no step the gated ops: what decides), estimated from the pairs' own spread."""
    if step is not None and not only_ops:
        wide = (step["half_width_pct"] or 0.0) > fail_above
        unsure: list[ComparedRow] = [as_op(step)] if step["status"] == "inconclusive" or wide \
            else []
    else:
        unsure = [r for r in rows if r.get("gated") and r.get("status") == "inconclusive"]
    if not unsure:
        return []
    k = len(sa)
    threshold = math.log1p(fail_above / 100.0)
    worst = max(unsure, key=lambda r: r["_log"][3] or 0.0)
    point, spread = worst["_log"][0], worst["_log"][3] or 0.0
    anyway = processes_needed(spread, threshold / 2.0)   # decides wherever the change is
    likely = pairs_to_decide(worst, fail_above)
    advice = []
    if k < MIN_TIME_PAIRS:
        advice.append(f"at least {MIN_TIME_PAIRS} processes per side (--max-processes "
                      f"{MIN_TIME_PAIRS}): {k} pair(s) cannot tell a slower op from one "
                      "process's luck (its memory layout, its core), however well they agree")
    disagree = (f"the pairs of {worst['op']} disagree by {C.pct(spread):.1f}% (standard "
                "deviation)")
    if likely and likely != anyway:
        half = C.pct(max(threshold - point, point))
        advice.append(f"about {max(likely - k, 1)} more process(es) per side (--max-processes "
                      f"{likely}): {disagree}; with the change near its {C.pct(point):+.1f}% "
                      f"so far, {likely} pairs bring its interval within ±{half:.1f}%, enough "
                      "to decide" + (f"; {anyway} would decide whatever the change "
                                     f"(±{fail_above / 2:g}%)" if anyway else ""))
    elif anyway:
        advice.append(f"about {max(anyway - k, 1)} more process(es) per side (--max-processes "
                      f"{anyway}): {disagree}, and {anyway} pairs would bring its interval "
                      f"to ±{fail_above / 2:g}%")
    else:
        advice.append(f"{disagree}: more processes alone would take over 50 per side; run "
                      "on a quieter machine, with --threads 1")
    clean = min(s.steps_used for s in sa + sb)
    if clean < 10:
        advice.append(f"measure more steps: as few as {clean} clean step(s) in a process "
                      "(--steps 40, with a script that runs that many)")
    return advice

