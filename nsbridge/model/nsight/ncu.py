"""Nsight Compute metrics -> per-launch quantities and roofline, kernels -> ops, and the
findings (model/nsight/ncu_findings.py) of every op and every kernel family.

Kernels reach ops through the NVTX stack ncu recorded for each launch: the innermost op
range (nsbridge's ``nsbridge`` domain, or PyTorch's own ``aten::mm, seq = 3`` ranges in the
default domain). When the deep pass targeted ops, a launch whose innermost op is not one
of them is marked ``outside_filter`` and never counted for an op it did not run in.

Quantities are resolved per launch from the profile's candidate metric names, in order,
for the launch's compute capability (a candidate ``name @cc>=9.0`` applies from Hopper
on; ``2*a + b`` adds metrics, each term required): the first one present with a value
wins. A quantity no candidate gives is missing (None), never zero, and the report lists it.

Each launch also gets its roofline from the counters (model/nsight/roofline.py); a FLOP or byte
count the capture lacks as a total is its rate times the launch's duration.

Per op and per kernel family (the kernel's name without template arguments and
parameters), quantities are duration-weighted means over the launches (counts summed), the
roofline is rolled up (roofline.rollup), and findings are drawn: every kernel gets them,
whether or not an NVTX range ties it to an op.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from . import ncu_findings
from .ncu_findings import Summary
from .roofline import rollup, roofline
from ..judging.rules import MATMUL_OP

_OP_NAME = re.compile(r"^[A-Za-z_][\w.]*::[\w.]+")
_CANDIDATE = re.compile(r"^(?P<formula>[^@]+?)(?:\s+@cc(?P<op>>=|<=|==)(?P<cc>[\d.]+))?$")
_TERM = re.compile(r"^(?:(?P<k>[\d.]+)\*)?(?P<metric>[\w.]+)$")
Formula = list[tuple[float, str]]
# counts (summed per op); everything else is a rate or percentage (weighted mean)
SUMMED = ("duration_ns", "flop_fp32", "flop_fp16", "flop_fp64", "dram_bytes")
OUTSIDE_FILTER, NO_NVTX, ATTRIBUTED = "outside_filter", "no_nvtx", "nvtx"
# a launch's rate times its duration gives these totals when the capture lacks them
_FROM_RATES = {"flop_fp32": "fp32", "flop_fp16": "fp16", "flop_fp64": "fp64"}
_ANONYMOUS = "(anonymous namespace)"
ROOFLINE_COLUMNS = ["flop_per_s", "precision", "intensity", "roof", "roof_pct",
                    "dram_bytes_per_s"]
_TENSOR_PATHS = [("hgmma", "Hopper warp-group MMA (wgmma)"), ("hmma", "HMMA"),
                 ("imma", "IMMA (integer)"), ("dmma", "DMMA (fp64)")]


def launch_op(nvtx: Sequence[tuple[str, str]]) -> dict[str, Optional[str]]:
    """op (innermost op range), module (innermost nsbridge non-op range) and step of a
    launch's NVTX push/pop stack (bottom first)."""
    op = module = step = None
    for domain, name in nvtx:
        base = name.split(",", 1)[0].strip()
        if domain in ("nsbridge", "") and _OP_NAME.match(base):
            op = base
        elif domain == "nsbridge" and name.startswith("step "):
            step = name
        elif domain == "nsbridge":
            module = name
    return {"op": op, "module": module, "step": step}


def target_op(range_op: str, kernel: str,
              targets: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """The planned op a launch in the op range ``range_op`` belongs to, or None: the op
    itself when planned; else a planned op whose ``ranges`` hold that range (a nested op,
    ``aten::cudnn_convolution`` within ``aten::convolution``) and whose kernels, as the
    triage saw them (``kernel_families``), include this one's: a bias add in the same range
    belongs to no planned op."""
    if any(t["op"] == range_op for t in targets):
        return range_op
    family = short_family(kernel)
    for t in targets:
        if range_op in (t.get("ranges") or ()) and (
                not t.get("kernel_families") or family in t["kernel_families"]):
            return str(t["op"])
    return None


def short_family(kernel: str) -> str:
    """A kernel family's last name (``winogradWgradData4x4``): torch's traces and ncu spell
    the namespaces of one kernel differently."""
    return kernel_family(kernel).rsplit("::", 1)[-1]


def resolve(candidates: Sequence[str], cc: Optional[float]) -> list[Formula]:
    """The candidates that apply to a compute capability, in order, as [(factor, metric)]."""
    out = []
    for text in candidates:
        match = _CANDIDATE.match(text.strip())
        if not match:
            continue
        if match["cc"] and cc is not None:
            want = float(match["cc"])
            ok = {">=": cc >= want, "<=": cc <= want, "==": math.isclose(cc, want)}[match["op"]]
            if not ok:
                continue
        terms = [_TERM.match(t.strip()) for t in match["formula"].split("+")]
        found = [t for t in terms if t is not None]
        if len(found) == len(terms):
            out.append([(float(t["k"] or 1), t["metric"]) for t in found])
    return out


def metric_names(quantities: Mapping[str, Sequence[str]]) -> list[str]:
    """Every metric any candidate names, in first-seen order (what ncu must collect)."""
    names: dict[str, None] = {}
    for candidates in quantities.values():
        for formula in resolve(candidates, None):
            names.update((metric, None) for _, metric in formula)
    return list(names)


def kernel_table(launches: pd.DataFrame, metrics: pd.DataFrame,
                 quantities: Mapping[str, Sequence[str]],
                 targets: Optional[Sequence[Mapping[str, Any]]] = None
                 ) -> tuple[pd.DataFrame, list[str]]:
    """One row per launch: launch, kernel, op, nvtx_range (the innermost op range), module,
    step, attribution (nvtx | outside_filter | no_nvtx), cc, and one column per quantity
    (NaN when missing). ``targets`` are the deep plan's ops (``op``, ``ranges``,
    ``kernel_families``: see target_op). Returns the table and the quantities no launch
    had."""
    wide = metrics.pivot_table(index="launch", columns="metric", values="value",
                               aggfunc="first")
    rows = []
    for ident in launches.itertuples(index=False):
        where = launch_op(ident.nvtx)
        cc = _cc(ident.cc)
        kernel = _kernel_name(ident.kernel, where["op"])
        row: dict[str, Any] = {"launch": ident.launch, "kernel": kernel, **where,
                               "nvtx_range": where["op"], "cc": cc}
        if not ident.nvtx or where["op"] is None:
            row["attribution"] = NO_NVTX
        elif targets:
            op = target_op(where["op"], kernel, targets)
            row["op"] = op or where["op"]
            row["attribution"] = OUTSIDE_FILTER if op is None else ATTRIBUTED
        else:
            row["attribution"] = ATTRIBUTED
        values = wide.loc[ident.launch] if ident.launch in wide.index else pd.Series(dtype=float)
        for quantity, candidates in quantities.items():
            row[quantity] = _first(values, resolve(candidates, cc))
        row["roofline"] = roofline(values.to_dict())
        _totals_from_rates(row)
        _rates_from_totals(row)
        row.update({k: row["roofline"].get(k) for k in ROOFLINE_COLUMNS})
        rows.append(row)
    table = pd.DataFrame(rows)
    missing = [q for q in quantities if q not in table or table[q].isna().all()]
    return table, missing


def _rates_from_totals(row: dict[str, Any]) -> None:
    """A capture with FLOP and byte totals but not the roofline's rates (nsbridge's own
    deep profile before the roofline section): the rates are total / the launch's time,
    with no peaks (so no roof is named)."""
    r, seconds = row["roofline"], (row.get("duration_ns") or math.nan) / 1e9
    if r["flops"] or not seconds > 0:
        return
    flops = {precision: {"achieved": row[q] / seconds, "peak": None}
             for q, precision in _FROM_RATES.items() if row.get(q, math.nan) > 0}
    bytes_per_s = row["dram_bytes"] / seconds if row.get("dram_bytes", math.nan) > 0 else None
    if flops:
        best = max(flops, key=lambda k: flops[k]["achieved"])
        r.update(flops=flops, precision=best, flop_per_s=flops[best]["achieved"],
                 intensity=bytes_per_s and flops[best]["achieved"] / bytes_per_s)
    if bytes_per_s is not None and r.get("dram_bytes_per_s") is None:
        r["dram_bytes_per_s"] = bytes_per_s


def _totals_from_rates(row: dict[str, Any]) -> None:
    """FLOPs and DRAM bytes the capture gives only as rates: rate x the launch's time."""
    seconds = (row.get("duration_ns") or math.nan) / 1e9
    flops = row["roofline"]["flops"]
    for quantity, precision in _FROM_RATES.items():
        if quantity in row and math.isnan(row[quantity]) and precision in flops:
            row[quantity] = flops[precision]["achieved"] * seconds
    rate = row["roofline"].get("dram_bytes_per_s")
    if "dram_bytes" in row and math.isnan(row["dram_bytes"]) and rate is not None:
        row["dram_bytes"] = rate * seconds


def op_summary(kernels: pd.DataFrame, op_shapes: Mapping[str, list[str]] | None = None
               ) -> dict[str, dict[str, Any]]:
    """Per op (attributed launches only): ``summarise`` of its launches, with findings."""
    out: dict[str, dict[str, Any]] = {}
    usable = kernels[kernels["attribution"] == ATTRIBUTED] if len(kernels) else kernels
    for op, group in usable.groupby("op", sort=False):
        summary = summarise(group)
        summary["findings"] = ncu_findings.findings(
            summary, summary["kernels"], (op_shapes or {}).get(str(op), []),
            matmul=bool(MATMUL_OP.match(str(op))))
        out[str(op)] = summary
    return out


def family_summary(kernels: pd.DataFrame) -> list[dict[str, Any]]:
    """Per kernel family (every launch, with an op or not), the most GPU time first:
    ``kernel`` (the family), ``ops`` it ran in, ``summarise`` of its launches, findings."""
    if not len(kernels):
        return []
    out = []
    for family, group in kernels.groupby(kernels["kernel"].map(kernel_family), sort=False):
        summary = summarise(group)
        summary["findings"] = ncu_findings.findings(
            summary, summary["kernels"], [], matmul=any(map(ncu_findings.is_matmul,
                                                            summary["kernels"])))
        ops = sorted({str(op) for op in group["op"] if isinstance(op, str)})
        out.append({"kernel": str(family), "ops": ops, **summary})
    return sorted(out, key=lambda f: -(f.get("duration_ns") or 0.0))


def summarise(group: pd.DataFrame) -> dict[str, Any]:
    """Launches, kernels (distinct names), every quantity (duration-weighted mean, counts
    summed), bound, occupancy limiter, tensor path, and the roofline rolled up."""
    summary = _weighted(group)
    summary["launches"] = int(len(group))
    summary["kernels"] = sorted(set(group["kernel"].astype(str)))
    summary["bound"] = ncu_findings.bound(summary)
    summary["occupancy_limiter"] = _limiter(summary)
    summary["tensor_path"] = _tensor_path(summary)
    durations = group["duration_ns"].fillna(0.0) if "duration_ns" in group else [0.0] * len(group)
    summary.update(rollup(list(zip(group["roofline"], durations))))
    return summary


def kernel_family(name: str) -> str:
    """A kernel's name without its template arguments and parameters ('void ' dropped):
    the launches of one kernel at several tile sizes or types are one family."""
    base = re.sub(r"^void ", "", str(name)).replace(_ANONYMOUS, "\0")
    depth, out = 0, []
    for char in base:
        if char in "<(":
            if char == "(" and depth == 0:
                break
            depth += 1
        elif char in ">)":
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out).strip().replace("\0", _ANONYMOUS) or str(name)


def _weighted(group: pd.DataFrame) -> dict[str, Any]:
    skip = {"launch", "kernel", "op", "module", "step", "attribution", "cc", "roofline",
            *ROOFLINE_COLUMNS}
    weights = group["duration_ns"].fillna(0.0).to_numpy() if "duration_ns" in group else None
    out: dict[str, Any] = {}
    for col in group.columns:
        if col in skip:
            continue
        values = pd.to_numeric(group[col], errors="coerce").to_numpy(dtype=float)
        ok = ~np.isnan(values)
        if not ok.any():
            out[col] = None
        elif col in SUMMED:
            out[col] = float(values[ok].sum())
        elif weights is not None and weights[ok].sum() > 0:
            out[col] = float(np.average(values[ok], weights=weights[ok]))
        else:
            out[col] = float(values[ok].mean())
    flop = sum(out.get(k) or 0.0 for k in ("flop_fp32", "flop_fp16", "flop_fp64"))
    out["intensity"] = (flop / out["dram_bytes"] if flop and out.get("dram_bytes") else None)
    return out


def _limiter(s: Summary) -> Optional[str]:
    limits: dict[str, float] = {}
    for name in ("registers", "shared memory", "warps", "blocks"):
        value = s.get(f"block_limit_{name.replace(' ', '_')}")
        if value is not None:
            limits[name] = value
    if not limits:
        return None
    low = min(limits.values())
    return ", ".join(k for k, v in limits.items() if v == low)


def _tensor_path(s: Summary) -> Optional[str]:
    if not s.get("tensor_pct") or s["tensor_pct"] < ncu_findings.TENSOR_ON_PCT:
        return None
    for key, label in _TENSOR_PATHS:
        value = s.get(f"tensor_{key}_pct")
        if value is not None and value >= 1.0:
            return label
    return None


def _first(values: pd.Series, formulas: list[Formula]) -> float:
    for formula in formulas:
        if all(m in values.index and not pd.isna(values[m]) for _, m in formula):
            return float(sum(k * values[m] for k, m in formula))
    return math.nan


def _cc(text: Any) -> Optional[float]:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _kernel_name(name: str, op: Optional[str]) -> str:
    """Strip the ``op/`` prefix that ``--print-nvtx-rename kernel`` adds."""
    if op and name.startswith(f"{op}/"):
        return name[len(op) + 1:]
    return name
