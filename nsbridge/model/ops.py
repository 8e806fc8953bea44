"""The hot-op table: one row per op name, ranked by self device time (or self CPU time)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import schema as S
from .nesting import HostTree
from .strings import starts_with

MIB = 1024.0 * 1024.0


def op_table(events: pd.DataFrame, tree: HostTree, gpu: pd.DataFrame,
             has_device: bool) -> pd.DataFrame:
    """Aggregate host ops by name into the OPS frame (schema.OP_COLUMNS).

    Columns (times in microseconds): calls; cpu_self_us / cpu_total_us (host time without /
    with children); device_self_us (GPU time of kernels, copies and memsets the op launched
    itself) and device_total_us (including those of nested ops), NaN without a device;
    mem_mib (bytes allocated inside the op itself, MiB; NaN without memory events);
    self_pct (share of all ops' self time in the ranking column); shapes (up to three most
    common input shapes); kernels (list of {name, kind, calls, device_us}, largest first).
    Rows are sorted by self device time when there is a device, else self CPU time.
    ``ProfilerStep#N`` ranges are steps, not ops, and are left out.
    """
    names = events.loc[tree.rows, S.NAME].to_numpy()
    n = len(tree)
    per_op = pd.DataFrame({"name": names, "cpu_self_us": tree.self_us, "cpu_total_us": tree.dur,
                           "shape": events.loc[tree.rows, S.INPUT_DIMS].to_numpy()})

    attributed = gpu[gpu["op_pos"] >= 0]
    pos, dur = attributed["op_pos"].to_numpy(), attributed["dur"].to_numpy(np.float64)
    per_op["device_self_us"] = np.bincount(pos, weights=dur, minlength=n)
    total = np.zeros(n)
    for level in tree.ancestors_or_self(pos):
        ok = level >= 0
        np.add.at(total, level[ok], dur[ok])
    per_op["device_total_us"] = total
    per_op["mem_bytes"] = _allocations(events, tree)

    per_op = per_op[~starts_with(per_op["name"].to_numpy(), S.PROFILER_STEP_PREFIX)]
    grouped = per_op.groupby("name", sort=False)
    table = grouped.agg(calls=("name", "size"), cpu_self_us=("cpu_self_us", "sum"),
                        cpu_total_us=("cpu_total_us", "sum"),
                        device_self_us=("device_self_us", "sum"),
                        device_total_us=("device_total_us", "sum"),
                        mem_bytes=("mem_bytes", "sum")).reset_index()
    has_memory = bool((events[S.CAT] == S.MEMORY).any())
    table["mem_mib"] = table.pop("mem_bytes") / MIB if has_memory else np.nan
    if not has_device:
        table["device_self_us"] = np.nan
        table["device_total_us"] = np.nan
    rank_col = "device_self_us" if has_device else "cpu_self_us"
    denominator = table[rank_col].sum()
    table["self_pct"] = 100.0 * table[rank_col] / denominator if denominator > 0 else 0.0
    table["shapes"] = table["name"].map(_common_shapes(per_op)).apply(
        lambda v: v if isinstance(v, list) else [])
    table["kernels"] = table["name"].map(_kernels_by_op(gpu, names)).apply(
        lambda v: v if isinstance(v, list) else [])
    table = table.sort_values([rank_col, "cpu_total_us"], ascending=False, kind="stable")
    return table[S.OP_COLUMNS].reset_index(drop=True)


def _allocations(events: pd.DataFrame, tree: HostTree) -> np.ndarray:
    mem = events[(events[S.CAT] == S.MEMORY) & (events[S.BYTES] > 0)]
    pos = tree.enclosing(mem[S.PID], mem[S.TID], mem[S.TS].to_numpy())
    ok = pos >= 0
    return np.bincount(pos[ok], weights=mem[S.BYTES].to_numpy()[ok], minlength=len(tree))


def _common_shapes(per_op: pd.DataFrame, top: int = 3) -> dict[str, list[str]]:
    shaped = per_op[per_op["shape"].notna()]
    if shaped.empty:
        return {}
    counts = shaped.groupby(["name", "shape"], sort=False).size().reset_index(name="n")
    counts = counts.sort_values(["name", "n"], ascending=[True, False], kind="stable")
    return {name: group["shape"].head(top).tolist() for name, group in counts.groupby("name")}


def _kernels_by_op(gpu: pd.DataFrame, names: np.ndarray) -> dict[str, list[dict]]:
    attributed = gpu[gpu["op_pos"] >= 0]
    if attributed.empty:
        return {}
    frame = pd.DataFrame({"op": names[attributed["op_pos"].to_numpy()],
                          "kernel": attributed["name"].to_numpy(),
                          "kind": attributed["cat"].to_numpy(),
                          "dur": attributed["dur"].to_numpy()})
    agg = frame.groupby(["op", "kernel", "kind"], sort=False)["dur"].agg(["size", "sum"])
    agg = agg.reset_index().sort_values(["op", "sum"], ascending=[True, False], kind="stable")
    out: dict[str, list[dict]] = {}
    for op, group in agg.groupby("op", sort=False):
        out[op] = [{"name": k, "kind": kind, "calls": int(c), "device_us": round(float(s), 3)}
                   for k, kind, c, s in zip(group["kernel"], group["kind"], group["size"],
                                            group["sum"])]
    return out
