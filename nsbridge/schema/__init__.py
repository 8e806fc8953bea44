"""nsbridge's names, each spelled in one place: stdlib only, so the profiled process
(_bootstrap) may import it too. ``from nsbridge import schema as S`` gives all of them:

- schema.columns  column names of the frames (EVENTS, OPS) and of ops[] per pass
- schema.report   report.json's top-level keys and section names; its skeleton,
                  typed shape and check are nsbridge.contract's (msgspec)
- schema.files    the file names of a run directory
- schema.exit_codes  every exit code and its meaning (RECORD_NOT_WRITTEN, TIMEOUT,
                  INTERRUPTED and TERMINATED, the ones a pass reports, are also S.*)
- schema.shape    the small records' shapes as plain values, derived from their TypedDicts,
                  and their check (stdlib)
- schema.records  the records nsbridge writes and reads back, declared as TypedDicts, and
                  their shapes (manifest.json,
                  child.json, summary.json, the job mailbox; ``record_problem``)

Column names:

EVENTS (parse.torch_trace.read_trace), one row per complete ('X') or instant ('i') event.
The text columns (cat, name, ph, pid, tid, input_dims, input_types, input_strides,
kernel_file, launch)
are pandas Categoricals of the values read, categories sorted, NaN where a value is absent:
a trace holds a few thousand distinct names over millions of rows, and groupbys and string
tests then work on small integer codes (model.strings):

    cat          str    category, lower-case, Kineto aliases folded (Runtime -> cuda_runtime)
    name         str    event name (op, kernel, runtime call, annotation)
    ph           str    'X' complete event, 'i' instant event (memory)
    pid, tid     str    process/thread for host events; device/stream for GPU events
    ts, dur      float  microseconds (dur 0 for instants); ts as written in the trace
    ext_id       float  args "External id" (NaN when absent)
    correlation  float  args "correlation" (NaN when absent)
    input_dims   str    args "Input Dims" as text (NaN when shapes were not recorded)
    input_types  str    args "Input type" as text, e.g. '["float"]' (NaN when absent)
    input_strides str   args "Input Strides" as text, e.g. '[[256,1],[1,256]]' (NaN when absent)
    bytes        float  memcpy/memset bytes, or allocation size of a memory event
    device       float  GPU index of a GPU event / memory event (NaN otherwise)
    kernel_file  str    args "kernel_file": the generated source of a torch.compile (Triton)
                        kernel, on the cpu_op that launches it (NaN elsewhere)
    total_allocated, total_reserved
                 float  a memory event's args "Total Allocated" / "Total Reserved": the
                        allocator's bytes after it (NaN elsewhere)
    addr         float  a memory event's args "Addr": the block allocated or freed (exact:
                        addresses stay below 2**53; NaN elsewhere)
    launch       str    a kernel's launch configuration from its args "grid", "block",
                        "registers per thread", "shared memory":
                        'grid [120,1,1] block [256,1,1] regs 40 smem 0' (NaN elsewhere)

OPS (model.host.ops.op_table), one row per op name, the report's hot-op table:

    name, calls, cpu_self_us, cpu_total_us, device_self_us, device_total_us, mem_mib,
    mem_net_mib, self_pct, shapes, kernels, copies, per_step_us (the ranking time in each
    measured step: what `diff` measures noise with), shape_work (per input shape, up to
    five: calls and ranking time; what `diff` prices added work with)

Ranges nsbridge itself records in the traces it writes (``nsbridge::`` names) are never
ops: ``nsbridge::own_sync`` wraps the synchronize that closes a measured window, and
``nsbridge::sync_site KIND DEVICE FILE:LINE`` wraps a script's sync call (``.item()``,
``.cpu()``, ...) with the line that made it, and ``nsbridge::speed_probe`` the reference
workload a gate's process times at each step boundary (left out of the step's time).
"""

from __future__ import annotations

from .columns import *  # noqa: F401,F403
from .files import *  # noqa: F401,F403
from .exit_codes import INTERRUPTED, RECORD_NOT_WRITTEN, TERMINATED, TIMEOUT  # noqa: F401
from .report import *  # noqa: F401,F403
from .records import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
