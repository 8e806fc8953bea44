"""Recommendations: small rules over the analysis, each tied to the finding that fired it.

A rule looks at the ``Facts`` of one analysed trace and returns a recommendation or None.
Recommendations that address the verdict's bound come first (a rule says which bounds it
addresses), then the rest; ``impact`` (0..1, roughly the share of step time at stake)
orders them within each group. The terminal summary shows the first three.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pandas as pd

from ... import schema as S
from ..host.syncs import IMPLICIT, SyncCost
from ...contract.report import DeviceIdleGap, MachineContention, Recommendation, SyncPoint

CONV_OP = re.compile(r"conv", re.IGNORECASE)
MATMUL_OP = re.compile(r"aten::(addmm|mm|bmm|matmul|linear|baddbmm|_scaled_mm|conv|cudnn_conv"
                       r"|convolution|_convolution|mkldnn_convolution|conv2d|conv1d|conv3d)")


@dataclass
class Facts:
    """What the rules read: numbers from one analysed trace."""

    has_device: bool
    verdict: str
    data_share: float
    dataloader_kind: Optional[str]      # "single-process", "multi-process" or None
    pageable_h2d: int                   # count of pageable host-to-device copies
    sync_points: list[SyncPoint]
    sync_cost: SyncCost
    ops: pd.DataFrame
    host_ops_per_step: Optional[float]   # None in a window without steps
    kernels_per_step: float
    median_kernel_us: Optional[float]
    busy_pct: Optional[float]
    gaps: list[DeviceIdleGap]
    top_kernel: Optional[dict[str, Any]] = None   # {name, share}
    script: Optional[str] = None
    sync_recommend_per_step: float = 1.0   # rarer syncs are listed, never recommended away
    contention: Optional[MachineContention] = None   # model.judging.contention.contention
    host_ops_per_s: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Rule:
    id: str
    url: str
    match: Callable[[Facts], Optional[Recommendation]]
    addresses: frozenset[str]    # the verdicts whose bound this recommendation attacks


def _rec(title: str, why: str, fix: str, impact: float) -> Recommendation:
    return {"title": title, "why": why, "fix": fix, "impact": round(min(max(impact, 0.0), 1.0), 3)}


def _quiet_machine(f: Facts) -> Optional[Recommendation]:
    contention = f.contention
    if contention is None or not contention.get("contended"):
        return None
    share = contention.get("share")
    rec = _rec("Measure on a machine that is not busy", str(contention.get("evidence")),
               str(contention.get("fix")), 0.5 if share is None else share)
    rec["addresses_verdict"] = True   # every number of this run carries the contention
    return rec


def _dataloader_workers(f: Facts) -> Optional[Recommendation]:
    if f.data_share < 0.10 or f.dataloader_kind != "single-process":
        return None
    return _rec("Load data in worker processes",
                f"data loading is {f.data_share:.0%} of each step and the DataLoader runs in the "
                "training process (num_workers=0)",
                "DataLoader(..., num_workers=4, persistent_workers=True): start with the number "
                "of free CPU cores and raise it until data loading leaves the profile",
                f.data_share)


def _dataloader_prefetch(f: Facts) -> Optional[Recommendation]:
    if f.data_share < 0.10 or f.dataloader_kind != "multi-process":
        return None
    return _rec("Feed the DataLoader faster",
                f"data loading is still {f.data_share:.0%} of each step with worker processes",
                "raise num_workers and prefetch_factor (e.g. 4), set persistent_workers=True, "
                "and move costly per-sample transforms out of __getitem__ (pre-process once)",
                f.data_share)


def _pin_memory(f: Facts) -> Optional[Recommendation]:
    if not f.has_device or f.pageable_h2d == 0:
        return None
    return _rec("Pin host memory for input copies",
                f"{f.pageable_h2d} host-to-device copies came from pageable memory (synchronous, "
                "slower)",
                "DataLoader(..., pin_memory=True) and tensor.to(device, non_blocking=True)",
                min(0.05 + f.data_share, 0.5))


def _remove_syncs(f: Facts) -> Optional[Recommendation]:
    in_loop = [p for p in f.sync_points if p["placement"] == "steps"
               and (p["per_step"] or 0.0) >= f.sync_recommend_per_step]
    if not in_loop:
        return None  # an occasional sync (after the loop, once per epoch) is not worth a change
    per_step = sum(p.get("per_step") or 0.0 for p in in_loop)
    top = in_loop[0]
    where = (f"at {top['file']}:{top['line']}" if top.get("file")
             else f"in {top['op']}" if top.get("op") else "in the loop")
    cost = f.sync_cost
    share = (cost.idle_share or 0.0) + (cost.blocked_share or 0.0)
    impact = max(share, 0.6 if f.verdict == "sync-bound" else min(per_step / 50, 0.3))
    why = f"{per_step:g} sync call(s) per step; the first is {top['kind']} {where}"
    if cost.idle_share is not None:
        why += (f"; the GPU idles after syncs {cost.idle_share:.0%} of each step and the host "
                f"is blocked in them {cost.blocked_share or 0:.0%}")
    fix = ("keep running values on the device (loss_sum += loss.detach()) and call .item()"
           " / .cpu() once per logging interval; avoid .tolist() and Python branches on "
           "tensor values inside the loop")
    if any(p["kind"] == IMPLICIT for p in in_loop):
        fix += ("; keep shapes fixed where the data chose them: torch.where(mask, value, x) or "
                "x.masked_fill(mask, v) instead of x[mask] = v and x[mask], "
                "nonzero_static(size=N) instead of nonzero, repeat_interleave(..., "
                "output_size=N)")
    return _rec("Remove host-device syncs from the step loop", why, fix, impact)


SMALL_OP_US = 50.0   # an op's mean self CPU time below which per-op dispatch matters


COMPILED_MARKS = ("Torch-Compiled Region", "CompiledFunction", "TorchDynamo Cache Lookup")


def compiled(ops: pd.DataFrame) -> bool:
    """Whether the trace ran torch.compile'd code (the ranges torch records around it)."""
    return not ops.empty and bool(ops[S.NAME].astype(str).str.startswith(COMPILED_MARKS).any())


def _torch_compile(f: Facts) -> Optional[Recommendation]:
    rate = f.host_ops_per_step if f.host_ops_per_step is not None else f.host_ops_per_s
    if f.ops.empty or not rate:
        return None   # nothing measured: no op to fuse
    launch_bound = f.has_device and f.verdict == "cpu-bound"
    calls = float(f.ops[S.CALLS].sum())
    op_us = float(f.ops[S.CPU_SELF_US].sum()) / calls if calls else 0.0
    # fusing pays where dispatch is a large part of each op: many ops of a step, each short
    small = op_us < SMALL_OP_US
    many_small = small and f.host_ops_per_step is not None and f.host_ops_per_step >= 200
    if not (launch_bound or many_small or (small and not f.has_device
                                           and f.verdict == "cpu-bound")):
        return None
    count = (f"{f.host_ops_per_step:.0f} host ops per step" if f.host_ops_per_step is not None
             else f"{f.host_ops_per_s:.0f} host ops per second")
    count += f", {op_us:.0f} µs each on average"
    if compiled(f.ops):
        return _rec("Widen what torch.compile covers",
                    count + " although the model is compiled (torch.compile regions in the "
                    "trace): they run outside its graphs or between them",
                    "find the graph breaks (TORCH_LOGS=graph_breaks, or torch._dynamo.explain)"
                    " and compile the whole step; then try mode='max-autotune'"
                    + (", or mode='reduce-overhead' (CUDA graphs) for static shapes"
                       if f.has_device else ""),
                    0.2 if launch_bound else 0.1)
    return _rec("Fuse ops with torch.compile",
                count + ("; the GPU waits on the host" if launch_bound else ""),
                "model = torch.compile(model) (try mode='max-autotune' for GEMM-heavy models); "
                "it fuses elementwise ops and cuts per-op dispatch overhead",
                0.3 if launch_bound else 0.15)


def _cuda_graphs(f: Facts) -> Optional[Recommendation]:
    if not (f.has_device and f.verdict == "cpu-bound" and f.median_kernel_us is not None
            and f.median_kernel_us < 20 and f.kernels_per_step >= 100):
        return None
    return _rec("Replay the step as a CUDA graph",
                f"{f.kernels_per_step:.0f} kernels per step with a median of "
                f"{f.median_kernel_us:.1f} µs: launch overhead dominates",
                "torch.compile(model, mode='reduce-overhead') or torch.cuda.graphs for static "
                "shapes", 0.3)


PRECISION_SHARE = 0.5     # matmul/conv must clearly dominate...
PRECISION_MIN_DIM = {True: 64, False: 128}   # ...on operands this wide (GPU, CPU) at least
_TENSOR_CORE_KERNEL = re.compile(r"bf16|fp16|f16f16|tf32|hmma|gmma|h884|h1688|h16816|s1688"
                                 r"|hgemm|bgemm", re.IGNORECASE)


def _amp_tf32(f: Facts) -> Optional[Recommendation]:
    """Lower precision, only where it can pay: matmul/conv at least PRECISION_SHARE of the
    ranking time, their costliest input shapes at least PRECISION_MIN_DIM wide in every
    matrix dimension, and on a GPU not already on Tensor Core kernels."""
    if f.ops.empty:
        return None
    col = S.DEVICE_SELF_US if f.has_device else S.CPU_SELF_US
    total = f.ops[col].sum()
    matmul = f.ops[f.ops["name"].str.match(MATMUL_OP)]
    share = matmul[col].sum() / total if total else 0.0
    if share < PRECISION_SHARE or not _wide_enough(matmul, PRECISION_MIN_DIM[f.has_device]):
        return None
    kernels = [k["name"] for ks in matmul["kernels"] for k in (ks or [])[:3]]
    if f.has_device and kernels and all(_TENSOR_CORE_KERNEL.search(k) for k in kernels):
        return None
    where = "GPU" if f.has_device else "CPU"
    fix = ("torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss, and "
           "torch.backends.cuda.matmul.allow_tf32 = True / "
           "torch.set_float32_matmul_precision('high') for the rest"
           if f.has_device else
           "torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss, on a CPU "
           "with bf16 units (AMX or AVX512-BF16: see lscpu); elsewhere it is slower")
    title = ("Use Tensor Cores: mixed precision / TF32" if f.has_device
             else "Matmul and convolution dominate: try bfloat16 autocast")
    rec = _rec(title, f"matmul and convolution ops take {share:.0%} of {where} self time",
               fix, share * 0.5)
    if not f.has_device:  # a CPU-only run is bound by this very compute
        rec["addresses_verdict"] = f.verdict == "cpu-bound"
    return rec


def _wide_enough(matmul: pd.DataFrame, min_dim: int) -> bool:
    """Whether the costliest input shape of the costliest matmul op has every matrix
    dimension (the last two of each input of 2 or more dims) at least ``min_dim``; True for
    convolutions (their last dims are the kernel's, not the work's width) and when no
    shapes were recorded (nothing says otherwise)."""
    if matmul.empty or CONV_OP.search(str(matmul["name"].iloc[0])):
        return True
    for work in matmul[S.SHAPE_WORK].head(1):
        if not work:
            return True
        try:
            inputs = json.loads(work[0]["shape"])
        except (ValueError, TypeError, KeyError):
            return True
        if not isinstance(inputs, list):    # "Input Dims" that are not a list (a damaged trace)
            return True
        dims = [d for t in inputs if isinstance(t, list) and len(t) >= 2
                and all(isinstance(x, int) for x in t) for d in t[-2:]]
        return bool(dims) and min(dims) >= min_dim
    return True


def _next_nsys(f: Facts) -> Optional[Recommendation]:
    if not f.has_device or f.busy_pct is None or f.busy_pct >= 90 or not f.gaps:
        return None
    gap = f.gaps[0]
    host = gap.get("host_op") or "Python code between ops"
    return _rec("Next: look at the timeline in Nsight Systems",
                f"the GPU is idle {100 - f.busy_pct:.0f}% of the window; the longest gap is "
                f"{(gap.get('dur_us') or 0.0) / 1e3:.2f} ms while the host was in {host}",
                "nsys profile -t cuda,nvtx,osrt --cuda-graph-trace=node -o timeline python "
                f"{f.script or 'script.py'}: see which host work leaves the GPU idle",
                0.1)


def _next_ncu(f: Facts) -> Optional[Recommendation]:
    if not f.has_device or f.verdict != "gpu-bound" or not f.top_kernel:
        return None
    k = f.top_kernel
    short = re.escape(_short_kernel_name(k["name"]))
    return _rec("Next: open the hottest kernel in Nsight Compute",
                f"the GPU is busy and {k['name'][:80]} takes {k['share']:.0%} of GPU time",
                f"ncu --target-processes all --kernel-name-base function --kernel-name "
                f"regex:'{short}' --launch-skip 5 --launch-count 3 --set full -o hot python "
                f"{f.script or 'script.py'}: occupancy, Tensor Core use, memory throughput",
                0.1)


def _short_kernel_name(name: str) -> str:
    """The bare function name of a demangled kernel (what ncu's 'function' base matches)."""
    head = name.split("(", 1)[0]
    head = re.sub(r"<.*", "", head).strip()
    head = head.split(" ")[-1]
    return head.split("::")[-1] or name


_INPUT, _GPU, _SYNC, _CPU = "input-bound", "gpu-bound", "sync-bound", "cpu-bound"
RULES = [
    Rule("contended-machine", "https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html",
         _quiet_machine, frozenset()),
    Rule("dataloader-workers", "https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
         _dataloader_workers, frozenset({_INPUT})),
    Rule("dataloader-prefetch", "https://pytorch.org/docs/stable/data.html", _dataloader_prefetch,
         frozenset({_INPUT})),
    Rule("pin-memory", "https://pytorch.org/docs/stable/data.html#memory-pinning", _pin_memory,
         frozenset({_INPUT})),
    Rule("remove-syncs", "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
         _remove_syncs, frozenset({_SYNC})),
    Rule("torch-compile", "https://pytorch.org/docs/stable/torch.compiler.html", _torch_compile,
         frozenset({_CPU, _GPU})),
    Rule("cuda-graphs", "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
         _cuda_graphs, frozenset({_CPU})),
    Rule("amp-tf32", "https://pytorch.org/docs/stable/amp.html", _amp_tf32, frozenset({_GPU})),
    Rule("next-nsys", "https://docs.nvidia.com/nsight-systems/UserGuide/index.html", _next_nsys,
         frozenset({_CPU, _SYNC})),
    Rule("next-ncu", "https://docs.nvidia.com/nsight-compute/NsightComputeCli/index.html",
         _next_ncu, frozenset({_GPU})),
]


def recommend(facts: Facts) -> list[Recommendation]:
    """Every rule that fires; those addressing the verdict's bound first, then by impact.
    Each: id, url, title, why, fix, impact, addresses_verdict."""
    out: list[Recommendation] = []
    for rule in RULES:
        rec = rule.match(facts)
        if rec is not None:
            addresses = rec.pop("addresses_verdict", facts.verdict in rule.addresses)
            out.append({"id": rule.id, **rec, "url": rule.url, "addresses_verdict": addresses})
    return sorted(out, key=lambda r: (not r.get("addresses_verdict"), -(r.get("impact") or 0.0)))
