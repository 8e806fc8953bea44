"""The Nsight Compute section (report key ``ncu``) and the ncu columns of the op table
(ops[].ncu)."""

from __future__ import annotations

from typing import Any, Optional

from ... import schema as S
from ...model.nsight.ncu_findings import si
from ..document.document import IN_FILES, TERMINAL, Items, Section, Table
from ..document.escape import terminal
from ..document.pass_view import OpColumn, PassView
from ..document.formats import cell, count, file_names, us_from_ns
from ...contract.report import Ncu, Report, pass_numbers

TOP_FAMILIES = 15   # kernel families on the roofline chart
NCU_RANK_HEADER = ["rank", "why this rank", "status", "launches", "per op: µs, SM %, "
                   "occupancy %, tensor %", "ncu report"]
LAUNCH_HEADER = ["launch", "op", "kernel", "µs", "SM %", "mem %", "occupancy %", "tensor %",
                 "L2 hit %"]


def ncu_section(report: Report, limit: Optional[int]) -> Optional[Section]:
    """The deep profile: each op's findings, each rank's profile in a job of several, and
    every profiled launch (in the files)."""
    ncu = report.get(S.NCU_SECTION)
    if not ncu:
        return None
    blocks: list[Any] = []
    findings = findings_rows(report)
    if findings:
        blocks.append(Table(["op or kernel", "finding", "numbers", "fix"], findings,
                            code=frozenset({0}), views=IN_FILES))
        blocks.append(Items([f"{where}: {title}: {numbers}. Fix: {fix}"
                             for where, title, numbers, fix in findings], brief=12,
                            views=frozenset({TERMINAL})))
    roofline = roofline_rows(ncu.get("families") or [], limit)
    if roofline:
        blocks.append(Table(ROOFLINE_HEADER, roofline, code=frozenset({0}), brief=8,
                            lead="Roofline per kernel family (from ncu's own counters and "
                                 "peaks):"))
    if ncu.get("ranks"):
        blocks.append(Table(NCU_RANK_HEADER, rank_rows(ncu), code=frozenset({5}),
                            lead=f"Per rank (the findings above are rank "
                                 f"{ncu['shown_rank']}'s):"))
    launches = [[str(k["launch"]), k.get("op") or "-", str(k["kernel"])[:90],
                 cell(us_from_ns(k.get("duration_ns")), "text"),
                 *(cell(k.get(key), "pct") for key in ("sm_pct", "memory_pct",
                                                       "achieved_occupancy_pct", "tensor_pct",
                                                       "l2_hit_pct"))]
                for k in (ncu.get("kernels") or [])[:limit]]
    if launches:
        blocks.append(Table(LAUNCH_HEADER, launches, code=frozenset({1, 2}),
                            lead="Profiled launches:", folded=True, views=IN_FILES))
    return Section("ncu", "Kernels (Nsight Compute)", blocks, lead=ncu_line(ncu),
                   brief_title="Nsight Compute")


def ncu_line(ncu: Ncu) -> str:
    """The profile in one sentence: version, source, launches and how they were tied to
    ops, the plan, and what this GPU or capture could not measure."""
    plan = ncu.get("plan") or {}
    tied = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in
                     (ncu.get("attribution") or {}).items())
    version = f" {ncu['ncu_version']}" if ncu.get("ncu_version") else ""
    text = (f"ncu{version} ({ncu['source']}, {ncu['file']}): "
            f"{count(ncu['launches'], 'kernel launch')} ({tied})")
    runs = len(plan.get("captures") or ()) if plan else 0
    planned = len(plan.get("ops") or ()) if plan else 0
    if runs > 1:
        text += (f"; plan: {planned} op(s), one ncu run each, "
                 f"profiled {plan['launch_count']} launches in all")
    elif plan:
        text += (f"; plan: {planned} op(s), skipped {plan['launch_skip']} warm-up "
                 f"launches, profiled {plan['launch_count']}")
    missing = ncu.get("missing_quantities")
    if missing:
        text += "; not measured on this GPU or in this capture: " + ", ".join(missing)
    return text


ROOFLINE_HEADER = ["kernel", "launches", "ms", "FLOP/s", "precision", "FLOP/byte",
                   "binding roof", "% of roof", "DRAM GB/s"]


def findings_rows(report: Report) -> list[list[str]]:
    """[op or kernel family, finding, numbers, fix]: every op with ncu numbers in op-table
    order, then every kernel family no op claims (all of them in a capture without
    NVTX ranges), the most GPU time first."""
    rows = [[op[S.NAME], f["title"], f["detail"], f.get("fix") or "-"]
            for op in report["ops"] for f in pass_numbers(op, S.NCU_KEY).get("findings") or []]
    families = (report.get(S.NCU_SECTION) or {}).get("families") or []
    return rows + [[fam["kernel"], f["title"], f["detail"], f.get("fix") or "-"]
                   for fam in families if not fam.get("ops") for f in fam.get("findings") or []]


def roofline_rows(families: list[dict[str, Any]], limit: Optional[int]) -> list[list[str]]:
    """One row per kernel family with FLOP counters: its time, FLOP/s, intensity and the
    roof that binds it."""
    def num(value: Any, scale: float = 1.0, digits: int = 3) -> str:
        return "-" if value is None else f"{value / scale:.{digits}g}"
    return [[f["kernel"], str(f.get("launches") or "-"), num(f.get("duration_ns"), 1e6, 4),
             rate(f["flop_per_s"]), str(f.get("precision") or "-"), num(f.get("intensity")),
             str(f.get("roof") or "-"), num(f.get("roof_pct")),
             num(f.get("dram_bytes_per_s"), 1e9)]
            for f in families[:limit] if f.get("flop_per_s") is not None]


def rate(value: Optional[float]) -> str:
    """'39.4 T' (per second), '-' when not measured."""
    return "-" if value is None else si(value, "").rstrip()


def rank_rows(ncu: Ncu) -> list[list[str]]:
    """One row per rank's ncu profile (a failed one with its error in the last column)."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)
    rows = []
    for r in ncu.get("ranks") or []:
        ops = "; ".join(
            f"{op} {us_from_ns(c.get('duration_ns')) or '-'}, {num(c.get('sm_pct'))}, "
            f"{num(c.get('achieved_occupancy_pct'))}, {num(c.get('tensor_pct'))}"
            for op, c in (r.get("ops") or {}).items())
        rows.append([str(r["rank"]), str(r.get("reason") or "-"), r["status"],
                     num(r.get("launches")), ops or "-",
                     r.get("error") or file_names((r.get("files") or {}).get("ncu_rep"))])
    return rows


def ncu_charts(report: Report) -> list[dict[str, Any]]:
    """report.html's Nsight Compute charts: its per-op percentages, and the roofline."""
    charts = []
    ops = [op for op in report.get("ops", []) if op.get(S.NCU_KEY)][:8]
    if ops:
        keys = {"SM %": "sm_pct", "memory %": "memory_pct",
                "achieved occupancy %": "achieved_occupancy_pct", "tensor pipe %": "tensor_pct",
                "L2 hit %": "l2_hit_pct"}
        charts.append({"id": "ncu", "kind": "bar",
                       "title": "Nsight Compute per op (% of peak / hit rate)",
                       "labels": [terminal(op["name"]) for op in ops],
                       "series": {label: [pass_numbers(op, S.NCU_KEY).get(k) for op in ops]
                                  for label, k in keys.items()},
                       "range": {"min": 0, "max": 100}})
    roofline = roofline_data((report.get(S.NCU_SECTION) or {}).get("families") or [])
    if roofline:
        charts.append({"id": "roofline", "kind": "roofline", **roofline,
                       "title": "Roofline: each kernel family at its arithmetic intensity "
                                "(FLOP/byte of DRAM traffic) and FLOP/s, under its roofs "
                                "(ncu's own peaks)"})
    return charts


def roofline_data(families: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The roofline chart: each kernel family placed at (FLOP/byte, FLOP/s), and each of
    their precisions' roofs (the DRAM slope up to the ridge, then the compute peak), all
    from ncu's own numbers."""
    placed = [f for f in families if f.get("flop_per_s") and f.get("intensity")][:TOP_FAMILIES]
    if not placed:
        return None
    roofs: dict[str, dict[str, float]] = {}
    for f in placed:
        if f.get("flop_peak_per_s") and f.get("dram_peak_bytes_per_s"):
            roofs.setdefault(str(f["precision"]), {"peak": f["flop_peak_per_s"],
                                                  "dram": f["dram_peak_bytes_per_s"]})
    return {"points": [{"label": terminal(f"{f['kernel'][:80]} ({f['precision']})"),
                        "x": f["intensity"], "y": f["flop_per_s"]} for f in placed],
            "roofs": [{"label": terminal(f"{name} roof"), **roof} for name, roof in roofs.items()]}


# ops[].ncu: the pandas dtype of its fixed numbers (its quantities, which the profile
# names, are float64)
NCU_OP_DTYPES = {"launches": "Int64", "bound": "str", "occupancy_limiter": "str",
                 "tensor_path": "str", "precision": "str", "flop_per_s": "float64",
                 "flop_peak_per_s": "float64", "dram_bytes_per_s": "float64",
                 "dram_peak_bytes_per_s": "float64", "l2_bytes_per_s": "float64",
                 "l2_peak_bytes_per_s": "float64", "intensity": "float64", "ridge": "float64",
                 "roof": "str", "roof_pct": "float64"}

NCU_VIEW = PassView(
    report_key=S.NCU_SECTION, section=ncu_section, op_key=S.NCU_KEY, source="Nsight Compute",
    frame_dtypes=tuple(NCU_OP_DTYPES.items()), frame_default="float64", charts=ncu_charts,
    trace_fields=("launches", "duration_ns", "sm_pct", "memory_pct", "achieved_occupancy_pct",
                  "tensor_pct", "tensor_path", "l2_hit_pct", "bound", "occupancy_limiter"),
    op_columns=(OpColumn("ncu SM %", "sm_pct", "pct"), OpColumn("ncu mem %", "memory_pct", "pct"),
                OpColumn("ncu occupancy %", "achieved_occupancy_pct", "pct"),
                OpColumn("ncu tensor %", "tensor_pct", "pct"),
                OpColumn("ncu L2 hit %", "l2_hit_pct", "pct"),
                OpColumn("ncu bound", "bound", "text")))
