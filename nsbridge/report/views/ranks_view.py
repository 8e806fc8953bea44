"""The ranks section (report key ``distributed``): a row per rank and the cross-rank
findings (steps, straggler, failed ranks, skew, collectives).

A job of more than ``ALL_RANKS`` ranks reads as its distribution, not one row per rank: the
rows of the slowest and fastest ranks, the straggler and failed ranks, a line of the step's
quantiles over the ranks, and each collective's time per step as quantiles with its slowest
rank (at 4,096 ranks one line per kind was 68,557 characters). report.json keeps every
rank."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ... import schema as S
from ..document.document import Items, Section, Table
from ..document.pass_view import PassView
from ..document.formats import decimals
from ..document.head import error_text
from ...contract.report import Distributed, DistributedCollective, DistributedRank, Report

RANK_HEADER = ["rank", "host", "status", "step ms", "collectives ms/step", "work ms/step",
               "verdict"]
ALL_RANKS = 16      # up to this many ranks, every rank is a row and named in each line
SLOWEST, FASTEST = 6, 3


def ranks_section(report: Report, limit: Optional[int]) -> Optional[Section]:
    """The rank table (with each rank's trace file for analyze of several traces) and the
    cross-rank findings."""
    dist = report.get(S.DISTRIBUTED_SECTION)
    if not dist:
        return None
    with_file = report.get("command") == "analyze"
    header = RANK_HEADER + (["file"] if with_file else [])
    table = Table(header, rank_rows(dist, with_file),
                  code=frozenset({len(RANK_HEADER)}) if with_file else frozenset())
    return Section("ranks", "Ranks", [table, Items(distributed_lines(dist), brief=3)])


def rank_rows(dist: Distributed, with_file: bool = False) -> list[list[str]]:
    """A row per rank shown (shown_ranks), in rank order (``with_file``: and its trace,
    last)."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"
    return [[str(r.get("rank")), str(r.get("host") or "-"), str(r.get("status")),
             num(r.get("step_ms")), num(r.get("collective_ms_per_step")),
             num(r.get("work_ms_per_step")), str(r.get("verdict") or "-")]
            + ([str(r.get("file") or "-")] if with_file else [])
            for r in shown_ranks(dist)]


def shown_ranks(dist: Distributed) -> list[DistributedRank]:
    """Every rank up to ALL_RANKS; past that the SLOWEST and FASTEST by step time, the
    straggler and the ranks that failed, in rank order."""
    ranks = list(dist.get("ranks") or [])
    if len(ranks) <= ALL_RANKS:
        return ranks
    timed = sorted((r for r in ranks if r.get("step_ms") is not None),
                   key=lambda r: -float(r.get("step_ms") or 0.0))
    keep = {id(r) for r in timed[:SLOWEST] + timed[-FASTEST:]}
    named = {(dist.get("straggler") or {}).get("rank")} | {f.get("rank")
                                                           for f in dist.get("failed") or []}
    return [r for r in ranks if id(r) in keep or r.get("rank") in named]


def distributed_lines(dist: Distributed) -> list[str]:
    """The cross-rank findings as sentences: steps, straggler, failed ranks, skew, collectives."""
    lines = []
    step = dist.get("step")
    if step:
        lines.append(f"{dist['world_size']} ranks: step {step['min_ms']:.2f} / "
                     f"{step['median_ms']:.2f} / {step['max_ms']:.2f} ms (min / median / max); "
                     f"slowest rank {step['slowest_rank']} (+{step['slowest_over_median_pct']:g}% "
                     "over the median)")
    ranks = dist.get("ranks") or []
    if len(ranks) > ALL_RANKS:
        steps = [step_ms for r in ranks if (step_ms := r.get("step_ms")) is not None]
        lines.append(f"table: {len(shown_ranks(dist))} of {len(ranks)} ranks ({SLOWEST} "
                     f"slowest, {FASTEST} fastest, straggler, failed; all in report.json)"
                     + (f"; step ms: {_quantiles(steps)}" if steps else ""))
    straggler = dist.get("straggler")
    if straggler:
        lines.append(f"{str(straggler.get('verdict')).upper()}: "
                     + "; ".join(straggler.get("evidence") or []))
    for f in dist.get("failed") or []:
        err = f.get("error")
        lines.append(f"rank {f['rank']} {f['status']}" + (f": {error_text(err)}" if err else ""))
    for s in (dist.get("skew") or [])[:3]:
        lines.append(f"skew: {s.get('op')} on rank {s.get('max_rank')} "
                     f"{decimals(s.get('max_us'), 1e3, 2) or '-'} ms per step against a median "
                     f"of {decimals(s.get('median_us'), 1e3, 2) or '-'} ms ({s.get('source')})")
    kinds: dict[str, list[DistributedCollective]] = {}
    for c in dist.get("collectives") or []:
        kinds.setdefault(str(c.get("kind")), []).append(c)
    for kind, rows in kinds.items():
        times = _collective_times(rows)
        first = rows[0]
        size, calls = first.get("bytes"), first.get("count")
        lines.append(f"{kind}: {first.get('per_step') or 0:g} per step"
                     + (f", {size / calls / 2**20:.2f} MiB each" if size and calls else "")
                     + f"; ms per step: {times}")
    return lines


def _collective_times(rows: list[DistributedCollective]) -> str:
    """One kind's ms per step on each rank, or past ALL_RANKS ranks their quantiles and
    the slowest rank."""
    if len(rows) <= ALL_RANKS:
        return ", ".join(f"rank {c.get('rank')} "
                         f"{decimals(c.get('time_per_step_us'), 1e3, 2) or '-'}" for c in rows)
    timed = [c for c in rows if c.get("time_per_step_us") is not None]
    if not timed:
        return "-"
    slowest = max(timed, key=lambda c: float(c.get("time_per_step_us") or 0.0))
    return (_quantiles([float(c.get("time_per_step_us") or 0.0) / 1e3 for c in timed])
            + f" over {len(timed)} ranks; slowest rank {slowest.get('rank')}")


def _quantiles(values: list[float]) -> str:
    """min / p10 / median / p90 / max of ``values``, as the ranks lines show them."""
    q = np.percentile(np.asarray(values, dtype=np.float64), [0, 10, 50, 90, 100])
    return " / ".join(f"{v:.2f}" for v in q) + " (min / p10 / median / p90 / max)"


RANKS_VIEW = PassView(report_key=S.DISTRIBUTED_SECTION, section=ranks_section)
