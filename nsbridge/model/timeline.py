"""The nsys join: every kernel, copy and runtime call mapped to the op that launched it.

Rules (each attributed row names its rule):

1. kernel/copy -> launching runtime or driver call by ``correlationId`` within the process
   (``globalPid == globalTid & ~0xFFFFFF``, as nsys's own ``nvtx_kern_sum`` does);
2. runtime call -> innermost NVTX push/pop *op* range on the same thread containing it
   (rule ``nvtx_push_pop``). Op ranges are nsbridge's own (domain ``nsbridge``) or
   PyTorch's ``emit_nvtx`` ranges (default domain, ``aten::mm, op_id = 7`` -> ``aten::mm``);
   library domains (CUB's ``CCCL``, ...) are context, never ops.

Kernels whose launch call is not in the capture (``no_launch_in_capture``: normal for a
cut window or graph launches) and launches outside any op range (``outside_op_ranges``) are
kept and counted. Backward ops run on autograd threads: matching is per thread, never by
time alone across threads.

Kernels, copies (memcpy, with bytes by direction) and memsets are counted apart
everywhere: a copy is never called a kernel.

The window (``window_to_steps``): with nsbridge's ``step N`` ranges in the capture, only
the measured steps count, as in the torch.profiler pass: ranges and runtime calls that
start in them, and the GPU work those calls launched (to its end) or, without a launch in
the capture, that starts in them. Without step ranges the whole capture is the window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np
import pandas as pd

from .. import schema as S
from .nesting import build_tree, longest_gaps, merge_intervals
from .strings import name_mask
from .syncs import BLOCKING_CALL

# the export's tables of GPU work: a capture with none of them traced no GPU activity
GPU_TABLES = frozenset({"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                        "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"})

NVTX_PUSH_POP, NO_LAUNCH, OUTSIDE_OPS = "nvtx_push_pop", "no_launch_in_capture", "outside_op_ranges"
_OP_NAME = re.compile(r"^[A-Za-z_][\w.]*::[\w.]+")
_PID_MASK = ~0xFFFFFF


@dataclass
class Timeline:
    """The joined nsys view of one capture."""

    ops: pd.DataFrame          # per op: see op_summary
    gpu: pd.DataFrame          # one row per kernel/copy/memset: kind (kernel | memcpy |
                               # memset), name, direction, bytes, device, start, dur, op,
                               # module, rule
    gaps: list[dict[str, Any]]
    summary: dict[str, Any]


def classify_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """Add ``kind`` (op | module | step | other) and ``op`` (op name or None) to ranges.

    String work happens once per distinct name and domain (both categoricals or strings).
    """
    frame = ranges.copy()
    name_codes, names = _codes(frame["name"])
    frame["name"] = pd.Categorical.from_codes(name_codes, categories=names)
    domain_codes, domains = _codes(frame["domain"])
    base = np.array([str(n).split(",", 1)[0].strip() for n in names], dtype=object)
    looks_op = np.array([bool(_OP_NAME.match(b)) for b in base], dtype=bool)
    looks_step = np.array([str(n).startswith(S.NVTX_STEP_PREFIX) for n in names], dtype=bool)
    ours_domain = np.array([d == S.NVTX_DOMAIN for d in domains], dtype=bool)
    op_domain = ours_domain | np.array([d == "" for d in domains], dtype=bool)
    ours = ours_domain[domain_codes] if len(domains) else np.zeros(len(frame), dtype=bool)
    is_op = (op_domain[domain_codes] if len(domains) else ours) & looks_op[name_codes]
    is_step = ours & looks_step[name_codes]
    kind = np.where(is_op, 0, np.where(is_step, 1, np.where(ours, 2, 3)))
    frame["kind"] = pd.Categorical.from_codes(kind, categories=["op", "step", "module", "other"])
    op_names = list(dict.fromkeys(base[looks_op]))
    op_index = {n: i for i, n in enumerate(op_names)}
    per_name = np.array([op_index.get(b, -1) for b in base], dtype=np.int32)
    frame["op"] = pd.Categorical.from_codes(np.where(is_op, per_name[name_codes], -1)
                                            if len(names) else np.zeros(0, dtype=np.int32),
                                            categories=op_names)
    return frame


def _codes(column: pd.Series) -> tuple[np.ndarray, list]:
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), list(column.cat.categories)
    codes, uniques = pd.factorize(column.to_numpy())
    return codes, list(uniques)


def window_to_steps(export: Any, steps: Optional[list[int]]
                    ) -> tuple[Any, dict[str, Any]]:
    """The export cut to the time of nsbridge's ``step N`` ranges for N in ``steps``, and
    what the window is (``{"kind": "steps", "steps", "start_ns", "end_ns"}`` or ``{"kind":
    "capture", "why"}``). The whole capture when a step is missing from it."""
    if not steps:
        return export, {"kind": "capture", "why": "the whole capture was asked for"}
    ranges = export.ranges
    wanted = {f"{S.NVTX_STEP_PREFIX}{n}" for n in steps}
    names = ranges["name"].astype(str).to_numpy()
    is_step = np.isin(names, list(wanted)) & (ranges["domain"].astype(str).to_numpy()
                                              == S.NVTX_DOMAIN)
    found = set(names[is_step])
    if found != wanted:
        return export, {"kind": "capture", "why": f"the capture lacks {len(wanted - found)} "
                        f"of the measured steps ({', '.join(sorted(wanted - found))})"}
    lo = float(ranges["start"].to_numpy(np.float64)[is_step].min())
    hi = float(ranges["end"].to_numpy(np.float64)[is_step].max())
    inside = lambda frame: frame[((frame["start"] >= lo) & (frame["start"] < hi)).to_numpy()]  # noqa: E731
    runtime = inside(export.runtime)
    launched, every_launch = _launch_keys(runtime), _launch_keys(export.runtime)

    def gpu(frame: pd.DataFrame) -> pd.DataFrame:
        keys = pd.MultiIndex.from_arrays([frame["correlation"].to_numpy(),
                                          frame["global_pid"].to_numpy().astype(np.int64)])
        start = frame["start"].to_numpy(np.float64)
        orphan = ~keys.isin(every_launch)
        return frame[keys.isin(launched) | (orphan & (start >= lo) & (start < hi))]

    cut = replace(export, ranges=inside(ranges), runtime=runtime, kernels=gpu(export.kernels),
                  memcpy=gpu(export.memcpy), memset=gpu(export.memset),
                  osrt=inside(export.osrt))
    return cut, {"kind": "steps", "steps": sorted(steps), "start_ns": lo, "end_ns": hi}


def _launch_keys(runtime: pd.DataFrame) -> pd.MultiIndex:
    """(correlationId, globalPid) of runtime calls: what a GPU event's launch is found by."""
    return pd.MultiIndex.from_arrays([runtime["correlation"].to_numpy(),
                                      runtime["global_tid"].to_numpy().astype(np.int64)
                                      & _PID_MASK])


def join(export: Any, top_gaps: int = 10) -> Timeline:
    """Attribute kernels, copies and sync calls to ops; rank GPU idle gaps.

    ``export`` is a parse.nsys_sqlite.NsysExport (frames only; this module does no I/O).
    Works on arrays throughout: ten million ranges are nested without a Python string per
    range (bench/nsys_scale.py).
    """
    ranges = classify_ranges(export.ranges[(export.ranges["style"] == "push_pop").to_numpy()])
    kind = ranges["kind"].cat.codes.to_numpy()
    nested = kind != 3                                   # op, step and module ranges
    gtid = ranges["global_tid"].to_numpy(np.int64)[nested]
    threads, thread = np.unique(gtid, return_inverse=True)
    tree = build_tree(thread.astype(np.int64), [str(t) for t in threads],
                      ranges["start"].to_numpy(np.float64)[nested],
                      ranges["dur"].to_numpy(np.float64)[nested],
                      np.zeros(int(nested.sum()), dtype=bool))
    kinds = kind[nested][tree.rows]
    op_codes = ranges["op"].cat.codes.to_numpy()[nested][tree.rows]
    name_codes = ranges["name"].cat.codes.to_numpy()[nested][tree.rows]
    op_names = np.array(list(ranges["op"].cat.categories) + [None], dtype=object)
    range_names = np.array(list(ranges["name"].cat.categories) + [None], dtype=object)

    runtime = export.runtime.copy()
    rt_gtid = runtime["global_tid"].to_numpy(np.int64)
    where = np.searchsorted(threads, rt_gtid)
    known = (where < len(threads)) & (threads[np.minimum(where, len(threads) - 1)] == rt_gtid) \
        if len(threads) else np.zeros(len(runtime), dtype=bool)
    pos = tree.enclosing_codes(np.where(known, where, -1), runtime["start"].to_numpy(np.float64))
    runtime["op"] = _label(tree, pos, kinds == 0, op_codes, op_names)
    runtime["module"] = _label(tree, pos, kinds == 2, name_codes, range_names)
    runtime["global_pid"] = rt_gtid & _PID_MASK

    gpu = pd.concat([export.kernels.assign(kind="kernel", direction=None, bytes=np.nan),
                     export.memcpy.assign(name=lambda f: "Memcpy " + f["kind"],
                                          direction=lambda f: f["kind"], kind="memcpy"),
                     export.memset.assign(name="Memset", kind="memset", direction=None)],
                    ignore_index=True)
    gpu = gpu[["kind", "name", "direction", "bytes", "device", "stream", "start", "end", "dur",
               "correlation", "global_pid"]]
    launches = runtime.drop_duplicates(["correlation", "global_pid"])[
        ["correlation", "global_pid", "start", "op", "module"]].rename(
        columns={"start": "launch_start"})
    gpu = gpu.merge(launches, on=["correlation", "global_pid"], how="left")
    gpu["rule"] = np.where(gpu["launch_start"].isna(), NO_LAUNCH,
                           np.where(gpu["op"].isna(), OUTSIDE_OPS, NVTX_PUSH_POP))
    gpu["launch_latency"] = gpu["start"] - gpu["launch_start"]
    gpu = gpu.sort_values(["device", "start"], kind="stable").reset_index(drop=True)
    prev_end = gpu.groupby("device")["end"].transform(lambda e: e.cummax().shift())
    gpu["idle_before"] = (gpu["start"] - prev_end).clip(lower=0).fillna(0)

    syncs = runtime[name_mask(runtime["name"].to_numpy(), BLOCKING_CALL.match)]
    op_table = op_summary(ranges, gpu, syncs)
    gaps = idle_gaps(gpu, tree, kinds, op_codes, op_names, name_codes, range_names, top_gaps)
    domain_codes, domains = _codes(ranges["domain"])
    summary = {
        "nsys_version": export.product_version, "schema_version": export.schema_version,
        "ranges": int(len(export.ranges)),
        "op_ranges": int((kind == 0).sum()),
        "module_ranges": int((kind == 2).sum()),
        "nsbridge_ranges": int(sum((domain_codes == i).sum() for i, d in enumerate(domains)
                                   if d == S.NVTX_DOMAIN)),
        "other_domains": sorted({str(d) for i, d in enumerate(domains)
                                 if d and (domain_codes[kind == 3] == i).any()}),
        "kernels": int((gpu["kind"] == "kernel").sum()),
        "copies": int((gpu["kind"] == "memcpy").sum()),
        "memsets": int((gpu["kind"] == "memset").sum()),
        "attribution": {rule: _by_kind(group)["counts"]
                        for rule, group in gpu.groupby("rule", sort=True)},
        "no_launch": _by_kind(gpu[gpu["rule"] == NO_LAUNCH])["totals"],
        "runtime_calls": int(len(runtime)),
        "sync_calls": int(len(syncs)), "sync_us": round(float(syncs["dur"].sum()) / 1e3, 3),
        "osrt_calls": int(len(export.osrt)),
        "gpu_busy_pct": _busy_pct(gpu), "gpu_traced": True,
    }
    if not GPU_TABLES & set(export.tables):
        op_table, summary = _without_gpu(op_table, summary)
    return Timeline(ops=op_table, gpu=gpu, gaps=gaps, summary=summary)


def _without_gpu(ops: pd.DataFrame, summary: dict[str, Any]
                 ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A capture with no CUDA trace at all (a CPU-only run): its GPU numbers were not
    measured, so they are null, not 0; only the ranges remain."""
    gpu_columns = [c for c in ops.columns if c not in ("op", "ranges", "range_us")]
    ops = ops.astype({c: object for c in gpu_columns})
    ops[gpu_columns] = None
    unmeasured = ("kernels", "copies", "memsets", "no_launch", "runtime_calls", "sync_calls",
                  "sync_us", "gpu_busy_pct")
    return ops, {**summary, **{k: None for k in unmeasured}, "attribution": {},
                 "gpu_traced": False}


def _label(tree: Any, pos: np.ndarray, wanted: np.ndarray, codes: np.ndarray,
           table: np.ndarray) -> np.ndarray:
    """Name of the nearest enclosing range of a kind, per point (None when there is none)."""
    found = tree.nearest(pos, wanted) if len(tree) else np.full(len(pos), -1)
    picked = np.where(found >= 0, codes[np.maximum(found, 0)] if len(codes) else -1, -1)
    return table[np.where(picked >= 0, picked, len(table) - 1)]


_DIRECTIONS = ("HtoD", "DtoH", "DtoD")
_COUNTS = ["ranges", "kernels", "copies", "memsets"]
_TIMES = ["range_us", "kernel_us", "copy_us", "memset_us", "gpu_us", "launch_latency_us",
          "idle_before_us", "sync_us"]


def op_summary(ranges: pd.DataFrame, gpu: pd.DataFrame, syncs: pd.DataFrame) -> pd.DataFrame:
    """Per op (microseconds, bytes): ranges, range_us; kernels, kernel_us; copies, copy_us,
    copy_bytes_htod / _dtoh / _dtod / _other; memsets, memset_us; gpu_us (all three);
    launch_latency_us (mean over its kernels); idle_before_us (GPU idle just before its
    work); sync_us (blocking calls inside it)."""
    codes = ranges["op"].cat.codes.to_numpy()
    names = list(ranges["op"].cat.categories)
    has = codes >= 0
    counts = np.bincount(codes[has], minlength=len(names))
    total = np.bincount(codes[has], weights=ranges["dur"].to_numpy(np.float64)[has],
                        minlength=len(names))
    table = pd.DataFrame({"ranges": counts, "range_us": total}, index=pd.Index(names, name="op"))
    table = table[table["ranges"] > 0]
    work = gpu[gpu["op"].notna()]
    kernel = work["kind"] == "kernel"
    direction = work["direction"].where(work["direction"].isin(_DIRECTIONS), "other")
    work = work.assign(
        is_kernel=kernel, kernel_dur=work["dur"].where(kernel, 0),
        is_copy=work["kind"] == "memcpy", copy_dur=work["dur"].where(work["kind"] == "memcpy", 0),
        is_memset=work["kind"] == "memset",
        memset_dur=work["dur"].where(work["kind"] == "memset", 0),
        kernel_latency=work["launch_latency"].where(kernel),
        **{f"copy_bytes_{d.lower()}": work["bytes"].where((work["kind"] == "memcpy")
                                                         & (direction == d), 0)
           for d in (*_DIRECTIONS, "other")})
    by_op = work.groupby("op").agg(
        kernels=("is_kernel", "sum"), kernel_us=("kernel_dur", "sum"),
        copies=("is_copy", "sum"), copy_us=("copy_dur", "sum"),
        memsets=("is_memset", "sum"), memset_us=("memset_dur", "sum"), gpu_us=("dur", "sum"),
        launch_latency_us=("kernel_latency", "mean"), idle_before_us=("idle_before", "sum"),
        **{f"copy_bytes_{d.lower()}": (f"copy_bytes_{d.lower()}", "sum")
           for d in (*_DIRECTIONS, "other")})
    sync = syncs[syncs["op"].notna()].groupby("op")["dur"].sum().rename("sync_us")
    table = table.join(by_op, how="outer").join(sync, how="left")
    for col in _TIMES:
        table[col] = table[col] / 1e3
    table[_COUNTS] = table[_COUNTS].fillna(0).astype(int)
    byte_cols = [c for c in table.columns if c.startswith("copy_bytes_")]
    table[byte_cols] = table[byte_cols].fillna(0).astype(np.int64)
    rest = [c for c in _TIMES if c != "launch_latency_us"]
    table[rest] = table[rest].fillna(0.0)
    table = table.reset_index().rename(columns={"index": "op"})
    return table.sort_values(["gpu_us", "range_us"], ascending=False).reset_index(drop=True)


def _by_kind(gpu: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """{"counts": {kernels, copies, memsets}, "totals": counts plus kernel_us, copy_us,
    memset_us (µs)} of a set of GPU rows."""
    counts, totals = {}, {}
    for kind, key in (("kernel", "kernels"), ("memcpy", "copies"), ("memset", "memsets")):
        part = gpu[gpu["kind"] == kind]
        counts[key] = totals[key] = int(len(part))
        totals[f"{kind.replace('memcpy', 'copy')}_us"] = round(float(part["dur"].sum()) / 1e3, 3)
    return {"counts": counts, "totals": totals}


def idle_gaps(gpu: pd.DataFrame, tree: Any, kinds: np.ndarray, op_codes: np.ndarray,
              op_names: np.ndarray, name_codes: np.ndarray, range_names: np.ndarray,
              top: int) -> list[dict[str, Any]]:
    """Longest GPU idle stretches between first and last activity, with the host's op,
    module and step (innermost ranges on the busiest thread at the gap's midpoint)."""
    found = longest_gaps(gpu["device"].to_numpy(), gpu["start"].to_numpy(np.float64),
                         gpu["end"].to_numpy(np.float64), top)
    empty = {"op": None, "module": None, "step": None}
    if not found or len(tree) == 0:
        return [{"device": d, "start_ns": a, "dur_us": round(n / 1e3, 3), **empty}
                for n, a, d in found]
    busiest = int(np.bincount(tree.thread, weights=tree.dur).argmax())
    mids = np.array([a + n / 2 for n, a, _ in found])
    pos = tree.enclosing_codes(np.full(len(mids), busiest), mids)
    ops = _label(tree, pos, kinds == 0, op_codes, op_names)
    modules = _label(tree, pos, kinds == 2, name_codes, range_names)
    steps = _label(tree, pos, kinds == 1, name_codes, range_names)
    return [{"device": d, "start_ns": a, "dur_us": round(n / 1e3, 3), "op": op,
             "module": module, "step": step}
            for (n, a, d), op, module, step in zip(found, ops, modules, steps)]


def _busy_pct(gpu: pd.DataFrame) -> Optional[float]:
    if gpu.empty:
        return None
    pcts = []
    for _, group in gpu.groupby("device"):
        s, e = merge_intervals(group["start"].to_numpy(np.float64),
                               group["end"].to_numpy(np.float64))
        span = e.max() - s.min()
        pcts.append(100.0 * (e - s).sum() / span if span > 0 else 100.0)
    return round(float(np.mean(pcts)), 2)
