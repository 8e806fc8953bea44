"""The ranks section (report key ``distributed``): one row per rank and the cross-rank
findings (steps, straggler, failed ranks, skew, collectives)."""

from __future__ import annotations

from typing import Any, Optional

from ... import schema as S
from ..document.document import Items, Section, Table
from ..document.pass_view import PassView
from ..document.head import error_text

RANK_HEADER = ["rank", "host", "status", "step ms", "collectives ms/step", "work ms/step",
               "verdict"]


def ranks_section(report: dict[str, Any], limit: Optional[int]) -> Optional[Section]:
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


def rank_rows(dist: dict[str, Any], with_file: bool = False) -> list[list[str]]:
    """One row per rank of the cross-rank section (``with_file``: and its trace, last)."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"
    return [[str(r["rank"]), str(r.get("host") or "-"), r["status"], num(r["step_ms"]),
             num(r["collective_ms_per_step"]), num(r["work_ms_per_step"]),
             str(r.get("verdict") or "-")] + ([str(r.get("file") or "-")] if with_file else [])
            for r in dist["ranks"]]


def distributed_lines(dist: dict[str, Any]) -> list[str]:
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
        lines.append(f"{straggler['verdict'].upper()}: " + "; ".join(straggler["evidence"]))
    for f in dist.get("failed", []):
        err = f.get("error")
        lines.append(f"rank {f['rank']} {f['status']}" + (f": {error_text(err)}" if err else ""))
    for s in dist.get("skew", [])[:3]:
        lines.append(f"skew: {s['op']} on rank {s['max_rank']} {s['max_us'] / 1e3:.2f} ms per "
                     f"step against a median of {s['median_us'] / 1e3:.2f} ms ({s['source']})")
    kinds: dict[str, list[dict[str, Any]]] = {}
    for c in dist.get("collectives", []):
        kinds.setdefault(c["kind"], []).append(c)
    for kind, rows in kinds.items():
        times = ", ".join(f"rank {c['rank']} {c['time_per_step_us'] / 1e3:.2f}" for c in rows)
        size = rows[0]["bytes"]
        lines.append(f"{kind}: {rows[0]['per_step']:g} per step"
                     + (f", {size / rows[0]['count'] / 2**20:.2f} MiB each" if size else "")
                     + f"; ms per step: {times}")
    return lines


RANKS_VIEW = PassView(report_key=S.DISTRIBUTED_SECTION, section=ranks_section)
