"""Tensor Core eligibility from the triage alone, before ncu runs.

Each matmul, convolution and attention op is marked from what torch.profiler recorded: its
input dtype and shapes, the math settings the script ended with (TF32 for matmuls and for
cuDNN, recorded by the profiled process), and on a GPU run the names of the kernels it
launched. Marks: ``on Tensor Cores`` (kernel names of a Tensor Core path), ``not on Tensor
Cores`` (a GPU run whose kernels are CUDA-core ones: FFMA, SIMT), ``eligible`` (dtype,
settings and shapes allow them; no kernel names to confirm), ``eligible if padded`` (the
dtype and settings allow them, the shapes are not multiples of its alignment) and ``not
eligible``; each with its reason. ncu's counters, when the deep pass runs, settle it (a disagreement is a
finding there: passes/ncu_pass.py).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from ..judging.rules import MATMUL_OP
from ..strings import value_codes
from ...contract.report import Op, TensorCoreMark

ATTENTION_OP = re.compile(r"aten::(_scaled_dot_product|scaled_dot_product|_flash_attention|"
                          r"_efficient_attention|_cudnn_attention)")
ON, OFF, ELIGIBLE, MISALIGNED, NOT_ELIGIBLE = ("on Tensor Cores", "not on Tensor Cores",
                                                "eligible", "eligible if padded",
                                                "not eligible")
# kernel names of Tensor Core paths (cuBLAS/cuDNN/CUTLASS HMMA, Hopper GMMA, cuBLASLt
# nvjet, flash attention) and of CUDA-core ones (FFMA/SIMT GEMMs)
TENSOR_KERNEL = re.compile(r"tf32|bf16|f16f16|h16|hmma|gmma|wgmma|tensorop|s1688|s16816|"
                           r"h1688|h16816|i8816|16816|1688gemm|884gemm|nvjet|flash|fmha|"
                           r"xmma_.*(?:tf32|bf16|f16)", re.IGNORECASE)
CUDA_CORE_KERNEL = re.compile(r"sgemm|dgemm|_ffma_|simt|gemv|f32f32_f32f32|wgrad_alg0|"
                              r"implicit_convolve_sgemm|winograd", re.IGNORECASE)
# torch's "Input type" spellings -> dtype
_DTYPES = {"float": "float32", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
           "double": "float64", "c10::Float8_e4m3fn": "float8", "c10::Float8_e5m2": "float8",
           "signed char": "int8", "unsigned char": "uint8", "int": "int32",
           "long int": "int64", "bool": "bool"}
_ALIGN = {"float16": 8, "bfloat16": 8, "float32": 4, "int8": 16, "float8": 16}


def kernel_path(name: str) -> Optional[str]:
    """'Tensor Cores' or 'CUDA cores' for a matmul/conv/attention kernel by its name, None
    when the name does not tell."""
    if TENSOR_KERNEL.search(name):
        return "Tensor Cores"
    return "CUDA cores" if CUDA_CORE_KERNEL.search(name) else None


def is_tensor_core_op(name: str) -> bool:
    """A matmul, convolution or attention op: work Tensor Cores can do."""
    return bool(MATMUL_OP.match(name) or ATTENTION_OP.match(name))


def common_input_types(names: Sequence[str], types: Sequence[Any]) -> dict[str, str]:
    """Per matmul/convolution/attention op name, its most common "Input type" list (ties:
    the one seen first), names in order of first appearance. Counted per distinct
    (name, types) pair, not per row."""
    name_codes, name_values = value_codes(names)
    type_codes, type_values = value_codes(types)
    wanted = np.array([is_tensor_core_op(str(n)) for n in name_values] + [False])
    is_text = np.array([isinstance(t, str) for t in type_values] + [False])
    rows = np.flatnonzero(wanted[name_codes] & is_text[type_codes])
    if not len(rows):
        return {}
    pairs = pd.DataFrame({"name": name_codes[rows], "types": type_codes[rows], "row": rows},
                         copy=False)
    counted = pairs.groupby(["name", "types"], sort=False).agg(
        count=("row", "size"), first=("row", "min")).reset_index()
    best = counted.sort_values(["count", "first"], ascending=[False, True]).drop_duplicates(
        "name").set_index("name")
    order = pairs.drop_duplicates("name")["name"]
    return {str(name_values[n]): type_values[best.at[n, "types"]] for n in order}


def mark(op: Mapping[str, Any], input_types: Optional[str], math: Mapping[str, Any],
         gpu_run: bool) -> Optional[TensorCoreMark]:
    """{status, reason, dtype, evidence} for one op row of the report (name, shapes,
    kernels); ``math``: the settings the script ended with (``matmul_allow_tf32``,
    ``cudnn_allow_tf32``, ``float32_matmul_precision``), empty when unknown. None when
    nothing tells: no kernel names and no recorded dtype (shapes not recorded)."""
    dtype = _dtype(input_types)
    kernels = [str(k["name"]) for k in op.get("kernels") or []]
    conv = "conv" in op["name"]
    status, reason = _by_dtype(dtype, op.get("shapes") or [], math, conv)
    if gpu_run and kernels:
        on = [k for k in kernels if TENSOR_KERNEL.search(k)]
        off = [k for k in kernels if CUDA_CORE_KERNEL.search(k) and not TENSOR_KERNEL.search(k)]
        if on:
            return {"status": ON, "dtype": dtype, "evidence": "kernel names",
                    "reason": f"Tensor Core kernels: {_short(on)}"
                              + (f"; also CUDA-core kernels: {_short(off)}" if off else "")}
        if off:
            if status == NOT_ELIGIBLE:
                why = reason
            elif dtype == "float32" and _tf32(math, conv) is None:
                why = ("fp32 without TF32 (CUDA-core kernels; TF32 is off by default for "
                       "matmuls): fix with torch.backends.cuda.matmul.allow_tf32 = True / "
                       "bf16 autocast")
            else:
                why = ("eligible by dtype and settings, yet cuBLAS/cuDNN chose CUDA-core "
                       "kernels (shapes, alignment or a heuristic)")
            return {"status": OFF, "dtype": dtype, "evidence": "kernel names",
                    "reason": f"{why}; kernels: {_short(off)}"}
    if dtype is None:
        return None
    evidence = "dtype, shapes and settings" + (
        "" if gpu_run else "; a CPU run: what a GPU would do")
    return {"status": status, "dtype": dtype, "evidence": evidence, "reason": reason}


def _by_dtype(dtype: Optional[str], shapes: Sequence[str], math: Mapping[str, Any],
              conv: bool) -> tuple[str, str]:
    """(eligible | not eligible, why) from the dtype, the TF32 settings and the shapes."""
    if dtype == "float32":
        allowed = _tf32(math, conv)
        if allowed is False:
            return NOT_ELIGIBLE, ("fp32 without TF32 (" + (
                "torch.backends.cudnn.allow_tf32 is False" if conv else
                "torch.backends.cuda.matmul.allow_tf32 is False, float32 matmul precision "
                f"'{math.get('float32_matmul_precision', 'highest')}'")
                + "): fix with torch.backends.cuda.matmul.allow_tf32 = True / bf16 autocast")
        if allowed is None:
            return ELIGIBLE, "fp32: only with TF32 allowed (the run's setting was not recorded)"
    elif dtype is None:
        return ELIGIBLE, "dtype not recorded"
    elif dtype not in _ALIGN:
        return NOT_ELIGIBLE, f"{dtype} has no Tensor Core path in PyTorch's kernels"
    odd = _odd_dims(shapes, _ALIGN[dtype])
    if odd:
        return MISALIGNED, (f"{dtype}, but dimensions {', '.join(map(str, odd[:4]))} are not "
                          f"multiples of {_ALIGN[dtype]}: pad them, or Tensor Cores are used "
                          "less or not at all")
    return ELIGIBLE, f"{dtype}" + (" with TF32 allowed" if dtype == "float32" else "") + \
        ", dimensions multiples of " + str(_ALIGN[dtype])


def _tf32(math: Mapping[str, Any], conv: bool) -> Optional[bool]:
    """Whether TF32 was allowed for this kind of op; None when not recorded."""
    if conv:
        value = math.get("cudnn_allow_tf32")
        return None if value is None else bool(value)
    if math.get("matmul_allow_tf32") is None and math.get("float32_matmul_precision") is None:
        return None
    return bool(math.get("matmul_allow_tf32")) or \
        math.get("float32_matmul_precision") in ("high", "medium")


def _dtype(input_types: Optional[str]) -> Optional[str]:
    """The first tensor input's dtype of a recorded "Input type" list."""
    if not input_types:
        return None
    try:
        names = json.loads(input_types)
    except ValueError:
        names = re.findall(r"'([^']*)'|\"([^\"]*)\"", input_types)
        names = [a or b for a, b in names]
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str) and name in _DTYPES:    # a damaged trace: lists, numbers
            return _DTYPES[name]
    return None


def _odd_dims(shapes: Sequence[str], align: int) -> list[int]:
    """The dimensions of the op's 2-d and larger inputs that are not multiples of ``align``
    (batch-like leading dimensions of 3-d and larger tensors left out)."""
    odd: list[int] = []
    for shape in shapes[:1]:
        try:
            tensors = json.loads(shape)
        except ValueError:
            continue
        for dims in tensors if isinstance(tensors, list) else []:
            if isinstance(dims, list) and len(dims) >= 2:
                inner = dims[-2:] if len(dims) <= 3 else dims[1:2]   # conv: channels
                odd += [d for d in inner if isinstance(d, int) and d > 1 and d % align]
    return sorted(set(odd))


def _short(names: Sequence[str]) -> str:
    return "; ".join(dict.fromkeys(n[:60] for n in names[:2]))


def summary(marks: Mapping[str, TensorCoreMark]) -> dict[str, int]:
    """report["tensor_cores"]: how many ops got each mark (the marks are in ops[])."""
    counts = Counter(m["status"] for m in marks.values())
    return {"ops": len(marks), **{status: counts.get(status, 0)
                                  for status in (ON, OFF, ELIGIBLE, MISALIGNED,
                                                 NOT_ELIGIBLE)}}


def settle_with_ncu(ops: list[Op], on_pct: float = 1.0) -> None:
    """Where the deep pass measured an op's tensor pipe, its counters decide the op's mark
    (``ops[].tensor_cores``, in place) over names and dtypes; a mark they contradict is
    kept as ``triage_status`` and reported as an ncu finding."""
    for op in ops:
        mark_, ncu = op.get("tensor_cores"), op.get("ncu") or {}
        tensor = ncu.get("tensor_pct")
        if not mark_ or tensor is None:
            continue
        measured = ON if tensor >= on_pct else OFF
        said = mark_["status"]
        agrees = said == ELIGIBLE or (said == ON) == (measured == ON)
        op["tensor_cores"] = {**mark_, "status": measured, "evidence": "ncu counters",
                              "triage_status": said}
        if agrees:
            continue
        ncu.setdefault("findings", []).append({
            "id": "tensor-cores-disagree", "title": "the triage's Tensor Core mark was wrong",
            "detail": f"the triage said {said} ({mark_['evidence']}); ncu measured the tensor "
                      f"pipe at {tensor:.2f}% of peak, so the op is {measured}",
            "fix": "trust ncu's counters; kernel names and dtypes only suggest the path"})
