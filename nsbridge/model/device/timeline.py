"""The nsys join: every kernel, copy and runtime call mapped to the op that launched it.

Rules (each attributed row names its rule):

1. kernel/copy -> launching runtime or driver call by ``correlationId`` within the process
   (``globalPid == globalTid & ~0xFFFFFF``, as nsys's own ``nvtx_kern_sum`` does);
2. runtime call -> innermost NVTX push/pop *op* range on the same thread containing it
   (rule ``nvtx_push_pop``). Op ranges are nsbridge's own (domain ``nsbridge``) or
   PyTorch's ``emit_nvtx`` ranges (default domain, ``aten::mm, op_id = 7`` -> ``aten::mm``);
   library domains (CUB's ``CCCL``, ...) are context, never ops.

3. a kernel a CUDA graph replay ran (``graphNodeId``, nsys tracing graphs node by node)
   -> the node it was instantiated from -> the op range around that node's creation, the
   op whose launch the stream capture recorded (rule ``graph_node_capture``). A replay's
   launch call (``cudaGraphLaunch``) sits outside every op: torch.profiler and rule 2
   cannot name the ops of a graph, this rule can when the capture is in the recording.

Kernels whose launch call is not in the capture (``no_launch_in_capture``: normal for a
cut window) and launches outside any op range (``outside_op_ranges``) are kept and
counted. Backward ops run on autograd threads: matching is per thread, never by
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
from typing import Any, Optional, cast

import numpy as np
import pandas as pd

from ... import schema as S
from ...contract.report import Timeline as TimelineSection
from ...contract.report import TimelineAttribution, TimelineIdleGap, TimelineWindow, UnlaunchedWork, WorkCounts
from ..host.nesting import HostTree, build_tree, longest_gaps, merge_intervals
from ..strings import name_mask
from ..host.syncs import BLOCKING_CALL

# the export's tables of GPU work: a capture with none of them traced no GPU activity
GPU_TABLES = frozenset({"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                        "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"})

NVTX_PUSH_POP, NO_LAUNCH, OUTSIDE_OPS = "nvtx_push_pop", "no_launch_in_capture", "outside_op_ranges"
GRAPH_CAPTURE = "graph_node_capture"
_OP_NAME = re.compile(r"^[A-Za-z_][\w.]*::[\w.]+")
_PID_MASK = ~0xFFFFFF


@dataclass
class Timeline:
    """The joined nsys view of one capture."""

    ops: pd.DataFrame          # per op: see op_summary
    gpu: pd.DataFrame          # one row per kernel/copy/memset: kind (kernel | memcpy |
                               # memset), name, direction, bytes, device, start, dur, op,
                               # module, rule
    gaps: list[TimelineIdleGap]
    summary: TimelineSection   # report["timeline"]'s counts, before the pass adds its own


def classify_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """Add ``kind`` (op | module | step | other) and ``op`` (op name or None) to ranges.

    String work happens once per distinct name and domain (both categoricals or strings).
    """
    name_codes, names = _codes(ranges["name"])
    domain_codes, domains = _codes(ranges["domain"])
    base = np.array([str(n).split(",", 1)[0].strip() for n in names], dtype=object)
    looks_op = np.array([bool(_OP_NAME.match(b)) for b in base], dtype=bool)
    looks_step = np.array([str(n).startswith(S.NVTX_STEP_PREFIX) for n in names], dtype=bool)
    ours_domain = np.array([d == S.NVTX_DOMAIN for d in domains], dtype=bool)
    op_domain = ours_domain | np.array([d == "" for d in domains], dtype=bool)
    ours = ours_domain[domain_codes] if len(domains) else np.zeros(len(ranges), dtype=bool)
    is_op = (op_domain[domain_codes] if len(domains) else ours) & looks_op[name_codes]
    # kind codes: 0 op, 1 step, 2 module (other ranges of ours), 3 other
    kind = np.where(ours, np.int8(2), np.int8(3))
    kind[ours & looks_step[name_codes]] = 1
    kind[is_op] = 0
    op_names = list(dict.fromkeys(base[looks_op]))
    op_index = {n: i for i, n in enumerate(op_names)}
    per_name = np.array([op_index.get(b, -1) for b in base], dtype=np.int32)
    op_codes = np.full(len(ranges), -1, dtype=np.int32)
    op_codes[is_op] = per_name[name_codes[is_op]]
    categorical = pd.Categorical.from_codes
    columns = {"kind": categorical(kind, categories=["op", "step", "module", "other"]),
               "op": categorical(op_codes, categories=op_names)}
    if not isinstance(ranges["name"].dtype, pd.CategoricalDtype):
        columns["name"] = categorical(name_codes, categories=names)
    return ranges.assign(**columns)


def _codes(column: pd.Series) -> tuple[np.ndarray, list]:
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), list(column.cat.categories)
    codes, uniques = pd.factorize(column.to_numpy())
    return codes, list(uniques)


def window_to_steps(export: Any, steps: Optional[list[int]]
                    ) -> tuple[Any, TimelineWindow]:
    """The export cut to the time of nsbridge's ``step N`` ranges for N in ``steps``, and
    what the window is (``{"kind": "steps", "steps", "start_ns", "end_ns"}`` or ``{"kind":
    "capture", "why"}``). The whole capture when a step is missing from it."""
    if not steps:
        return export, {"kind": "capture", "why": "the whole capture was asked for"}
    ranges = export.ranges
    wanted = {f"{S.NVTX_STEP_PREFIX}{n}" for n in steps}
    is_step = (ranges["name"].isin(wanted) & (ranges["domain"] == S.NVTX_DOMAIN)).to_numpy()
    found = {str(n) for n in ranges["name"].to_numpy()[is_step]}
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
        named = frame["correlation"].to_numpy(np.int64) >= 0    # NULL ids name no launch
        orphan = ~(keys.isin(every_launch) & named)
        return frame[(keys.isin(launched) & named) | (orphan & (start >= lo) & (start < hi))]

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
    Works on arrays throughout: ten million ranges are nested, and a million kernels
    joined, in seconds (bench/nsys_scale.py). Ranges of different NVTX domains (nsbridge's
    and the default one keep separate stacks) may overlap without nesting: a launch is
    labelled only with ranges still open at it, never with one that ended before it.
    """
    push_pop = (export.ranges["style"] == "push_pop").to_numpy()
    ranges = classify_ranges(export.ranges if push_pop.all() else export.ranges[push_pop])
    kind = ranges["kind"].cat.codes.to_numpy()
    nested = kind != 3                                   # op, step and module ranges
    threads, thread = _sorted_codes(_where(ranges["global_tid"].to_numpy(np.int64), nested))
    start = _where(_numbers(ranges["start"]), nested)
    dur = _where(_numbers(ranges["dur"]), nested)

    runtime = export.runtime.copy()
    rt_gtid = runtime["global_tid"].to_numpy(np.int64)
    rt_thread = _thread_codes(threads, rt_gtid)
    rt_start = runtime["start"].to_numpy(np.float64)
    nodes = getattr(export, "graph_nodes", None)
    nodes = nodes if nodes is not None else pd.DataFrame(columns=["start", "global_tid",
                                                                   "graph_node",
                                                                   "original_node"])
    node_thread = _thread_codes(threads, nodes["global_tid"].to_numpy(np.int64))
    node_start = nodes["start"].to_numpy(np.float64)
    found_gaps = longest_gaps(*_gpu_spans(export), top_gaps)
    busiest = int(np.bincount(thread, weights=dur).argmax()) if len(thread) else -1
    gap_thread = np.full(len(found_gaps), busiest)
    mids = np.array([a + n / 2 for n, a, _ in found_gaps])
    labels = RangeLabels.build(ranges, nested, threads, thread, start, dur,
                               points=(np.r_[rt_thread, gap_thread, node_thread],
                                       np.r_[rt_start, mids, node_start]))

    rt_op, rt_module, _ = labels.at(rt_thread, rt_start)
    runtime["op"], runtime["module"] = labels.op_names[rt_op], labels.range_names[rt_module]
    runtime["global_pid"] = rt_gtid & _PID_MASK
    node_op, node_module, _ = labels.at(node_thread, node_start)
    captured = captured_ops(nodes, node_op, node_module,
                            export.kernels["graph_node"].to_numpy(np.int64)
                            if "graph_node" in export.kernels else
                            np.full(len(export.kernels), -1, dtype=np.int64))
    gpu, gpu_op = gpu_work(export, runtime, rt_op, labels.op_names, labels.range_names,
                           captured)
    syncs = name_mask(runtime["name"].to_numpy(), BLOCKING_CALL.match)
    op_table = op_summary(ranges, gpu, gpu_op, runtime["dur"].to_numpy(np.float64)[syncs],
                          rt_op[syncs])
    gap_op, gap_module, gap_step = labels.at(gap_thread, mids)
    gaps: list[TimelineIdleGap] = [{"device": d, "start_ns": a, "dur_us": round(n / 1e3, 3), "op": op,
             "module": module, "step": step}
            for (n, a, d), op, module, step in zip(
                found_gaps, labels.op_names[gap_op], labels.range_names[gap_module],
                labels.range_names[gap_step])]
    summary = _summary(export, ranges, kind, gpu, runtime, syncs)
    if not GPU_TABLES & set(export.tables):
        op_table, summary = _without_gpu(op_table, summary)
    return Timeline(ops=op_table, gpu=gpu, gaps=gaps, summary=summary)


@dataclass
class RangeLabels:
    """The nested op, step and module ranges as a tree, to name the innermost range of
    each kind around a point on a thread."""

    tree: HostTree
    kinds: np.ndarray          # per tree position: 0 op, 1 step, 2 module
    op_codes: np.ndarray       # per tree position: code into op_names (-1: not an op)
    name_codes: np.ndarray     # per tree position: code into range_names
    op_names: np.ndarray       # op names, then None (code -1)
    range_names: np.ndarray    # range names, then None (code -1)

    @classmethod
    def build(cls, ranges: pd.DataFrame, nested: np.ndarray, threads: np.ndarray,
              thread: np.ndarray, start: np.ndarray, dur: np.ndarray,
              points: tuple[np.ndarray, np.ndarray]) -> "RangeLabels":
        """The ranges where ``nested`` (classified: kind, op); ``thread``, ``start`` and
        ``dur`` are those ranges' thread codes into ``threads``, starts and durations. The
        tree keeps only ranges around one of ``points`` (thread codes, times): the others
        cannot label anything, NVTX push/pop ranges being properly nested on each thread
        (model.host.nesting.build_tree)."""
        tree = build_tree(thread, [str(t) for t in threads], start, dur,
                          np.zeros(len(thread), dtype=bool), points=points)

        def per_position(codes: pd.Series) -> np.ndarray:
            return _where(codes.cat.codes.to_numpy(), nested)[tree.rows]

        return cls(tree=tree, kinds=per_position(ranges["kind"]),
                   op_codes=per_position(ranges["op"]), name_codes=per_position(ranges["name"]),
                   op_names=np.array(list(ranges["op"].cat.categories) + [None], dtype=object),
                   range_names=np.array(list(ranges["name"].cat.categories) + [None],
                                        dtype=object))

    def at(self, thread: np.ndarray, time: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(op code, module name code, step name code) of the innermost range of each
        kind around each point (-1: none; index op_names / range_names with them). Only
        the points the tree was built for are answered as the full tree would."""
        time = np.asarray(time, dtype=np.float64)
        pos = self.tree.enclosing_codes(thread, time)

        def nearest(kind: int, codes: np.ndarray) -> np.ndarray:
            """The closest ancestor-or-self of that kind still open at the point: ranges
            of two domains may overlap without nesting, and one that ended is not it."""
            wanted, found = self.kinds == kind, pos.copy()
            while len(self.tree):
                at = np.maximum(found, 0)
                miss = (found >= 0) & (~wanted[at] | (self.tree.end[at] < time))
                if not miss.any():
                    break
                found[miss] = self.tree.parent[found[miss]]
            return np.where(found >= 0, codes[np.maximum(found, 0)] if len(codes) else -1, -1)

        return nearest(0, self.op_codes), nearest(2, self.name_codes), nearest(1, self.name_codes)


def _summary(export: Any, ranges: pd.DataFrame, kind: np.ndarray, gpu: pd.DataFrame,
             runtime: pd.DataFrame, syncs: np.ndarray) -> TimelineSection:
    """report["timeline"]'s counts: ranges by kind and domain, GPU work by kind and
    attribution rule, runtime and blocking calls, GPU busy share."""
    domain_codes, domains = _codes(ranges["domain"])
    gpu_kind, rule, dur = gpu["kind"].to_numpy(), gpu["rule"].to_numpy(), gpu["dur"].to_numpy()
    return {
        "nsys_version": export.product_version, "schema_version": export.schema_version,
        "ranges": int(len(export.ranges)),
        "op_ranges": int((kind == 0).sum()),
        "module_ranges": int((kind == 2).sum()),
        "nsbridge_ranges": int(sum((domain_codes == i).sum() for i, d in enumerate(domains)
                                   if d == S.NVTX_DOMAIN)),
        "other_domains": sorted({str(d) for i, d in enumerate(domains)
                                 if d and (domain_codes[kind == 3] == i).any()}),
        "kernels": int((gpu_kind == "kernel").sum()),
        "copies": int((gpu_kind == "memcpy").sum()),
        "memsets": int((gpu_kind == "memset").sum()),
        "attribution": cast(TimelineAttribution,
                            {r: _work_counts(gpu_kind[rule == r]) for r in sorted(set(rule))}),
        "no_launch": _unlaunched(gpu_kind[rule == NO_LAUNCH], dur[rule == NO_LAUNCH]),
        "outside_ops": _unlaunched(gpu_kind[rule == OUTSIDE_OPS], dur[rule == OUTSIDE_OPS]),
        "runtime_calls": int(len(runtime)),
        "sync_calls": int(syncs.sum()),
        "sync_us": round(float(runtime["dur"].to_numpy(np.float64)[syncs].sum()) / 1e3, 3),
        "osrt_calls": int(len(export.osrt)),
        "gpu_busy_pct": _busy_pct(gpu), "gpu_traced": True,
    }


def _sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, int32 code of each value): np.unique's answer by hashing."""
    local, found = pd.factorize(values)
    distinct = np.sort(found)
    return distinct, np.searchsorted(distinct, found).astype(np.int32)[local]


def _numbers(column: pd.Series) -> np.ndarray:
    """A numeric column's own array (no copy), any other as float64."""
    values = column.to_numpy()
    return values if values.dtype.kind in "iuf" else values.astype(np.float64)


def _where(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``values[mask]``, without the copy when every row is kept."""
    return values if mask.all() else values[mask]


def _thread_codes(threads: np.ndarray, global_tids: np.ndarray) -> np.ndarray:
    """Each global thread id's code into the sorted ``threads`` (-1: a thread without
    ranges)."""
    if not len(threads):
        return np.full(len(global_tids), -1, dtype=np.int64)
    where = np.searchsorted(threads, global_tids)
    hit = (where < len(threads)) & (threads[np.minimum(where, len(threads) - 1)] == global_tids)
    return np.where(hit, where, -1)


def captured_ops(nodes: pd.DataFrame, node_op: np.ndarray, node_module: np.ndarray,
                 kernel_node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel (its ``graph_node``, -1: not a replay): the op code and module code of
    the range its graph node was created in (rule 3), -1 for none. An instantiated node
    names its original; the original's creation, during the stream capture, is where the
    op's launch was recorded."""
    none = np.full(len(kernel_node), -1, dtype=np.int64)
    if not len(nodes) or not (kernel_node >= 0).any():
        return none, none.copy()
    ids = nodes["graph_node"].to_numpy(np.int64)
    original = nodes["original_node"].to_numpy(np.int64)
    made = original < 0                                  # creations, not instantiations
    op_of = pd.Series(node_op[made], index=ids[made])
    module_of = pd.Series(node_module[made], index=ids[made])
    op_of = op_of[~op_of.index.duplicated()]
    module_of = module_of[~module_of.index.duplicated()]
    source = pd.Series(original[~made], index=ids[~made])
    source = source[~source.index.duplicated()]
    nodes_of_kernels = pd.Series(kernel_node)
    origin = nodes_of_kernels.map(source).fillna(nodes_of_kernels).to_numpy(np.int64)
    ops = pd.Series(origin).map(op_of).fillna(-1).to_numpy(np.int64)
    modules = pd.Series(origin).map(module_of).fillna(-1).to_numpy(np.int64)
    replay = kernel_node >= 0
    return np.where(replay, ops, -1), np.where(replay, modules, -1)


def gpu_work(export: Any, runtime: pd.DataFrame, runtime_op: np.ndarray,
             op_names: np.ndarray, range_names: Optional[np.ndarray] = None,
             captured: Optional[tuple[np.ndarray, np.ndarray]] = None
             ) -> tuple[pd.DataFrame, np.ndarray]:
    """Kernels, copies and memsets as one frame sorted by (device, start), each with its
    launch (rule 1) and the launch's op and module (rule 2; a graph replay's kernel, the
    op and module it was captured in: rule 3, ``captured`` from captured_ops, with
    ``range_names`` naming the modules), and the op's code per row (-1: none).

    ``runtime`` has the op and module columns; ``runtime_op`` is its op code per call.
    Times, devices, streams and ids are integers, as read_nsys_sqlite gives them (ns;
    NULL read as -1)."""
    parts = [export.kernels, export.memcpy, export.memset]
    sizes = [len(p) for p in parts]

    def ints(col: str) -> np.ndarray:
        return np.concatenate([p[col].to_numpy(np.int64) for p in parts])

    start, end, dur, device = ints("start"), ints("end"), ints("dur"), ints("device")
    correlation, global_pid = ints("correlation"), ints("global_pid")
    copy_kind = export.memcpy["kind"].to_numpy(object)
    columns: dict[str, Any] = {
        "kind": np.repeat(np.array(["kernel", "memcpy", "memset"], dtype=object), sizes),
        "name": np.concatenate([export.kernels["name"].to_numpy(object),
                                np.array(["Memcpy " + str(k) for k in copy_kind], dtype=object),
                                np.full(sizes[2], "Memset", dtype=object)]),
        "direction": np.concatenate([np.full(sizes[0], None, dtype=object), copy_kind,
                                     np.full(sizes[2], None, dtype=object)]),
        "bytes": np.concatenate([np.full(sizes[0], np.nan),
                                 export.memcpy["bytes"].to_numpy(np.float64),
                                 export.memset["bytes"].to_numpy(np.float64)]),
        "device": device, "stream": ints("stream"), "start": start, "end": end, "dur": dur,
        "correlation": correlation, "global_pid": global_pid}
    launch = _first_match(runtime["correlation"].to_numpy(np.int64),
                          runtime["global_pid"].to_numpy(np.int64), correlation, global_pid)
    launch[correlation < 0] = -1       # no correlationId (NULL): no launch can be named
    launched = launch >= 0
    at = np.maximum(launch, 0)
    launch_start = np.where(launched, runtime["start"].to_numpy(np.float64)[at]
                            if len(runtime) else 0.0, np.nan)
    op: np.ndarray = np.where(launched, runtime_op[at] if len(runtime) else -1, -1)
    columns["launch_start"] = launch_start
    module = np.full(len(launched), None, dtype=object)
    if len(runtime):
        module[launched] = runtime["module"].to_numpy(object)[at[launched]]
    rule = np.where(~launched, NO_LAUNCH, np.where(op < 0, OUTSIDE_OPS,
                                                   NVTX_PUSH_POP)).astype(object)
    if captured is not None and range_names is not None:
        graph_op = np.r_[captured[0], np.full(sizes[1] + sizes[2], -1, dtype=np.int64)]
        graph_module = np.r_[captured[1], np.full(sizes[1] + sizes[2], -1, dtype=np.int64)]
        replayed = graph_op >= 0
        op = np.where(replayed, graph_op, op)
        module = np.where(replayed, range_names[graph_module], module)
        rule[replayed] = GRAPH_CAPTURE
    columns["op"] = op_names[op]
    columns["module"] = module
    columns["rule"] = rule
    # a kernel cannot start before its launch call: such a pair (a damaged export) has no
    # latency, and is left out of the op's mean
    with np.errstate(invalid="ignore"):
        columns["launch_latency"] = np.where(start >= launch_start, start - launch_start,
                                             np.nan)
    order = np.lexsort((start, device))
    columns = {name: values[order] for name, values in columns.items()}
    columns["idle_before"] = _idle_before(columns["device"], columns["start"], columns["end"])
    return pd.DataFrame(columns), op[order]


def _first_match(left_a: np.ndarray, left_b: np.ndarray, right_a: np.ndarray,
                 right_b: np.ndarray) -> np.ndarray:
    """For each right row, the first left row with the same (a, b) pair, or -1."""
    a, _ = pd.factorize(np.concatenate([left_a, right_a]))
    b, found = pd.factorize(np.concatenate([left_b, right_b]))
    key = a.astype(np.int64) * max(len(found), 1) + b
    left, right = key[:len(left_a)], key[len(left_a):]
    keys, first = np.unique(left, return_index=True)
    at = np.minimum(np.searchsorted(keys, right), max(len(keys) - 1, 0))
    hit = keys[at] == right if len(keys) else np.zeros(len(right), dtype=bool)
    return np.where(hit, first[at] if len(keys) else -1, -1)


def _idle_before(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """GPU idle time just before each activity on its device (rows sorted by device, then
    start): the start minus the latest end so far, 0 for overlaps and each device's first."""
    idle = np.zeros(len(start))
    firsts = (np.flatnonzero(np.r_[True, device[1:] != device[:-1]]) if len(device)
              else np.zeros(0, dtype=np.intp))
    for a, b in zip(firsts, list(firsts[1:]) + [len(device)]):
        reach = np.maximum.accumulate(end[a:b].astype(np.float64))
        idle[a + 1:b] = np.clip(start[a + 1:b] - reach[:-1], 0.0, None)
    return idle


def _without_gpu(ops: pd.DataFrame, summary: TimelineSection
                 ) -> tuple[pd.DataFrame, TimelineSection]:
    """A capture with no CUDA trace at all (a CPU-only run): its GPU numbers were not
    measured, so they are null, not 0; only the ranges remain."""
    gpu_columns = [c for c in ops.columns if c not in ("op", "ranges", "range_us")]
    ops = ops.astype({c: object for c in gpu_columns})
    ops[gpu_columns] = None
    return ops, {**summary, "kernels": None, "copies": None, "memsets": None,
                 "no_launch": None, "runtime_calls": None, "sync_calls": None,
                 "sync_us": None, "gpu_busy_pct": None, "attribution": {},
                 "gpu_traced": False}


_DIRECTIONS = ("HtoD", "DtoH", "DtoD")
_COUNTS = ["ranges", "kernels", "copies", "memsets"]
_TIMES = ["range_us", "kernel_us", "copy_us", "memset_us", "gpu_us", "launch_latency_us",
          "idle_before_us", "sync_us"]


def op_summary(ranges: pd.DataFrame, gpu: pd.DataFrame, gpu_op: np.ndarray,
               sync_dur: np.ndarray, sync_op: np.ndarray) -> pd.DataFrame:
    """Per op (microseconds, bytes): ranges, range_us; kernels, kernel_us; copies, copy_us,
    copy_bytes_htod / _dtoh / _dtod / _other; memsets, memset_us; gpu_us (all three);
    launch_latency_us (mean over its kernels); idle_before_us (GPU idle just before its
    work); sync_us (blocking calls inside it).

    ``gpu_op`` and ``sync_op`` are codes into the ranges' op categories (-1: no op), per
    GPU row and per blocking call; sums are bincounts over them."""
    codes = ranges["op"].cat.codes.to_numpy()
    names = np.array(ranges["op"].cat.categories, dtype=object)
    has = codes >= 0
    counts = np.bincount(codes[has], minlength=len(names))
    total = np.bincount(codes[has], weights=ranges["dur"].to_numpy(np.float64)[has],
                        minlength=len(names))
    table = pd.DataFrame({"ranges": counts, "range_us": total}, index=pd.Index(names, name="op"))
    table = table[table["ranges"] > 0]
    sel = gpu_op >= 0
    op = gpu_op[sel]
    kind = gpu["kind"].to_numpy()[sel]
    dur = gpu["dur"].to_numpy(np.float64)[sel]
    is_kernel, is_copy, is_memset = kind == "kernel", kind == "memcpy", kind == "memset"
    latency = gpu["launch_latency"].to_numpy(np.float64)[sel]
    timed = is_kernel & ~np.isnan(latency)
    present = np.bincount(op, minlength=len(names)) > 0

    def per_op(weights: np.ndarray) -> np.ndarray:
        return np.bincount(op, weights=weights, minlength=len(names))[present]

    direction = gpu["direction"].to_numpy()[sel]
    size = np.nan_to_num(gpu["bytes"].to_numpy(np.float64)[sel])
    other = is_copy & ~np.logical_or.reduce([direction == d for d in _DIRECTIONS])
    with np.errstate(invalid="ignore", divide="ignore"):
        latency_mean = per_op(np.where(timed, latency, 0.0)) / per_op(timed)
    by_op = pd.DataFrame({
        "kernels": per_op(is_kernel), "kernel_us": per_op(dur * is_kernel),
        "copies": per_op(is_copy), "copy_us": per_op(dur * is_copy),
        "memsets": per_op(is_memset), "memset_us": per_op(dur * is_memset),
        "gpu_us": per_op(dur), "launch_latency_us": latency_mean,
        "idle_before_us": per_op(gpu["idle_before"].to_numpy(np.float64)[sel]),
        **{f"copy_bytes_{d.lower()}": per_op(size * (is_copy & (direction == d)))
           for d in _DIRECTIONS},
        "copy_bytes_other": per_op(size * other)},
        index=pd.Index(names[present], name="op"), copy=False)
    has_sync = sync_op >= 0
    sync = pd.Series(np.bincount(sync_op[has_sync], weights=sync_dur[has_sync],
                                 minlength=len(names)), index=pd.Index(names, name="op"),
                     name="sync_us")
    sync = sync[np.bincount(sync_op[has_sync], minlength=len(names)) > 0]
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


def _work_counts(kind: np.ndarray) -> WorkCounts:
    """How many kernels, copies and memsets a set of GPU rows holds, given their kinds."""
    return {"kernels": int((kind == "kernel").sum()), "copies": int((kind == "memcpy").sum()),
            "memsets": int((kind == "memset").sum())}


def _unlaunched(kind: np.ndarray, dur: np.ndarray) -> UnlaunchedWork:
    """The counts of a set of GPU rows and their time by kind (µs), given their kinds and
    durations (ns)."""
    def us(name: str) -> float:
        return round(float(dur[kind == name].astype(np.float64).sum()) / 1e3, 3)

    return {**_work_counts(kind), "kernel_us": us("kernel"), "copy_us": us("memcpy"),
            "memset_us": us("memset")}


def _gpu_spans(export: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(device, start, end) of every kernel, copy and memset."""
    parts = [export.kernels, export.memcpy, export.memset]
    device, start, end = (np.concatenate([p[col].to_numpy(dtype) for p in parts])
                          for col, dtype in (("device", np.int64), ("start", np.float64),
                                             ("end", np.float64)))
    return device, start, end


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
