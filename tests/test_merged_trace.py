"""merged.json.gz: the torch trace with nsbridge's findings, checked on a real H200 trace."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from nsbridge.api import analyze
from nsbridge.parse.torch_trace import read_trace
from nsbridge.report.render.merged_trace import PID, TRACKS, merge_trace, merged_trace_json

from conftest import DATA, TORCH_DATA

H200 = TORCH_DATA / "h200" / "train_cnn_h200.json.gz"


def test_ops_and_their_kernels_carry_nsys_and_ncu_numbers(tmp_path: Path) -> None:
    result = analyze([H200, DATA / "ncu" / "train_cnn_nvtx_sections.raw.csv"], out=tmp_path / "r")
    assert result.report["files"]["merged_trace"] == "merged.json.gz"
    merged = json.loads(gzip.open(tmp_path / "r" / "merged.json.gz").read())["traceEvents"]
    original = json.loads(gzip.open(H200).read())["traceEvents"]
    ours = [e for e in merged if e.get("pid") == PID]
    assert len(merged) == len(original) + len(ours)          # nothing of the trace lost
    addmm = [e for e in merged if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm"]
    assert addmm and all(e["args"]["nsbridge.ncu"]["launches"] == 4 for e in addmm)
    ext = {e["args"]["External id"] for e in addmm}
    kernels = [e for e in merged if e.get("cat") == "kernel"
               and e.get("args", {}).get("External id") in ext]
    assert kernels and all("nsbridge.ncu" in e["args"] for e in kernels)
    gaps = [e for e in ours if e.get("tid") == TRACKS["GPU idle gaps"] and e["ph"] == "X"]
    assert len(gaps) == len(result.report["device"]["idle_gaps"])
    verdict = next(e for e in ours if e.get("tid") == TRACKS["verdict"] and e["ph"] == "i")
    assert verdict["name"] == "verdict: cpu-bound" and verdict["args"]["evidence"]


def test_sync_calls_are_marked_and_the_file_reads_back(tmp_path: Path) -> None:
    sync = TORCH_DATA / "h200" / "sync_bound_h200.json.gz"
    result = analyze([sync], out=tmp_path / "r")
    merged = tmp_path / "r" / "merged.json.gz"
    events = json.loads(gzip.open(merged).read())["traceEvents"]
    marks = [e for e in events if e.get("tid") == TRACKS["sync points"] and e["ph"] == "i"]
    blocking = sum(p["count"] for p in result.report["sync_points"])
    assert len(marks) == blocking == 388
    assert read_trace(merged).events["name"].str.startswith("sync: ").sum() == 388


def test_a_file_msgspec_refuses_is_merged_by_the_stdlibs_rules() -> None:
    """A BOM, NaN, bytes that are not UTF-8 (in an event the splice would keep as it is
    too), a lone surrogate, Chrome's bare array: the merged file is still JSON that
    json.loads reads, with the events the reader reads."""
    odd = b'\xef\xbb\xbf{"traceEvents": [], "v": NaN, "s": "a\xffb", "x": 10}'
    merged = json.loads(merged_trace_json(odd, {}))
    assert merged == {"traceEvents": [], "v": None, "s": "a\ufffdb", "x": 10}
    lone = b'{"traceEvents": [], "name": "lone \\udc80 surrogate"}'
    assert json.loads(merged_trace_json(lone, {}))["name"] == "lone \udc80 surrogate"
    in_args = b'{"traceEvents": [{"ph": "M", "name": "x", "args": {"s": "a\xffb"}}]}'
    assert json.loads(merged_trace_json(in_args, {}))["traceEvents"][0]["args"]["s"] == "a\ufffdb"
    bare = b'[{"ph": "X", "name": "aten::mm", "ts": 1.5, "dur": 2.0}, 7, {"ts": 1}]'
    assert json.loads(merged_trace_json(bare, {})) == {
        "traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1.5, "dur": 2.0}]}


ODD_EVENTS = [   # each needs the reader's repair, or is skipped by it
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": -1,
     "args": None},
    {"ph": "X", "cat": "cpu_op", "name": 7, "pid": 1, "tid": 1, "ts": "6.5", "dur": 0.0},
    {"ph": "i", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": "later"},
    {"cat": "cpu_op", "name": "no phase", "ts": 1.0},
    {"ph": 3, "name": "a phase that is not a string"},
    {"ph": "M", "name": "process_name", "args": {"name": "kept as it is"}},
]


@pytest.mark.parametrize("fixture", ["sync_bound_h200.json.gz", "train_cnn_h200.json.gz"])
@pytest.mark.parametrize("per_op", [False, True])
def test_splicing_equals_merging_every_decoded_event(fixture: str, per_op: bool,
                                                    tmp_path: Path) -> None:
    """merged_trace_json decodes only the events merge_trace may change or read; its file
    decodes to what merge_trace gives on the whole decoded trace, on real traces with odd
    events added, with and without per-op numbers to attach. An event it does not decode
    keeps its own bytes (a number written 1.50 stays so)."""
    doc = json.loads(gzip.open(TORCH_DATA / "h200" / fixture).read())
    doc["traceEvents"] += copy.deepcopy(ODD_EVENTS)
    text = json.dumps(doc).encode()
    text = text.replace(b'"name": "kept as it is"}', b'"name": "kept as it is", "w": 1.50}')
    doc["traceEvents"][-1]["args"]["w"] = 1.5
    report = analyze([TORCH_DATA / "h200" / fixture], out=tmp_path / "r").report
    if per_op:
        report = {**report, "ops": [{**op, "nsys": {"kernels": 3, "kernel_us": 2.5}}
                                    for op in report["ops"]]}
    spliced = merged_trace_json(text, report)
    expected = json.loads(json.dumps(merge_trace(doc, report)))
    assert json.loads(spliced) == expected
    assert b'"w": 1.50}' in spliced
    marked = [e for e in expected["traceEvents"] if "nsbridge.sync" in e.get("args", {})]
    assert marked or fixture != "sync_bound_h200.json.gz"
    assert any("nsbridge.nsys" in e.get("args", {}) for e in expected["traceEvents"]) == per_op


def test_merging_leaves_the_decoded_trace_as_it_was() -> None:
    """readable_events hands back the input's own dicts when nothing needs repair, so
    merge_trace must replace an event it annotates, never change it in place."""
    trace = json.loads(gzip.open(TORCH_DATA / "h200" / "sync_bound_h200.json.gz").read())
    trace["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                                 "tid": 1, "ts": 5, "dur": -1, "args": None})   # repaired
    before = copy.deepcopy(trace)
    report = {"ops": [{"name": "aten::mm", "nsys": {"kernels": 3}}],
              "verdict": {"label": "sync-bound", "evidence": ["x"]}, "device": {}}
    merged = merge_trace(trace, report)["traceEvents"]
    assert trace == before
    annotated = [e for e in merged if e.get("name") == "aten::mm" and e.get("cat") == "cpu_op"]
    assert annotated and all(e["args"]["nsbridge.nsys"] == {"kernels": 3} for e in annotated)
    repaired = annotated[-1]
    assert repaired["ts"] == 5.0 and isinstance(repaired["ts"], float) and repaired["dur"] == 0.0
    assert sum(1 for e in merged if "nsbridge.sync" in (e.get("args") or {})) > 0


def test_an_op_with_ncu_findings_but_no_numbers_keeps_its_findings() -> None:
    """Regression: findings of an op whose ncu numbers were all missing raised KeyError."""
    trace = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,
                              "ts": 0, "dur": 5, "args": {"External id": 7}}]}
    report = {"ops": [{"name": "a", "ncu": {"sm_pct": None, "findings": [
        {"title": "t", "detail": "d"}]}}]}
    slice_ = merge_trace(trace, report)["traceEvents"][0]
    assert slice_["args"]["nsbridge.ncu_findings"] == "t: d"
