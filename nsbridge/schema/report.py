"""report.json's top-level keys and its one skeleton (documented in docs/reference/report-json.md).

Every report nsbridge writes starts as ``empty_report``: the run before any pass
(nsbridge.run.Run.create) and the torch.profiler pass's report (report.document.build.build_report)
alike, so both have every key, device fields null.
"""

from __future__ import annotations

from typing import Any, Optional

SCHEMA_VERSION = 1

# the top-level keys, in the order report.json lists them
REPORT_KEYS = ("schema_version", "nsbridge_version", "command", "target", "status", "error",
               "verdict", "ranked_by", "window", "ops", "steps", "device", "sync_points",
               "recommendations", "collectives", "overhead", "machine", "environment",
               "files", "notes", "sources")
# the keys other passes add as their own sections (any key not in REPORT_KEYS is one):
# nsys "timeline", ncu "ncu", the ranks of a job "distributed"; "tensor_cores" (the count
# of each Tensor Core mark; each matmul/conv/attention op's own is its ops[].tensor_cores)
TIMELINE_SECTION, NCU_SECTION, DISTRIBUTED_SECTION = "timeline", "ncu", "distributed"
TENSOR_CORES_SECTION = "tensor_cores"
MEMORY_SECTION = "memory"   # model.device.memory.memory_over_window: the curve and its peak
OP_GROUPS_SECTION = "op_groups"   # model.host.op_groups: ops by input shape and by source line
# the keys whose values every pass adds to rather than replaces
ACCUMULATED_KEYS = ("notes", "files", "sources")

# report["status"] (and the manifest's): "running" until a pass says how it went
RUNNING, OK, FAILED = "running", "ok", "failed"


def empty_report(*, command: str, target: str, version: str, status: str = RUNNING,
                 error: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A report with every key present and nothing measured: device fields null (never 0),
    lists empty, ``verdict`` null."""
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "nsbridge_version": version, "command": command,
        "target": target, "status": status, "error": error,
        "verdict": None, "ranked_by": None, "window": None, "ops": [], "steps": None,
        "device": None, "sync_points": [], "recommendations": [], "collectives": [],
        "overhead": None, "machine": None, "environment": None,
        "files": {}, "notes": [], "sources": {}}
    return report
