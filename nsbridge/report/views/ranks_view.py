"""The ranks section (report key ``distributed``): one row per rank and the cross-rank
findings (steps, straggler, failed ranks, skew, collectives)."""

from __future__ import annotations

from typing import Any, Optional

from ... import schema as S
from ..document.document import Items, Section, Table
from ..document.pass_view import PassView
from ..document.formats import decimals
from ..document.head import error_text
from ...contract.report import Distributed, DistributedCollective, Report

RANK_HEADER = ["rank", "host", "status", "step ms", "collectives ms/step", "work ms/step",
               "verdict"]


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
    """One row per rank of the cross-rank section (``with_file``: and its trace, last)."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"
    return [[str(r.get("rank")), str(r.get("host") or "-"), str(r.get("status")),
             num(r.get("step_ms")), num(r.get("collective_ms_per_step")),
             num(r.get("work_ms_per_step")), str(r.get("verdict") or "-")]
            + ([str(r.get("file") or "-")] if with_file else [])
            for r in dist.get("ranks") or []]


def distributed_lines(dist: Distributed) -> list[str]:
    """The cross-rank findings as sentences: steps, straggler, failed ranks, skew, collectives."""
    lines = []
    step = dist.get("step")
    if step:
        lines.append(f"{dist['world_size']} ranks: step {step['min_ms']:.2f} / "
                     f"{step['median_ms']:.2f} / {step['max_ms']:.2f} ms (min / median / max); "
                     f"slowest rank {step['slowest_rank']} (+{step['slowest_over_median_pct']:g}% "
                     "over the median)")
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
        times = ", ".join(f"rank {c.get('rank')} "
                          f"{decimals(c.get('time_per_step_us'), 1e3, 2) or '-'}" for c in rows)
        first = rows[0]
        size, calls = first.get("bytes"), first.get("count")
        lines.append(f"{kind}: {first.get('per_step') or 0:g} per step"
                     + (f", {size / calls / 2**20:.2f} MiB each" if size and calls else "")
                     + f"; ms per step: {times}")
    return lines


RANKS_VIEW = PassView(report_key=S.DISTRIBUTED_SECTION, section=ranks_section)
