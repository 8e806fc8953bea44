"""What Nsight Compute's numbers say about an op or a kernel family, each finding with the
numbers it rests on and its fix.

A subject is a summary of one op's or one kernel family's launches (model/nsight/ncu.py:
duration-weighted quantities, roofline numbers, kernel names). Findings, in order:
Tensor Core use for matmul-like work (and, when off, why: fp32 without TF32, half
precision on CUDA cores, shapes not multiples of 8, launches too small), the roofline
(which roof binds and how far below it), the speed-of-light bound, occupancy and its
limiter, and a poor L2 hit rate on memory-bound work.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence, TypedDict

BOUND_PCT = 60.0          # a unit at >= 60% of peak bounds the kernel (ncu's SOL guidance)
TENSOR_ON_PCT = 1.0       # tensor pipe active at least this share of peak: on Tensor Cores
# kernels that do matrix multiply-accumulate work (GEMM, convolution, attention)
MATMUL_KERNEL = re.compile(r"gemm|gemv|xmma|nvjet|cutlass|wgrad|dgrad|fprop|implicit_gemm|"
                           r"conv|flash|fmha|attention|sdpa|hmma|gmma|mma_", re.IGNORECASE)
_FP32_ONLY = re.compile(r"sgemm|f32f32_f32f32|_ffma_|fp32_fp32|gemm_f32|gemmSN|s1688|"
                        r"simt_sgemm|xmma_gemm_f32f32", re.IGNORECASE)
_TF32 = re.compile(r"tf32", re.IGNORECASE)
_HALF = re.compile(r"bf16|f16|fp16|hgemm|h1688|h884|half", re.IGNORECASE)
TF32_FIX = ("torch.backends.cuda.matmul.allow_tf32 = True (or "
            "torch.set_float32_matmul_precision('high')), and torch.backends.cudnn.allow_tf32 "
            "= True for convolutions; or run the model under torch.autocast('cuda', "
            "dtype=torch.bfloat16)")

Summary = Mapping[str, Any]   # one op's or family's quantities: the profile's metric set, open


class Finding(TypedDict):
    """One thing the numbers say (``ops[].ncu.findings[]``, ``ncu.families[].findings[]``)."""

    id: str
    title: str
    detail: str       # the numbers it rests on
    fix: str


def findings(summary: Summary, kernels: Sequence[str], shapes: Sequence[str],
             matmul: bool) -> list[Finding]:
    """[{id, title, detail, fix}] for one op or kernel family (``matmul``: its work is a
    matrix multiply, convolution or attention, so Tensor Cores apply)."""
    found: list[Finding] = []
    if matmul or (summary.get("tensor_pct") or 0.0) >= TENSOR_ON_PCT:
        found.append(_tensor(summary, kernels, shapes))
    found += [f for f in (_roofline(summary), _bound(summary), _occupancy(summary)) if f]
    l2 = summary.get("l2_hit_pct")
    if l2 is not None and l2 < 50 and summary.get("bound") == "memory":
        found.append({"id": "poor-l2", "title": "poor L2 hit rate",
                      "detail": f"L2 hit {l2:.1f}% on memory-bound work: data is re-read "
                                "from DRAM",
                      "fix": "reuse data while it is in L2: fuse the ops that read the same "
                             "tensors (torch.compile), or tile the work"})
    return found


def is_matmul(name: str) -> bool:
    """A kernel name of matrix multiply-accumulate work (GEMM, convolution, attention)."""
    return bool(MATMUL_KERNEL.search(name))


def bound(summary: Summary) -> Optional[str]:
    """compute | memory (the unit at >= BOUND_PCT of peak, the busier) | latency (neither)."""
    sm, mem = summary.get("sm_pct"), summary.get("memory_pct")
    if sm is None and mem is None:
        return None
    sm, mem = sm or 0.0, mem or 0.0
    if max(sm, mem) < BOUND_PCT:
        return "latency"
    return "compute" if sm >= mem else "memory"


def _roofline(s: Summary) -> Optional[Finding]:
    if not s.get("flop_per_s"):
        return None
    text = f"{si(s['flop_per_s'], 'FLOP/s')} {s['precision']}"
    if s.get("intensity") is not None:
        text += f" at {s['intensity']:.3g} FLOP/byte of DRAM traffic"
    if s.get("roof") is None:
        return {"id": "roofline", "title": "roofline: achieved FLOP/s", "detail": text,
                "fix": "collect the roofline section (--set full) for the peaks"}
    peak = (si(s["flop_peak_per_s"], "FLOP/s") if s["roof"] == "compute"
            else f"{si(s['dram_peak_bytes_per_s'], 'B/s')} x {s['intensity']:.3g} FLOP/byte")
    text += (f"; roof {peak} (ridge {s['ridge']:.3g} FLOP/byte): {s['roof_pct']:.1f}% of "
             f"it, over {(s.get('duration_ns') or 0.0) / 1e6:.2f} ms")
    fix = ("raise the work per byte (fuse, tile, keep data in L2) or move fewer bytes (lower "
           "precision)" if s["roof"] == "memory" else
           "close the gap to the roof (occupancy, Tensor Cores), or do less work")
    return {"id": "roofline", "title": f"{s['roof']} roof binds", "detail": text, "fix": fix}


def _bound(s: Summary) -> Optional[Finding]:
    kind = s.get("bound")
    if not kind:
        return None
    detail = (f"SM throughput {_pct(s.get('sm_pct'))}, memory throughput "
              f"{_pct(s.get('memory_pct'))} (DRAM {_pct(s.get('dram_pct'))}) of peak")
    fix = {"latency": "more parallel work per launch (larger batches), fewer tiny launches "
                      "(CUDA graphs, torch.compile)",
           "memory": "fewer bytes per result: fuse elementwise ops, lower precision",
           "compute": "fewer instructions per result: Tensor Cores, fused kernels"}[kind]
    return {"id": f"{kind}-bound", "title": f"{kind}-bound", "detail": detail, "fix": fix}


def _occupancy(s: Summary) -> Optional[Finding]:
    occ, theo = s.get("achieved_occupancy_pct"), s.get("theoretical_occupancy_pct")
    if occ is None or not (occ < 25 or (theo is not None and theo < 50)):
        return None
    limiter = s.get("occupancy_limiter")
    detail = (f"achieved {occ:.1f}% of peak warps, theoretical {_pct(theo)}"
              + (f"; limited by {limiter}" if limiter else "")
              + (f"; {s['registers_per_thread']:.0f} registers/thread"
                 if s.get("registers_per_thread") is not None else ""))
    first = (limiter or "").split(",")[0]
    fix = {"registers": "fewer registers per thread (launch bounds, smaller tiles)",
           "shared memory": "less shared memory per block (smaller tiles)",
           "warps": "smaller blocks", "blocks": "larger blocks"}.get(first,
                                                                  "more blocks per launch")
    if first in ("registers", "shared memory") and (s.get("tensor_pct") or 0) >= 50:
        fix = "none needed while the Tensor Cores stay busy: large tiles trade occupancy " \
              "for data reuse"
    return {"id": "low-occupancy", "title": "low occupancy", "detail": detail, "fix": fix}


def _tensor(s: Summary, kernels: Sequence[str], shapes: Sequence[str]) -> Finding:
    tensor = s.get("tensor_pct")
    if tensor is None:
        return {"id": "tensor-unknown", "title": "Tensor Core use not measured",
                "detail": "no tensor-pipe metric in this capture",
                "fix": "profile with the deep or deep-tensorcore profile (or --set full)"}
    if tensor >= TENSOR_ON_PCT:
        return {"id": "tensor-cores", "title": "on Tensor Cores",
                "detail": f"tensor pipe active {tensor:.1f}% of peak"
                          + (f" ({s['tensor_path']})" if s.get("tensor_path") else ""),
                "fix": "none"}
    why, fix = _why_no_tensor(s, kernels, shapes)
    return {"id": "no-tensor-cores", "title": "matmul eligible for Tensor Cores but not on them",
            "detail": f"tensor pipe {tensor:.4f}% of peak, FMA pipe {_pct(s.get('fma_pct'))}: "
                      f"{why}", "fix": fix}


def _why_no_tensor(s: Summary, kernels: Sequence[str],
                   shapes: Sequence[str]) -> tuple[str, str]:
    """Why matmul work missed the Tensor Cores, from the counters first, then the kernel
    names and the op's shapes; and its fix."""
    names = " ".join(kernels)
    flops = s.get("flops") or {}
    fp32 = flops.get("fp32", {}).get("achieved") or 0.0
    on_ffma = fp32 > 0 and fp32 >= max((v.get("achieved") or 0.0 for v in flops.values()),
                                       default=0.0)
    if (on_ffma or _FP32_ONLY.search(names)) and not _TF32.search(names):
        numbers = f" ({si(fp32, 'FLOP/s')} on the FMA pipe)" if on_ffma else ""
        return (f"fp32 without TF32: the FFMA path{numbers}", TF32_FIX)
    dims = [int(d) for shape in shapes for d in re.findall(r"\d+", shape)]
    if dims and any(d % 8 for d in dims if d > 1):
        return (f"shapes not multiples of 8 ({'; '.join(shapes[:2])})",
                "pad the matmul dimensions to multiples of 8 (16 for int8, fp8)")
    launches = s.get("launches") or 0
    if launches and (s.get("duration_ns") or 0.0) / launches < 5_000:
        return ("too small to use them (under 5 µs per launch)",
                "batch the work into fewer, larger matmuls")
    if flops.get("fp16", {}).get("achieved") or _HALF.search(names):
        return ("half precision on the CUDA cores (HFMA)",
                "check shapes (multiples of 8) and alignment (16 bytes)")
    return ("the dtype or the shapes keep cuBLAS/cuDNN off the Tensor Cores",
            "autocast to bfloat16 and pad dimensions to multiples of 8")


def si(value: float, unit: str) -> str:
    """A rate with a decimal prefix: '39.4 TFLOP/s', '114 GB/s'."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.1f}%"
