"""Nsight Compute metrics -> per-kernel quantities, kernels -> ops, per-op findings.

Kernels reach ops through the NVTX stack ncu recorded for each launch: the innermost op
range (nsbridge's ``nsbridge`` domain, or PyTorch's own ``aten::mm, seq = 3`` ranges in the
default domain). When the deep pass targeted ops, a launch whose innermost op is not one
of them is marked ``outside_filter`` and never counted for an op it did not run in.

Quantities are resolved per launch from the profile's candidate metric names, in order,
for the launch's compute capability (a candidate ``name @cc>=9.0`` applies from Hopper
on; ``2*a + b`` adds metrics, each term required): the first one present with a value
wins. A quantity no candidate gives is missing (None), never zero, and the report lists it.

Per op, quantities are duration-weighted means over its launches (counts are summed).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from .rules import MATMUL_OP

_OP_NAME = re.compile(r"^[A-Za-z_][\w.]*::[\w.]+")
_CANDIDATE = re.compile(r"^(?P<formula>[^@]+?)(?:\s+@cc(?P<op>>=|<=|==)(?P<cc>[\d.]+))?$")
_TERM = re.compile(r"^(?:(?P<k>[\d.]+)\*)?(?P<metric>[\w.]+)$")
Formula = list[tuple[float, str]]
# counts (summed per op); everything else is a rate or percentage (weighted mean)
SUMMED = ("duration_ns", "flop_fp32", "flop_fp16", "flop_fp64", "dram_bytes")
BOUND_PCT = 60.0          # a unit at >= 60% of peak bounds the kernel (ncu's SOL guidance)
OUTSIDE_FILTER, NO_NVTX, ATTRIBUTED = "outside_filter", "no_nvtx", "nvtx"
_FP32_ONLY = re.compile(r"sgemm|f32f32_f32f32|_ffma_|fp32_fp32|gemm_f32|gemmSN|s1688|cutlass_80_simt_sgemm"
                        r"|simt_sgemm|xmma_gemm_f32f32", re.IGNORECASE)
_HALF = re.compile(r"bf16|f16|fp16|hgemm|h1688|h884|half", re.IGNORECASE)
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
        if all(terms):
            out.append([(float(t["k"] or 1), t["metric"]) for t in terms])
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
                 targets: Optional[Sequence[str]] = None) -> tuple[pd.DataFrame, list[str]]:
    """One row per launch: launch, kernel, op, module, step, attribution (nvtx |
    outside_filter | no_nvtx), cc, and one column per quantity (NaN when missing).
    Returns the table and the quantities no launch had."""
    wide = metrics.pivot_table(index="launch", columns="metric", values="value",
                               aggfunc="first")
    rows = []
    for ident in launches.itertuples(index=False):
        where = launch_op(ident.nvtx)
        cc = _cc(ident.cc)
        row: dict[str, Any] = {"launch": ident.launch, "kernel": _kernel_name(ident.kernel,
                                                                                where["op"]),
                               **where, "cc": cc}
        if not ident.nvtx or where["op"] is None:
            row["attribution"] = NO_NVTX
        elif targets and where["op"] not in targets:
            row["attribution"] = OUTSIDE_FILTER
        else:
            row["attribution"] = ATTRIBUTED
        values = wide.loc[ident.launch] if ident.launch in wide.index else pd.Series(dtype=float)
        for quantity, candidates in quantities.items():
            row[quantity] = _first(values, resolve(candidates, cc))
        rows.append(row)
    table = pd.DataFrame(rows)
    missing = [q for q in quantities if q not in table or table[q].isna().all()]
    return table, missing


def op_summary(kernels: pd.DataFrame, op_shapes: Mapping[str, list[str]] | None = None
               ) -> dict[str, dict[str, Any]]:
    """Per op (attributed launches only): launches, kernels (distinct names), every
    quantity (duration-weighted mean, counts summed), bound, occupancy limiter, tensor
    path, and findings [{id, title, detail}] with their numbers."""
    out: dict[str, dict[str, Any]] = {}
    usable = kernels[kernels["attribution"] == ATTRIBUTED] if len(kernels) else kernels
    for op, group in usable.groupby("op", sort=False):
        summary = _weighted(group)
        summary["launches"] = int(len(group))
        summary["kernels"] = sorted(set(group["kernel"]))
        summary["bound"] = _bound(summary)
        summary["occupancy_limiter"] = _limiter(summary)
        summary["tensor_path"] = _tensor_path(summary)
        summary["findings"] = findings(str(op), summary, group, (op_shapes or {}).get(op, []))
        out[str(op)] = summary
    return out


def findings(op: str, s: dict[str, Any], group: pd.DataFrame,
             shapes: list[str]) -> list[dict[str, Any]]:
    """What the numbers say about one op, each with its numbers."""
    found = []
    bound = s["bound"]
    if bound:
        detail = (f"SM throughput {_pct(s.get('sm_pct'))}, memory throughput "
                  f"{_pct(s.get('memory_pct'))} (DRAM {_pct(s.get('dram_pct'))}) of peak")
        if s.get("intensity") is not None:
            detail += f"; arithmetic intensity {s['intensity']:.2f} FLOP/byte (CUDA cores)"
        found.append({"id": f"{bound}-bound", "title": f"{bound}-bound", "detail": detail})
    occ, theo = s.get("achieved_occupancy_pct"), s.get("theoretical_occupancy_pct")
    if occ is not None and (occ < 25 or (theo is not None and theo < 50)):
        limiter = s["occupancy_limiter"]
        found.append({"id": "low-occupancy", "title": "low occupancy",
                      "detail": f"achieved {occ:.1f}% of peak warps, theoretical "
                                f"{_pct(theo)}" + (f"; limited by {limiter}" if limiter else "")
                                + (f"; {s['registers_per_thread']:.0f} registers/thread"
                                   if s.get("registers_per_thread") is not None else "")})
    tensor = s.get("tensor_pct")
    if MATMUL_OP.match(op):
        if tensor is None:
            found.append({"id": "tensor-unknown", "title": "Tensor Core use not measured",
                          "detail": "no tensor-pipe metric in this capture (use the deep or "
                                    "deep-tensorcore profile)"})
        elif tensor >= 1.0:
            found.append({"id": "tensor-cores", "title": "on Tensor Cores",
                          "detail": f"tensor pipe active {tensor:.1f}% of peak"
                                    + (f" ({s['tensor_path']})" if s["tensor_path"] else "")})
        else:
            found.append({"id": "no-tensor-cores",
                          "title": "matmul eligible for Tensor Cores but not on them",
                          "detail": f"tensor pipe {tensor:.4f}% of peak, FMA pipe "
                                    f"{_pct(s.get('fma_pct'))}: {_why_no_tensor(group, s, shapes)}"})
    l2 = s.get("l2_hit_pct")
    if l2 is not None and l2 < 50 and bound == "memory":
        found.append({"id": "poor-l2", "title": "poor L2 hit rate",
                      "detail": f"L2 hit {l2:.1f}% on a memory-bound op: data is re-read from "
                                "DRAM"})
    return found


def _why_no_tensor(group: pd.DataFrame, s: dict[str, Any], shapes: list[str]) -> str:
    names = " ".join(group["kernel"].astype(str))
    if _FP32_ONLY.search(names) and not re.search(r"tf32", names, re.IGNORECASE):
        return ("fp32 without TF32 (FFMA kernels); allow TF32 "
                "(torch.set_float32_matmul_precision('high')) or autocast to bfloat16")
    dims = [int(d) for shape in shapes for d in re.findall(r"\d+", shape)]
    if dims and any(d % 8 for d in dims if d > 1):
        return (f"shapes not multiples of 8 ({'; '.join(shapes[:2])}); pad the matmul "
                "dimensions to multiples of 8 (16 for int8)")
    duration = s.get("duration_ns") or 0.0
    if s["launches"] and duration / s["launches"] < 5_000:
        return "too small to use them (under 5 µs per launch): batch the work"
    if _HALF.search(names):
        return "half-precision kernel on CUDA cores: check shapes and alignment"
    return "dtype or shapes keep cuBLAS/cuDNN off Tensor Cores"


def _weighted(group: pd.DataFrame) -> dict[str, Any]:
    skip = {"launch", "kernel", "op", "module", "step", "attribution", "cc"}
    weights = group["duration_ns"].fillna(0.0).to_numpy() if "duration_ns" in group else None
    out: dict[str, Any] = {}
    for col in group.columns:
        if col in skip:
            continue
        values = group[col].to_numpy(dtype=float)
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


def _bound(s: dict[str, Any]) -> Optional[str]:
    sm, mem = s.get("sm_pct"), s.get("memory_pct")
    if sm is None and mem is None:
        return None
    sm, mem = sm or 0.0, mem or 0.0
    if max(sm, mem) < BOUND_PCT:
        return "latency"
    return "compute" if sm >= mem else "memory"


def _limiter(s: dict[str, Any]) -> Optional[str]:
    limits = {name: s.get(f"block_limit_{name.replace(' ', '_')}")
              for name in ("registers", "shared memory", "warps", "blocks")}
    limits = {k: v for k, v in limits.items() if v is not None}
    if not limits:
        return None
    low = min(limits.values())
    return ", ".join(k for k, v in limits.items() if v == low)


def _tensor_path(s: dict[str, Any]) -> Optional[str]:
    if not s.get("tensor_pct") or s["tensor_pct"] < 1.0:
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


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.1f}%"
