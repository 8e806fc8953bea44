"""merged.json.gz: the torch trace with nsbridge's findings, checked on a real H200 trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from nsbridge.api import analyze
from nsbridge.parse.torch_trace import read_trace
from nsbridge.report.merged_trace import PID, TRACKS

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


def test_merged_trace_io_takes_what_the_reader_takes(tmp_path: Path) -> None:
    """read_json_trace decodes with msgspec and falls back to the stdlib for what msgspec
    refuses (a BOM, NaN, bytes that are not UTF-8); write_json_gz encodes with msgspec and
    falls back for a lone surrogate. Either way the file is JSON that json.loads reads."""
    from nsbridge.pipeline import read_json_trace, write_json_gz

    doc = {"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1.5, "dur": 2,
                            "args": {"External id": 7}}], "x": 10 ** 20}
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(doc))
    assert read_json_trace(plain) == doc
    odd = tmp_path / "odd.json"
    odd.write_bytes(b"\xef\xbb\xbf" + b'{"traceEvents": [], "v": NaN, "s": "a\xffb"}')
    read = read_json_trace(odd)
    assert read["v"] != read["v"] and read["s"] == "a\ufffdb"
    out = tmp_path / "out.json.gz"
    write_json_gz(out, {**doc, "nan": float("nan")})
    assert json.loads(gzip.open(out).read()) == {**doc, "nan": None}
    write_json_gz(out, {"name": "lone \udc80 surrogate"})
    assert json.loads(gzip.open(out).read())["name"].startswith("lone ")


def test_merging_leaves_the_decoded_trace_as_it_was() -> None:
    """readable_events hands back the input's own dicts when nothing needs repair, so
    merge_trace must replace an event it annotates, never change it in place."""
    import copy

    from nsbridge.pipeline import read_json_trace
    from nsbridge.report.merged_trace import merge_trace

    trace = read_json_trace(TORCH_DATA / "h200" / "sync_bound_h200.json.gz")
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
