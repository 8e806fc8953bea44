"""A kernel's roofline from Nsight Compute's own counters and peaks: no table of GPUs.

What is computed, per launch, from the metrics ncu's roofline sections collect (`--set
full`, `--section SpeedOfLight_RooflineChart`), the same way those sections do:

- CUDA-core FLOP/s per precision: thread instructions per elapsed cycle, summed over the
  SM sub-partitions, times their clock (``smsp__cycles_elapsed.avg.per_second``); an FMA is
  2 FLOPs, a half-precision HFMA2 4 and an HADD2/HMUL2 2. The peak: the SMs' sustained
  FMA instructions per cycle (``sm__sass_thread_inst_executed_op_*fma_pred_on.sum.
  peak_sustained``) times the SM clock, at the same FLOPs per instruction.
- Tensor Core FLOP/s: the busiest ``sm__ops_path_tensor_*`` path (dense, not sparse),
  ``.sum.per_second`` against that path's ``.sum.peak_sustained_elapsed.per_second``.
- Bytes: DRAM (``dram__bytes.sum.per_second``; peak ``dram__bytes.sum.peak_sustained`` x
  ``dram__cycles_elapsed.avg.per_second``) and L2 (32-byte sectors: ``lts__t_sectors``,
  its peak per slice x slices x the L2 clock).
- Arithmetic intensity = FLOP/s / DRAM bytes/s; the ridge = compute peak / DRAM peak; the
  roof that binds is the lower of the compute peak and intensity x DRAM peak.

A number whose metrics are absent is None (and listed by ``missing``), never 0.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Literal, Mapping, Optional, Sequence, TypedDict

Roof = Literal["compute", "memory"]


class FlopRate(TypedDict):
    """One precision's FLOP/s: what the kernel achieved and the hardware's peak (None
    without the peak's counters)."""

    achieved: float
    peak: Optional[float]


class Work(TypedDict):
    """The FLOP numbers of the precision that did the most (``_work``)."""

    flops: dict[str, FlopRate]           # per precision: "fp32", "tensor bf16 (hgmma)", ...
    precision: Optional[str]
    flop_per_s: Optional[float]
    flop_peak_per_s: Optional[float]


class Binding(TypedDict):
    """Which roof binds at the kernel's intensity, and the share of it achieved."""

    roof: Optional[Roof]
    roof_pct: Optional[float]


class Rollup(Work, Binding):
    """The roofline of several launches (``rollup``): no ``missing``."""

    dram_bytes_per_s: Optional[float]
    dram_peak_bytes_per_s: Optional[float]
    l2_bytes_per_s: Optional[float]
    l2_peak_bytes_per_s: Optional[float]
    intensity: Optional[float]
    ridge: Optional[float]


class Roofline(Rollup):
    """The roofline numbers of one launch (``roofline``)."""

    missing: list[str]                    # the inputs the capture lacks


Getter = Callable[[str], Optional[float]]

SECTOR_BYTES = 32
_PER_CYCLE = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum.per_cycle_elapsed"
_PEAK = "sm__sass_thread_inst_executed_op_{}_pred_on.sum.peak_sustained"
# precision: (fma, FLOPs per FMA instruction, (add, mul), FLOPs per add/mul instruction)
CUDA_CORE = {"fp64": ("dfma", 2.0, ("dadd", "dmul"), 1.0),
             "fp32": ("ffma", 2.0, ("fadd", "fmul"), 1.0),
             "fp16": ("hfma", 4.0, ("hadd", "hmul"), 2.0)}
_TENSOR_PATH = re.compile(r"^sm__ops_path_tensor_(?P<path>\w+?)\.sum\.per_second$")


def roofline(values: Mapping[str, object]) -> Roofline:
    """The roofline numbers of one launch from its metric values (base units: /s, byte).

    Returns {flops: {precision: {achieved, peak}}, precision (the busiest), flop_per_s,
    flop_peak_per_s, dram_bytes_per_s, dram_peak_bytes_per_s, l2_bytes_per_s,
    l2_peak_bytes_per_s, intensity, ridge, roof ("compute" | "memory"), roof_pct,
    missing [the inputs not in the capture]}."""
    get = _getter(values)
    flops = {name: rates for name, rates in
             ((name, _cuda_core(get, *spec)) for name, spec in CUDA_CORE.items()) if rates}
    tensor = _tensor(values)
    if tensor:
        flops[f"tensor {tensor[0]}"] = tensor[1]
    slices = _ratio(get("lts__t_sectors.sum"), get("lts__t_sectors.avg"))
    out = _bound(_work(flops), dram=get("dram__bytes.sum.per_second"),
                 dram_peak=_times(get("dram__bytes.sum.peak_sustained"),
                                  get("dram__cycles_elapsed.avg.per_second")),
                 l2=_times(get("lts__t_sectors.sum.per_second"), SECTOR_BYTES),
                 l2_peak=_times(_times(get("lts__t_sectors.avg.peak_sustained"), slices),
                                _times(get("lts__cycles_elapsed.avg.per_second"),
                                       SECTOR_BYTES)))
    missing = [name for name, value in (
        ("FLOP counters", out["flop_per_s"]), ("DRAM bytes", out["dram_bytes_per_s"]),
        ("DRAM peak", out["dram_peak_bytes_per_s"])) if value is None]
    return Roofline(**out, missing=missing)


def rollup(launches: Sequence[tuple[Roofline, float]]) -> Rollup:
    """The roofline of several launches (an op, a kernel family) from each one's
    ``roofline`` and duration: FLOPs and bytes summed over the summed time, peaks
    duration-weighted, for the precision that did the most FLOPs."""
    total = sum(duration for _, duration in launches)
    if total <= 0:    # no durations: each launch weighs the same
        launches, total = [(r, 1.0) for r, _ in launches], float(len(launches))
    flops: dict[str, FlopRate] = {}
    for precision in dict.fromkeys(p for r, _ in launches for p in r.get("flops") or {}):
        work = [(r["flops"][precision], d) for r, d in launches if precision in r["flops"]]
        peaks = [(p, d) for f, d in work if (p := f.get("peak")) is not None]
        flops[precision] = {"achieved": sum(f["achieved"] * d for f, d in work) / total,
                            "peak": _weighted(peaks)}

    def rate(key: Literal["dram_bytes_per_s", "l2_bytes_per_s"]) -> Optional[float]:
        known = [(v, d) for r, d in launches if (v := r.get(key)) is not None]
        return sum(v * d for v, d in known) / total if known else None

    def peak(key: Literal["dram_peak_bytes_per_s", "l2_peak_bytes_per_s"]) -> Optional[float]:
        return _weighted([(v, d) for r, d in launches if (v := r.get(key)) is not None])

    return _bound(_work(flops), dram=rate("dram_bytes_per_s"),
                  dram_peak=peak("dram_peak_bytes_per_s"), l2=rate("l2_bytes_per_s"),
                  l2_peak=peak("l2_peak_bytes_per_s"))


def _bound(work: Work, *, dram: Optional[float], dram_peak: Optional[float],
           l2: Optional[float], l2_peak: Optional[float]) -> Rollup:
    """The FLOP numbers with the bytes moved: intensity, ridge and the roof that binds."""
    intensity = _ratio(work["flop_per_s"], dram)
    return Rollup(**work, dram_bytes_per_s=dram, dram_peak_bytes_per_s=dram_peak,
                  l2_bytes_per_s=l2, l2_peak_bytes_per_s=l2_peak, intensity=intensity,
                  ridge=_ratio(work["flop_peak_per_s"], dram_peak),
                  **_binding(work, dram_peak, intensity))


def _work(flops: dict[str, FlopRate]) -> Work:
    """The FLOP numbers of the precision that did the most: {flops, precision, flop_per_s,
    flop_peak_per_s}; a kernel whose counters show no FLOP at all has 0 FLOP/s and no
    precision, one without counters None."""
    busiest = max(flops, key=lambda k: flops[k]["achieved"], default=None)
    if busiest is not None and flops[busiest]["achieved"] <= 0:
        return {"flops": flops, "precision": None, "flop_per_s": 0.0, "flop_peak_per_s": None}
    return {"flops": flops, "precision": busiest,
            "flop_per_s": flops[busiest]["achieved"] if busiest else None,
            "flop_peak_per_s": flops[busiest]["peak"] if busiest else None}


def _weighted(pairs: Sequence[tuple[float, float]]) -> Optional[float]:
    weight = sum(d for _, d in pairs)
    return sum(v * d for v, d in pairs) / weight if pairs and weight else None


def _cuda_core(get: Getter, fma: str, fma_flops: float, others: tuple[str, str],
               other_flops: float) -> Optional[FlopRate]:
    """{achieved, peak} FLOP/s of one precision on the CUDA cores (achieved 0 when the
    kernel ran none of its instructions); None without counters."""
    clock, sm_clock, peak = (get("smsp__cycles_elapsed.avg.per_second"),
                             get("sm__cycles_elapsed.avg.per_second"), get(_PEAK.format(fma)))
    rates = [get(_PER_CYCLE.format(fma)), *(get(_PER_CYCLE.format(op)) for op in others)]
    if clock is None or rates[0] is None:
        return None
    per_cycle = fma_flops * rates[0] + other_flops * sum(r or 0.0 for r in rates[1:])
    return {"achieved": per_cycle * clock,
            "peak": None if peak is None or sm_clock is None else fma_flops * peak * sm_clock}


def _tensor(values: Mapping[str, object]) -> Optional[tuple[str, FlopRate]]:
    """The busiest dense Tensor Core path: (its name, {achieved, peak}); None when no path
    ran (or the capture has none)."""
    best: Optional[tuple[str, FlopRate, tuple[bool, float]]] = None
    for metric, value in values.items():
        match = _TENSOR_PATH.match(str(metric))
        achieved = _float(value)
        if not match or "sparsity_on" in metric or achieved is None or achieved <= 0:
            continue
        peak = _float(values.get(metric.replace(".sum.per_second",
                                                ".sum.peak_sustained_elapsed.per_second")))
        # the most specific path (op_hgmma_src_bf16_...) over a sum of paths (src_bf16_...)
        rank = (match["path"].startswith("op_"), achieved)
        if best is None or rank > best[2]:
            best = (_path_label(match["path"]), {"achieved": achieved, "peak": peak}, rank)
    return None if best is None else best[:2]


def _path_label(path: str) -> str:
    """'op_hgmma_src_bf16_dst_fp32_sparsity_off' -> 'bf16 (hgmma)'."""
    src = re.search(r"src_([a-z0-9]+)", path)
    op = re.match(r"op_([a-z]+)_", path)
    return (src[1] if src else path) + (f" ({op[1]})" if op else "")


def _binding(work: Work, dram: Optional[float], intensity: Optional[float]) -> Binding:
    """Which roof binds at the kernel's intensity (given its DRAM peak), and the share of it
    achieved."""
    peak, achieved = work["flop_peak_per_s"], work["flop_per_s"]
    if peak is None or dram is None or not intensity or not achieved:
        return {"roof": None, "roof_pct": None}
    memory_roof = intensity * dram
    if min(peak, memory_roof) <= 0:       # a peak of 0 (a damaged export): no roof to judge
        return {"roof": None, "roof_pct": None}
    roof: Roof = "compute" if peak <= memory_roof else "memory"
    return {"roof": roof, "roof_pct": 100.0 * achieved / min(peak, memory_roof)}


def _getter(values: Mapping[str, object]) -> Getter:
    def get(name: str) -> Optional[float]:
        return _float(values.get(name))
    return get


def _float(value: object) -> Optional[float]:
    """A finite number as a float; None for anything else (absent, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _times(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a * b


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else a / b
