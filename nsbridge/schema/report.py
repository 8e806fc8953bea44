"""report.json's top-level keys and section names (documented in docs/reference/report-json.md;
its typed shape and skeleton are nsbridge.contract.report's). The section names are
``Final`` so that the type checker takes ``report[S.TIMELINE_SECTION]`` as the literal key.
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION = 1

# the top-level keys, in the order report.json lists them
REPORT_KEYS = ("schema_version", "nsbridge_version", "command", "target", "status", "error",
               "verdict", "ranked_by", "window", "ops", "steps", "device", "sync_points",
               "recommendations", "collectives", "overhead", "machine", "environment",
               "files", "notes", "sources")
# the keys other passes add as their own sections (any key not in REPORT_KEYS is one):
# nsys "timeline", ncu "ncu", the ranks of a job "distributed"; "tensor_cores" (the count
# of each Tensor Core mark; each matmul/conv/attention op's own is its ops[].tensor_cores)
TIMELINE_SECTION: Final = "timeline"
NCU_SECTION: Final = "ncu"
DISTRIBUTED_SECTION: Final = "distributed"
TENSOR_CORES_SECTION: Final = "tensor_cores"
MEMORY_SECTION: Final = "memory"   # model.device.memory.memory_over_window: the curve and its peak
SNAPSHOT_SECTION: Final = "memory_snapshot"   # model.device.snapshot_memory: an allocator snapshot
OP_GROUPS_SECTION: Final = "op_groups"   # model.host.op_groups: ops by input shape and source line
# the keys whose values every pass adds to rather than replaces
ACCUMULATED_KEYS = ("notes", "files", "sources")

# report["status"] (and the manifest's): "running" until a pass says how it went
RUNNING, OK, FAILED = "running", "ok", "failed"

