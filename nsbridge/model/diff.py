"""Two runs compared op by op: a gate that says regression, no regression, or that it cannot
tell.

Comparability comes first (model.comparability). api.diff refuses, before this module
sees them, runs it cannot compare at all (failed, still running, nothing measured, another
schema version or shape, timed on another kind of device, another script unless allowed);
differences of arguments, torch, GPU, threads or cores make the answer inconclusive unless
allowed. Called directly, ``compare`` still never calls fine runs that did not finish,
measured nothing or differ in device or script: they come out inconclusive (it does not
check a report's shape: that is api.diff's refusal).

The numbers. Each op's time per step (self device time when both runs had a GPU, else
self CPU time; ``source`` says which) is its mean over the measured steps
(``ops[].per_step_us``). Between two processes the whole run can be faster or slower
(clocks, caches, other load): that **drift** is the weighted median of the judged ops'
log-ratios, each op a witness of the process's speed weighted by its share of the time
but never more than a quarter of the total (so one heavy op that changed cannot pass its
own change off as drift), and each op is judged by its change *beyond* the drift. Its 95% interval is a
bootstrap over steps, resampling the runs first where ``triage --runs`` pooled several
(model.stats), with the drift recomputed in every resample; with several processes per
side it is widened to at least the Welch t interval over the processes' means (a bootstrap
over a handful of processes is too narrow). With one process on a side the
between-process spread of single ops is not in those samples, so it is estimated from how
much the judged ops moved relative to each other (``op_noise_pct``: 1.4826 x the weighted
median absolute deviation of their log-ratios beyond the drift, the same weights) and added
to each interval.

An op **regressed** when its change beyond the drift is above ``fail_above`` percent, its
interval lies above no change, and the time it added per step beyond the drift is at least
``min_step_share`` of the base step; a change above ``fail_above`` whose interval reaches
no change is **inconclusive**. An op only the new run has regresses when it costs that
share of the step. Ops under ``min_share`` of both runs' time are listed, never gated.

Whether the same work got slower needs the between-process spread of single ops, which
only several processes per side show (on a shared 2-core VM one op took 2.5x as long in one
process as in another, every step, with nothing changed), and on a contended machine
(either run's ``machine.contention``) an op's wall time is mostly its threads waiting for a
CPU. So with one process per side, or on a contended machine, a time regression counts only
when the op's work changed too (its calls per step or input shapes differ between the
runs, a change no noise makes); the same work taking longer is inconclusive there.

Work itself is gated too: an op whose calls per step rose by more than ``fail_above``
percent regressed when the change in its calls, priced per input shape at the cheaper of
the two runs' time per call of that shape (``ops[].shape_work``), adds more than
``fail_above`` percent of the op's time and ``min_step_share`` of the base step, whatever
the timing noise (``basis`` "work", source "torch.profiler call counts").

Step time (median step, unprofiled steps when both runs have at least three, else the
measured ones) regresses the same way, except that a slowdown no larger than the drift
(every op slower alike) cannot be told from a slower machine: with one process per side,
on a contended machine, or when the step's interval reaches down to the drift, it is
inconclusive unless an op regressed too. (Batches of processes made minutes apart on a
shared VM differed by 39% with nothing changed.)

The outcome: ``inconclusive`` (exit 4) when the runs differ in a way not allowed, whatever
the numbers; else ``regression`` (exit 1) when anything gated regressed; else ``inconclusive``
when something gated is inconclusive, or the noise is
so wide that a ``fail_above`` change in most of the judged time could not be seen
(``detectable_pct``, the time-weighted median of the judged ops' interval half-widths,
above ``fail_above``); else ``pass`` (exit 0).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, NamedTuple, Optional, Sequence

import numpy as np

from .. import schema as S
from .comparability import problems
from .stats import LEVEL, resample_indices

Z = 1.96
WITNESS_CAP = 0.25
EXIT_CODES = {"pass": 0, "regression": 1, "inconclusive": 4}
MIN_STEP_SAMPLES = 3


def compare(a: dict[str, Any], b: dict[str, Any], *, fail_above: float = 10.0,
            ops: Sequence[str] = (), min_share: float = 0.01, min_step_share: float = 0.02,
            allow: Iterable[str] = ()) -> dict[str, Any]:
    """B against A (A is the base): outcome, exit_code, reasons, advice, comparability,
    step, ops[], regressions[], inconclusive[] and the noise figures (module docstring)."""
    device = _has_device(a) and _has_device(b)
    key = S.DEVICE_SELF_US if device else S.CPU_SELF_US
    source = "torch.profiler self device time" if device else "torch.profiler self CPU time"
    blockers = problems(a, b, allow)
    side_a, side_b = _Side(a, key), _Side(b, key)
    base_step_us = side_a.mean_step_us
    single = min(side_a.runs, side_b.runs) < 2
    contended = [w for w, r in (("A", a), ("B", b)) if _contended(r)]
    table, noise = _op_table(side_a, side_b, fail_above=fail_above, min_share=min_share,
                             min_step_share=min_step_share, base_step_us=base_step_us,
                             single_process=single, gate=set(ops), contended=bool(contended))
    step = _step_change(a, b, fail_above, single, bool(contended),
                        math.log1p(noise["drift_pct"] / 100.0))
    regressions = [_regression(r, source) for r in table
                   if r["gated"] and r["status"] == "regressed"]
    if step and not ops and (step["status"] == "regressed" or (
            step["status"] == "inconclusive" and step["significant"] and regressions)):
        step["status"] = "regressed"          # on its own, or corroborated by the ops
        regressions.insert(0, {"what": "step time", "source": step["source"],
                               "delta_pct": step["delta_pct"], "ci_pct": step["ci_pct"],
                               "added_ms": _ms(step["b_us"] - step["a_us"]), "basis": "time"})
    unsure = [r for r in table if r["gated"] and r["status"] == "inconclusive"]
    reasons = [f"not comparable: {p['text']}" for p in blockers]
    reasons += [_unsure_reason(r, contended, single) for r in unsure]
    if step and step["status"] == "inconclusive" and not ops:
        reasons.append(step["why"])
    detectable = noise["detectable_pct"]
    if detectable is not None and detectable > fail_above and not regressions:
        reasons.append(f"too noisy to see a +{fail_above:g}% change: the judged ops' 95% "
                       f"intervals are ±{detectable:.0f}% wide (time-weighted median)")
    outcome = ("inconclusive" if blockers else "regression" if regressions
               else "inconclusive" if reasons else "pass")
    return {"outcome": outcome, "exit_code": EXIT_CODES[outcome], "reasons": reasons,
            "advice": _advice(outcome, blockers, single, contended, a),
            "comparability": blockers, "source": source, "fail_above_pct": fail_above,
            "min_step_share_pct": round(100.0 * min_step_share, 3),
            "samples": {"a": side_a.describe(), "b": side_b.describe()},
            "drift_pct": noise["drift_pct"], "op_noise_pct": noise["op_noise_pct"],
            "detectable_pct": detectable, "contended": contended, "step": step,
            "verdict": {"a": (a.get("verdict") or {}).get("label"),
                        "b": (b.get("verdict") or {}).get("label")},
            "machine": {"a": a.get("machine"), "b": b.get("machine")},
            "syncs": _syncs(a, b), "ops": table, "regressions": regressions,
            "inconclusive": [r["op"] for r in unsure]}


class _Side:
    """One run's per-step samples of the gate's time, op by op."""

    def __init__(self, report: dict[str, Any], key: str) -> None:
        per_step = (report.get("steps") or {}).get("per_step") or []
        self.n = len(per_step) or int((report.get("steps") or {}).get("count") or 1)
        self.groups = [int(s.get("run", 1)) for s in per_step] or [1] * self.n
        self.runs = len(set(self.groups))
        walls = [s["wall_ms"] * 1e3 for s in per_step if s.get("wall_ms") is not None]
        self.mean_step_us = float(np.mean(walls)) if walls else None
        spread_ok = report.get("ranked_by") == key
        self.ops: dict[str, np.ndarray] = {}
        self.total: dict[str, float] = {}
        self.spread: dict[str, bool] = {}
        self.work: dict[str, tuple[float, tuple[str, ...]]] = {}
        self.shape_work: dict[str, dict[str, tuple[float, float]]] = {}
        for op in report.get("ops") or []:
            value = op.get(key)
            if value is None or not op.get("name"):
                continue
            self.work[op["name"]] = ((op.get("calls") or 0) / self.n,
                                     tuple(str(x) for x in op.get("shapes") or []))
            self.shape_work[op["name"]] = {e["shape"]: (e["calls"] / self.n, e["us"] / self.n)
                                           for e in op.get(S.SHAPE_WORK) or []}
            samples = op.get(S.PER_STEP_US) or []
            known = spread_ok and len(samples) == self.n
            self.ops[op["name"]] = (np.asarray(samples, dtype=np.float64) if known
                                    else np.full(self.n, float(value) / self.n))
            self.spread[op["name"]] = known
            self.total[op["name"]] = float(value)
        self.grand_total = sum(self.total.values()) or 1.0

    def describe(self) -> dict[str, Any]:
        return {"steps": self.n, "runs": self.runs}


def _op_table(sa: _Side, sb: _Side, *, fail_above: float, min_share: float,
              min_step_share: float, base_step_us: Optional[float], single_process: bool,
              gate: set[str], contended: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    names = sorted(set(sa.ops) | set(sb.ops))
    share = {n: max(sa.total.get(n, 0.0) / sa.grand_total, sb.total.get(n, 0.0) / sb.grand_total)
             for n in names}
    judged = [n for n in names if n in sa.ops and n in sb.ops and share[n] >= min_share
              and sa.ops[n].mean() > 0 and sb.ops[n].mean() > 0]
    est = _bootstrap(sa, sb, judged, single_process)
    floor = min_step_share * base_step_us if base_step_us else 0.0
    rows = []
    for name in names:
        ma = float(sa.ops[name].mean()) if name in sa.ops else None
        mb = float(sb.ops[name].mean()) if name in sb.ops else None
        row: dict[str, Any] = {"op": name, "a_us": _r(ma), "b_us": _r(mb), "delta_pct": None,
                               "beyond_drift_pct": None, "ci_pct": None, "added_us": None,
                               "share": round(share[name], 4), "new": ma is None,
                               "gated": (not gate or name in gate) and share[name] >= min_share,
                               "spread_known": bool(sa.spread.get(name) and sb.spread.get(name))}
        if ma is None:
            row.update(added_us=_r(mb), status="regressed" if floor and mb >= floor else "new")
            row["gated"] = not gate or name in gate
        elif mb is None:
            row.update(added_us=_r(-ma), status="vanished")
        else:
            row["delta_pct"] = _r(100.0 * (mb / ma - 1.0)) if ma else None
            row["work_change"] = _work_change(sa.work[name], sb.work[name])
            row["status"] = "not gated"
            if name in est.ops:
                point, low, high = est.ops[name]
                added = mb - ma * math.exp(est.drift)
                row.update(beyond_drift_pct=_pct(point), ci_pct=[_pct(low), _pct(high)],
                           added_us=_r(added), basis="time")
                row["status"] = _status(point, low, high, fail_above, added >= floor)
                if row["status"] == "regressed" and not row["work_change"] and (
                        single_process or contended):
                    row["status"] = "inconclusive"
            more = _more_work(sa, sb, name, ma, mb)
            if more and row["gated"] and row["status"] != "regressed" and (
                    more["pct"] > fail_above and more["added_us"] >= floor
                    and more["added_us"] > fail_above / 100.0 * ma):
                row.update(status="regressed", basis="work", more_work=more)
        rows.append(row)
    rows.sort(key=lambda r: -abs(r["added_us"] or 0.0))
    judged_rows = [r for r in rows if r["op"] in judged]
    return rows, {"drift_pct": _pct(est.drift), "op_noise_pct": _pct(est.noise),
                  "detectable_pct": _detectable(judged_rows, sa)}


def _more_work(sa: _Side, sb: _Side, name: str, ma: float,
               mb: float) -> Optional[dict[str, Any]]:
    """{calls_a, calls_b, pct, added_us, priced}: the op's calls per step rose, and what the
    change in calls costs: per input shape, each shape's extra (or fewer) calls priced at
    the cheaper of the two runs' time per call of that shape (a shape only one run has, at
    that run's); without shape counts, when the shapes are the same, at the cheaper of the
    runs' mean time per call. None when the calls did not rise or cannot be priced."""
    (calls_a, shapes_a), (calls_b, shapes_b) = sa.work[name], sb.work[name]
    if calls_a <= 0 or calls_b <= calls_a:
        return None
    by_a, by_b = sa.shape_work.get(name), sb.shape_work.get(name)
    if by_a and by_b:
        added = 0.0
        for shape in set(by_a) | set(by_b):
            (ca, ua), (cb, ub) = by_a.get(shape, (0.0, 0.0)), by_b.get(shape, (0.0, 0.0))
            if cb != ca:
                added += (cb - ca) * min(u / c for c, u in ((ca, ua), (cb, ub)) if c > 0)
        priced = "per input shape"
    elif not shapes_a or not shapes_b or set(shapes_a) == set(shapes_b):
        per_call = min(ma / calls_a, mb / calls_b)
        added = per_call * (calls_b - calls_a)
        priced = f"about {per_call / 1e3:.3f} ms each"
    else:
        return None
    return {"calls_a": round(calls_a, 3), "calls_b": round(calls_b, 3),
            "pct": round(100.0 * (calls_b / calls_a - 1.0), 2), "added_us": round(added, 3),
            "priced": priced}


def _work_change(a: tuple[float, tuple[str, ...]],
                 b: tuple[float, tuple[str, ...]]) -> Optional[str]:
    """What changed in an op's work between the runs (calls per step, input shapes), or
    None: the same work."""
    changes = []
    if abs(a[0] - b[0]) > 0.01 * max(a[0], b[0], 1e-9):
        changes.append(f"calls per step {a[0]:g} -> {b[0]:g}")
    if a[1] and b[1] and set(a[1]) != set(b[1]):
        changes.append(f"input shapes {a[1][0]} -> {b[1][0]}")
    return "; ".join(changes) or None


def _regression(row: dict[str, Any], source: str) -> dict[str, Any]:
    """One regression as the gate names it: the op, the value gated and its source."""
    if row.get("basis") == "work":
        more = row["more_work"]
        return {"what": row["op"], "source": "torch.profiler call counts", "delta_pct": more["pct"],
                "ci_pct": None, "added_ms": _ms(more["added_us"]), "basis": "work",
                "detail": f"{more['calls_b']:g} calls per step instead of {more['calls_a']:g}, "
                          f"priced {more['priced']}"}
    return {"what": row["op"], "source": source, "delta_pct": row["beyond_drift_pct"],
            "ci_pct": row["ci_pct"], "added_ms": _ms(row["added_us"]),
            "basis": "time" if not row["new"] else "new"}


def _unsure_reason(row: dict[str, Any], contended: list[str], single: bool) -> str:
    text = f"{row['op']} {row['beyond_drift_pct']:+.1f}% beyond the drift"
    if row["ci_pct"][0] <= 0:
        return text + f", but its 95% interval {_ci(row['ci_pct'])} reaches no change"
    where = (f"on a contended machine (run {' and '.join(contended)})" if contended
             else "with one process per side")
    return (text + f" (95% interval {_ci(row['ci_pct'])}) with the same calls and shapes in "
            f"both runs: {where} a slowdown of the same work cannot be told from the way "
            "single ops vary between processes")


def _status(point: float, low: float, high: float, fail_above: float, material: bool) -> str:
    limit = math.log1p(fail_above / 100.0)
    if point > limit:
        if not material:
            return "too small to matter"
        return "regressed" if low > 0 else "inconclusive"
    if point < -limit:
        return "improved" if high < 0 else "within noise"
    return "unchanged"


class _Estimates(NamedTuple):
    """What the bootstrap gives: per judged op (point, low, high) of log(B/A) beyond the
    drift; the drift (log); the between-process op noise added (log; None when not)."""

    ops: dict[str, tuple[float, float, float]]
    drift: float
    noise: Optional[float]


def _bootstrap(sa: _Side, sb: _Side, judged: list[str], single_process: bool) -> _Estimates:
    """The judged ops' changes beyond the drift with their 95% intervals (module docstring)."""
    if not judged:
        return _Estimates({}, 0.0, None)
    xa = np.stack([sa.ops[n] for n in judged])
    xb = np.stack([sb.ops[n] for n in judged])
    ma, mb = xa.mean(axis=1), xb.mean(axis=1)
    weight = witness_weights(ma)[:, None]
    logs = np.log(mb) - np.log(ma)
    drift = float(_weighted_median(logs[:, None], weight)[0])
    beyond = logs - drift
    boot_a = xa[:, resample_indices(sa.n, sa.groups, seed=11)].mean(axis=2)
    boot_b = xb[:, resample_indices(sb.n, sb.groups, seed=12)].mean(axis=2)
    boot_logs = np.log(np.maximum(boot_b, 1e-9)) - np.log(np.maximum(boot_a, 1e-9))
    boot_drift = _weighted_median(boot_logs, np.broadcast_to(weight, boot_logs.shape))
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(boot_logs - boot_drift, [tail, 100 - tail], axis=1)
    noise = None
    if single_process and len(judged) >= 3:
        center = _weighted_median(beyond[:, None], weight)[0]
        noise = 1.4826 * float(_weighted_median(np.abs(beyond - center)[:, None], weight)[0])
    if not single_process:            # few processes: a t interval over their means too
        half = welch_half_width(_run_means(xa, sa.groups), _run_means(xb, sb.groups))
        low, high = np.minimum(low, beyond - half), np.maximum(high, beyond + half)
    extra = Z * (noise or 0.0)
    ops = {name: (float(beyond[i]), float(beyond[i] - math.hypot(beyond[i] - low[i], extra)),
                  float(beyond[i] + math.hypot(high[i] - beyond[i], extra)))
           for i, name in enumerate(judged)}
    return _Estimates(ops, drift, noise)


# Student's t, 97.5th percentile, by degrees of freedom 1..30 (two-sided 95%)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def welch_half_width(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Half the 95% Welch t interval of mean(log b) - mean(log a), row by row, for (k, runs)
    arrays of per-process values: with a handful of processes a bootstrap over them is too
    narrow, the t interval is not."""
    la, lb = np.log(np.maximum(a, 1e-9)), np.log(np.maximum(b, 1e-9))
    va, vb = la.var(axis=1, ddof=1) / la.shape[1], lb.var(axis=1, ddof=1) / lb.shape[1]
    se = np.sqrt(va + vb)
    denom = va ** 2 / (la.shape[1] - 1) + vb ** 2 / (lb.shape[1] - 1)
    df = np.where(denom > 0, (va + vb) ** 2 / np.where(denom > 0, denom, 1.0), 1e9)
    t = np.array([_T975[min(int(d), 30) - 1] if d < 30 else Z for d in np.maximum(df, 1)])
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


def _detectable(rows: list[dict[str, Any]], sa: _Side) -> Optional[float]:
    """Time-weighted median half-width (percent) of the judged ops' intervals."""
    ok = [(abs(r["ci_pct"][1] - r["ci_pct"][0]) / 2.0, sa.total[r["op"]]) for r in rows
          if r.get("ci_pct") and r["ci_pct"][0] is not None]
    if not ok:
        return None
    widths = np.array([[w] for w, _ in ok])
    weights = np.array([[t] for _, t in ok])
    return round(float(_weighted_median(widths, weights)[0]), 1)


def _step_change(a: dict[str, Any], b: dict[str, Any], fail_above: float,
                 single_process: bool, contended: bool,
                 drift: float = 0.0) -> Optional[dict[str, Any]]:
    """Median step time of each side (unprofiled steps when both have enough), its change
    and 95% interval, and the status (module docstring)."""
    sa, sb = a.get("steps") or {}, b.get("steps") or {}
    bare_a, bare_b = sa.get("unprofiled_ms") or [], sb.get("unprofiled_ms") or []
    if len(bare_a) >= MIN_STEP_SAMPLES and len(bare_b) >= MIN_STEP_SAMPLES:
        what = "unprofiled steps (nsbridge's step timer)"
        xa, ga = bare_a, sa.get("unprofiled_runs") or [1] * len(bare_a)
        xb, gb = bare_b, sb.get("unprofiled_runs") or [1] * len(bare_b)
    else:
        what = "measured steps (torch.profiler step ranges)"
        pa, pb = sa.get("per_step") or [], sb.get("per_step") or []
        xa, ga = [s["wall_ms"] for s in pa], [s.get("run", 1) for s in pa]
        xb, gb = [s["wall_ms"] for s in pb], [s.get("run", 1) for s in pb]
    if not xa or not xb:
        return None
    va, vb = np.asarray(xa, dtype=np.float64), np.asarray(xb, dtype=np.float64)
    point = math.log(np.median(vb) / np.median(va))
    boot = (np.log(np.median(vb[resample_indices(vb.size, gb, seed=22)], axis=1))
            - np.log(np.median(va[resample_indices(va.size, ga, seed=21)], axis=1)))
    tail = 100 * (1 - LEVEL) / 2
    low, high = (np.percentile(boot, [tail, 100 - tail]) if min(va.size, vb.size) > 1
                 else (point, point))
    if not single_process:            # few processes: a t interval over their medians too
        half = float(welch_half_width(_run_medians(va, ga)[None, :],
                                      _run_medians(vb, gb)[None, :])[0])
        low, high = min(low, point - half), max(high, point + half)
    status = _status(point, float(low), float(high), fail_above, True)
    significant = status == "regressed"
    why = None
    if status == "regressed" and (single_process or contended):
        status = "inconclusive"
        why = (f"step time {_pct(point):+.1f}% (95% interval {_ci([_pct(low), _pct(high)])}), "
               "but " + ("on a contended machine" if contended else "with one process per "
                         "side") + " a whole-process slowdown cannot be told from "
               "between-process drift")
    elif status == "regressed" and low <= drift:
        status = "inconclusive"
        why = (f"step time {_pct(point):+.1f}% (95% interval {_ci([_pct(low), _pct(high)])}), "
               f"no more than every op moved (drift {_pct(drift):+.1f}%): a slower machine "
               "and code that got slower everywhere alike look the same; compare runs made "
               "interleaved (A, B, A, B) on the same machine")
    elif status == "inconclusive":
        why = (f"step time {_pct(point):+.1f}%, but its 95% interval "
               f"{_ci([_pct(low), _pct(high)])} reaches no change")
    return {"source": f"median step time, {what}", "a_us": _r(1e3 * float(np.median(va))),
            "b_us": _r(1e3 * float(np.median(vb))), "delta_pct": _pct(point),
            "ci_pct": [_pct(low), _pct(high)], "samples": [int(va.size), int(vb.size)],
            "status": status, "significant": significant, "why": why}


def _run_medians(values: np.ndarray, groups: list[int]) -> np.ndarray:
    labels = np.asarray(groups)
    return np.array([np.median(values[labels == g]) for g in np.unique(labels)])


def _advice(outcome: str, blockers: list[dict[str, str]], single: bool,
            contended: list[str], a: dict[str, Any]) -> list[str]:
    if outcome != "inconclusive":
        return []
    advice = []
    kinds = {p["kind"] for p in blockers}
    if "status" in kinds:
        advice.append("rerun the run that did not finish and compare again")
    allowable = sorted(kinds - {"status", "device"})
    if allowable:
        advice.append(f"if the difference is intended, accept it: --allow {','.join(allowable)}")
    if single:
        advice.append("pool several processes on each side: nsbridge triage --runs 3 (or more)")
    steps = int((a.get("steps") or {}).get("count") or 0)
    if steps < 10:
        advice.append("measure more steps: a profile with schedule.active: 10")
    if contended:
        advice.append(f"run {' and '.join(contended)} on a quieter machine, or with "
                      "torch.set_num_threads(1) on both sides")
    return advice


def _contended(report: dict[str, Any]) -> bool:
    return bool(((report.get("machine") or {}).get("contention") or {}).get("contended"))


def _syncs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[str]]:
    def sites(report: dict[str, Any]) -> set[str]:
        return {f"{p['kind']} at {p['file']}:{p['line']}" if p.get("file")
                else f"{p['kind']} in {p.get('op') or 'no op'}"
                for p in report.get("sync_points", [])}
    sa, sb = sites(a), sites(b)
    return {"new": sorted(sb - sa), "vanished": sorted(sa - sb)}


def _has_device(report: dict[str, Any]) -> bool:
    return report.get("ranked_by") == S.DEVICE_SELF_US


def _pct(log_ratio: Optional[float]) -> Optional[float]:
    return None if log_ratio is None else round(100.0 * math.expm1(log_ratio), 2)


def _ci(ci: Optional[list[Optional[float]]]) -> str:
    if not ci or ci[0] is None:
        return "-"
    return f"{ci[0]:+.1f}..{ci[1]:+.1f}%"


def _ms(us: Optional[float]) -> Optional[float]:
    return None if us is None else round(us / 1e3, 3)


def _r(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(float(value), 3)
