"""Which host op launched each GPU kernel, copy and memset.

Two linking generations exist (shared/facts.md, fact 1), detected from the data:

- new (kineto >= 2024-02): a GPU event's ``External id`` equals the launching cpu_op's, so
  the op is a dictionary lookup. Rule ``external_id``.
- old: ``External id`` merely copies ``correlation``. The GPU event's ``correlation``
  finds its runtime/driver launch call, and the innermost host op on the launching thread
  that contains that call is the op. Rule ``launch_containment``.

New traces fall back to the old rule for events whose External id names no op. What
neither rule explains stays in the frame, counted and shown, never dropped:

- ``launched_before_window``: no launch call in the trace. The GPU runs behind the host,
  so work queued in the step before the profiler started still runs inside the window;
  it counts toward the device's busy time, not toward any op.
- ``outside_ops``: launched from Python between ops (or inside a step range only).

Each GPU event also says how it was launched (``via``: ``cuda_graph`` when its launch call
is a graph launch, whose kernels torch.profiler shows under the replaying op only) and,
for torch.compile (Triton) kernels, the generated source file the launching op carries
(``source``, from the cpu_op's args "kernel_file"; recent torch traces write it).
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

import numpy as np
import pandas as pd

from ... import schema as S
from ..host.nesting import HostTree, at_rows
from ..keys import first_match
from ..strings import is_in, starts_with, value_codes
from ...contract.report import DeviceAttribution

Rule = Literal["external_id", "launch_containment", "launched_before_window", "outside_ops"]
EXTERNAL_ID: Final = "external_id"
LAUNCH_CONTAINMENT: Final = "launch_containment"
LAUNCHED_BEFORE_WINDOW: Final = "launched_before_window"
OUTSIDE_OPS: Final = "outside_ops"
GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
_RULES: tuple[Rule, ...] = get_args(Rule)


def linking_generation(events: pd.DataFrame) -> str:
    """'new' when GPU events carry their op's External id, 'old' when it copies correlation."""
    gpu = events.loc[is_in(events[S.CAT], S.GPU_CATS), [S.EXT_ID, S.CORRELATION]]
    return _generation(gpu[S.EXT_ID].to_numpy(np.float64),
                       gpu[S.CORRELATION].to_numpy(np.float64))


def _generation(ext_id: np.ndarray, correlation: np.ndarray) -> str:
    """linking_generation of the GPU events' External ids and correlation ids."""
    both = ~np.isnan(ext_id) & ~np.isnan(correlation)
    if not both.any():
        return "old"
    return "new" if (ext_id[both] != correlation[both]).mean() > 0.5 else "old"


def attribute_gpu_events(events: pd.DataFrame, tree: HostTree) -> pd.DataFrame:
    """One row per GPU event with the host op that launched it.

    Returns columns: cat, name, device (float), stream (str), ts, dur, bytes, op_pos
    (position in ``tree``, -1 without an op), rule (external_id | launch_containment |
    launched_before_window | outside_ops), via (cuda_graph or None), source (the
    launching op's generated kernel file, or None), launch (the kernel's grid, block,
    registers and shared memory as the trace gives them, or None).
    """
    gpu = events.loc[is_in(events[S.CAT], S.GPU_CATS),
                     [S.CAT, S.NAME, S.PID, S.TID, S.TS, S.DUR, S.EXT_ID, S.CORRELATION,
                      S.BYTES, S.DEVICE, S.LAUNCH]]
    op_pos = np.full(len(gpu), -1, dtype=np.int64)
    rule = np.full(len(gpu), _RULES.index(OUTSIDE_OPS), dtype=np.int8)   # codes into _RULES
    ext_id = gpu[S.EXT_ID].to_numpy(np.float64)

    if _generation(ext_id, gpu[S.CORRELATION].to_numpy(np.float64)) == "new":
        # the first op of each External id
        found = first_match(at_rows(events, tree.rows, S.EXT_ID).to_numpy(np.float64), ext_id)
        hit = found >= 0
        op_pos[hit] = found[hit]
        rule[hit] = _RULES.index(EXTERNAL_ID)

    launches = events.loc[is_in(events[S.CAT], S.LAUNCH_CATS)
                          & events[S.CORRELATION].notna().to_numpy(),
                          [S.NAME, S.PID, S.TID, S.TS, S.CORRELATION]]
    # each GPU event's launch call: the first one with its correlation id
    launch = first_match(launches[S.CORRELATION].to_numpy(np.float64),
                         gpu[S.CORRELATION].to_numpy(np.float64))
    has_launch = launch >= 0
    launch_pos = tree.enclosing(launches[S.PID], launches[S.TID], launches[S.TS].to_numpy())
    found = np.where(has_launch, launch_pos[np.maximum(launch, 0)] if len(launches) else -1, -1)
    hit = (op_pos < 0) & (found >= 0)
    op_pos[hit] = found[hit]
    rule[hit] = _RULES.index(LAUNCH_CONTAINMENT)
    rule[(op_pos < 0) & ~has_launch] = _RULES.index(LAUNCHED_BEFORE_WINDOW)

    not_op = starts_with(tree.names,
                         (S.PROFILER_STEP_PREFIX, S.NSBRIDGE_RANGE_PREFIX))
    in_step_only = (op_pos >= 0) & not_op[np.maximum(op_pos, 0)] if len(tree) else op_pos < -1
    op_pos[in_step_only] = -1  # launched between ops: a step or nsbridge range is not an op
    rule[in_step_only] = _RULES.index(OUTSIDE_OPS)

    graph_launch = is_in(launches[S.NAME], GRAPH_LAUNCH_CALLS)
    by_graph = has_launch & graph_launch[np.maximum(launch, 0)] if len(launches) else has_launch
    source = np.full(len(gpu), None, dtype=object)
    if len(tree):
        files = at_rows(events, tree.rows, S.KERNEL_FILE).to_numpy()
        launched = op_pos >= 0
        source[launched] = files[op_pos[launched]]
    via = np.full(len(gpu), None, dtype=object)
    via[by_graph] = S.CUDA_GRAPH

    device = gpu[S.DEVICE].to_numpy(np.float64)
    pid_codes, pids = value_codes(gpu[S.PID])   # converted once per distinct pid
    pid_as_device = np.append(pd.to_numeric(pd.Series(pids, dtype=object), errors="coerce")
                              .to_numpy(np.float64), np.nan)[pid_codes]
    device = np.where(np.isnan(device), pid_as_device, device)
    device = np.where(np.isfinite(device), device, 0.0)   # no device and no numeric pid
    return pd.DataFrame({
        "cat": _as_text(gpu[S.CAT]), "name": gpu[S.NAME].to_numpy(),
        "device": device, "stream": gpu[S.TID].to_numpy(), "ts": gpu[S.TS].to_numpy(),
        "dur": gpu[S.DUR].to_numpy(), "bytes": gpu[S.BYTES].to_numpy(),
        "op_pos": op_pos, "rule": np.array(_RULES, dtype=object)[rule],
        "via": via, "source": source, "launch": gpu[S.LAUNCH].to_numpy(),
    }, copy=False)


def _as_text(column: pd.Series) -> Any:
    """A column of a few distinct words as text: the trace reader's Categorical as it is
    (its tests, ``== "kernel"`` say, then compare a code per row, not a string), any other
    column as str."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.array
    return column.astype(str).to_numpy()


def attribution_counts(gpu: pd.DataFrame) -> DeviceAttribution:
    """How many of the window's GPU events each rule attributed, the most first."""
    rules: dict[str, Rule] = {rule: rule for rule in _RULES}
    out: DeviceAttribution = {}
    for rule, n in gpu["rule"].value_counts().items():
        out[rules[str(rule)]] = int(n)
    return out
