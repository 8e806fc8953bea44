"""Column names of nsbridge's frames and of ops[] (see the package docstring)."""

from __future__ import annotations

from typing import Final

# EVENTS
CAT: Final = "cat"
NAME: Final = "name"
PH: Final = "ph"
PID: Final = "pid"
TID: Final = "tid"
TS: Final = "ts"
DUR: Final = "dur"
EXT_ID, CORRELATION, INPUT_DIMS, INPUT_TYPES, BYTES, DEVICE = (
    "ext_id", "correlation", "input_dims", "input_types", "bytes", "device")
INPUT_STRIDES: Final = "input_strides"
KERNEL_FILE: Final = "kernel_file"
TOTAL_ALLOCATED: Final = "total_allocated"
TOTAL_RESERVED: Final = "total_reserved"
ADDR: Final = "addr"
LAUNCH: Final = "launch"
EVENT_COLUMNS = [CAT, NAME, PH, PID, TID, TS, DUR, EXT_ID, CORRELATION, INPUT_DIMS,
                 INPUT_TYPES, INPUT_STRIDES, BYTES, DEVICE, KERNEL_FILE, TOTAL_ALLOCATED, TOTAL_RESERVED, ADDR, LAUNCH]

# Categories (after folding)
CPU_OP: Final = "cpu_op"
USER_ANNOTATION: Final = "user_annotation"
PYTHON_FUNCTION: Final = "python_function"
KERNEL: Final = "kernel"
MEMCPY: Final = "gpu_memcpy"
MEMSET: Final = "gpu_memset"
CUDA_RUNTIME: Final = "cuda_runtime"
CUDA_DRIVER: Final = "cuda_driver"
MEMORY: Final = "cpu_instant_event"
HOST_OP_CATS = (CPU_OP, USER_ANNOTATION)
GPU_CATS = (KERNEL, MEMCPY, MEMSET)
LAUNCH_CATS = (CUDA_RUNTIME, CUDA_DRIVER)
PROFILER_STEP_PREFIX: Final = "ProfilerStep#"
CLOSURE_PREFIX: Final = "closure#"   # the range nsbridge puts around a closure given to optimizer.step
# how a kernel was launched (device.work[].via): by a CUDA graph replay
CUDA_GRAPH: Final = "cuda_graph"
# torch.compile's generated kernels are named triton_...
TRITON_PREFIX: Final = "triton"

# NVTX ranges nsbridge emits (timeline pass): ops "aten::addmm", modules "model.fc",
# backward module ranges "model.fc [backward]", steps "step N"
NVTX_DOMAIN: Final = "nsbridge"
NVTX_BACKWARD_SUFFIX: Final = " [backward]"
NVTX_STEP_PREFIX: Final = "step "

# Ranges nsbridge records in torch.profiler traces (user annotations)
NSBRIDGE_RANGE_PREFIX: Final = "nsbridge::"
OWN_SYNC_RANGE: Final = "nsbridge::own_sync"
SPEED_PROBE_RANGE: Final = "nsbridge::speed_probe"   # the reference workload (_bootstrap.speed_probe)
# around each torch.autograd.backward call (loss.backward()): the engine's final callbacks
# (DDP's and FSDP's wait for the gradients' collectives) run in it (_bootstrap.steps)
BACKWARD_RANGE: Final = "nsbridge::backward"
SYNC_SITE_PREFIX: Final = "nsbridge::sync_site "   # + "KIND DEVICE FILE:LINE"

# OPS (the torch.profiler pass's columns of ops[]; NAME is the op's name)
CALLS: Final = "calls"
CPU_SELF_US: Final = "cpu_self_us"
CPU_TOTAL_US: Final = "cpu_total_us"
DEVICE_SELF_US: Final = "device_self_us"
DEVICE_TOTAL_US: Final = "device_total_us"
MEM_MIB: Final = "mem_mib"
MEM_NET_MIB: Final = "mem_net_mib"
SELF_PCT: Final = "self_pct"
SHAPES: Final = "shapes"
KERNELS: Final = "kernels"
COPIES: Final = "copies"
PER_STEP_US: Final = "per_step_us"
SHAPE_WORK: Final = "shape_work"
SPREAD_PCT: Final = "spread_pct"   # added by report.document.build: half the 95% interval of per_step_us
OP_COLUMNS = [NAME, CALLS, CPU_SELF_US, CPU_TOTAL_US, DEVICE_SELF_US, DEVICE_TOTAL_US,
              MEM_MIB, MEM_NET_MIB, SELF_PCT, SHAPES, KERNELS, COPIES, PER_STEP_US,
              SHAPE_WORK]
# the OPS columns that add up when traces (ranks, or runs of one script) are combined
OP_SUMMED_COLUMNS = [CALLS, CPU_SELF_US, CPU_TOTAL_US, DEVICE_SELF_US, DEVICE_TOTAL_US,
                     MEM_MIB, MEM_NET_MIB]
# the list-valued OPS columns (an op only another pass saw gets [] there, not None)
OP_LIST_COLUMNS = [SHAPES, KERNELS, COPIES, SHAPE_WORK]
# what ops[] is ranked by (report["ranked_by"]): device time with a device, else CPU time
RANKED_BY_DEVICE: Final = DEVICE_SELF_US
RANKED_BY_HOST: Final = CPU_SELF_US

# Per-pass columns of ops[]: every other pass's per-op numbers sit under its own key
NSYS_KEY: Final = "nsys"
NCU_KEY: Final = "ncu"
OP_PASS_KEYS = (NSYS_KEY, NCU_KEY)

# A byte count at or beyond 2**53 (8 PiB) is not a size: every reader takes it as unknown,
# so that sums of sizes stay finite
SIZE_LIMIT_BYTES = 2 ** 53
