"""merged.json.gz: the run's torch trace with nsbridge's findings on it, for ui.perfetto.dev.

- op slices (``cpu_op``) carry their op's nsys and ncu numbers as args
  (``nsbridge.nsys``, ``nsbridge.ncu``), and so do the kernels they launched (found by
  External id, so traces with the newer linking);
- a process "nsbridge findings" (pid 2000000000) holds three tracks: the verdict with its evidence (an
  instant at the window's start), the longest GPU idle gaps (slices, with the host op),
  and every blocking sync call in the window (instants);
- the runtime's blocking calls themselves get ``nsbridge.sync`` args.
Pure: a decoded trace in (an object or Chrome's bare array), a trace dict out. Its events
are read by the trace reader's rules (parse._event_columns.readable_events): an event the
analysis skipped is left out here too.
"""

from __future__ import annotations

from typing import Any

from .. import schema as S
from ..model.syncs import BLOCKING_CALL
from ..parse._event_columns import readable_events

PID = 2_000_000_000          # a pid no real process has: nsbridge's own tracks
TRACKS = {"verdict": 1, "GPU idle gaps": 2, "sync points": 3}
_OP_FIELDS = {S.NSYS_KEY: ("kernels", "kernel_us", "copies", "copy_us", "launch_latency_us",
                       "idle_before_us", "sync_us"),
              S.NCU_KEY: ("launches", "duration_ns", "sm_pct", "memory_pct",
                      "achieved_occupancy_pct", "tensor_pct", "tensor_path", "l2_hit_pct",
                      "bound", "occupancy_limiter")}


def merge_trace(trace: Any, report: dict[str, Any]) -> dict[str, Any]:
    """The trace with the report's findings attached (the input is not changed)."""
    events = readable_events(trace)
    facts = _op_facts(report)
    ext_to_op: dict[Any, Any] = {}
    for event in events:
        if event.get("cat") == "cpu_op":
            ext = _external_id(event)
            if ext is not None:
                ext_to_op.setdefault(ext, event.get("name"))
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
             and e["ph"] == "X" and e.get("cat") == "user_annotation"]
    lo = min((e["ts"] for e in steps), default=None)
    hi = max((e["ts"] + e["dur"] for e in steps), default=None)
    added: list[dict[str, Any]] = []
    for at, event in enumerate(events):   # events may be the input's own: replaced, not changed
        cat, args = event.get("cat"), event.get("args") or {}
        op = event.get("name") if cat == "cpu_op" else (
            ext_to_op.get(_external_id(event)) if cat == "kernel" else None)
        if op in facts:
            events[at] = {**event, "args": {**args, **facts[op]}}
        elif cat in ("cuda_runtime", "cuda_driver") and event["ph"] == "X" and BLOCKING_CALL.match(
                str(event.get("name", ""))) and lo is not None and lo <= event["ts"] < hi:
            events[at] = {**event, "args": {**args, "nsbridge.sync": "blocking call: the host "
                                            "waits for the device here (report: sync_points)"}}
            added.append({"ph": "i", "s": "t", "pid": PID, "tid": TRACKS["sync points"],
                          "name": f"sync: {event['name']}", "ts": event["ts"]})
    added += _findings_tracks(report, lo)
    return {**(trace if isinstance(trace, dict) else {}), "traceEvents": events + added}


def _external_id(event: dict[str, Any]) -> Any:
    """The event's External id when it is a number or a string (a key that can be looked
    up), else None."""
    ext = (event.get("args") or {}).get("External id")
    return ext if isinstance(ext, (int, float, str)) and not isinstance(ext, bool) else None


def _op_facts(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    facts: dict[str, dict[str, Any]] = {}
    for op in report.get("ops", []):
        for key, fields in _OP_FIELDS.items():
            if op.get(key):
                facts.setdefault(op["name"], {})[f"nsbridge.{key}"] = {
                    f: op[key].get(f) for f in fields if op[key].get(f) is not None}
        findings = (op.get("ncu") or {}).get("findings")
        if findings:
            facts[op["name"]]["nsbridge.ncu_findings"] = "; ".join(
                f"{f['title']}: {f['detail']}" for f in findings)
    return facts


def _findings_tracks(report: dict[str, Any], lo: Any) -> list[dict[str, Any]]:
    if lo is None:
        return []
    out = [{"ph": "M", "name": "process_name", "pid": PID,
            "args": {"name": "nsbridge findings"}}]
    for name, tid in TRACKS.items():
        out.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid,
                    "args": {"name": name}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid,
                    "args": {"sort_index": tid}})
    verdict = report.get("verdict")
    if verdict:
        out.append({"ph": "i", "s": "p", "pid": PID, "tid": TRACKS["verdict"], "ts": lo,
                    "name": f"verdict: {verdict['label']}",
                    "args": {"evidence": verdict["evidence"],
                             "recommendations": [r["title"] for r in report.get(
                                 "recommendations", [])[:3]]}})
    for gap in (report.get("device") or {}).get("idle_gaps", []):
        out.append({"ph": "X", "pid": PID, "tid": TRACKS["GPU idle gaps"],
                    "ts": lo + gap["start_us"],
                    "dur": gap["dur_us"], "name": f"GPU {gap['device']} idle",
                    "args": {"host_op": gap["host_op"] or "Python between ops",
                             "host_top_op": gap["host_top_op"]}})
    return out
