"""A report dict as DataFrames: what ``nsbridge.load(run_dir)`` and a RunResult expose.

``r = nsbridge.load(run_dir)`` gives the frames below, read from report.json (which keeps
its own format: shapes as torch's text, nulls). Every frame has its columns, in this
order, even when it has no rows (a CPU-only run's ``r.gaps`` and ``r.kernels``); the
nsys and ncu frames are None when that pass did not run. dtypes:

- float64: times, MiB, rates, percentages and shares; NaN where not measured (a
  CPU-only run's device times, a quantity ncu did not collect), never None.
- int64: counts and ids. A column written ``Int64`` can lack a value in some row (an op
  only nsys or ncu saw has no torch.profiler ``calls``): it is pandas' nullable Int64
  with <NA> when some row lacks one, plain int64 when none does; never float.
- str: text, pandas' string dtype (``str`` from pandas 3, ``object`` before); NaN where
  there is none (a kernel no op launched has no ``op``).
- bool: a flag (pandas' nullable boolean where some row lacks one).
- object: Python lists and dicts, as the column says.

Units: µs, ms, ns, s; MiB; B (bytes), B/s; FLOP/s, FLOP/B (arithmetic intensity); % (0 to
100); ``-`` for counts, names and labels. A row in ``[brackets]`` opens the columns a frame
has only when it holds; ``<quantity>`` stands for every name of that kind.

r.ops: one row per op name (report ``ops[]``), ranked by ``report["ranked_by"]`` (self
device time on a GPU run, else self CPU time); totals over the measured window.

    column                      dtype    unit    meaning
    name                        str      -       op name (aten::addmm) or annotation
    calls                       Int64    -       times it ran in the window (<NA>: an op
                                                 only nsys or ncu saw)
    cpu_self_us                 float64  µs      host time without its child ops
    cpu_total_us                float64  µs      host time with its child ops
    device_self_us              float64  µs      GPU time of the kernels, copies and
                                                 memsets it launched itself (torch's Self
                                                 CUDA); NaN without a GPU
    device_total_us             float64  µs      the same with its nested ops' (CUDA
                                                 total); NaN without a GPU
    mem_mib                     float64  MiB     allocated inside the op itself (gross);
                                                 NaN without memory profiling
    mem_net_mib                 float64  MiB     allocated minus freed during the op and
                                                 all it calls, on the run's device
    self_pct                    float64  %       share of the ranking column
    shapes                      object   -       up to 3 most common input shapes, each a
                                                 list of dims lists as torch records them:
                                                 [[8,3,32,32],[16,3,3,3]]; [] when not
                                                 recorded
    kernels                     object   -       list of {name, calls, device_us}: the
                                                 kernels it launched itself
    copies                      object   -       list of {name, kind (memcpy, memset),
                                                 calls, device_us, bytes}
    per_step_us                 object   µs      list: the ranking time in each measured
                                                 step ([] for an op torch did not see)
    shape_work                  object   -       list of {shape (as in shapes), dtypes,
                                                 layout, calls, us}: the op's 8 most called
                                                 work signatures
    spread_pct                  float64  %       half the 95% interval of its time per
                                                 step; NaN with fewer than 2 steps
    tensor_cores_status         str      -       on Tensor Cores, not on Tensor Cores,
                                                 eligible, eligible if padded, not
                                                 eligible; NaN where nothing
                                                 tells (matmul, conv and attention ops)
    tensor_cores_dtype          str      -       the dtype that decided it
    tensor_cores_evidence       str      -       kernel names, dtype shapes and settings,
                                                 or ncu counters
    tensor_cores_reason         str      -       why, in words
    tensor_cores_triage_status  str      -       the triage's mark when ncu's counters
                                                 overruled it
    [after the nsys pass: report["timeline"]; NaN or <NA> where nsys saw no range]
    nsys_ranges                 Int64    -       NVTX op ranges of this name
    nsys_range_us               float64  µs      time inside them
    nsys_kernels                Int64    -       kernels launched in them
    nsys_kernel_us              float64  µs      their GPU time
    nsys_copies                 Int64    -       memcpys launched in them
    nsys_copy_us                float64  µs      their GPU time
    nsys_memsets                Int64    -       memsets launched in them
    nsys_memset_us              float64  µs      their GPU time
    nsys_gpu_us                 float64  µs      kernels, copies and memsets together
    nsys_launch_latency_us      float64  µs      mean launch-to-start over its kernels
    nsys_idle_before_us         float64  µs      GPU idle just before its work
    nsys_copy_bytes_htod        Int64    B       bytes copied host to device
    nsys_copy_bytes_dtoh        Int64    B       bytes copied device to host
    nsys_copy_bytes_dtod        Int64    B       bytes copied device to device
    nsys_copy_bytes_other       Int64    B       bytes copied any other way
    nsys_sync_us                float64  µs      blocking runtime calls inside it
    [after the ncu pass: report["ncu"]; NaN or <NA> where ncu did not profile the op]
    ncu_launches                Int64    -       launches profiled
    ncu_bound                   str      -       compute, memory or latency
    ncu_occupancy_limiter       str      -       what limits occupancy (registers, ...)
    ncu_tensor_path             str      -       the Tensor Core path its kernels used
    ncu_precision               str      -       the precision that did the most FLOPs
    ncu_flop_per_s              float64  FLOP/s  achieved, in that precision
    ncu_flop_peak_per_s         float64  FLOP/s  the device's peak for it
    ncu_dram_bytes_per_s        float64  B/s     DRAM traffic
    ncu_dram_peak_bytes_per_s   float64  B/s     the device's DRAM peak
    ncu_l2_bytes_per_s          float64  B/s     L2 traffic
    ncu_l2_peak_bytes_per_s     float64  B/s     the device's L2 peak
    ncu_intensity               float64  FLOP/B  FLOPs per DRAM byte
    ncu_ridge                   float64  FLOP/B  the roofline's ridge point
    ncu_roof                    str      -       the roof that binds: compute or memory
    ncu_roof_pct                float64  %       share of that roof achieved
    ncu_<quantity>              float64  -       each other quantity of the deep profile's
                                                 metric set, unit in its name (duration_ns,
                                                 sm_pct, dram_bytes, ...): duration-weighted
                                                 mean over the launches, counts summed

r.kernels: one row per (kernel, copy or memset name, op) in the measured window (report
``device.work[]``; before that key existed, ``ops[].kernels`` and ``ops[].copies``).

    column                      dtype    unit    meaning
    op                          str      -       the op that launched it; NaN: none did
    kind                        str      -       kernel, memcpy or memset
    name                        str      -       kernel name, or the copy's kind
    calls                       int64    -       launches in the window
    device_us                   float64  µs      GPU time over them
    bytes                       Int64    B       bytes a copy or memset moved (<NA> for
                                                 kernels)
    attribution                 str      -       external_id or launch_containment (how it
                                                 was tied to its op), outside_ops or
                                                 launched_before_window (why not)
    via                         str      -       cuda_graph for a graph replay's kernels
    source                      str      -       a Triton kernel's generated file
    launch                      str      -       a kernel's launch configuration as the
                                                 trace gives it (grid, block, registers per
                                                 thread, shared memory B), the first seen
    launch_configs              int64    -       how many different ones it had

r.op_shapes: ops by input shape (report ``op_groups.by_shape[]``), the 200 costliest by
the ranking column; totals over the measured window.

    column                      dtype    unit    meaning
    name                        str      -       op name
    shape                       object   -       its input shapes as lists:
                                                 [[8,3,32,32],[16,3,3,3]]
    calls                       int64    -       calls with that shape
    cpu_self_us                 float64  µs      host time without child ops
    cpu_total_us                float64  µs      host time with child ops
    device_self_us              float64  µs      GPU time it launched itself; NaN without
                                                 a GPU
    device_total_us             float64  µs      the same with nested ops'

r.op_sources: ops by the function of the script that called them (report
``op_groups.by_source[]``: the innermost frame of the script's own code in the trace's
Python stacks); no rows without stacks.

    column                      dtype    unit    meaning
    name                        str      -       op name
    source                      str      -       forward (model.py:31): the function and
                                                 where torch's tracer saw it start
    calls                       int64    -       calls from it
    cpu_self_us                 float64  µs      host time without child ops
    cpu_total_us                float64  µs      host time with child ops
    device_self_us              float64  µs      GPU time it launched itself; NaN without
                                                 a GPU
    device_total_us             float64  µs      the same with nested ops'

r.memory: the allocator's level over the measured window on the run's device (report
``memory.points``): up to 400 points, each time bucket's highest and lowest and the peak.

    column                      dtype    unit    meaning
    t_ms                        float64  ms      time from the window's start
    allocated_mib               float64  MiB     allocated (torch's Total Allocated);
                                                 since the window's start where
                                                 memory.relative (host memory)
    reserved_mib                float64  MiB     reserved by the caching allocator; NaN on
                                                 the host

r.steps: one row per measured step (report ``steps.per_step[]``); the phases add up to
``wall_ms``.

    column                      dtype    unit    meaning
    step                        Int64    -       the step's number (<NA>: a window without steps, one row)
    wall_ms                     float64  ms      its length
    data_ms                     float64  ms      data loading
    forward_ms                  float64  ms      forward
    backward_ms                 float64  ms      backward
    optimizer_ms                float64  ms      optimizer step and zero_grad
    other_ms                    float64  ms      the rest
    gpu_done_ms                 float64  ms      how long after the previous step's GPU work
                                                 the GPU finished this step's (NaN without
                                                 a GPU, or a step that launched none)
    cpu_ms                      float64  ms      CPU time of the profiled process's threads
                                                 in the step (NaN where not measured: an
                                                 analysed trace)
    wait_ms                     float64  ms      time those threads waited for a CPU (run
                                                 queue) in the step; NaN where not measured
    probe_ms                    float64  ms      thread CPU time of the speed probe run as
                                                 the step began (the gate profile's
                                                 schedule.speed_probe; NaN without one)
    [after --runs N: the steps of N processes pooled]
    run                         int64    -       the process the step ran in, from 1

r.sync_points: one row per call site where the host waited for the device (report
``sync_points[]``), those in the training steps first, then costliest first.

    column                      dtype    unit    meaning
    kind                        str      -       item, tolist, cpu, cuda_synchronize, ...
                                                 or the runtime call's name
    call                        str      -       the blocking runtime call (trace sites)
    op                          str      -       the op that made it
    file                        str      -       source file of the call
    line                        Int64    -       its line
    function                    str      -       its function
    code                        str      -       the statement's text (what diff matches a
                                                 site by)
    device                      str      -       the tensor's device (cpu, cuda)
    count                       int64    -       calls over counted_over
    per_step                    float64  -       calls per measured step; NaN outside the
                                                 steps and without steps
    per_s                       float64  -       calls per second (windows without steps)
    counted_over                str      -       measured steps, whole run, outside the
                                                 steps, window
    placement                   str      -       steps, outside, window or run
    placement_why               str      -       why that placement
    host_ms                     float64  ms      host time blocked in the calls
    gpu_idle_ms                 float64  ms      GPU idle after them; NaN without a GPU
    run_count                   Int64    -       calls over the whole run (the profiled
                                                 process's own records)
    library                     bool     -       the call is in a library, not the script
    via                         str      -       the library line the script's call went
                                                 through
    source                      str      -       which record found it

r.gaps: the longest GPU idle stretches of the measured window (report
``device.idle_gaps[]``); no rows without a GPU.

    column                      dtype    unit    meaning
    device                      int64    -       GPU index
    start_us                    float64  µs      start, from the window's start
    dur_us                      float64  µs      length
    host_op                     str      -       the op the training thread was in
    host_top_op                 str      -       its outermost op

r.timeline_ops: nsys per op name (report ``timeline.ops[]``); None without the nsys pass.

    column                      dtype    unit    meaning
    op                          str      -       op name (nsbridge's NVTX op range)
    ranges                      int64    -       ranges of this name
    range_us                    float64  µs      time inside them
    kernels                     Int64    -       kernels launched in them (<NA>: the
                                                 capture traced no GPU)
    kernel_us                   float64  µs      their GPU time
    copies                      Int64    -       memcpys launched in them
    copy_us                     float64  µs      their GPU time
    memsets                     Int64    -       memsets launched in them
    memset_us                   float64  µs      their GPU time
    gpu_us                      float64  µs      kernels, copies and memsets together
    launch_latency_us           float64  µs      mean launch-to-start over its kernels
    idle_before_us              float64  µs      GPU idle just before its work
    copy_bytes_htod             Int64    B       bytes copied host to device
    copy_bytes_dtoh             Int64    B       bytes copied device to host
    copy_bytes_dtod             Int64    B       bytes copied device to device
    copy_bytes_other            Int64    B       bytes copied any other way
    sync_us                     float64  µs      blocking runtime calls inside its ranges

r.timeline_gaps: nsys's longest GPU idle stretches (report ``timeline.idle_gaps[]``); None
without the nsys pass.

    column                      dtype    unit    meaning
    device                      int64    -       GPU index
    start_ns                    float64  ns      start, on nsys's clock
    dur_us                      float64  µs      length
    op                          str      -       the op range the host was in
    module                      str      -       the module range the host was in
    step                        str      -       the step range (step 3)

r.ranks: each rank of a job, as its row of the cross-rank report (report
``distributed.ranks[]``: every rank, however many the views show); None on one rank.

    column                      dtype    unit    meaning
    rank                        Int64    -       the rank
    host                        str      -       its host
    status                      str      -       ok, failed, hung, ...
    exit_code                   Int64    -       its exit status
    profiled                    bool     -       whether its trace was analysed
    step_ms                     float64  ms      its median measured step
    min_step_ms                 float64  ms      its shortest measured step
    max_step_ms                 float64  ms      its longest measured step
    collective_ms_per_step      float64  ms      median time per step some collective ran
    work_ms_per_step            float64  ms      the rest of the median step
    verdict                     str      -       its verdict (cpu-bound, ...)
    device_busy_pct             float64  %       its GPU busy share
    comm_overlap_pct            float64  %       NCCL kernel time overlapping compute
    file                        str      -       its trace (analyze of several traces)
    busy_pct                    float64  %       its verdict's GPU busy share
    ops                         Int64    -       how many ops it ran

r.timeline_ranks: nsys on each rank of a job (report ``timeline.ranks[]``); None on one
rank.

    column                      dtype    unit    meaning
    rank                        int64    -       the rank
    host                        str      -       its host
    reason                      str      -       why nsys ran on it
    status                      str      -       ok, failed, hung, ...
    error                       str      -       what went wrong
    wall_s                      float64  s       the pass's wall time
    gpu_busy_pct                float64  %       GPU busy in its capture
    kernels                     Int64    -       kernels
    copies                      Int64    -       memcpys
    memsets                     Int64    -       memsets
    nsbridge_ranges             Int64    -       nsbridge's NVTX ranges recorded
    sync_calls                  Int64    -       blocking runtime calls
    sync_us                     float64  µs      time in them
    kernel_us                   float64  µs      GPU time of the op ranges' kernels
    comm_kernel_us              float64  µs      the part in communication ops

r.ncu: one row per launch Nsight Compute profiled (report ``ncu.kernels[]``); None
without the ncu pass.

    column                      dtype    unit    meaning
    launch                      int64    -       ncu's launch id
    kernel                      str      -       kernel name
    op                          str      -       the innermost NVTX op range
    module                      str      -       the innermost module range
    step                        str      -       the step range (step 3)
    attribution                 str      -       nvtx, outside_filter or no_nvtx
    duration_ns                 float64  ns      its duration
    sm_pct                      float64  %       SM throughput of peak
    memory_pct                  float64  %       memory throughput of peak
    achieved_occupancy_pct      float64  %       achieved occupancy
    tensor_pct                  float64  %       Tensor Core pipe utilisation
    l2_hit_pct                  float64  %       L2 hit rate
    flop_per_s                  float64  FLOP/s  achieved, in its busiest precision
    precision                   str      -       that precision
    intensity                   float64  FLOP/B  FLOPs per DRAM byte
    roof                        str      -       the roof that binds: compute or memory
    roof_pct                    float64  %       share of that roof achieved
    dram_bytes_per_s            float64  B/s     DRAM traffic

r.ncu_ranks: ncu on each profiled rank of a job (report ``ncu.ranks[]``); None on one rank.

    column                      dtype    unit    meaning
    rank                        int64    -       the rank
    host                        str      -       its host
    reason                      str      -       why ncu ran on it (median, slowest, ...)
    status                      str      -       ok, failed, hung, ...
    error                       str      -       what went wrong
    wall_s                      float64  s       the pass's wall time
    launches                    Int64    -       launches profiled
    <op>.duration_ns            float64  ns      per op: duration summed over its launches
    <op>.sm_pct                 float64  %       per op: SM throughput
    <op>.memory_pct             float64  %       per op: memory throughput
    <op>.achieved_occupancy_pct float64  %       per op: achieved occupancy
    <op>.tensor_pct             float64  %       per op: Tensor Core pipe utilisation
    <op>.bound                  str      -       per op: compute, memory or latency
"""

from __future__ import annotations

import html
import json
from typing import Any, Literal, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from .. import schema as S
from .document.escape import terminal
from .views.timeline_view import NSYS_OP_DTYPES
from .views import catalog
from .document.head import shown_verdict, trouble_lines, verdict_title
from ..contract.report import Op, Report, per_step_of

# each frame's columns and dtypes, as the module docstring's tables give them
# (tests/test_load.py checks the two against the frames of real runs)
OPS: dict[str, str] = {
    S.NAME: "str", S.CALLS: "Int64", S.CPU_SELF_US: "float64", S.CPU_TOTAL_US: "float64",
    S.DEVICE_SELF_US: "float64", S.DEVICE_TOTAL_US: "float64", S.MEM_MIB: "float64",
    S.MEM_NET_MIB: "float64", S.SELF_PCT: "float64", S.SHAPES: "object", S.KERNELS: "object",
    S.COPIES: "object", S.PER_STEP_US: "object", S.SHAPE_WORK: "object",
    S.SPREAD_PCT: "float64",
    **{f"tensor_cores_{k}": "str" for k in ("status", "dtype", "evidence", "reason",
                                             "triage_status")}}
KERNELS = {"op": "str", "kind": "str", "name": "str", "calls": "int64", "device_us": "float64",
           "bytes": "Int64", "attribution": "str", "via": "str", "source": "str",
           "launch": "str", "launch_configs": "int64"}
_GROUPED = {"calls": "int64", "cpu_self_us": "float64", "cpu_total_us": "float64",
            "device_self_us": "float64", "device_total_us": "float64"}
OP_SHAPES = {"name": "str", "shape": "object", **_GROUPED}
OP_SOURCES = {"name": "str", "source": "str", **_GROUPED}
MEMORY = {"t_ms": "float64", "allocated_mib": "float64", "reserved_mib": "float64"}
STEPS = {"step": "Int64", "wall_ms": "float64", "data_ms": "float64", "forward_ms": "float64",
         "backward_ms": "float64", "optimizer_ms": "float64", "other_ms": "float64",
         "gpu_done_ms": "float64", "cpu_ms": "float64", "wait_ms": "float64",
         "probe_ms": "float64"}
STEPS_RUNS = {"run": "int64"}
SYNC_POINTS = {"kind": "str", "call": "str", "op": "str", "file": "str", "line": "Int64",
               "function": "str", "code": "str", "device": "str", "count": "int64", "per_step": "float64",
               "per_s": "float64", "counted_over": "str", "placement": "str",
               "placement_why": "str", "host_ms": "float64", "gpu_idle_ms": "float64",
               "run_count": "Int64", "library": "bool", "via": "str", "source": "str"}
GAPS = {"device": "int64", "start_us": "float64", "dur_us": "float64", "host_op": "str",
        "host_top_op": "str"}
TIMELINE_OPS = {"op": "str", **{k: ("int64" if k == "ranges" else v)
                                for k, v in NSYS_OP_DTYPES.items()}}
TIMELINE_GAPS = {"device": "int64", "start_ns": "float64", "dur_us": "float64", "op": "str",
                 "module": "str", "step": "str"}
RANKS = {"rank": "Int64", "host": "str", "status": "str", "exit_code": "Int64",
         "profiled": "bool", "step_ms": "float64", "min_step_ms": "float64",
         "max_step_ms": "float64", "collective_ms_per_step": "float64",
         "work_ms_per_step": "float64", "verdict": "str", "device_busy_pct": "float64",
         "comm_overlap_pct": "float64", "file": "str", "busy_pct": "float64",
         "ops": "Int64"}
_RANK = {"rank": "int64", "host": "str", "reason": "str", "status": "str", "error": "str",
         "wall_s": "float64"}
TIMELINE_RANKS = {**_RANK, "gpu_busy_pct": "float64", "kernels": "Int64", "copies": "Int64",
                  "memsets": "Int64", "nsbridge_ranges": "Int64", "sync_calls": "Int64",
                  "sync_us": "float64", "kernel_us": "float64", "comm_kernel_us": "float64"}
NCU_KERNELS = {"launch": "int64", "kernel": "str", "op": "str", "module": "str", "step": "str",
               "attribution": "str", "duration_ns": "float64", "sm_pct": "float64",
               "memory_pct": "float64", "achieved_occupancy_pct": "float64",
               "tensor_pct": "float64", "l2_hit_pct": "float64", "flop_per_s": "float64",
               "precision": "str", "intensity": "float64", "roof": "str",
               "roof_pct": "float64", "dram_bytes_per_s": "float64"}
NCU_RANKS = {**_RANK, "launches": "Int64"}
NCU_RANK_OP = {"duration_ns": "float64", "sm_pct": "float64", "memory_pct": "float64",
               "achieved_occupancy_pct": "float64", "tensor_pct": "float64", "bound": "str"}


def ops(report: Report) -> pd.DataFrame:
    """The ``r.ops`` frame (module docstring): torch.profiler's columns with shapes parsed
    from torch's text, then each other pass's scalars as ``KEY_name`` columns (``nsys_*``
    after the nsys pass, ``ncu_*`` after the ncu pass; lists such as ncu findings stay in
    the report)."""
    rows = [_op_row(op) for op in report.get("ops") or []]
    columns = dict(OPS)
    views = catalog.views_by_op_key()
    for key, view in views.items():   # each pass's columns, as its view types them
        if report.get(view.report_key):
            columns.update({f"{key}_{name}": dtype for name, dtype in view.frame_dtypes})
    defaults = {f"{key}_": view.frame_default for key, view in views.items()}
    for row in rows:          # the rest: each ncu quantity, any other pass's
        for col in row:
            if col not in columns:
                columns[col] = next((dtype for prefix, dtype in defaults.items()
                                     if col.startswith(prefix)), "")
    return _frame(rows, columns)


def _op_row(op: Op) -> dict[str, Any]:
    row = {c: op.get(c) for c in S.OP_COLUMNS}
    row[S.SPREAD_PCT] = op.get(S.SPREAD_PCT)
    row[S.SHAPES] = [_shape(s) for s in op.get(S.SHAPES) or []]
    row[S.SHAPE_WORK] = [{**w, "shape": _shape(w.get("shape"))}
                         for w in op.get(S.SHAPE_WORK) or []]
    row[S.KERNELS] = list(op.get(S.KERNELS) or [])
    row[S.COPIES] = list(op.get(S.COPIES) or [])
    row[S.PER_STEP_US] = list(op.get(S.PER_STEP_US) or [])
    for key, values in op.items():    # each other pass's numbers: nsys, ncu, tensor_cores
        if key in S.OP_COLUMNS or not isinstance(values, dict):
            continue
        for name, value in values.items():
            if not isinstance(value, (list, dict)):
                row[f"{key}_{name}"] = value
    return row


def _shape(text: Any) -> Any:
    """One input shape as lists, from the JSON text torch writes ('[[8,3],[]]' ->
    [[8, 3], []]); text that is not JSON stays text."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def kernels(report: Report) -> pd.DataFrame:
    """The ``r.kernels`` frame (module docstring): every kernel, copy and memset of the
    window, attributed or not. A report from before ``device.work`` gives the kernels and
    copies of ``ops[]`` (attribution unknown there)."""
    work = (report.get("device") or {}).get("work")
    if work is not None:
        return _frame(work, KERNELS)
    rows = [{"op": op["name"], "kind": "kernel", "name": k["name"], "calls": k.get("calls"),
             "device_us": k.get("device_us"), "via": k.get("via"), "source": k.get("source")}
            for op in report.get("ops") or [] for k in op.get("kernels") or []]
    rows += [{"op": op["name"], "kind": c.get("kind"), "name": c["name"],
              "calls": c.get("calls"), "device_us": c.get("device_us"), "bytes": c.get("bytes")}
             for op in report.get("ops") or [] for c in op.get("copies") or []]
    return _frame(rows, KERNELS)


def op_shapes(report: Report) -> pd.DataFrame:
    """The ``r.op_shapes`` frame (module docstring): shapes parsed from torch's text."""
    rows = (report.get(S.OP_GROUPS_SECTION) or {}).get("by_shape") or []
    return _frame([{**r, "shape": _shape(r.get("shape"))} for r in rows], OP_SHAPES)


def op_sources(report: Report) -> pd.DataFrame:
    """The ``r.op_sources`` frame (module docstring)."""
    return _frame((report.get(S.OP_GROUPS_SECTION) or {}).get("by_source") or [], OP_SOURCES)


def memory(report: Report) -> pd.DataFrame:
    """The ``r.memory`` frame (module docstring): no rows without memory events."""
    points = (report.get(S.MEMORY_SECTION) or {}).get("points") or {}
    times = points.get("t_ms") or []
    reserved = points.get("reserved_mib") or [None] * len(times)
    return _frame([{"t_ms": t, "allocated_mib": a, "reserved_mib": r} for t, a, r in
                   zip(times, points.get("allocated_mib") or [], reserved)], MEMORY)


def steps(report: Report) -> pd.DataFrame:
    """The ``r.steps`` frame (module docstring); ``run`` only after ``--runs``."""
    rows = per_step_of(report)
    pooled = any("run" in row for row in rows)
    return _frame(rows, {**STEPS, **(STEPS_RUNS if pooled else {})})


def sync_points(report: Report) -> pd.DataFrame:
    """The ``r.sync_points`` frame (module docstring)."""
    return _frame(report.get("sync_points") or [], SYNC_POINTS)


def gaps(report: Report) -> pd.DataFrame:
    """The ``r.gaps`` frame (module docstring): GPU idle gaps from the torch trace, no rows
    without a device."""
    return _frame((report.get("device") or {}).get("idle_gaps") or [], GAPS)


def timeline_ops(report: Report) -> Optional[pd.DataFrame]:
    """The ``r.timeline_ops`` frame (module docstring); None without the nsys pass."""
    timeline = report.get(S.TIMELINE_SECTION)
    return _frame(timeline.get("ops") or [], TIMELINE_OPS) if timeline else None


def timeline_gaps(report: Report) -> Optional[pd.DataFrame]:
    """The ``r.timeline_gaps`` frame (module docstring); None without the nsys pass."""
    timeline = report.get(S.TIMELINE_SECTION)
    return _frame(timeline.get("idle_gaps") or [], TIMELINE_GAPS) if timeline else None


def ncu_kernels(report: Report) -> Optional[pd.DataFrame]:
    """The ``r.ncu`` frame (module docstring); None without the ncu pass."""
    ncu = report.get(S.NCU_SECTION)
    return _frame(ncu.get("kernels") or [], NCU_KERNELS) if ncu else None


def ranks(report: Report) -> Optional[pd.DataFrame]:
    """The ``r.ranks`` frame (module docstring); None on one rank."""
    rows = (report.get(S.DISTRIBUTED_SECTION) or {}).get("ranks")
    return _frame(rows, RANKS) if rows else None


def pass_ranks(report: Report, section: Literal["timeline", "ncu"]
               ) -> Optional[pd.DataFrame]:
    """One row per rank of a pass run on several ranks (``section``: "timeline" gives
    ``r.timeline_ranks``, "ncu" ``r.ncu_ranks``, module docstring; ncu's per-op numbers
    flattened to ``OP.metric`` columns); None without one."""
    rows: Optional[Sequence[Mapping[str, Any]]] = (report.get(section) or {}).get("ranks")
    if not rows:
        return None
    columns = dict(TIMELINE_RANKS if section == S.TIMELINE_SECTION else NCU_RANKS)
    flat = []
    for row in rows:
        out = {k: v for k, v in row.items() if k not in ("ops", "files", "attribution")}
        for op, numbers in (row.get("ops") or {}).items():
            for k, v in numbers.items():
                out[f"{op}.{k}"] = v
                columns.setdefault(f"{op}.{k}", NCU_RANK_OP.get(k, ""))
        columns.update({k: "" for k in out if k not in columns})
        flat.append(out)
    return _frame(flat, columns)


def _frame(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, str]) -> pd.DataFrame:
    """A frame with exactly ``columns`` (name -> dtype as the docstring's tables spell it;
    "" lets pandas infer), in that order, from report rows; a key a row lacks is missing."""
    return pd.DataFrame({col: _column([row.get(col) for row in rows], dtype)
                         for col, dtype in columns.items()}, columns=list(columns))


def _column(values: list[Any], dtype: str) -> pd.Series:
    """``values`` as one column of ``dtype``: float64 with NaN for None; int64, or Int64
    when a value is missing; str as pandas' own string dtype; bool (nullable boolean when
    a value is missing); "" as pandas infers it. A value that does not fit (a report from
    another version) leaves the column as Python objects rather than failing the load."""
    raw = pd.Series(values, dtype=object)
    missing = bool(raw.isna().any())
    try:
        if dtype == "float64":
            return raw.astype("float64")
        if dtype in ("int64", "Int64"):
            return raw.astype("Int64" if missing else "int64")
        if dtype == "bool":
            return raw.astype("boolean" if missing else "bool")
        if dtype == "str":
            text = pd.Series(["x"]).dtype    # pandas' string dtype: str (pandas 3), or object
            return raw.astype(text) if text != object else raw.where(~raw.isna(), np.nan)
        if dtype == "" and values:
            return pd.Series(values)
        return raw
    except (TypeError, ValueError, OverflowError):
        return raw


def summary_html(report: Report, run_dir: str, top: int = 10) -> str:
    """A notebook cell's view: status, error, verdict, evidence and the top ops (every
    string escaped, control characters shown as escapes)."""
    e = lambda s: html.escape(terminal(s))  # noqa: E731
    parts = [f"<div><b>nsbridge {e(report.get('command'))}</b>: <code>{e(report.get('target'))}"
             f"</code> [{e(report.get('status'))}] in <code>{e(run_dir)}</code>"]
    parts += [f"<p>{e(line)}</p>" for line in trouble_lines(report)]
    verdict = shown_verdict(report)
    if verdict:
        parts.append(f"<p>{e(verdict_title(report))}: <b>{e(verdict['label'])}</b></p><ul>"
                     + "".join(f"<li>{e(x)}</li>" for x in verdict.get("evidence") or []) + "</ul>")
    table = ops(report).head(top)
    if not table.empty:
        table = table.assign(name=table["name"].map(terminal))
        cols = [c for c in (S.NAME, S.CALLS, S.CPU_SELF_US, S.DEVICE_SELF_US, S.SELF_PCT)
                if c in table]
        parts.append(table[cols].to_html(index=False, escape=True, na_rep="-"))
    return "".join(parts) + "</div>"
