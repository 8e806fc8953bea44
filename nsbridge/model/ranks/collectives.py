"""Collectives in one rank's trace: what each kind costs, and on GPUs how much of the
communication overlaps computation.

``collectives`` counts calls on the host and times them on the device:

- Calls: the backend's own host ranges (``nccl:all_reduce``, ``mpi:...``; cat
  user_annotation or cpu_op) where they run inside the call (NCCL: in the c10d op, on
  the calling thread), and PyTorch's ``c10d::allreduce_`` ops that have no backend range
  inside them. Each call is counted once, in [lo, hi) by its host start: the
  ``gpu_user_annotation`` copies torch writes of each backend range on the GPU timeline
  are never calls; a c10d op is not counted when a backend range runs inside it (NCCL's
  barrier is an all_reduce), nor inside another c10d op.
- Worker threads: gloo runs every collective on a worker thread of its own, under a range
  named for what it does there, not for what was called (FSDP2's reduce-scatter is a
  ``gloo:all_reduce`` of the whole tensor). Such a range (the outermost op of a thread
  that runs nothing but backend ranges: ``worker_ranges``) is not a call when c10d ops
  are in the trace: it times the c10d op it carried out, matched in order (the first
  worker range to start at or after the op, each used once), and gives its bytes. Only
  without c10d ops do worker ranges count as the calls.
- Kinds: every spelling torch emits is folded onto one name (``_all_gather_base``,
  ``all_gather_into_tensor_coalesced``, ``allgather_`` -> all_gather; ``alltoall_base`` ->
  all_to_all; ``send 0->1`` -> send; ...). A name not recognised stays under its own
  suffix (``nccl:foo_bar`` -> foo_bar), never dropped.
- Time, per call, the first that exists: the device copy of its range (``gpu_user_annotation``
  with the range's External id: "device annotation"), else the GPU time of what it
  launched (the GPU events attributed to the range or any op nested in it, or to the
  communication op around it that launched the kernel: "device kernels"), else its host
  duration ("host ranges": the enqueue time for NCCL; for gloo the work itself, waiting
  for the other ranks included). The device time is the calls' whole time, not clipped to
  the window. Each row keeps the host time beside it (host_time_us), names the source
  most of its calls were timed by (time_source) and counts the calls per source
  (time_sources): a call that launched nothing in the trace falls back on its own.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

import numpy as np
import pandas as pd

from ... import schema as S
from ..host.nesting import HostTree, clipped_union, covered_within, merge_intervals
from ..strings import is_in, name_mask, value_codes
from ...contract.report import Collective, DeviceComm

_BACKENDS = "nccl|gloo|mpi|ucc|xccl"
_BACKEND = re.compile(rf"^(?:{_BACKENDS}):(?P<op>\S+)")
# an op that communicates: a backend's own range, a c10d op, or PyTorch's comms record
COMMUNICATION_OP = re.compile(rf"^(?:{_BACKENDS}):|^c10d::|^record_param_comms$")
_C10D = re.compile(r"^c10d::(?P<op>\S+)")
GPU_USER_ANNOTATION = "gpu_user_annotation"   # torch's device copy of a user annotation
BACKEND_RANGES, C10D_OPS = "backend ranges", "c10d ops"
DEVICE_ANNOTATION, DEVICE_KERNELS = "device annotation", "device kernels"
HOST_RANGES = "host ranges"
_TIME_SOURCES = [DEVICE_ANNOTATION, DEVICE_KERNELS, HOST_RANGES]   # in order of preference
# an op name with its underscores removed and its variant suffixes stripped -> the kind
KINDS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
         "alltoall": "all_to_all", "broadcast": "broadcast", "barrier": "barrier",
         "monitoredbarrier": "barrier", "allreducebarrier": "barrier", "send": "send",
         "recv": "recv", "reduce": "reduce", "gather": "gather", "scatter": "scatter"}
# variants of one collective: _base, _coalesced, _into_tensor, reduce_scatter_tensor,
# _oop (out of place), recv_any_source / recvAnySource, allreduce_multigpu
_VARIANT_SUFFIXES = ("coalesced", "base", "intotensor", "tensor", "oop", "anysource", "multigpu")
_VARIANT_PREFIXES = ("sparse",)                       # gloo:sparse_all_reduce
_NOT_COLLECTIVES = {"check_for_nan"}                  # c10d ops that communicate nothing
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2,
                "bfloat16": 2, "int": 4, "long int": 8, "long": 8, "short": 2, "signed char": 1,
                "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "int64_t": 8}


def collective_kind(name: str) -> Optional[tuple[str, str]]:
    """(kind, source) of a collective's name, None for any other name.

    source is "backend ranges" for ``nccl:``/``gloo:``/``mpi:``/``ucc:``/``xccl:`` ranges
    and "c10d ops" for ``c10d::`` ops. An unknown operation keeps its own name, as
    written after the prefix (``nccl:foo_bar`` -> foo_bar; a c10d op without its in-place
    underscore)."""
    for pattern, source in ((_BACKEND, BACKEND_RANGES), (_C10D, C10D_OPS)):
        match = pattern.match(name)
        if match:
            op = match["op"]
            if source == C10D_OPS:
                op = op.rstrip("_") or op
                if op.strip("_") in _NOT_COLLECTIVES:
                    return None
            return _normalise(op), source
    return None


def _normalise(op: str) -> str:
    key = op.lower().replace("_", "")
    changed = True
    while changed and key not in KINDS:
        changed = False
        for suffix in _VARIANT_SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                key, changed = key[: -len(suffix)], True
        for prefix in _VARIANT_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key, changed = key[len(prefix):], True
    return KINDS.get(key, op)


def collectives(events: pd.DataFrame, tree: HostTree, gpu: Optional[pd.DataFrame],
                lo: float, hi: float, n_steps: int) -> list[Collective]:
    """Per kind, the calls that start on the host in [lo, hi) (see the module docstring).

    ``tree`` is ``build_host_tree(events)``; ``gpu`` is ``attribute_gpu_events(events,
    tree)``, empty (or None) for CPU-only traces. Each row: kind, count, bytes (None when
    the trace has no shapes), time_us (device time where the trace has it, see
    time_source), host_time_us (the host ranges' time), time_source ("device annotation"
    | "device kernels" | "host ranges": the one most calls were timed by), time_sources
    (calls timed by each), per_step (calls), time_per_step_us, source ("backend ranges" |
    "c10d ops").
    """
    if not len(tree):
        return []
    codes, uniques = value_codes(events[S.NAME])   # regexes per distinct name
    found = [collective_kind(str(u)) for u in uniques]
    # one extra last entry per table: a missing name's code, -1, reads it
    kind_of = np.array([f[0] if f else None for f in found] + [None], dtype=object)
    form_of = np.array([(1 if f[1] == BACKEND_RANGES else 2) if f else 0 for f in found] + [0],
                       dtype=np.int8)
    if not form_of.any():   # no collective in the trace: no op to place
        return []
    comm_of = np.array([bool(COMMUNICATION_OP.match(str(u))) for u in uniques] + [False])

    # the host tree's ops, by position
    rowpos = events.index.get_indexer(tree.rows)
    t_code = codes[rowpos]
    t_form = form_of[t_code]
    if not t_form.any():
        return []
    t_kind = kind_of[t_code]
    in_window = (tree.start >= lo) & (tree.start < hi)
    backend = t_form == 1
    c10d = t_form == 2
    workers = backend & _worker_threads(tree, backend)
    # c10d ops (the whole trace's, for the matching): outermost, no backend range inside
    c10d_calls = np.zeros(len(tree), dtype=bool)
    candidates = np.nonzero(c10d)[0]
    if len(candidates):
        has_backend_inside = np.zeros(len(tree), dtype=bool)
        for level in tree.ancestors_or_self(np.nonzero(backend & ~workers)[0])[1:]:
            has_backend_inside[level[level >= 0]] = True
        outermost = tree.nearest(_parent(tree, candidates), c10d) < 0
        c10d_calls[candidates[outermost & ~has_backend_inside[candidates]]] = True
    # worker ranges time the c10d ops they carried out; alone, they are the calls
    carried = _carried_by(tree, np.nonzero(c10d_calls)[0], np.nonzero(workers)[0]) \
        if c10d_calls.any() else None
    calls = (backend & ~workers & in_window) | (c10d_calls & in_window)
    if carried is None:
        calls |= workers & in_window
    pos = np.nonzero(calls)[0]
    if not len(pos):
        return []

    host_us = tree.dur[pos].copy()
    measured_at = pos.copy()           # the range whose inputs give the bytes
    if carried is not None:
        done = carried.reindex(pos).to_numpy(np.float64)
        ok = ~np.isnan(done)
        measured_at[ok] = done[ok].astype(np.int64)
        host_us[ok] = tree.dur[measured_at[ok]]
    annotation_us = _device_annotations(events, codes, form_of, rowpos[pos], t_code[pos])
    kernel_us = _device_kernels(tree, gpu, calls, pos, comm_of[t_code])
    time_us = np.where(~np.isnan(annotation_us), annotation_us,
                       np.where(~np.isnan(kernel_us), kernel_us, host_us))
    time_source = np.where(~np.isnan(annotation_us), DEVICE_ANNOTATION,
                           np.where(~np.isnan(kernel_us), DEVICE_KERNELS, HOST_RANGES))
    rows_at = rowpos[measured_at]
    frame = pd.DataFrame({
        "kind": t_kind[pos], "source": np.where(t_form[pos] == 1, BACKEND_RANGES, C10D_OPS),
        "time": time_us, "host": host_us, "time_source": time_source,
        "bytes": [_bytes(d, t) for d, t in zip(events[S.INPUT_DIMS].take(rows_at).to_numpy(),
                                               events[S.INPUT_TYPES].take(rows_at).to_numpy())]},
        copy=False)
    steps = max(n_steps, 1)
    rows: list[Collective] = []
    for (kind, source), group in frame.groupby(["kind", "source"], sort=True):
        known = group["bytes"].dropna()
        by_source = group["time_source"].value_counts().reindex(_TIME_SOURCES).dropna()
        total = float(group["time"].sum())
        rows.append({"kind": kind, "count": int(len(group)),
                     "bytes": int(known.sum()) if len(known) else None,
                     "time_us": round(total, 3),
                     "host_time_us": round(float(group["host"].sum()), 3),
                     "time_source": str(by_source.idxmax()),   # ties: the device first
                     "time_sources": {str(k): int(v) for k, v in by_source.items()},
                     "per_step": round(len(group) / steps, 2),
                     "time_per_step_us": round(total / steps, 3),
                     "source": source})
    return rows


def worker_ranges(tree: HostTree) -> np.ndarray:
    """Per tree position: a backend range on a worker thread of the backend's own (the
    module docstring): its time is the collective's work and the wait for the other
    ranks, not an op of the script's threads (what the backend runs inside it is)."""
    codes, uniques = value_codes(tree.names)
    is_backend = np.array([bool(_BACKEND.match(str(u))) for u in uniques] + [False])
    backend = is_backend[codes]
    return backend & _worker_threads(tree, backend)


def _worker_threads(tree: HostTree, backend: np.ndarray) -> np.ndarray:
    """Per tree position: the outermost op of a thread whose outermost ops are all backend
    ranges (``backend``, per position; the ops the backend runs inside them are nested)."""
    if not len(tree):
        return np.zeros(0, dtype=bool)
    root = tree.parent < 0
    other = np.bincount(tree.thread, weights=(root & ~backend).astype(np.float64),
                        minlength=len(tree.bounds))
    return root & (other[tree.thread] == 0)


def _carried_by(tree: HostTree, calls: np.ndarray, workers: np.ndarray) -> pd.Series:
    """Per c10d call (tree positions, any order): the worker range that carried it out,
    matched in order of start (the first unmatched one to start at or after the call:
    the backend's queue runs in order), the call position -> the worker position; calls
    left unmatched are absent."""
    calls = calls[np.argsort(tree.start[calls], kind="stable")]
    workers = workers[np.argsort(tree.start[workers], kind="stable")]
    out: dict[int, int] = {}
    j = 0
    for call in calls:
        while j < len(workers) and tree.start[workers[j]] < tree.start[call]:
            j += 1
        if j == len(workers):
            break
        out[int(call)] = int(workers[j])
        j += 1
    return pd.Series(out, dtype=np.int64)


def _parent(tree: HostTree, pos: np.ndarray) -> np.ndarray:
    return np.where(pos >= 0, tree.parent[np.maximum(pos, 0)], -1)


def _outermost(tree: HostTree, pos: np.ndarray, communicates: np.ndarray) -> np.ndarray:
    """Per position, the outermost op of the unbroken chain of communication ops around it
    (itself included): the whole call, c10d op to backend range."""
    cur = pos.copy()
    while True:
        up = _parent(tree, cur)
        step = (cur >= 0) & (up >= 0) & communicates[np.maximum(up, 0)]
        if not step.any():
            return cur
        cur[step] = up[step]


def _device_annotations(events: pd.DataFrame, codes: np.ndarray, form_of: np.ndarray,
                        call_rows: np.ndarray, call_codes: np.ndarray) -> np.ndarray:
    """Per call, the summed duration of the GPU timeline's copies of its range (same name,
    same External id), NaN where it has none."""
    out = np.full(len(call_rows), np.nan)
    copy = ((events[S.CAT] == GPU_USER_ANNOTATION).to_numpy() & (form_of[codes] > 0))
    if not copy.any():
        return out
    ext = events[S.EXT_ID].to_numpy(np.float64)
    copies = pd.DataFrame({"code": codes[copy], "ext": ext[copy],
                           "dur": events[S.DUR].to_numpy(np.float64)[copy]}, copy=False).dropna()
    per_key = copies.groupby(["code", "ext"])["dur"].sum()
    keys = pd.DataFrame({"code": call_codes, "ext": ext[call_rows]}, copy=False)
    unique = ~keys.duplicated(keep=False) & keys["ext"].notna()  # ambiguous ids match nothing
    index = pd.MultiIndex.from_frame(keys[unique])
    out[unique.to_numpy()] = per_key.reindex(index).to_numpy(np.float64)
    return out


def _device_kernels(tree: HostTree, gpu: Optional[pd.DataFrame], calls: np.ndarray,
                    pos: np.ndarray, communicates: np.ndarray) -> np.ndarray:
    """Per call, the summed duration of the GPU events it launched, NaN where none.

    A GPU event belongs to the call whose range is its op or encloses it; failing that,
    when its op is a communication op (``record_param_comms`` around the range, whose
    External id new traces give the NCCL kernel), to the call inside the outermost
    communication op around it."""
    out = np.full(len(pos), np.nan)
    if gpu is None or gpu.empty:
        return out
    launched = gpu[gpu["op_pos"].to_numpy() >= 0]
    if launched.empty:
        return out
    op_pos, inverse = np.unique(launched["op_pos"].to_numpy(np.int64), return_inverse=True)
    owner = tree.nearest(op_pos, calls)      # per launching op, then per GPU event
    miss = (owner < 0) & communicates[op_pos]
    if miss.any():
        root_to_call = pd.Series(pos, index=_outermost(tree, pos, communicates))
        root_to_call = root_to_call[~root_to_call.index.duplicated()]
        found = pd.Series(_outermost(tree, op_pos[miss], communicates)).map(root_to_call)
        owner[miss] = found.fillna(-1).to_numpy(np.int64)
    owner = owner[inverse.ravel()]
    hit = owner >= 0
    if not hit.any():
        return out
    per_call = pd.Series(launched["dur"].to_numpy(np.float64)[hit]).groupby(owner[hit]).sum()
    out[:] = per_call.reindex(pos).to_numpy(np.float64)
    return out


def time_per_step(events: pd.DataFrame, windows: pd.DataFrame) -> list[float]:
    """Per step window, the time (µs) some communication op was running on the host, on
    any thread: the union of their intervals clipped to the step, so overlapping
    collectives (gloo's and DDP's buckets run concurrently) never add up to more than the
    step. Device copies of the ranges (``gpu_user_annotation``) are not host time."""
    codes, uniques = value_codes(events[S.NAME])
    is_comm = np.array([bool(COMMUNICATION_OP.match(str(u))) for u in uniques] + [False])
    hit = is_comm[codes] & is_in(events[S.CAT], S.HOST_OP_CATS)
    start = events[S.TS].to_numpy(np.float64)[hit]
    end = start + events[S.DUR].to_numpy(np.float64)[hit]
    return [round(clipped_union(start, end, lo, hi), 3) if len(start) else 0.0
            for lo, hi in windows[["start", "end"]].itertuples(index=False)]


def comm_overlap(gpu: pd.DataFrame, lo: float, hi: float) -> Optional[DeviceComm]:
    """GPU traces: time in NCCL kernels and the share of it that overlaps other kernels."""
    if gpu.empty:
        return None
    kernels = gpu[(gpu["cat"] == S.KERNEL) & (gpu["ts"] >= lo) & (gpu["ts"] < hi)]
    is_comm = name_mask(kernels["name"], lambda name: "nccl" in name.lower())
    if not is_comm.any():
        return None
    start = kernels["ts"].to_numpy(np.float64)
    end = start + kernels["dur"].to_numpy(np.float64)
    comm_s, comm_e = merge_intervals(start[is_comm], end[is_comm])
    comp_s, comp_e = merge_intervals(start[~is_comm], end[~is_comm])
    comm = float((comm_e - comm_s).sum())
    overlap = float(covered_within(comp_s, comp_e, comm_s, comm_e).sum())
    return {"comm_us": round(comm, 3), "overlap_us": round(overlap, 3),
            "overlap_pct": round(100.0 * overlap / comm, 2) if comm else None}


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
