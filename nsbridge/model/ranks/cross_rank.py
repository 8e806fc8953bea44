"""The reduce step: rank summaries (job.summary) -> the cross-rank report; and
several traces (ranks of one job, or several runs) folded into one view (``combine_ops``,
``slowest``).

Per rank and per measured step: the step time, the time some collective was running
(the union of their intervals in the step, so it never exceeds the step) and the work
outside collectives. With collectives the ranks wait for each other, so their step
times even out; the straggler is the rank that works longest outside collectives (the
others wait for it inside them). Without collectives it is the rank with the longest step.

A straggler is called only when it is real: in the measured steps, the rank's excess over
the median of the other ranks is at least ``straggler_pct`` percent of the median step and
at least ``straggler_min_ms``, and the lower end of its 95% interval (Student's t over the
steps) stays above both that floor and the spread between the other ranks; an excess large
enough but not that steady says how many measured steps would decide it. Work is judged
without the time each rank's training loop waited for a CPU (the summaries' ``wait_ms``),
and a rank's host is suspected only when the ranks ran on several hosts. When the excess lies
outside any op torch.profiler recorded (Python code, sleeps, data loading), the report says
so instead of naming ops whose differences are a small part of it.
"""

from __future__ import annotations

import math
import statistics
from typing import (Any, Callable, Iterable, Literal, Mapping, NamedTuple, Optional, Sequence,
                    cast)

import numpy as np
import pandas as pd

from ... import schema as S
from ..host.ops import SHAPE_WORK_TOP, merge_shape_work
from ..comparing.change import t975
from ...schema.records import Output, RankSummary
from ...contract.report import (Distributed, DistributedHeat, DistributedRank,
                                DistributedRanksBreakdownMs, DistributedSkew,
                                DistributedStraggler, ToolRank)

OP_SHARE = 0.10     # an op is named when it holds at least this share of the excess
MAX_STEPS_ADVISED = 200   # more measured steps than this are not offered as the answer
HEAT_COLUMNS = 64         # the op-by-rank heat map's columns at most (runs of ranks past it)


def cross_rank(summaries: Iterable[RankSummary], straggler_pct: float = 10.0,
               top: int = 10, straggler_min_ms: float = 1.0) -> Distributed:
    """{world_size, ranks[], step, skew[], collectives[], straggler, failed[] (the likely
    cause first: _cause_first)}."""
    rows = sorted(summaries, key=lambda s: s["rank"])
    measured = [s for s in rows if s.get("profiled") and s.get("step_ms")]
    per_rank = [rank_row(s) for s in rows]
    out: Distributed = {
        "world_size": max((s.get("world_size") or 0 for s in rows), default=len(rows)),
        "ranks": per_rank, "profiled": [s["rank"] for s in measured],
        "failed": [{"rank": s["rank"], "host": s.get("host"), "status": s["status"],
                    "exit_code": s["exit_code"], "error": s.get("error")}
                   for s in sorted((s for s in rows if s["status"] != "ok"), key=_cause_first)],
        "step": None, "skew": [], "collectives": [], "straggler": None}
    if not measured:
        return out
    profiled = {s["rank"] for s in measured}   # a summary may hold steps yet say not profiled
    medians = {rank: _Timed(step, r.get("collective_ms_per_step") or 0.0,
                            r.get("work_ms_per_step") or 0.0)
               for r in per_rank if (step := r.get("step_ms")) is not None
               and (rank := r.get("rank")) is not None and rank in profiled}
    steps = [t.step_ms for t in medians.values()]
    slowest = max(medians, key=lambda rank: medians[rank].step_ms)
    mid = statistics.median(steps)
    out["step"] = {"min_ms": min(steps), "median_ms": round(mid, 3), "max_ms": max(steps),
                   "slowest_rank": slowest,
                   "slowest_over_median_pct": round(100 * (medians[slowest].step_ms - mid) / mid,
                                                    1) if mid else None}
    skew = out["skew"] = _skew(measured, top)
    out["heat"] = op_heat(measured, [op for row in skew if (op := row.get("op"))])
    out["collectives"] = [{**c, "rank": s["rank"]} for s in measured
                          for c in s.get("collectives") or []]
    out["straggler"] = _straggler(medians, _judged_work(measured),
                                  {s["rank"]: list(s["step_ms"]) for s in measured},
                                  straggler_pct, straggler_min_ms, skew,
                                  several_hosts=len({s.get("host") for s in measured}) > 1)
    return out


def _judged_work(measured: list[RankSummary]) -> _Work:
    """Each rank's work outside collectives per step, as the straggler is judged on it:
    less the time its training loop's thread waited for a CPU in that step, where every
    rank's summary has it (a rank that shares the cores with another job is not slower code; on a 2-core
    machine beside busy processes a rank flagged with nothing planted had waited 10-15 ms
    more per step)."""
    work = {s["rank"]: _work_per_step(s) for s in measured}
    waits = {s["rank"]: s.get("wait_ms") or [] for s in measured}
    if not all(len(waits[r]) == len(work[r]) and work[r] for r in work):
        return _Work(work, None)
    return _Work({r: [max(w - min(wait, w), 0.0) for w, wait in zip(work[r], waits[r])]
                  for r in work}, {r: statistics.median(waits[r]) for r in work})


class _Work(NamedTuple):
    """Per rank: its judged work per step (ms), and its median CPU wait per step taken out
    of it (None: the summaries do not all have it, nothing taken out)."""
    per_step: dict[int, list[float]]
    wait_ms: Optional[dict[int, float]]


class _Timed(NamedTuple):
    """A measured rank's medians per step (ms): its step, its collectives, its work
    outside them."""
    step_ms: float
    collective_ms: float
    work_ms: float


def _collective_per_step(s: RankSummary) -> list[float]:
    """ms per step some collective was running: the summary's per-step union, else (older
    summaries, GPU traces) the summed time spread evenly, never above the step."""
    steps = s.get("step_ms") or []
    union = s.get("collective_ms") or []
    if len(union) == len(steps) and steps:
        comm = (s.get("comm") or {}).get("comm_us")   # GPU: NCCL kernels, the waiting
        if comm is None:
            return [min(u, w) for u, w in zip(union, steps)]
    comm = (s.get("comm") or {}).get("comm_us")
    total = comm if comm is not None else sum(c["time_us"] for c in s.get("collectives") or [])
    each = total / 1e3 / max(len(steps), 1)
    return [min(each, w) for w in steps]


def _work_per_step(s: RankSummary) -> list[float]:
    """ms per step outside collectives."""
    return [max(w - c, 0.0) for w, c in zip(s.get("step_ms") or [], _collective_per_step(s))]


def rank_row(s: RankSummary) -> DistributedRank:
    """The one row of a rank in report.json's ``distributed.ranks``, from its summary
    (job.summary): status, step times (median, min, max; the median per-step time in
    collectives and the rest of the median step, the work outside them), verdict, device
    figures; ``file`` (its trace: the path given to analyze, or the name in its rank
    folder), ``busy_pct`` (the verdict's device busy %) and ``ops`` (how many ops it ran)
    where known; ``breakdown_ms`` (step_breakdown)."""
    steps = s.get("step_ms") or []
    coll = statistics.median(_collective_per_step(s)) if steps else None
    step = statistics.median(steps) if steps else None
    # the rest of the median step: the row's columns add up (medians of the per-step work
    # and collectives did not: 5.73 ms against 1.71 + 4.33 on a 2-rank DDP job)
    work = max(step - coll, 0.0) if step is not None and coll is not None else None
    return {"rank": s["rank"], "host": s.get("host"), "status": s["status"],
            "exit_code": s["exit_code"], "profiled": bool(s.get("profiled")),
            "step_ms": None if step is None else round(step, 3),
            "min_step_ms": min(steps) if steps else None,
            "max_step_ms": max(steps) if steps else None,
            "collective_ms_per_step": None if coll is None else round(coll, 3),
            "work_ms_per_step": None if work is None else round(work, 3),
            "verdict": s.get("verdict"), "device_busy_pct": s.get("device_busy_pct"),
            "comm_overlap_pct": (s.get("comm") or {}).get("overlap_pct"),
            "file": s.get("trace"), "busy_pct": (s.get("numbers") or {}).get("device_busy_pct"),
            "ops": len(s["ops"]) if s.get("ops") is not None else None,
            "breakdown_ms": step_breakdown(step, work, s.get("device_busy_pct"),
                                           (s.get("comm") or {}).get("overlap_pct"))}


def step_breakdown(step: Optional[float], work: Optional[float], busy_pct: Optional[float],
                   overlap_pct: Optional[float]) -> Optional[DistributedRanksBreakdownMs]:
    """A rank's median step split into parts that add up to it (ms), from its median work
    outside collectives per step (``work_ms_per_step``, the same number the rank table
    shows): ``idle`` (the GPU idle: step x (1 - busy)), ``overlap`` (collectives running
    while compute does), ``communication`` (collectives exposed), ``compute`` (the work
    less the GPU idle). Without a device, idle and overlap are unknown (None) and compute
    is the work itself."""
    if step is None or work is None:
        return None
    comm = max(step - work, 0.0)
    if busy_pct is None:
        return {"compute": round(max(step - comm, 0.0), 3), "communication": round(comm, 3),
                "overlap": None, "idle": None}
    idle = step * max(0.0, 1 - busy_pct / 100)
    overlap = comm * (overlap_pct or 0.0) / 100
    return {"compute": round(max(step - idle - comm, 0.0), 3),
            "communication": round(comm - overlap, 3), "overlap": round(overlap, 3),
            "idle": round(idle, 3)}


def _cause_first(summary: RankSummary) -> tuple[bool, float, int]:
    """Failed ranks, the likely cause first: one that failed on its own before one a
    launcher stopped or that never answered, and among those the first to fail (the
    others' errors, such as "Connection closed by peer", follow from it)."""
    at = (summary.get("error") or {}).get("at")
    stopped = summary["status"] in ("terminated", "hung", "interrupted")
    return stopped, at if isinstance(at, (int, float)) else float("inf"), summary["rank"]


def tool_rank_row(tool: str, rank: int, out: Optional[Output], *,
                  numbers: Callable[[Mapping[str, Any], Output, str], Mapping[str, object]],
                  reason: Optional[str], host: Optional[str], folder: str,
                  missing: str) -> ToolRank:
    """The one row of a rank in the ``ranks`` of a pass's section, from that rank's pass
    output (None: it never answered, ``missing`` says why): status, error, and the
    headline numbers the pass picks (``numbers(section, output, folder)``, file names
    under the rank's ``folder``)."""
    if out is None:
        return {"rank": rank, "host": host, "reason": reason, "status": "hung",
                "error": f"no {tool} output: {missing}"}
    row: ToolRank = {"rank": rank, "host": host, "reason": reason, "status": out["status"],
                     "error": (out.get("error") or {}).get("message")}
    row["wall_s"] = (out.get("manifest") or {}).get("wall_s")
    section = out.get("section")
    if not section:
        return row
    return cast(ToolRank, {**row, **numbers(section[1], out, folder)})


def _skew(measured: list[RankSummary], top: int) -> list[DistributedSkew]:
    """Ops whose time per step differs most across ranks (device time when every rank had
    a GPU, else CPU time)."""
    device = all(s.get("has_device") for s in measured)
    key: Literal["device_self_us", "cpu_self_us"] = ("device_self_us" if device
                                                     else "cpu_self_us")
    times: dict[str, dict[int, float]] = {}
    for s in measured:
        n = max(len(s["step_ms"]), 1)
        for op in s.get("ops") or []:
            if op.get(key) is not None:
                times.setdefault(op["name"], {})[s["rank"]] = float(op[key] or 0) / n
    rows: list[DistributedSkew] = []
    for name, by_rank in times.items():
        if len(by_rank) < 2:
            continue
        values = list(by_rank.values())
        mid = statistics.median(values)
        worst = max(by_rank, key=by_rank.__getitem__)
        rows.append({"op": name, "source": f"torch.profiler {key.replace('_us', '')}",
                     "min_us": round(min(values), 3), "median_us": round(mid, 3),
                     "max_us": round(max(values), 3), "max_rank": worst,
                     "excess_us": round(by_rank[worst] - mid, 3),
                     "skew_pct": round(100 * (by_rank[worst] - mid) / mid, 1) if mid else None})
    return sorted(rows, key=lambda r: -(r.get("excess_us") or 0.0))[:top]


def op_heat(measured: list[RankSummary], ops: list[str],
            columns: int = HEAT_COLUMNS) -> Optional[DistributedHeat]:
    """The heat map of ``ops``' time per step by rank (the skew's source): one column per
    rank up to ``columns`` ranks, else runs of consecutive ranks, each cell the largest
    rank's time in its run, so a single slow rank still shows among thousands."""
    if len(measured) < 2 or not ops:
        return None
    key: Literal["device_self_us", "cpu_self_us"] = (
        "device_self_us" if all(s.get("has_device") for s in measured) else "cpu_self_us")
    ranked = sorted(measured, key=lambda s: s["rank"])
    width = -(-len(ranked) // columns)          # ranks per column, rounded up
    runs = [ranked[i:i + width] for i in range(0, len(ranked), width)]
    per_rank = {s["rank"]: {op["name"]: float(op[key] or 0) / max(len(s["step_ms"]), 1)
                            for op in s.get("ops") or [] if op.get(key) is not None}
                for s in ranked}
    cells = [[round(max((per_rank[s["rank"]].get(op, 0.0) for s in run), default=0.0), 3)
              for run in runs] for op in ops]
    return {"ops": ops, "source": f"torch.profiler {key.replace('_us', '')}",
            "ranks": [[run[0]["rank"], run[-1]["rank"]] for run in runs], "max_us": cells}


def _straggler(ranks: dict[int, _Timed], work: _Work, steps: dict[int, list[float]],
               threshold: float, min_ms: float, skew: list[DistributedSkew], *,
               several_hosts: bool) -> Optional[DistributedStraggler]:
    if len(ranks) < 2:
        return None
    with_coll = any(t.collective_ms for t in ranks.values())
    metric = "work_ms_per_step" if with_coll else "step_ms"
    what = "works outside collectives" if with_coll else "takes per step"
    waits = work.wait_ms if with_coll else None
    series = {rank: (work.per_step if with_coll else steps)[rank] for rank in ranks}
    # the table's figures (one number, one place), less each rank's median CPU wait
    values = {rank: max(t.work_ms - (waits[rank] if waits else 0.0), 0.0) if with_coll
              else t.step_ms for rank, t in ranks.items()}
    worst = max(values, key=values.__getitem__)
    others = [rank for rank in ranks if rank != worst]
    mid = statistics.median(values[rank] for rank in others)
    step = statistics.median(t.step_ms for t in ranks.values())
    excess_ms = values[worst] - mid
    excess = 100 * excess_ms / step if step else 0.0
    low, high = _excess_interval(series, worst, others)
    spread = _between_ranks(values, others)
    floor = max(min_ms, threshold / 100 * step, spread)
    waited = (f" (not counting the {waits[worst]:.2f} ms per step its training loop waited "
              "for a CPU)" if waits and waits[worst] >= 0.005 else "")
    evidence = [f"rank {worst} {what} {values[worst]:.2f} ms per step{waited}, "
                f"{excess_ms:.2f} ms more than the median of the other ranks ({mid:.2f} ms): "
                f"{excess:.0f}% of the {step:.2f} ms step"
                + (f" (95% interval {low:.2f} to {high:.2f} ms over the measured steps)"
                   if low is not None else "")]
    called = low is not None and excess >= threshold and excess_ms >= min_ms and low >= floor
    if not called:
        evidence.append(_why_balanced(excess, excess_ms, low, threshold, min_ms, spread)
                        + _steps_to_decide(series, worst, others, floor, excess_ms,
                                           excess >= threshold and excess_ms >= min_ms))
    if with_coll and called:
        waits_in = {rank: t.collective_ms - ranks[worst].collective_ms
                    for rank, t in ranks.items() if rank != worst}
        waiting = [kv for kv in sorted(waits_in.items(), key=lambda kv: -kv[1])[:3]
                   if kv[1] > 0]
        if waiting:
            evidence.append("the other ranks wait for it inside collectives: " + ", ".join(
                f"rank {rank} {wait:.2f} ms per step more than rank {worst}"
                for rank, wait in waiting))
    if called:
        evidence.append(_where_excess(worst, excess_ms, skew))
    compare = ("its host (another job, thermal throttling, a slower GPU), its data"
               if several_hosts else "its data")
    return {"verdict": "straggler" if called else "balanced", "rank": worst if called else None,
            "excess_pct": round(excess, 1), "excess_ms": round(excess_ms, 3),
            "excess_ci_ms": (None if low is None or high is None
                             else [round(low, 3), round(high, 3)]),
            "floor_ms": round(floor, 3), "metric": metric, "evidence": evidence,
            "recommendation": {
                "id": "straggler", "title": f"Speed up rank {worst}, the straggler",
                "why": evidence[0], "impact": round(min(excess / 100, 1.0), 3),
                "fix": (f"every rank waits for rank {worst} at each collective: compare "
                        f"{compare} (uneven shards or sequence lengths) and the ops above "
                        "with the other ranks'; profile it alone with --ranks " + str(worst)),
                "url": "https://pytorch.org/docs/stable/notes/ddp.html",
                "addresses_verdict": True} if called else None}


def _excess_interval(series: dict[int, list[float]], worst: int,
                     others: list[int]) -> tuple[Optional[float], Optional[float]]:
    """95% interval (ms) of the mean per-step excess of ``worst`` over the median of the
    other ranks, step by step (steps aligned by position): Student's t over the steps'
    excesses (a bootstrap of 3 steps gave little more than their range)."""
    diff = _step_excess(series, worst, others)
    if diff is None:
        return None, None
    half = t975(len(diff) - 1) * float(diff.std(ddof=1)) / math.sqrt(len(diff))
    return float(diff.mean()) - half, float(diff.mean()) + half


def _step_excess(series: dict[int, list[float]], worst: int,
                 others: list[int]) -> Optional[np.ndarray]:
    """Per measured step, ``worst``'s value less the median of the other ranks' (None with
    fewer than 2 steps)."""
    n = min(len(series[r]) for r in [worst, *others])
    if n < 2:
        return None
    rest = np.median(np.asarray([series[r][:n] for r in others]), axis=0)
    return np.asarray(series[worst][:n]) - rest


def _steps_to_decide(series: dict[int, list[float]], worst: int, others: list[int],
                     floor: float, excess_ms: float, large: bool) -> str:
    """What would settle an excess large enough to be a straggler but not steady enough
    over the steps measured: about how many steps bring its interval's lower end over the
    floor, at the steps' spread so far ('' when more steps would not, or it was not large
    enough)."""
    diff = _step_excess(series, worst, others)
    if not large or diff is None or excess_ms <= floor:
        return ""
    sd = float(diff.std(ddof=1))
    for n in range(len(diff) + 1, MAX_STEPS_ADVISED + 1):
        if t975(n - 1) * sd / math.sqrt(n) <= excess_ms - floor:
            return (f"; about {n} measured steps at this spread would decide it "
                    f"(nsbridge triage --steps {n})")
    return ""


def _between_ranks(values: dict[int, float], others: list[int]) -> float:
    """How far the other ranks spread around their median (ms): 1.4826 x their MAD, zero
    with fewer than three of them."""
    if len(others) < 3:
        return 0.0
    rest = [values[r] for r in others]
    mid = statistics.median(rest)
    return 1.4826 * statistics.median(abs(v - mid) for v in rest)


def _why_balanced(excess: float, excess_ms: float, low: Optional[float], threshold: float,
                  min_ms: float, spread: float) -> str:
    if low is None:
        return "too few measured steps to tell a straggler from noise"
    if excess < threshold:
        return f"below the {threshold:g}% of the step that makes a straggler"
    if excess_ms < min_ms:
        return f"below the {min_ms:g} ms per step that makes a straggler"
    return (f"not steady across the measured steps: its 95% interval reaches {low:.2f} ms, "
            f"under the floor of {max(min_ms, spread):.2f} ms and {threshold:g}% of the step")


def _where_excess(worst: int, excess_ms: float, skew: list[DistributedSkew]) -> str:
    """Which ops hold the straggler's excess, or that it lies outside any op."""
    mine = [(str(s.get("op")), (s.get("excess_us") or 0.0) / 1e3) for s in skew
            if s.get("max_rank") == worst]
    in_ops = sum(ms for _, ms in mine)
    named = [(op, ms) for op, ms in mine if ms >= OP_SHARE * excess_ms][:3]
    outside = max(excess_ms - in_ops, 0.0)
    if not named or outside >= 0.5 * excess_ms:
        text = (f"{outside:.2f} of rank {worst}'s {excess_ms:.2f} ms per step lies outside any "
                "op torch.profiler recorded: Python code, sleeps, data loading or I/O")
        if named:
            text += "; of the ops, " + ", ".join(f"{op} +{ms:.2f} ms" for op, ms in named)
        return text
    return (f"rank {worst}'s ops that take longest against the median rank: "
            + ", ".join(f"{op} +{ms:.2f} ms per step" for op, ms in named))


def combine_ops(tables: list[pd.DataFrame], has_device: bool) -> pd.DataFrame:
    """Sum OPS frames by op name (kernels and copies merged by name); self_pct recomputed."""
    if len(tables) == 1:
        return tables[0]
    return ranked_ops(merge_ops(tables), has_device)


def merge_ops(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """OPS frames (or earlier merges) summed by op name, in their order: every shape
    signature kept, so merging in batches and once gives the same sums (ranked_ops makes
    it an OPS frame)."""
    frame = pd.concat(tables, ignore_index=True)
    by_name = frame.groupby("name", sort=False)
    numeric = by_name[S.OP_SUMMED_COLUMNS].sum(min_count=1)
    shapes = by_name["shapes"].first()
    kernels = by_name["kernels"].apply(_merge_work)
    copies = by_name["copies"].apply(_merge_work)
    spread = by_name["per_step_us"].apply(_sum_steps)
    work = by_name["shape_work"].apply(merge_shape_work, top=None)
    return numeric.join(shapes).join(kernels).join(copies).join(spread).join(work).reset_index()


def ranked_ops(table: pd.DataFrame, has_device: bool) -> pd.DataFrame:
    """A merge_ops sum as an OPS frame: each op's top shape signatures, self_pct of the
    ranking time, costliest first."""
    table = table.assign(shape_work=[w[:SHAPE_WORK_TOP] for w in table["shape_work"]])
    rank_col = "device_self_us" if has_device else "cpu_self_us"
    total = table[rank_col].sum()
    table["self_pct"] = 100.0 * table[rank_col] / total if total > 0 else 0.0
    table = table.sort_values([rank_col, "cpu_total_us"], ascending=False, kind="stable")
    return table[S.OP_COLUMNS].reset_index(drop=True)


def slowest(summaries: Sequence[Mapping[str, Any]]) -> int:
    """Index of the rank with the longest mean step: it sets the job's pace."""
    walls = [s.get("step_ms") or 0.0 for s in summaries]
    return int(np.argmax(walls)) if walls else 0


def _sum_steps(lists: pd.Series) -> list[float]:
    """Per-step times of several ranks added step by step (ranks step together)."""
    width = max((len(v) for v in lists), default=0)
    return [round(sum(v[i] for v in lists if i < len(v)), 3) for i in range(width)]


_WORK_KEY = ("name", "kind", "via", "source")


def _merge_work(lists: pd.Series) -> list[dict[str, Any]]:
    """Kernel (or copy) entries of several traces summed by name (and kind, and how it
    was launched: via, source)."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for entries in lists:
        for k in entries:
            fresh = {**k, "calls": 0, "device_us": 0.0}
            if "bytes" in k:
                fresh["bytes"] = None
            row = merged.setdefault(tuple(k.get(f) for f in _WORK_KEY), fresh)
            row["calls"] += k["calls"]
            row["device_us"] = round(row["device_us"] + k["device_us"], 3)
            if k.get("bytes") is not None:
                row["bytes"] = (row["bytes"] or 0) + k["bytes"]
    return sorted(merged.values(),      # ties by name: the same order however merged
                  key=lambda k: (-k["device_us"], *(str(k.get(f)) for f in _WORK_KEY)))
