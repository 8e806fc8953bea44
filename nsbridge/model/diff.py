"""Two runs compared op by op, with noise taken from each run's own step-to-step spread.

For every op either run has: calls, self CPU and device time, memory, kernel launches, and
the nsys and ncu numbers when both runs have them. The gate uses one time per op: self
device time when both runs had a GPU, else self CPU time (``source`` says which).

Noise, two kinds. Within a run, the per-step times (ops[].per_step_us) give a standard
error of the difference of the means; a change within twice that is noise (about 95%).
Between runs, a whole process can run a few percent faster or slower (clocks, caches, a
busy machine): that drift is the time-weighted median change over all ops, and each op is
judged by how far it moved beyond it. An op regresses when its change beyond the drift is
above ``fail_above`` percent and outside its noise, and the time it added per step beyond
the drift is at least ``min_step_share`` of the base run's step (smaller changes cannot
move the step time). Ops under ``min_share`` of both runs' time are listed, never gated. Step time is
judged on its own change and spread (steps.per_step), so a slowdown of everything still
fails the gate. On a machine whose speed varies between processes, use a larger threshold
or compare runs made back to back.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

NOISE_SE = 2.0


def compare(a: dict[str, Any], b: dict[str, Any], *, fail_above: float = 10.0,
            ops: Sequence[str] = (), min_share: float = 0.01,
            min_step_share: float = 0.02) -> dict[str, Any]:
    """{step, verdict, ops[], syncs, regressions[], source}: B against A (A is the base)."""
    device = _has_device(a) and _has_device(b)
    key = "device_self_us" if device else "cpu_self_us"
    source = ("torch.profiler self device time" if device else "torch.profiler self CPU time")
    rows_a = {op["name"]: op for op in a.get("ops", []) if op.get(key) is not None}
    rows_b = {op["name"]: op for op in b.get("ops", []) if op.get(key) is not None}
    total_a = sum(op[key] for op in rows_a.values()) or 1.0
    total_b = sum(op[key] for op in rows_b.values()) or 1.0
    steps_a, steps_b = _steps(a), _steps(b)
    # per_step_us holds each run's ranking time: usable only when that is the gate's time
    spread_a, spread_b = a.get("ranked_by") == key, b.get("ranked_by") == key
    series = {name: (_per_step(rows_a.get(name), key, steps_a, spread_a),
                     _per_step(rows_b.get(name), key, steps_b, spread_b))
              for name in sorted(set(rows_a) | set(rows_b))}
    drift = _drift({n: v for n, v in series.items() if n in rows_a and n in rows_b})
    base_step_us = 1e3 * (_mean([s["wall_ms"] for s in (a.get("steps") or {}).get("per_step")
                                 or []]) or 0.0)
    table = []
    for name, (va, vb) in series.items():
        oa, ob = rows_a.get(name), rows_b.get(name)
        change = _change(va, vb, fail_above, drift)
        if change["status"] == "regressed" and base_step_us and (
                change["beyond_drift_us"] < min_step_share * base_step_us):
            change["status"] = "too small to matter"
        share = max((oa or {}).get(key, 0.0) / total_a, (ob or {}).get(key, 0.0) / total_b)
        gated = (not ops or name in ops) and share >= min_share
        if oa is None:   # an op only the new run has: a regression when it matters
            material = base_step_us and (change["b_us"] or 0.0) >= min_step_share * base_step_us
            change["status"] = "regressed" if material else "new"
        elif ob is None:
            change["status"] = "vanished"
        table.append({"op": name, **change, "gated": gated, "share": round(share, 4),
                      "new": oa is None, "a": _numbers(oa, key), "b": _numbers(ob, key)})
    table.sort(key=lambda r: -abs(r["delta_us"] or 0.0))
    step = _change([s["wall_ms"] * 1e3 for s in a.get("steps", {}).get("per_step") or []],
                   [s["wall_ms"] * 1e3 for s in b.get("steps", {}).get("per_step") or []],
                   fail_above) if a.get("steps") and b.get("steps") else None
    regressions = [{"what": r["op"], "source": source, "delta_pct": r["delta_pct"],
                    "noise_pct": r["noise_pct"]}
                   for r in table if r["gated"] and r["status"] == "regressed"]
    if step and step["status"] == "regressed" and not ops:
        regressions.insert(0, {"what": "step time", "source": "torch.profiler step ranges",
                               "delta_pct": step["delta_pct"], "noise_pct": step["noise_pct"]})
    return {"source": source, "fail_above_pct": fail_above,
            "min_step_share_pct": round(100.0 * min_step_share, 3), "drift_pct": round(drift, 2),
            "step": step,
            "verdict": {"a": (a.get("verdict") or {}).get("label"),
                        "b": (b.get("verdict") or {}).get("label")},
            "syncs": _syncs(a, b), "ops": table, "regressions": regressions}


def _change(a: list[float], b: list[float], fail_above: float,
            drift: float = 0.0) -> dict[str, Any]:
    """Mean per step of each side, the delta, the noise band and the status; the change
    is judged beyond the run-wide ``drift`` (percent)."""
    if not a or not b:
        return {"a_us": _mean(a), "b_us": _mean(b), "delta_us": None, "delta_pct": None,
                "beyond_drift_us": None, "noise_pct": None, "status": "not comparable"}
    ma, mb = _mean(a), _mean(b)
    se = math.sqrt(_var(a) / len(a) + _var(b) / len(b))
    delta = mb - ma
    pct = 100.0 * delta / ma if ma else (math.inf if delta > 0 else 0.0)
    noise = 100.0 * NOISE_SE * se / ma if ma else 0.0
    beyond_drift = pct - drift
    beyond_drift_us = delta - drift * ma / 100.0
    beyond = abs(beyond_drift_us) > NOISE_SE * se
    if beyond_drift > fail_above and beyond:
        status = "regressed"
    elif beyond_drift < -fail_above and beyond:
        status = "improved"
    elif abs(pct) > fail_above:
        status = "within noise"
    else:
        status = "unchanged"
    return {"a_us": round(ma, 3), "b_us": round(mb, 3), "delta_us": round(delta, 3),
            "delta_pct": round(pct, 2) if math.isfinite(pct) else None,
            "beyond_drift_us": round(beyond_drift_us, 3), "noise_pct": round(noise, 2),
            "status": status}


def _drift(series: dict[str, tuple[list[float], list[float]]]) -> float:
    """Time-weighted median change (percent) of the ops both runs have."""
    points = sorted((100.0 * (_mean(b) - _mean(a)) / _mean(a), _mean(a))
                    for a, b in series.values() if _mean(a))
    total = sum(w for _, w in points)
    running = 0.0
    for pct, weight in points:
        running += weight
        if running >= total / 2:
            return pct
    return 0.0


def _per_step(op: Optional[dict[str, Any]], key: str, steps: int,
              spread: bool = True) -> list[float]:
    if op is None:
        return [0.0] * max(steps, 1)
    values = (op.get("per_step_us") or []) if spread else []
    return values if values else [op[key] / max(steps, 1)] * max(steps, 1)


def _numbers(op: Optional[dict[str, Any]], key: str) -> Optional[dict[str, Any]]:
    if op is None:
        return None
    out = {"calls": op.get("calls"), "time_us": op.get(key), "cpu_self_us": op.get("cpu_self_us"),
           "device_self_us": op.get("device_self_us"), "mem_mib": op.get("mem_mib"),
           "kernels": sum(k["calls"] for k in op.get("kernels") or [])}
    for pass_key, fields in (("nsys", ("kernel_us", "copy_us")),
                             ("ncu", ("duration_ns", "sm_pct", "achieved_occupancy_pct",
                                      "tensor_pct"))):
        if op.get(pass_key):
            out[pass_key] = {f: op[pass_key].get(f) for f in fields}
    return out


def _syncs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[str]]:
    def sites(report: dict[str, Any]) -> set[str]:
        return {f"{p['kind']} at {p['file']}:{p['line']}" if p.get("file")
                else f"{p['kind']} in {p.get('op') or 'no op'}"
                for p in report.get("sync_points", [])}
    sa, sb = sites(a), sites(b)
    return {"new": sorted(sb - sa), "vanished": sorted(sa - sb)}


def _has_device(report: dict[str, Any]) -> bool:
    return report.get("ranked_by") == "device_self_us"


def _steps(report: dict[str, Any]) -> int:
    return int((report.get("steps") or {}).get("count") or 1)


def _mean(values: list[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def _var(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    m = _mean(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)
