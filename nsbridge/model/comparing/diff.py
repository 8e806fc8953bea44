"""Two runs compared op by op (`nsbridge diff`): regression, no regression, or the data
cannot decide. The interleaved gate (`nsbridge gate`, model.comparing.paired) measures both sides
again, in pairs; this module judges two runs as they were recorded.

Comparability comes first (model.comparing.comparability). commands.diff refuses, before this module
sees them, runs it cannot compare at all (failed, still running, nothing measured, another
schema version or shape, timed on another kind of device, another script unless allowed);
differences of arguments, torch, GPU, threads or cores make the answer inconclusive unless
allowed. Called directly, ``compare`` still never calls fine runs that did not finish,
measured nothing or differ in device or script: they come out inconclusive.

**Work first** (model.comparing.work, model.comparing.gate_answer.judge_work). An op that runs in another
dtype or layout, or on other input shapes, is different work: a regression when it takes
more than ``fail_above`` percent longer and adds ``min_step_share`` of the base step,
whatever the timing noise. More calls per step are priced per signature at the cheaper of
the two runs' time per call (``ops[].shape_work``).

**Then time.** Each op's time per step (self device time when both runs had a GPU, else
self CPU time; ``source`` says which) is its mean over the measured steps, leaving out on
host time the steps its process spent waiting for a CPU, or scaling every step by its
running share when most waited (model.comparing.steady.step_weights). Between
two processes the whole run can be faster or slower (clocks, caches, other load): that
**drift** is the weighted median of the log ratios of the judged ops whose work did not
change, each a witness of the process's speed weighted by its share of the time but never
more than a quarter of the total, and each op is judged by its change *beyond* the drift.
Its 95% interval is a bootstrap over steps (over the processes first where ``triage
--runs`` pooled several; model.stats), the drift recomputed in every resample; with several
processes per side it is widened to at least the Welch t interval over the processes'
means. With one process per side the between-process spread of single ops is not in those
samples: it is estimated from how much the judged ops moved relative to each other
(``op_noise_pct``) and added to every interval. The interval then decides (model.comparing.change).

With one process per side, or on a contended machine, the same work taking longer is not a
regression: single ops vary between processes (2.5x seen on a quiet VM) and a contended
op's wall time is mostly waiting. Such a change is inconclusive, and the advice says what
would settle it (`nsbridge gate`: interleaved processes). The same work taking less time
is not an improvement for the same reason: it stays within noise, its ``why`` says so
(an unchanged CNN diffed beside two CPU hogs read one op "improved -54%").

Step time (median step: the measured steps when both runs have at least ten, as the gate's
runs do, else the unprofiled steps when both have at least three; either kind with the
steps that waited for a CPU left out, or all scaled by their running share, as
model.comparing.steady says) is judged the same way, except that a slowdown no larger than the drift (every op slower alike)
cannot be told from a slower machine: with one process per side, on a contended machine,
or when the step's interval reaches down to the drift, it is inconclusive unless an op
regressed too.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, NamedTuple, Optional, Sequence

import numpy as np

from ... import schema as S
from . import change as C
from .comparability import problems
from .gate_answer import answer, judge_work, same_work_reason, show_ci
from .memory_change import memory_change
from .paired import processes_needed
from ..stats import LEVEL, resample_indices
from .steady import (intra_op_threads, step_length_ms, step_weights,
                     unprofiled_samples)
from .work import OpWork, calls_changed, signature_changes
from ...contract.comparison import Blocker, ComparedRow, ComparedStep, Comparison, Noise, SideSamples
from ...contract.report import RankedBy, Report, Steps, per_step_of

WITNESS_CAP = 0.25
MIN_STEP_SAMPLES = 3
ENOUGH_MEASURED_STEPS = 10   # then the step time is judged on them (model.comparing.steady says why)


def compare(a: Report, b: Report, *, fail_above: float = 10.0,
            ops: Sequence[str] = (), min_share: float = 0.01, min_step_share: float = 0.02,
            allow: Iterable[str] = (), fail_above_mib: Optional[float] = None) -> Comparison:
    """B against A (A is the base): outcome, exit_code, reasons, advice, comparability,
    step, ops[], regressions[], inconclusive[], memory (model.comparing.memory_change, by
    ``fail_above_mib``) and the noise figures (module docstring;
    docs/how-to/ci-perf-gate.md)."""
    device = _has_device(a) and _has_device(b)
    key: RankedBy = S.DEVICE_SELF_US if device else S.CPU_SELF_US
    blockers = problems(a, b, allow)
    side_a, side_b = _Side(a, key, device), _Side(b, key, device)
    single = min(side_a.runs, side_b.runs) < 2
    contended = [w for w, r in (("A", a), ("B", b)) if _contended(r)]
    table, noise = _op_table(side_a, side_b, fail_above=fail_above, min_share=min_share,
                             min_step_share=min_step_share, single_process=single,
                             gate=set(ops), contended=contended)
    step = _step_change(a, b, side_a, side_b, fail_above, single, contended,
                        math.log1p((noise.get("drift_pct") or 0.0) / 100.0))
    if step and step["status"] == "inconclusive" and step.get("significant") and any(
            r["gated"] and r["status"] == "regressed" for r in table):
        step["status"], step["why"] = "regressed", None    # corroborated by the ops
    return answer(a, b, rows=table, step=step, blockers=blockers, fail_above=fail_above,
                  min_step_share=min_step_share, ops=ops, device=device, mode="two runs",
                  samples={"a": side_a.describe(), "b": side_b.describe()},
                  advice=_advice(blockers, single, contended, a, noise, fail_above),
                  reasons=[], noise={**noise, "contended": contended, "pairs": None},
                  memory=memory_change([a], [b], fail_above_mib))


class _Side:
    """One run's per-step samples of the gate's time, op by op (model.comparing.steady.step_weights:
    waited steps left out, or all scaled by their running share)."""

    def __init__(self, report: Report, key: RankedBy, device: bool) -> None:
        steps: Steps = report.get("steps") or {"count": 0}
        per_step = steps.get("per_step") or []
        n = len(per_step) or int(steps.get("count") or 1)
        threads = intra_op_threads(report)
        self.weights = step_weights(per_step, threads, device)
        self.bare_ms, self.bare_groups = unprofiled_samples(steps, threads, device)
        index = self.weights.index if per_step else np.arange(n)
        scale = self.weights.scale if per_step else np.ones(n)
        self.n = len(index)
        self.steps_count = n
        groups = [int(s.get("run") or 1) for s in per_step] or [1] * n
        self.groups = [groups[i] for i in index]
        self.runs = len(set(self.groups))
        spread_ok = report.get("ranked_by") == key
        self.ops: dict[str, np.ndarray] = {}
        self.total: dict[str, float] = {}
        self.spread: dict[str, bool] = {}
        self.work: dict[str, OpWork] = {}
        for op in report.get("ops") or []:
            value = op.get(key)
            if value is None or not op.get("name"):
                continue
            total = float(value)
            self.work[op["name"]] = OpWork(op.get("calls") or 0, total,
                                           op.get("shape_work") or [], n)
            samples = op.get(S.PER_STEP_US) or []
            known = spread_ok and len(samples) == n and n > 0
            self.ops[op["name"]] = (np.asarray(samples, dtype=np.float64)[index] * scale
                                    if known else np.full(self.n, total / n))
            self.spread[op["name"]] = known
            self.total[op["name"]] = total
        self.grand_total = sum(self.total.values()) or 1.0
        walls = (np.asarray([step_length_ms(s) for s in per_step], dtype=np.float64)[index]
                 * scale
                 * 1e3 if per_step else np.array([]))
        self.mean_step_us = float(walls.mean()) if len(walls) else None
        self.walls_ms = walls / 1e3

    def describe(self) -> SideSamples:
        return {"steps": self.steps_count, "runs": self.runs, "used_steps": self.n,
                "waited_steps": self.weights.waited,
                "scaled_processes": int(self.weights.scaled)}


def _op_table(sa: _Side, sb: _Side, *, fail_above: float, min_share: float,
              min_step_share: float, single_process: bool, gate: set[str],
              contended: list[str]) -> tuple[list[ComparedRow], Noise]:
    names = sorted(set(sa.ops) | set(sb.ops))
    share = {n: max(sa.total.get(n, 0.0) / sa.grand_total, sb.total.get(n, 0.0) / sb.grand_total)
             for n in names}
    judged = [n for n in names if n in sa.ops and n in sb.ops and share[n] >= min_share
              and sa.ops[n].mean() > 0 and sb.ops[n].mean() > 0]
    same_work = [n for n in judged if not calls_changed(sa.work[n], sb.work[n])
                 and not signature_changes(sa.work[n], sb.work[n])]
    est = _bootstrap(sa, sb, judged, same_work, single_process)
    floor = min_step_share * sa.mean_step_us if sa.mean_step_us else 0.0
    rows = []
    for name in names:
        ma = float(sa.ops[name].mean()) if name in sa.ops else None
        mb = float(sb.ops[name].mean()) if name in sb.ops else None
        row: ComparedRow = {"op": name, "a_us": C.rounded(ma), "b_us": C.rounded(mb),
                               "statistic": "mean", "share": round(share[name], 4),
                               "new": ma is None, "basis": "time",
                               "gated": (not gate or name in gate) and share[name] >= min_share,
                               "spread_known": bool(sa.spread.get(name)
                                                    and sb.spread.get(name))}
        if ma is None and mb is not None:
            row.update({"added_us": C.rounded(mb), "basis": "new",
                        "status": "regressed" if floor and mb >= floor else "new"})
            row["gated"] = not gate or name in gate
        elif mb is None and ma is not None:
            row.update({"added_us": C.rounded(-ma), "status": "vanished"})
        elif ma is not None and mb is not None:
            row["raw_pct"] = C.pct(math.log(mb / ma)) if ma > 0 and mb > 0 else None
            row["status"] = "not gated"
            if name in est.ops:
                row.update(_judged(est.ops[name], ma, mb, est.drift, fail_above, floor))
                if row["status"] == "regressed" and (single_process or contended):
                    cause = _same_work_cause(contended)
                    row.update({"status": "inconclusive", "significant": True, "_cause": cause,
                                "why": same_work_reason([row], cause)})
                elif row["status"] in SPEED_UPS and (single_process or contended):
                    row.update({"status": "within noise",
                                "why": f"{C.pct(row['_log'][0]):+.1f}%: "
                                       f"{_same_work_cause(contended, 'speed-up')}"})
            if row["gated"]:
                judge_work(row, sa.work[name], sb.work[name],
                           est.ops[name][0] if name in est.ops else math.log(mb / ma),
                           fail_above, floor)
        rows.append(row)
    rows.sort(key=_table_order)
    return rows, {"drift_pct": C.pct(est.drift), "op_noise_pct": C.pct(est.noise),
                  "drift_witnesses": len(same_work)}


SPEED_UPS = ("faster", "improved")


def _table_order(row: ComparedRow) -> float:
    """The largest ops first (their time per step on either side): a reader meets what
    matters, not the noise of small ops (gate_answer.answer puts the deciding ones first)."""
    return -max(row.get("a_us") or 0.0, row.get("b_us") or 0.0)


def _judged(estimate: tuple[float, float, float], ma: float, mb: float, drift: float,
            fail_above: float, floor: float) -> ComparedRow:
    """An op's change beyond the drift, its interval, what it added and its status."""
    point, low, high = estimate
    expected = ma * math.exp(drift)            # the base op on the new run's machine
    added = mb - expected
    added_high = expected * math.expm1(high)
    return {"change_pct": C.pct(point), "ci_pct": C.interval_pct(low, high),
            "half_width_pct": C.half_width_pct(low, high), "added_us": C.rounded(added),
            "added_ci_us": [C.rounded(expected * math.expm1(low)), C.rounded(added_high)],
            "status": C.judge(point, low, high, fail_above, added, added_high, floor),
            "_log": (point, low, high, None, 1)}


def _same_work_cause(contended: list[str], change: str = "slowdown") -> str:
    """Why a ``change`` (slowdown or speed-up) of the same work cannot be put on the code:
    a contended machine, or one process per side."""
    where = (f"on a contended machine (run {' and '.join(contended)})" if contended
             else "with one process per side")
    return (f"{where} a {change} of the same work cannot be told from the way single ops "
            "vary between processes")


class _Estimates(NamedTuple):
    """What the bootstrap gives: per judged op (point, low, high) of log(B/A) beyond the
    drift; the drift (log); the between-process op noise added (log; None when not)."""

    ops: dict[str, tuple[float, float, float]]
    drift: float
    noise: Optional[float]


def _bootstrap(sa: _Side, sb: _Side, judged: list[str], witnesses: list[str],
               single_process: bool) -> _Estimates:
    """The judged ops' changes beyond the drift with their 95% intervals (module
    docstring); the drift from the ``witnesses`` (judged ops whose work did not change)."""
    if not judged:
        return _Estimates({}, 0.0, None)
    xa = np.stack([sa.ops[n] for n in judged])
    xb = np.stack([sb.ops[n] for n in judged])
    ma, mb = xa.mean(axis=1), xb.mean(axis=1)
    is_witness = np.array([n in witnesses for n in judged])
    weight = np.zeros(len(judged))
    if is_witness.any():
        weight[is_witness] = witness_weights(ma[is_witness])
    weight = weight[:, None]
    logs = np.log(mb) - np.log(ma)
    drift = float(_weighted_median(logs[:, None], weight)[0]) if is_witness.any() else 0.0
    beyond = logs - drift
    picks_a = resample_indices(sa.n, sa.groups, seed=11)
    same = np.array_equal(xa, xb) and list(sa.groups) == list(sb.groups)
    picks_b = picks_a if same else resample_indices(sb.n, sb.groups, seed=12)  # one measurement
    boot_a = xa[:, picks_a].mean(axis=2)
    boot_b = xb[:, picks_b].mean(axis=2)
    boot_logs = np.log(np.maximum(boot_b, 1e-9)) - np.log(np.maximum(boot_a, 1e-9))
    boot_drift = (_weighted_median(boot_logs, np.broadcast_to(weight, boot_logs.shape))
                  if is_witness.any() else np.zeros(boot_logs.shape[1]))
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(boot_logs - boot_drift, [tail, 100 - tail], axis=1)
    noise = None
    if single_process and is_witness.sum() >= 3:
        center = _weighted_median(beyond[:, None], weight)[0]
        noise = 1.4826 * float(_weighted_median(np.abs(beyond - center)[:, None], weight)[0])
    if not single_process:            # few processes: a t interval over their means too
        half = welch_half_width(_run_means(xa, sa.groups), _run_means(xb, sb.groups))
        low, high = np.minimum(low, beyond - half), np.maximum(high, beyond + half)
    extra = C.Z * (noise or 0.0)
    ops = {name: (float(beyond[i]), float(beyond[i] - math.hypot(beyond[i] - low[i], extra)),
                  float(beyond[i] + math.hypot(high[i] - beyond[i], extra)))
           for i, name in enumerate(judged)}
    return _Estimates(ops, drift, noise)


def welch_half_width(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Half the 95% Welch t interval of mean(log b) - mean(log a), row by row, for (k, runs)
    arrays of per-process values: with a handful of processes a bootstrap over them is too
    narrow, the t interval is not."""
    la, lb = np.log(np.maximum(a, 1e-9)), np.log(np.maximum(b, 1e-9))
    va, vb = la.var(axis=1, ddof=1) / la.shape[1], lb.var(axis=1, ddof=1) / lb.shape[1]
    se = np.sqrt(va + vb)
    denom = va ** 2 / (la.shape[1] - 1) + vb ** 2 / (lb.shape[1] - 1)
    df = np.where(denom > 0, (va + vb) ** 2 / np.where(denom > 0, denom, 1.0), 1e9)
    t = np.array([C.t975(d) for d in np.maximum(df, 1)])
    return t * se


def _run_means(x: np.ndarray, groups: list[int]) -> np.ndarray:
    """(k, runs) mean per process of each row's samples."""
    labels = np.asarray(groups)
    return np.stack([x[:, labels == g].mean(axis=1) for g in np.unique(labels)], axis=1)


def witness_weights(times: np.ndarray, cap: float = WITNESS_CAP) -> np.ndarray:
    """Each op's weight as a witness of the process's speed: its share of the time (heavy
    ops are measured more precisely), capped so that no op outweighs ``cap`` of the total
    (one heavy op that changed cannot pass its own change off as the process's)."""
    share = times / times.sum()
    if len(share) * cap <= 1.0:        # too few ops to cap: each counts the same
        return np.full(len(share), 1.0 / len(share))
    for _ in range(len(share)):
        over = share > cap
        if not over.any():
            break
        spare = share[over].sum() - cap * over.sum()
        share = np.where(over, cap, share)
        rest = share < cap
        if not rest.any():
            break
        share = np.where(rest, share + spare * share / share[rest].sum(), share)
    return share


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Column-wise weighted median of (k, r) values with (k, r) non-negative weights."""
    order = np.argsort(values, axis=0)
    v = np.take_along_axis(values, order, axis=0)
    w = np.take_along_axis(weights, order, axis=0)
    cum = np.cumsum(w, axis=0)
    half = cum[-1] / 2.0
    cols = np.arange(values.shape[1])
    idx = np.argmax(cum >= half * (1 - 1e-9), axis=0)
    upper = np.minimum(idx + 1, len(v) - 1)
    exact = np.isclose(cum[idx, cols], half)       # half the weight on each side: average
    return np.where(exact, (v[idx, cols] + v[upper, cols]) / 2.0, v[idx, cols])


def _step_change(a: Report, b: Report, side_a: _Side, side_b: _Side,
                 fail_above: float, single_process: bool, contended: list[str],
                 drift: float = 0.0) -> Optional[ComparedStep]:
    """Median step time of each side (measured or unprofiled steps: module docstring), its
    change and 95% interval, and the status; ``contended``: the sides (A, B) that ran on
    a contended machine."""
    measured = min(len(per_step_of(a)), len(per_step_of(b)))
    if (min(len(side_a.bare_ms), len(side_b.bare_ms)) >= MIN_STEP_SAMPLES
            and measured < ENOUGH_MEASURED_STEPS):
        what = "unprofiled steps (nsbridge's step timer)"
        xa, ga = list(side_a.bare_ms), side_a.bare_groups
        xb, gb = list(side_b.bare_ms), side_b.bare_groups
    else:
        what = "measured steps (torch.profiler step ranges)"
        xa, ga = list(side_a.walls_ms), side_a.groups
        xb, gb = list(side_b.walls_ms), side_b.groups
    if not xa or not xb:
        return None
    va, vb = np.asarray(xa, dtype=np.float64), np.asarray(xb, dtype=np.float64)
    point = math.log(np.median(vb) / np.median(va))
    if np.array_equal(va, vb) and list(ga) == list(gb):   # one measurement on both sides
        return _judged_step(what, va, vb, point, point, fail_above, single_process,
                            contended, drift)
    boot = (np.log(np.median(vb[resample_indices(vb.size, gb, seed=22)], axis=1))
            - np.log(np.median(va[resample_indices(va.size, ga, seed=21)], axis=1)))
    tail = 100 * (1 - LEVEL) / 2
    low, high = (np.percentile(boot, [tail, 100 - tail]) if min(va.size, vb.size) > 1
                 else (point, point))
    if not single_process:            # few processes: a t interval over their medians too
        half = float(welch_half_width(_run_medians(va, ga)[None, :],
                                      _run_medians(vb, gb)[None, :])[0])
        low, high = min(low, point - half), max(high, point + half)
    return _judged_step(what, va, vb, float(low), float(high), fail_above, single_process,
                        contended, drift)


def _judged_step(what: str, va: np.ndarray, vb: np.ndarray, low: float, high: float,
                 fail_above: float, single_process: bool, contended: list[str],
                 drift: float) -> ComparedStep:
    """The step-time row from both sides' samples and the interval of its change."""
    point = math.log(np.median(vb) / np.median(va))
    a_us, b_us = 1e3 * float(np.median(va)), 1e3 * float(np.median(vb))
    status = C.judge(point, low, high, fail_above, b_us - a_us, a_us * math.expm1(high), 0.0)
    significant = status == "regressed"
    change = f"step time {C.pct(point):+.1f}% (95% interval {show_ci(C.interval_pct(low, high))})"
    why = None
    where = (f"on a contended machine (run {' and '.join(contended)})" if contended
             else "with one process per side")
    if significant and (single_process or contended):
        status = "inconclusive"
        why = (f"{change}, but {where} a whole-process slowdown cannot be told from "
               "between-process drift")
    elif status in SPEED_UPS and (single_process or contended):
        status = "within noise"
        why = (f"{change}: a speed-up these runs cannot confirm ({where} a whole-process "
               "speed-up cannot be told from between-process drift)")
    elif significant and low <= drift:
        status = "inconclusive"
        why = (f"{change}, no more than every op moved (drift {C.pct(drift):+.1f}%): a "
               "slower machine and code that got slower everywhere alike look the same")
    return {"source": f"median step time, {what}", "a_us": C.rounded(a_us),
            "b_us": C.rounded(b_us), "statistic": "median", "raw_pct": C.pct(point),
            "change_pct": C.pct(point), "ci_pct": C.interval_pct(low, high),
            "half_width_pct": C.half_width_pct(low, high), "added_us": C.rounded(b_us - a_us),
            "samples": [int(va.size), int(vb.size)], "status": status,
            "significant": significant, "why": why, "_log": (point, low, high, None, 1)}


def _run_medians(values: np.ndarray, groups: list[int]) -> np.ndarray:
    labels = np.asarray(groups)
    return np.array([np.median(values[labels == g]) for g in np.unique(labels)])


def _advice(blockers: list[Blocker], single: bool, contended: list[str],
            a: Report, noise: Noise, fail_above: float) -> list[str]:
    """What would settle an inconclusive answer (the gate keeps it only then)."""
    advice = []
    kinds = {p["kind"] for p in blockers}
    if "status" in kinds:
        advice.append("rerun the run that did not finish and compare again")
    allowable = sorted(kinds - {"status", "device"})
    if allowable:
        advice.append(f"if the difference is intended, accept it: --allow {','.join(allowable)}")
    spread = noise.get("op_noise_pct")
    pairs = processes_needed(math.log1p(spread / 100.0) * math.sqrt(2.0),
                             math.log1p(fail_above / 100.0) / 2.0) if spread else None
    advice.append("measure both sides again, interleaved: nsbridge gate BASE NEW (A, B, A, B "
                  "... in one session, so machine drift hits both alike)"
                  + (f"; at the {spread:.0f}% between-process op noise seen here, about "
                     f"{pairs} processes per side" if pairs and single else ""))
    steps = int(steps_of.get("count") or 0) if (steps_of := a.get("steps")) else 0
    if steps < 10:
        advice.append(f"measure more steps: {steps} measured step(s) here (nsbridge triage "
                      "--steps 25 on both sides; the gate's runs measure 25)")
    threads = ((a.get("machine") or {}).get("threads") or {}).get("intra_op")
    if contended:
        advice.append(f"run {' and '.join(contended)} on a quieter machine"
                      + (", or with one thread (triage --threads 1 on both sides)"
                         if threads and threads > 1 else ""))
    return advice


def _contended(report: Report) -> bool:
    return bool(((report.get("machine") or {}).get("contention") or {}).get("contended"))


def _has_device(report: Report) -> bool:
    return report.get("ranked_by") == S.DEVICE_SELF_US
