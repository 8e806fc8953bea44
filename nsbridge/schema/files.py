"""The names of the files in a run directory, as every writer and reader spells them.

Written by nsbridge itself (pipeline.save): REPORT_JSON, MANIFEST_JSON, REPORT_MD,
REPORT_HTML, OPS_CSV, RANKS_CSV (a job's), MERGED_TRACE; by `nsbridge gate` in its folder (which holds one run
directory per process): GATE_JSON, GATE_MD. Written by the profiled process (_bootstrap): the
record of each pass's child (CHILD_JSON for torch.profiler, NVTX_CHILD_JSON under nsys,
NCU_CHILD_JSON under ncu), read from its config (CHILD_CONFIG, ...); the torch trace
(TRACE_JSON_GZ, ``trace_name``), its key_averages table (KEY_AVERAGES) and, in each rank's
folder of a job, SUMMARY_JSON. (Its exit codes are in schema.exit_codes.)
"""

from __future__ import annotations

from typing import Union

REPORT_JSON = "report.json"
MANIFEST_JSON = "manifest.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
OPS_CSV = "ops.csv"
RANKS_CSV = "ranks.csv"
MERGED_TRACE = "merged.json.gz"
GATE_JSON = "gate.json"                   # `nsbridge gate`'s answer, in its folder
GATE_MD = "gate.md"

CHILD_JSON = "child.json"                 # the torch.profiler pass's child
NVTX_CHILD_JSON = "nvtx-child.json"       # the child under nsys (NVTX ranges)
NCU_CHILD_JSON = "ncu-child.json"         # the child under ncu
CHILD_CONFIG = "child-config.json"
NVTX_CHILD_CONFIG = "nvtx-child-config.json"
NCU_CHILD_CONFIG = "ncu-child-config.json"
SUMMARY_JSON = "summary.json"             # a rank's summary, in its rank folder
TRACE_JSON_GZ = "trace.json.gz"
KEY_AVERAGES = "key_averages.txt"
# torch's own snapshot of the recording's memory (torch.cuda._memory_viz._profile_to_snapshot:
# torch's memory categories), written with the memory profile's stacks, shapes and memory on
MEMORY_SNAPSHOT = "memory-snapshot.pickle"
# the CUDA caching allocator's snapshots on a GPU run (_bootstrap.allocator): at an
# out-of-memory, and at the end of a run that recorded its history (the memory profile)
OOM_SNAPSHOT = "oom-snapshot.pickle"
ALLOCATOR_SNAPSHOT = "allocator-snapshot.pickle"
# which of them a report reads, the first found
SNAPSHOTS_READ = (OOM_SNAPSHOT, ALLOCATOR_SNAPSHOT, MEMORY_SNAPSHOT)
PROFILER_NOISE_LOG = "profiler-noise.log"   # the profiler's known noise from the child's stderr
PROFILER_DOING = "profiler-doing.txt"   # what the child's profiler is doing while it does it

# files nsbridge writes that are JSON but no trace (analyze skips them in a folder)
NOT_TRACES = frozenset({REPORT_JSON, MANIFEST_JSON, CHILD_JSON, CHILD_CONFIG, NVTX_CHILD_JSON,
                        NCU_CHILD_JSON, NVTX_CHILD_CONFIG, NCU_CHILD_CONFIG, SUMMARY_JSON,
                        MERGED_TRACE, GATE_JSON})


def trace_name(n: int) -> str:
    """The torch trace of the profiler's ``n``-th window (1: TRACE_JSON_GZ)."""
    return TRACE_JSON_GZ if n == 1 else f"trace.{n}.json.gz"


def child_config_rank(rank: Union[int, str]) -> str:
    """The child's config of rank ``rank`` when nsbridge starts the ranks itself."""
    return f"child-config-rank-{rank}.json"
