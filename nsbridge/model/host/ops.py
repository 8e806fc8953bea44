"""The hot-op table: one row per op name, ranked by self device time (or self CPU time)."""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from ... import schema as S
from .nesting import HostTree, at_rows
from ..ranks.collectives import worker_ranges
from ..strings import row_groups, starts_with, value_codes
from ..comparing.work import dtype_text, layout_text

MIB = 1024.0 * 1024.0


def op_table(events: pd.DataFrame, tree: HostTree, gpu: pd.DataFrame, has_device: bool,
             windows: pd.DataFrame, in_window: Optional[np.ndarray] = None,
             calls: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Aggregate host ops by name into the OPS frame (schema.OP_COLUMNS).

    Columns (times in microseconds): calls; cpu_self_us / cpu_total_us (host time without /
    with children); device_self_us (GPU time of kernels, copies and memsets the op launched
    itself, as torch's "Self CUDA") and device_total_us (including those of nested ops,
    torch's "CUDA total"), NaN without a device; mem_mib (gross: bytes allocated inside the
    op itself, not its children, on any device, MiB); mem_net_mib (net: allocations minus
    frees during the op and everything it calls, on the run's device: torch's "CUDA Mem" on
    GPU runs, "CPU Mem" otherwise), both NaN without memory events; self_pct (share of all
    ops' self time in the ranking column); shapes (up to three most common input shapes);
    kernels (list of {name, calls, device_us}, largest first; with via "cuda_graph" for
    kernels a graph replay ran and source for a Triton kernel's generated file, when the
    trace says so) and copies (memcpys and
    memsets: {name, kind, calls, device_us, bytes}): a copy is never a kernel.
    Rows are sorted by self device time when there is a device, else self CPU time.
    ``ProfilerStep#N`` ranges are steps and ``nsbridge::`` ranges nsbridge's own: not ops.
    per_step_us: the ranking column per measured step (``windows``), see per_step_times.
    shape_work: per work signature (input shapes, dtypes, layout: model.comparing.work), the eight
    with the most calls: {shape, dtypes, layout, calls, us}.
    ``in_window`` (a flag per tree position): only those ops count, and only the GPU work
    they launched (the measured window; None: every op of the trace).
    """
    per_op = op_calls(events, tree, gpu, has_device, in_window) if calls is None else calls
    # the names' category codes (the index is tree positions): no string hashed per row
    groups, firsts = row_groups(tree.names.take(per_op.index.to_numpy()))
    sums = [S.CPU_SELF_US, S.CPU_TOTAL_US, S.DEVICE_SELF_US, S.DEVICE_TOTAL_US, "mem_bytes",
            "mem_net_bytes"]
    table = per_op[sums].groupby(groups, sort=False).sum().reset_index(drop=True)
    table.insert(0, S.CALLS, np.bincount(groups))   # group codes count from 0 in that order
    table.insert(0, S.NAME, per_op[S.NAME].iloc[firsts].reset_index(drop=True))
    has_memory = bool((events[S.CAT] == S.MEMORY).any())
    table[S.MEM_MIB] = table.pop("mem_bytes") / MIB if has_memory else np.nan
    table[S.MEM_NET_MIB] = table.pop("mem_net_bytes") / MIB if has_memory else np.nan
    if not has_device:
        table[S.DEVICE_SELF_US] = np.nan
        table[S.DEVICE_TOTAL_US] = np.nan
    rank_col = S.DEVICE_SELF_US if has_device else S.CPU_SELF_US
    denominator = table[rank_col].sum()
    table[S.SELF_PCT] = 100.0 * table[rank_col] / denominator if denominator > 0 else 0.0
    table["shapes"] = table["name"].map(_common_shapes(per_op)).apply(
        lambda v: v if isinstance(v, list) else [])
    table[S.SHAPE_WORK] = table["name"].map(_shape_work(per_op, rank_col)).apply(
        lambda v: v if isinstance(v, list) else [])
    spread = per_step_times(events, tree, gpu, windows, has_device)
    table[S.PER_STEP_US] = table["name"].map(spread).apply(
        lambda v: v if isinstance(v, list) else [])
    kernels, copies = _gpu_work_by_op(gpu, tree)
    table["kernels"] = table["name"].map(kernels).apply(lambda v: v if isinstance(v, list) else [])
    table["copies"] = table["name"].map(copies).apply(lambda v: v if isinstance(v, list) else [])
    table = table.sort_values([rank_col, S.CPU_TOTAL_US], ascending=False, kind="stable")
    return table[S.OP_COLUMNS].reset_index(drop=True)


def op_calls(events: pd.DataFrame, tree: HostTree, gpu: pd.DataFrame, has_device: bool,
             in_window: Optional[np.ndarray] = None) -> pd.DataFrame:
    """One row per op call (index: its position in ``tree``): name, cpu_self_us,
    cpu_total_us, shape (input dims text), dtypes and layout (model.comparing.work; None where the
    trace has no types or strides), device_self_us, device_total_us, mem_bytes,
    mem_net_bytes. Steps and nsbridge's ranges are left out, and with ``in_window`` the
    ops outside the window. A collective backend's range on a worker thread of its own
    (gloo's: model.ranks.collectives.worker_ranges) is no op either: its time is the
    collective's work and its wait for the other ranks, counted with the collectives, and
    torch's key_averages leaves it out."""
    n = len(tree)
    not_ops = starts_with(tree.names, (S.PROFILER_STEP_PREFIX, S.NSBRIDGE_RANGE_PREFIX))
    not_ops |= worker_ranges(tree)
    if in_window is not None:
        not_ops |= ~in_window
    keep = np.flatnonzero(~not_ops)   # the rows are built for these only: no frame copy

    attributed = gpu[gpu["op_pos"] >= 0]
    pos, dur = attributed["op_pos"].to_numpy(), attributed["dur"].to_numpy(np.float64)
    total = np.zeros(n)
    for level in tree.ancestors_or_self(pos):
        ok = level >= 0
        np.add.at(total, level[ok], dur[ok])
    # no op kept: the name column's type as pandas infers it from all names
    kept_names = tree.name_values[keep] if len(keep) else pd.Series(tree.name_values)[:0]
    index = pd.Index(keep)
    shape = _texts(events, tree.rows[keep], S.INPUT_DIMS, index)
    calls = pd.DataFrame({
        S.NAME: kept_names, S.CPU_SELF_US: tree.self_us[keep],
        S.CPU_TOTAL_US: tree.dur[keep], "shape": shape,
        "dtypes": _derived(dtype_text, _texts(events, tree.rows[keep], S.INPUT_TYPES, index)),
        "layout": _derived(layout_text, shape,
                           _texts(events, tree.rows[keep], S.INPUT_STRIDES, index)),
        S.DEVICE_SELF_US: np.bincount(pos, weights=dur, minlength=n)[keep],
        S.DEVICE_TOTAL_US: total[keep], "mem_bytes": _allocations(events, tree)[keep],
        "mem_net_bytes": _net_memory(events, tree, has_device)[keep]}, index=index, copy=False)
    return _merge_duplicates(calls, tree)


def _merge_duplicates(calls: pd.DataFrame, tree: HostTree) -> pd.DataFrame:
    """Count calls as torch's tables do (EventList._remove_dup_nodes): an op whose parent
    has the same name and no other child is one call with it. Its own times and
    allocations go to that parent (the same name: the name's self totals are unchanged);
    its row goes, so its total time, its nested GPU work and its net memory are not
    counted twice."""
    parent = tree.parent
    if not len(parent):
        return calls
    codes, _ = value_codes(tree.names)
    above = np.maximum(parent, 0)
    children = np.bincount(parent[parent >= 0], minlength=len(parent))
    merged = (parent >= 0) & (codes >= 0) & (codes == codes[above]) & (children[above] == 1)
    if not merged.any():
        return calls
    pos = np.flatnonzero(merged)
    into = parent[pos]
    while True:                         # a chain of them goes to its top
        up = merged[into]
        if not up.any():
            break
        into[up] = parent[into[up]]
    rows, targets = calls.index.get_indexer(pos), calls.index.get_indexer(into)
    both = (rows >= 0) & (targets >= 0)   # a parent outside the window keeps its child
    rows, targets = rows[both], targets[both]
    for column in (S.CPU_SELF_US, S.DEVICE_SELF_US, "mem_bytes"):
        values = calls[column].to_numpy(np.float64, copy=True)
        np.add.at(values, targets, values[rows])
        calls[column] = values
    return calls.drop(index=calls.index[rows])


def _texts(events: pd.DataFrame, rows: np.ndarray, column: str, index: pd.Index) -> Any:
    """``events.loc[rows, column]``'s values as an object array for a frame with ``index``;
    a column with no value there is typed object at once (pandas would look at every row
    to find that out: 10 ms at 350k ops)."""
    whole = events[column]
    categorical = isinstance(whole.dtype, pd.CategoricalDtype)
    if not categorical or len(whole.cat.categories):   # else no value anywhere (no shapes)
        values = at_rows(events, rows, column)
        if not categorical or (values.cat.codes >= 0).any():
            return values.to_numpy()
    missing = np.empty(len(rows), dtype=object)
    missing.fill(np.nan)
    return pd.Series(missing, index=index, dtype=object, copy=False)


def _derived(text_of: Callable[..., Optional[str]], *columns: Any) -> np.ndarray:
    """``text_of`` applied to each row's values of ``columns``, computed once per distinct
    combination (a trace repeats a few shapes and types many times)."""
    codes, combos = pd.factorize(pd.MultiIndex.from_arrays(
        [pd.Series(np.asarray(c, dtype=object)).fillna("") for c in columns])
        if len(columns) > 1 else pd.Series(np.asarray(columns[0], dtype=object)).fillna(""))
    texts = np.array([text_of(*(v if isinstance(v, tuple) else (v,))) for v in combos] + [None],
                     dtype=object)
    return texts[codes]


def _allocations(events: pd.DataFrame, tree: HostTree) -> np.ndarray:
    """Gross bytes allocated by each op itself (its innermost allocations, any device)."""
    mem = events[(events[S.CAT] == S.MEMORY) & (events[S.BYTES] > 0)]
    pos = tree.enclosing(mem[S.PID], mem[S.TID], mem[S.TS].to_numpy())
    ok = pos >= 0
    return np.bincount(pos[ok], weights=mem[S.BYTES].to_numpy()[ok], minlength=len(tree))


def _net_memory(events: pd.DataFrame, tree: HostTree, device_run: bool) -> np.ndarray:
    """Net bytes (allocations minus frees) timed within each op's [start, end], on the
    run's device. Time alone decides, on any thread: torch's own rule for key_averages."""
    mem = events[events[S.CAT] == S.MEMORY]
    on_gpu = mem[S.DEVICE].fillna(-1).to_numpy() >= 0
    mem = mem[on_gpu if device_run else ~on_gpu]
    order = np.argsort(mem[S.TS].to_numpy(np.float64), kind="stable")
    ts = mem[S.TS].to_numpy(np.float64)[order]
    running = np.concatenate([[0.0], np.cumsum(np.nan_to_num(mem[S.BYTES].to_numpy(
        np.float64)[order]))])
    first = np.searchsorted(ts, tree.start, side="left")
    last = np.searchsorted(ts, tree.end, side="right")
    return running[last] - running[first]


def _common_shapes(per_op: pd.DataFrame, top: int = 3) -> dict[str, list[str]]:
    shaped = per_op[per_op["shape"].notna()]
    if shaped.empty:
        return {}
    counts = shaped.groupby(["name", "shape"], sort=False).size().reset_index(name="n")
    counts = counts.sort_values(["name", "n"], ascending=[True, False], kind="stable")
    return {name: group["shape"].head(top).tolist() for name, group in counts.groupby("name")}


SHAPE_WORK_TOP = 8


def _shape_work(per_op: pd.DataFrame, rank_col: str,
                top: int = SHAPE_WORK_TOP) -> dict[str, list[dict]]:
    """Per op name, its calls and ranking time per work signature (input shapes, dtypes,
    layout), the ``top`` most called, ties broken by the signature's text (calls and
    signatures are the same in every run of the same work, times are not: two runs of
    unchanged code keep the same signatures, whatever the noise)."""
    shaped = per_op[per_op["shape"].notna()]
    if shaped.empty:
        return {}
    keys = ["name", "shape", "dtypes", "layout"]
    agg = shaped.groupby(keys, sort=False, dropna=False).agg(
        calls=("shape", "size"), us=(rank_col, "sum")).reset_index()
    agg["order"] = [_signature_order(r.shape, r.dtypes, r.layout)
                    for r in agg.itertuples(index=False)]
    agg = agg.sort_values(["name", "calls", "order"], ascending=[True, False, True],
                          kind="stable")
    return {name: [_work_entry(r.shape, r.dtypes, r.layout, int(r.calls), float(r.us))
                   for r in group.head(top).itertuples(index=False)]
            for name, group in agg.groupby("name", sort=False)}


def _signature_order(shape: Any, dtypes: Any, layout: Any) -> tuple[str, str, str]:
    """A work signature as text, for an order both sides of a comparison share."""
    def text(value: Any) -> str:
        return value if isinstance(value, str) else ""
    return text(shape), text(dtypes), text(layout)


def _work_entry(shape: Any, dtypes: Any, layout: Any, calls: int, us: float) -> dict:
    return {"shape": str(shape), "dtypes": dtypes if isinstance(dtypes, str) else None,
            "layout": layout if isinstance(layout, str) else None, "calls": calls,
            "us": round(us, 3)}


def merge_shape_work(lists: pd.Series, top: Optional[int] = SHAPE_WORK_TOP) -> list[dict]:
    """shape_work entries of several traces summed by signature, most called first: the
    ``top`` of them (None: all, for a sum that is merged again)."""
    merged: dict[tuple, dict] = {}
    for entries in lists:
        for e in entries if isinstance(entries, list) else []:
            key = (e["shape"], e.get("dtypes"), e.get("layout"))
            row = merged.setdefault(key, _work_entry(*key, 0, 0.0))
            row["calls"] += e["calls"]
            row["us"] = round(row["us"] + e["us"], 3)
    return sorted(merged.values(), key=lambda e: (-e["calls"], _signature_order(
        e["shape"], e["dtypes"], e["layout"])))[:top]


_COPY_KIND = {S.MEMCPY: "memcpy", S.MEMSET: "memset"}


def _gpu_work_by_op(gpu: pd.DataFrame,
                    tree: HostTree) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """Per op name: its kernels and, apart, its copies and memsets, largest first. A
    kernel entry names the ops its launches ran within (``within``: see enclosing_ops)."""
    names = tree.names
    attributed = gpu[gpu["op_pos"] >= 0]
    if attributed.empty:
        return {}, {}
    op_pos = attributed["op_pos"].to_numpy()
    keys = {"op": names.take(op_pos),
            "name": attributed["name"].to_numpy(), "cat": attributed["cat"].array,
            "via": attributed["via"].fillna("").to_numpy(),
            "source": attributed["source"].fillna("").to_numpy()}
    groups, firsts = row_groups(*keys.values())   # integer keys: no string hashed per row
    within = enclosing_ops(tree, op_pos, groups)
    frame = pd.DataFrame({"dur": attributed["dur"].to_numpy(),
                          "bytes": attributed["bytes"].to_numpy(np.float64)}, copy=False)
    agg = frame.groupby(groups, sort=False).agg(
        calls=("dur", "size"), device_us=("dur", "sum"), bytes=("bytes", "sum"),
        has_bytes=("bytes", "count")).reset_index(drop=True)
    for key, values in keys.items():
        agg[key] = np.asarray(values.take(firsts), dtype=object)
    agg["group"] = np.arange(len(agg))
    agg = agg.sort_values(["op", "device_us"], ascending=[True, False], kind="stable")
    kernels: dict[str, list[dict]] = {}
    copies: dict[str, list[dict]] = {}
    for row in agg.itertuples(index=False):
        entry = {"name": row.name, "calls": int(row.calls),
                 "device_us": round(float(row.device_us), 3),
                 **({"via": row.via} if row.via else {}),
                 **({"source": row.source} if row.source else {})}
        if row.cat == S.KERNEL:
            kernels.setdefault(row.op, []).append(
                {**entry, **({"within": within[row.group]} if within.get(row.group) else {})})
        else:
            copies.setdefault(row.op, []).append(
                {**entry, "kind": _COPY_KIND.get(row.cat, row.cat),
                 "bytes": int(row.bytes) if row.has_bytes else None})
    return kernels, copies


_OP_NAME = re.compile(r"^[A-Za-z_]\w*::[\w.]+$")


def enclosing_ops(tree: HostTree, op_pos: np.ndarray, groups: np.ndarray) -> dict[int, list[str]]:
    """Per group code: the ops enclosing its launching ops, innermost first, up to the first
    enclosing range that is not an op (a step, a module, a user range). Nested ops such as
    ``aten::cudnn_convolution`` have no NVTX range of their own in nsbridge's timeline and
    deep passes (a dispatch mode sees ``aten::convolution``): their kernels run within one
    of these."""
    if not len(op_pos):
        return {}
    codes, uniques = value_codes(tree.names)
    is_op = np.append([isinstance(n, str) and bool(_OP_NAME.match(n)) for n in uniques],
                      False).astype(bool)[codes]
    calls, inverse = np.unique(op_pos, return_inverse=True)
    pairs = pd.DataFrame({"group": groups, "call": inverse}).drop_duplicates()
    call_of_pair = pairs["call"].to_numpy()
    found = []
    alive = np.ones(len(calls), dtype=bool)
    for level, pos in enumerate(tree.ancestors_or_self(calls)[1:], 1):
        alive &= (pos >= 0) & is_op[np.maximum(pos, 0)]
        if not alive.any():
            break
        keep = alive[call_of_pair]
        found.append(pd.DataFrame({"group": pairs["group"].to_numpy()[keep],
                                   "name": uniques[codes[pos[call_of_pair[keep]]]],
                                   "level": level}))
    if not found:
        return {}
    table = (pd.concat(found, ignore_index=True).sort_values(["group", "level"], kind="stable")
             .drop_duplicates(["group", "name"]))
    return {int(group): list(rows["name"]) for group, rows in table.groupby("group", sort=False)}


def per_step_times(events: pd.DataFrame, tree: HostTree, gpu: pd.DataFrame,
                   windows: pd.DataFrame, has_device: bool) -> dict[str, list[float]]:
    """Per op name, its ranking time (self device µs, else self CPU µs) in each measured
    step, in step order: the spread a comparison of two runs needs to tell a change from
    noise. Host ops count in the step they start in, GPU work in the step its op was
    launched in: a GPU that runs behind the host would otherwise pile every step's work into
    the step that waits for it (the last one, or the next sync's)."""
    codes, names = value_codes(tree.names)   # grouped by name code: no string hashed
    edges = windows["start"].to_numpy(np.float64)
    ends = windows["end"].to_numpy(np.float64)
    if has_device:
        work = gpu[gpu["op_pos"] >= 0]
        launched_by = work["op_pos"].to_numpy()
        name, at, value = (codes[launched_by], tree.start[launched_by],
                           work["dur"].to_numpy(np.float64))
    else:
        name, at, value = codes, tree.start, tree.self_us
    step = np.searchsorted(edges, at, side="right") - 1
    inside = (step >= 0) & (at < ends[np.maximum(step, 0)]) & (name >= 0)   # a name
    frame = pd.DataFrame({"name": name[inside], "step": step[inside], "us": value[inside]},
                         copy=False)
    table = frame.groupby(["name", "step"])["us"].sum().unstack(fill_value=0.0)
    table = table.reindex(columns=range(len(windows)), fill_value=0.0)
    return {str(names[n]): [round(float(v), 3) for v in row]
            for n, row in zip(table.index, table.to_numpy())}
