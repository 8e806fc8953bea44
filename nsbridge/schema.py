"""Column names of nsbridge's frames: the one place they are spelled.

EVENTS (parse.torch_trace.read_trace), one row per complete ('X') or instant ('i') event:

    cat          str    category, lower-case, Kineto aliases folded (Runtime -> cuda_runtime)
    name         str    event name (op, kernel, runtime call, annotation)
    ph           str    'X' complete event, 'i' instant event (memory)
    pid, tid     str    process/thread for host events; device/stream for GPU events
    ts, dur      float  microseconds (dur 0 for instants); ts as written in the trace
    ext_id       float  args "External id" (NaN when absent)
    correlation  float  args "correlation" (NaN when absent)
    input_dims   object args "Input Dims" as text (None when shapes were not recorded)
    input_types  object args "Input type" as text, e.g. '["float"]' (None when absent)
    bytes        float  memcpy/memset bytes, or allocation size of a memory event
    device       float  GPU index of a GPU event / memory event (NaN otherwise)

OPS (model.ops.op_table), one row per op name, the report's hot-op table:

    name, calls, cpu_self_us, cpu_total_us, device_self_us, device_total_us, mem_mib,
    mem_net_mib, self_pct, shapes, kernels, copies, per_step_us (the ranking time in each
    measured step: what `diff` measures noise with), shape_work (per input shape, up to
    five: calls and ranking time; what `diff` prices added work with)

Ranges nsbridge itself records in the traces it writes (``nsbridge::`` names) are never
ops: ``nsbridge::own_sync`` wraps the synchronize that closes a measured window, and
``nsbridge::sync_site KIND DEVICE FILE:LINE`` wraps a script's sync call (``.item()``,
``.cpu()``, ...) with the line that made it.
"""

from __future__ import annotations

# EVENTS
CAT, NAME, PH, PID, TID, TS, DUR = "cat", "name", "ph", "pid", "tid", "ts", "dur"
EXT_ID, CORRELATION, INPUT_DIMS, INPUT_TYPES, BYTES, DEVICE = (
    "ext_id", "correlation", "input_dims", "input_types", "bytes", "device")
EVENT_COLUMNS = [CAT, NAME, PH, PID, TID, TS, DUR, EXT_ID, CORRELATION, INPUT_DIMS,
                 INPUT_TYPES, BYTES, DEVICE]

# Categories (after folding)
CPU_OP, USER_ANNOTATION, PYTHON_FUNCTION = "cpu_op", "user_annotation", "python_function"
KERNEL, MEMCPY, MEMSET = "kernel", "gpu_memcpy", "gpu_memset"
CUDA_RUNTIME, CUDA_DRIVER, MEMORY = "cuda_runtime", "cuda_driver", "cpu_instant_event"
HOST_OP_CATS = (CPU_OP, USER_ANNOTATION)
GPU_CATS = (KERNEL, MEMCPY, MEMSET)
LAUNCH_CATS = (CUDA_RUNTIME, CUDA_DRIVER)
PROFILER_STEP_PREFIX = "ProfilerStep#"

# NVTX ranges nsbridge emits (timeline pass): ops "aten::addmm", modules "model.fc",
# backward module ranges "model.fc [backward]", steps "step N"
NVTX_DOMAIN = "nsbridge"
NVTX_BACKWARD_SUFFIX = " [backward]"
NVTX_STEP_PREFIX = "step "

# Ranges nsbridge records in torch.profiler traces (user annotations)
NSBRIDGE_RANGE_PREFIX = "nsbridge::"
OWN_SYNC_RANGE = "nsbridge::own_sync"
SYNC_SITE_PREFIX = "nsbridge::sync_site "   # + "KIND DEVICE FILE:LINE"

# OPS
OP_COLUMNS = ["name", "calls", "cpu_self_us", "cpu_total_us", "device_self_us",
              "device_total_us", "mem_mib", "mem_net_mib", "self_pct", "shapes", "kernels",
              "copies", "per_step_us", "shape_work"]
# the OPS columns that add up when traces (ranks, or runs of one script) are combined
OP_SUMMED_COLUMNS = ["calls", "cpu_self_us", "cpu_total_us", "device_self_us",
                     "device_total_us", "mem_mib", "mem_net_mib"]
