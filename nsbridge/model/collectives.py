"""Collectives in one rank's trace: what each kind costs, and on GPUs how much of the
communication overlaps computation.

Sources, in order of preference per kind: the backend's own ranges (``gloo:all_reduce``,
``nccl:all_reduce``, ``mpi:...``: the work itself, waiting for the other ranks included,
with the tensor's shape and dtype, hence bytes), else PyTorch's ``c10d::allreduce_`` ops
(the calls). On GPU traces the NCCL kernels give the device-side time.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

import numpy as np
import pandas as pd

from .. import schema as S
from .nesting import clipped_union, merge_intervals

_BACKENDS = "nccl|gloo|mpi|ucc|xccl"
_BACKEND = re.compile(rf"^(?:{_BACKENDS}):(?P<kind>[a-z_]+)")
# an op that communicates: a backend's own range, a c10d op, or PyTorch's comms record
COMMUNICATION_OP = re.compile(rf"^(?:{_BACKENDS}):|^c10d::|^record_param_comms$")
_C10D = re.compile(r"^c10d::(?P<kind>[a-z_]+?)_?$")
KINDS = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce",
         "all_gather": "all_gather", "allgather": "all_gather", "_allgather_base": "all_gather",
         "all_gather_into_tensor": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
         "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
         "reduce_scatter_tensor_coalesced": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
         "broadcast": "broadcast", "barrier": "barrier", "all_to_all": "all_to_all",
         "alltoall": "all_to_all", "alltoall_base": "all_to_all", "send": "send", "recv": "recv",
         "reduce": "reduce", "gather": "gather", "scatter": "scatter"}
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2,
                "bfloat16": 2, "int": 4, "long int": 8, "long": 8, "short": 2, "signed char": 1,
                "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "int64_t": 8}


def collectives(events: pd.DataFrame, lo: float, hi: float, n_steps: int) -> list[dict[str, Any]]:
    """Per kind, in [lo, hi): count, bytes (None when the trace has no shapes), time_us,
    per_step (calls), time_per_step_us, source."""
    in_window = ((events[S.TS] >= lo) & (events[S.TS] < hi)).to_numpy()
    codes, uniques = pd.factorize(events[S.NAME].to_numpy())   # regexes per distinct name
    rows = []
    for source, pattern in (("backend ranges", _BACKEND), ("c10d ops", _C10D)):
        per_name = np.array([_kind(pattern, str(u)) for u in uniques] + [None], dtype=object)
        kinds = per_name[np.where(codes >= 0, codes, len(uniques))]
        hit = in_window & (kinds != None)  # noqa: E711
        if not hit.any():
            continue
        frame = pd.DataFrame({"kind": kinds[hit], "dur": events[S.DUR].to_numpy()[hit],
                              "bytes": [_bytes(d, t) for d, t in zip(
                                  events[S.INPUT_DIMS].to_numpy()[hit],
                                  events[S.INPUT_TYPES].to_numpy()[hit])]})
        for kind, group in frame.groupby("kind", sort=True):
            known = group["bytes"].dropna()
            steps = max(n_steps, 1)
            rows.append({"kind": kind, "count": int(len(group)),
                         "bytes": int(known.sum()) if len(known) else None,
                         "time_us": round(float(group["dur"].sum()), 3),
                         "per_step": round(len(group) / steps, 2),
                         "time_per_step_us": round(float(group["dur"].sum()) / steps, 3),
                         "source": source})
        break   # backend ranges when there are any, else the c10d calls
    return rows


def time_per_step(events: pd.DataFrame, windows: pd.DataFrame) -> list[float]:
    """Per step window, the time (µs) some communication op was running, on any thread:
    the union of their intervals clipped to the step, so overlapping collectives (gloo's
    and DDP's buckets run concurrently) never add up to more than the step."""
    names = events[S.NAME].to_numpy()
    codes, uniques = pd.factorize(names)
    is_comm = np.array([bool(COMMUNICATION_OP.match(str(u))) for u in uniques] + [False])
    hit = is_comm[np.where(codes >= 0, codes, len(uniques))]
    start = events[S.TS].to_numpy(np.float64)[hit]
    end = start + events[S.DUR].to_numpy(np.float64)[hit]
    return [round(clipped_union(start, end, lo, hi), 3) if len(start) else 0.0
            for lo, hi in windows[["start", "end"]].itertuples(index=False)]


def comm_overlap(gpu: pd.DataFrame, lo: float, hi: float) -> Optional[dict[str, Any]]:
    """GPU traces: time in NCCL kernels and the share of it that overlaps other kernels."""
    if gpu.empty:
        return None
    kernels = gpu[(gpu["cat"] == S.KERNEL) & (gpu["ts"] >= lo) & (gpu["ts"] < hi)]
    is_comm = kernels["name"].astype(str).str.contains("nccl", case=False).to_numpy()
    if not is_comm.any():
        return None
    start = kernels["ts"].to_numpy(np.float64)
    end = start + kernels["dur"].to_numpy(np.float64)
    comm_s, comm_e = merge_intervals(start[is_comm], end[is_comm])
    comp_s, comp_e = merge_intervals(start[~is_comm], end[~is_comm])
    comm = float((comm_e - comm_s).sum())
    overlap = sum(clipped_union(comp_s, comp_e, a, b) for a, b in zip(comm_s, comm_e))
    return {"comm_us": round(comm, 3), "overlap_us": round(overlap, 3),
            "overlap_pct": round(100.0 * overlap / comm, 2) if comm else None}


def _kind(pattern: re.Pattern, name: str) -> Optional[str]:
    match = pattern.match(name)
    return KINDS.get(match["kind"]) if match else None


def _bytes(dims: Optional[str], types: Optional[str]) -> Optional[float]:
    """Bytes of the first tensor (or tensor list) argument, from its shape and dtype."""
    if not isinstance(dims, str) or not isinstance(types, str):
        return None
    try:
        shapes, dtypes = json.loads(dims), json.loads(types)
    except ValueError:
        return None
    if not shapes or not dtypes or dtypes[0] not in _DTYPE_BYTES:
        return None
    first = shapes[0]
    tensors = first if first and isinstance(first[0], list) else [first]
    return float(sum(int(np.prod(t)) if t else 0 for t in tensors) * _DTYPE_BYTES[dtypes[0]])
