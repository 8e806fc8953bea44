"""merged.json.gz: the run's torch trace with nsbridge's findings on it, for ui.perfetto.dev.

- op slices (``cpu_op``) carry each pass's numbers for their op as args
  (``nsbridge.nsys``, ``nsbridge.ncu``, ``nsbridge.KEY`` for any pass: the fields its view
  names, else every scalar), and so do the kernels they launched (found by External id,
  so traces with the newer linking);
- a process "nsbridge findings" (pid 2000000000) holds three tracks: the verdict with its evidence (an
  instant at the window's start), the longest GPU idle gaps (slices, with the host op),
  and every blocking sync call in the window (instants);
- the runtime's blocking calls themselves get ``nsbridge.sync`` args.
Pure: ``merge_trace`` takes a decoded trace (an object or Chrome's bare array) and gives a
trace dict; ``merged_trace_json`` takes the trace file's JSON bytes and gives the merged
file's. Events are read by the trace reader's rules (parse._event_columns.readable_events):
an event the analysis skipped is left out here too.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ... import schema as S
from ...model.host.syncs import BLOCKING_CALL
from ...parse._event_columns import fields_as_read, readable_event, readable_events
from ...parse._quotes import repair_quotes
from ..views import catalog
from ...contract.report import Report

PID = 2_000_000_000          # a pid no real process has: nsbridge's own tracks
TRACKS = {"verdict": 1, "GPU idle gaps": 2, "sync points": 3}
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")   # their blocking calls get marks
_PER_OP_CATS = ("cpu_op", "kernel")               # they get the op's nsys and ncu numbers


def merge_trace(trace: Any, report: Report) -> dict[str, Any]:
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
        elif cat in _RUNTIME_CATS and event["ph"] == "X" and BLOCKING_CALL.match(
                str(event.get("name", ""))) and lo is not None and lo <= event["ts"] < hi:
            events[at] = {**event, "args": {**args, "nsbridge.sync": "blocking call: the host "
                                            "waits for the device here (report: sync_points)"}}
            added.append({"ph": "i", "s": "t", "pid": PID, "tid": TRACKS["sync points"],
                          "name": f"sync: {event['name']}", "ts": event["ts"]})
    added += _findings_tracks(report, lo)
    return {**(trace if isinstance(trace, dict) else {}), "traceEvents": events + added}


def merged_trace_json(data: bytes, report: Report) -> bytes:
    """``merge_trace`` from JSON bytes to JSON bytes. An event ``merge_trace`` would hand
    back as it is keeps its own bytes: only the events it may change or reads to place its
    marks (every one the reader repairs, the blocking runtime calls, the step annotations,
    and the ops and kernels when the report has per-op numbers to attach) are decoded and
    merged: 0.15 s for a 100k-event trace, where decoding every event took 0.4 s. A file
    msgspec does not take (NaN, a BOM, bytes that are not UTF-8, a bare array) is decoded
    whole by the stdlib's rules and merged as it is. torch's bare double quotes in names
    and paths are escaped first, as the trace reader escapes them (parse._quotes)."""
    try:
        return _merged_by_splice(data, report)
    except (msgspec.DecodeError, UnicodeError, TypeError, OverflowError):
        pass
    repaired = repair_quotes(data)
    if repaired != data:
        try:
            return _merged_by_splice(repaired, report)
        except (msgspec.DecodeError, UnicodeError, TypeError, OverflowError):
            pass
    return _encode(merge_trace(_decode(repaired), report))


class _EventView(msgspec.Struct, gc=False):
    """The fields that decide whether merge_trace may change an event; ``args`` kept raw."""
    ph: Any = None
    name: Any = ""
    cat: Any = ""
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw()




def _merged_by_splice(data: bytes, report: Report) -> bytes:
    """The top-level keys and the events as raw JSON, the events merge_trace reads decoded
    and merged, the rest spliced back as they were, in their order.

    Raises:
        msgspec.DecodeError: a file msgspec does not take, or one that is not an object.
        UnicodeDecodeError: bytes that are not UTF-8 (msgspec passes them in raw JSON).
    """
    if not data.isascii():
        data.decode("utf-8")
    top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    listed = top.get("traceEvents", msgspec.Raw(b"[]"))
    events: list[Any] = msgspec.json.decode(listed, type=list[msgspec.Raw])
    views = msgspec.json.decode(listed, type=list[_EventView])
    per_op = bool(_op_facts(report))
    read = {at: readable_event(msgspec.json.decode(events[at]))
            for at, view in enumerate(views) if _merge_reads(view, per_op)}
    kept = [at for at, event in read.items() if event is not None]
    merged = merge_trace({"traceEvents": [read[at] for at in kept]}, report)["traceEvents"]
    for at, event in zip(kept, merged):
        events[at] = event
    if len(kept) < len(read):   # events the reader skips are left out
        events = [e for at, e in enumerate(events) if at not in read or read[at] is not None]
    return msgspec.json.encode({**top, "traceEvents": events + merged[len(kept):]})


def _merge_reads(view: _EventView, per_op: bool) -> bool:
    """Whether merge_trace may change or read this event: one the reader repairs or skips,
    a blocking runtime call, a step annotation, or an op or kernel when there are per-op
    numbers to attach. Any other event merge_trace hands back as it is."""
    cat, name, ph = view.cat, view.name, view.ph
    if type(name) is str and (
            (cat in _RUNTIME_CATS and BLOCKING_CALL.match(name))
            or (cat == "user_annotation" and name.startswith("ProfilerStep#"))):
        return True
    if per_op and cat in _PER_OP_CATS:
        return True
    args = bytes(view.args)
    return type(ph) is not str or not fields_as_read(ph, name, cat, view.ts, view.dur,
                                                     not args or args[:1] == b"{")


def _decode(data: bytes) -> Any:
    """A trace file's JSON as the trace reader takes it (a BOM allowed, a byte that is not
    UTF-8 replaced, NaN read as the stdlib reads it): msgspec for a well-formed file,
    three times faster than the stdlib, which takes the rest."""
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return json.loads(data.decode("utf-8-sig", errors="replace"))


def _encode(doc: Any) -> bytes:
    """``doc`` as JSON in one msgspec call (NaN written as null, which Perfetto reads); a
    string Python holds but UTF-8 cannot (a lone surrogate) goes through the stdlib's
    ASCII encoder."""
    try:
        return msgspec.json.encode(doc)
    except (UnicodeEncodeError, TypeError, OverflowError):
        return json.dumps(doc).encode("ascii")


def _external_id(event: dict[str, Any]) -> Any:
    """The event's External id when it is a number or a string (a key that can be looked
    up), else None."""
    ext = (event.get("args") or {}).get("External id")
    return ext if isinstance(ext, (int, float, str)) and not isinstance(ext, bool) else None


def _op_facts(report: Report) -> dict[str, dict[str, Any]]:
    """Per op name, each pass's numbers (its ops[] key's scalars, or those its view names)."""
    views = catalog.views_by_op_key()
    facts: dict[str, dict[str, Any]] = {}
    for op in report.get("ops", []):
        for key, values in op.items():
            if key in S.OP_COLUMNS or not isinstance(values, dict) or not values:
                continue
            view = views.get(key)
            fields = view.trace_fields if view and view.trace_fields else tuple(values)
            kept = {f: values[f] for f in fields if values.get(f) is not None
                    and not isinstance(values[f], (list, dict))}
            if kept:
                facts.setdefault(op["name"], {})[f"nsbridge.{key}"] = kept
        findings = (op.get("ncu") or {}).get("findings")
        if findings:
            facts.setdefault(op["name"], {})["nsbridge.ncu_findings"] = "; ".join(
                f"{f['title']}: {f['detail']}" for f in findings)
    return facts


def _findings_tracks(report: Report, lo: Any) -> list[dict[str, Any]]:
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
                    "args": {"evidence": verdict.get("evidence") or [],
                             "recommendations": [r.get("title") for r in (report.get(
                                 "recommendations") or [])[:3]]}})
    for gap in (report.get("device") or {}).get("idle_gaps") or []:
        out.append({"ph": "X", "pid": PID, "tid": TRACKS["GPU idle gaps"],
                    "ts": lo + gap["start_us"],
                    "dur": gap["dur_us"], "name": f"GPU {gap['device']} idle",
                    "args": {"host_op": gap["host_op"] or "Python between ops",
                             "host_top_op": gap["host_top_op"]}})
    return out
