"""The reduce step: rank summaries (distributed.summary) -> the cross-rank report.

Per rank: step time, time in collectives per step, and the work outside them. With
collectives the ranks wait for each other, so their step times even out; the straggler is
the rank that works longest outside collectives (the others wait for it inside them).
Without collectives it is the rank with the longest step. A straggler is called when its
excess over the median rank is at least ``straggler_pct`` percent of the median step: a
small absolute difference between two short stretches of work is noise, not a straggler.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Optional


def cross_rank(summaries: Iterable[dict[str, Any]], straggler_pct: float = 10.0,
               top: int = 10) -> dict[str, Any]:
    """{world_size, ranks[], step, skew[], collectives[], straggler, failed[]}."""
    rows = sorted(summaries, key=lambda s: s["rank"])
    measured = [s for s in rows if s.get("profiled") and s.get("step_ms")]
    per_rank = [_rank_row(s) for s in rows]
    out: dict[str, Any] = {
        "world_size": max((s.get("world_size") or 0 for s in rows), default=len(rows)),
        "ranks": per_rank, "profiled": [s["rank"] for s in measured],
        "failed": [{"rank": s["rank"], "host": s.get("host"), "status": s["status"],
                    "exit_code": s["exit_code"], "error": s.get("error")}
                   for s in rows if s["status"] != "ok"],
        "step": None, "skew": [], "collectives": [], "straggler": None}
    if not measured:
        return out
    medians = {r["rank"]: r for r in per_rank if r["step_ms"] is not None}
    steps = [r["step_ms"] for r in medians.values()]
    slowest = max(medians.values(), key=lambda r: r["step_ms"])
    mid = statistics.median(steps)
    out["step"] = {"min_ms": min(steps), "median_ms": round(mid, 3), "max_ms": max(steps),
                   "slowest_rank": slowest["rank"],
                   "slowest_over_median_pct": round(100 * (slowest["step_ms"] - mid) / mid, 1)
                   if mid else None}
    out["skew"] = _skew(measured, top)
    out["collectives"] = [{**c, "rank": s["rank"]} for s in measured
                          for c in s.get("collectives") or []]
    out["straggler"] = _straggler(medians, straggler_pct, out["skew"])
    return out


def _rank_row(s: dict[str, Any]) -> dict[str, Any]:
    steps = s.get("step_ms") or []
    n = max(len(steps), 1)
    comm = (s.get("comm") or {}).get("comm_us")   # GPU: NCCL kernels, where the waiting is
    coll = (comm if comm is not None else sum(
        c["time_us"] for c in s.get("collectives") or [])) / 1e3 / n
    step = statistics.median(steps) if steps else None
    return {"rank": s["rank"], "host": s.get("host"), "status": s["status"],
            "exit_code": s["exit_code"], "profiled": bool(s.get("profiled")),
            "step_ms": None if step is None else round(step, 3),
            "min_step_ms": min(steps) if steps else None,
            "max_step_ms": max(steps) if steps else None,
            "collective_ms_per_step": round(coll, 3) if steps else None,
            "work_ms_per_step": None if step is None else round(max(step - coll, 0.0), 3),
            "verdict": s.get("verdict"), "device_busy_pct": s.get("device_busy_pct"),
            "comm_overlap_pct": (s.get("comm") or {}).get("overlap_pct")}


def _skew(measured: list[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    """Ops whose time per step differs most across ranks (device time when every rank had
    a GPU, else CPU time)."""
    device = all(s.get("has_device") for s in measured)
    key = "device_self_us" if device else "cpu_self_us"
    times: dict[str, dict[int, float]] = {}
    for s in measured:
        n = max(len(s["step_ms"]), 1)
        for op in s.get("ops") or []:
            if op.get(key) is not None:
                times.setdefault(op["name"], {})[s["rank"]] = op[key] / n
    rows = []
    for name, by_rank in times.items():
        if len(by_rank) < 2:
            continue
        values = list(by_rank.values())
        mid = statistics.median(values)
        worst = max(by_rank, key=by_rank.get)
        rows.append({"op": name, "source": f"torch.profiler {key.replace('_us', '')}",
                     "min_us": round(min(values), 3), "median_us": round(mid, 3),
                     "max_us": round(max(values), 3), "max_rank": worst,
                     "excess_us": round(by_rank[worst] - mid, 3),
                     "skew_pct": round(100 * (by_rank[worst] - mid) / mid, 1) if mid else None})
    return sorted(rows, key=lambda r: -r["excess_us"])[:top]


def _straggler(ranks: dict[int, dict[str, Any]], threshold: float,
               skew: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    if len(ranks) < 2:
        return None
    with_coll = any(r["collective_ms_per_step"] for r in ranks.values())
    metric = "work_ms_per_step" if with_coll else "step_ms"
    what = "works outside collectives" if with_coll else "takes per step"
    values = {rank: r[metric] for rank, r in ranks.items()}
    worst = max(values, key=values.get)
    mid = statistics.median(values.values())
    step = statistics.median(r["step_ms"] for r in ranks.values())
    excess = 100 * (values[worst] - mid) / step if step else 0.0
    evidence = [f"rank {worst} {what} {values[worst]:.2f} ms per step, "
                f"{values[worst] - mid:.2f} ms more than the median rank ({mid:.2f} ms): "
                f"{excess:.0f}% of the {step:.2f} ms step"]
    called = excess >= threshold
    if with_coll and called:
        waits = {rank: r["collective_ms_per_step"] - ranks[worst]["collective_ms_per_step"]
                 for rank, r in ranks.items() if rank != worst}
        waiting = [kv for kv in sorted(waits.items(), key=lambda kv: -kv[1])[:3] if kv[1] > 0]
        if waiting:
            evidence.append("the other ranks wait for it inside collectives: " + ", ".join(
                f"rank {rank} {wait:.2f} ms per step more than rank {worst}"
                for rank, wait in waiting))
    ops = [s for s in skew if s["max_rank"] == worst][:3]
    if ops:
        evidence.append(f"rank {worst}'s ops that take longest against the median rank: "
                        + ", ".join(f"{s['op']} +{s['excess_us'] / 1e3:.2f} ms per step"
                                    for s in ops))
    return {"verdict": "straggler" if called else "balanced", "rank": worst if called else None,
            "excess_pct": round(excess, 1), "metric": metric, "evidence": evidence,
            "recommendation": {
                "id": "straggler", "title": f"Speed up rank {worst}, the straggler",
                "why": evidence[0], "impact": round(min(excess / 100, 1.0), 3),
                "fix": (f"every rank waits for rank {worst} at each collective: compare its "
                        "host (another job, thermal throttling, a slower GPU), its data (uneven "
                        "shards or sequence lengths) and the ops above with the other ranks'; "
                        "profile it alone with --ranks " + str(worst)),
                "url": "https://pytorch.org/docs/stable/notes/ddp.html",
                "addresses_verdict": True} if called else None}
