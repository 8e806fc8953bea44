"""Faults: one tolerant reading of a trace. Odd events are skipped or repaired and counted
in report.notes, real variants (bare array, BOM, NaN, ProfilerStep#warmup) are read, the
merged trace reads events by the same rules, and a file with nothing usable says why."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import nsbridge
from nsbridge import schema as S
from nsbridge.errors import EmptyTraceError, TraceFormatError
from nsbridge.parse.torch_trace import read_trace

TRACE = Path(__file__).parent / "data" / "torch" / "h200" / "input_bound_h200.json.gz"
BERT = Path(__file__).parent / "data" / "torch" / "h100_bert-small_2025-07.json.gz"


def _doc() -> dict[str, Any]:
    return json.loads(gzip.open(TRACE).read())


def _write(tmp_path: Path, doc: Any, name: str = "t.json", **dumps: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, **dumps))
    return path


@pytest.mark.parametrize("streaming", [True, False])
def test_skipped_events_are_counted_in_the_report(tmp_path: Path, streaming: bool) -> None:
    doc = _doc()
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    for e in ops[:40]:
        e["ts"] = "soon"                    # not a number: skipped
    for e in ops[40:50]:
        e["ts"] = str(e["ts"])              # a number written as text: read
    for e in ops[50:53]:
        e["dur"] = -5                       # negative: counted as 0
    del ops[53]["ph"]                       # no phase: skipped
    doc["traceEvents"] += ["junk", 7, None]
    path = _write(tmp_path, doc)
    trace = read_trace(path, streaming=streaming)
    assert trace.skipped == {
        "entries of traceEvents that are not JSON objects skipped": 3,
        'events without a phase ("ph") skipped': 1,
        "events without a usable timestamp (missing, not a number, or out of range) skipped": 40,
        "complete events without a usable duration (missing, negative, not a number or out of "
        "range) counted as 0 µs": 3}
    clean = read_trace(TRACE)
    assert len(trace.events) == len(clean.events) - 41
    notes = nsbridge.analyze([path], out=tmp_path / "run").report["notes"]
    assert "t.json: 40 events without a usable timestamp (missing, not a number, or out of " \
           "range) skipped" in notes
    assert any(n.startswith("t.json: 3 complete events without a usable duration") for n in notes)


def test_a_clean_trace_has_no_skip_notes(tmp_path: Path) -> None:
    notes = nsbridge.analyze([TRACE], out=tmp_path / "run").report["notes"]
    assert not [n for n in notes if "skipped" in n or "counted as 0" in n]


def test_chromes_bare_array_form_is_read_and_merged(tmp_path: Path) -> None:
    events = _doc()["traceEvents"]
    path = _write(tmp_path, events)
    result = nsbridge.analyze([path], out=tmp_path / "run")
    assert result.ops["calls"].sum() == nsbridge.analyze(
        [TRACE], out=tmp_path / "run2").ops["calls"].sum()
    merged = json.loads(gzip.open(tmp_path / "run" / "merged.json.gz").read())
    assert len(merged["traceEvents"]) >= len([e for e in events if "ph" in e])


def test_a_bom_nan_and_warmup_steps_are_read(tmp_path: Path) -> None:
    doc = _doc()
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    steps[0]["name"] = "ProfilerStep#warmup"
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["ts"] = float("nan")
    path = tmp_path / "t.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())   # json.dumps writes NaN
    trace = read_trace(path)
    assert trace.skipped == {"events without a usable timestamp (missing, not a number, or "
                             "out of range) skipped": 1}
    names = set(trace.events.loc[trace.events[S.NAME].str.startswith("ProfilerStep#"), S.NAME])
    assert "ProfilerStep#warmup" in names
    report = nsbridge.analyze([path], out=tmp_path / "run").report
    clean = nsbridge.analyze([TRACE], out=tmp_path / "clean").report
    assert report["steps"]["count"] == clean["steps"]["count"]   # the warm-up step counts


@pytest.mark.parametrize("content, message", [
    (b"", r"is empty \(0 bytes\)"),
    (b'{"traceEvents": ["a", 1, null]}', r"holds no event nsbridge can read: 3 entries of "
                                         r"traceEvents that are not JSON objects skipped"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "x"}]}',
     r"holds no event nsbridge can read: 1 events without a usable timestamp"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}', r"ends early \(truncated\)"),
    (b'{"other": 1}', r"not a torch.profiler trace: it has no 'traceEvents' list"),
])
def test_unusable_files_say_why(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    for streaming in (True, False):
        with pytest.raises(TraceFormatError, match=message):
            read_trace(path, streaming=streaming)


def test_a_trace_without_events_is_empty_not_malformed(tmp_path: Path) -> None:
    path = _write(tmp_path, {"traceEvents": [{"ph": "M", "name": "process_name"}]})
    with pytest.raises(EmptyTraceError, match="no events"):
        read_trace(path)


def test_merged_trace_reads_events_by_the_readers_rules(tmp_path: Path) -> None:
    """Events the reader skips are left out of merged.json.gz; wrong types never crash it."""
    doc = _doc()
    odd = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"][:5]
    odd[0]["ts"] = [1, 2]
    odd[1]["args"] = ["not", "an", "object"]
    odd[2]["args"] = {"External id": [1]}
    odd[3]["name"] = {"a": 1}
    doc["traceEvents"].append(17)
    path = _write(tmp_path, doc)
    nsbridge.analyze([path], out=tmp_path / "run")
    merged = json.loads(gzip.open(tmp_path / "run" / "merged.json.gz").read())["traceEvents"]
    assert all(isinstance(e, dict) for e in merged)
    assert all(isinstance(e["ts"], float) for e in merged if e.get("ph") in ("X", "i"))
    assert all(isinstance(e.get("args", {}), dict) for e in merged)


def test_bytes_that_are_not_utf8_and_lone_surrogates_still_write_a_report(tmp_path: Path) -> None:
    doc = _doc()
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    ops[0]["name"] = "aten::odd\udcff"                       # a lone surrogate (\udcff escape)
    raw = json.dumps(doc).replace('"aten::mm"', '"aten::mm\\udcfe"', 1).encode()
    raw = raw.replace(b'"aten::add_"', b'"aten::add_\xff"', 1)   # not UTF-8
    path = tmp_path / "t.json"
    path.write_bytes(raw)
    run = tmp_path / "run"
    nsbridge.analyze([path], out=run)
    assert nsbridge.load(run).status == "ok"
    assert (run / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("dims", [1.5, {"x": 1}, "abc", [[1.5, "a"], None]])
def test_odd_input_dims_on_matmuls_are_not_a_crash(tmp_path: Path, dims: Any) -> None:
    """Regression (fuzzing): "Input Dims": 1.5 on the matmul ops of a real trace failed in
    the recommendations' width rule (rules.py) with TypeError."""
    doc = json.loads(gzip.open(BERT).read())
    for event in doc["traceEvents"]:
        if event.get("name") in ("aten::addmm", "aten::mm", "aten::linear"):
            event.setdefault("args", {})["Input Dims"] = dims
    (tmp_path / "t.json").write_text(json.dumps(doc))
    report = nsbridge.analyze([tmp_path / "t.json"], out=tmp_path / "run").report
    assert report["status"] == "ok" and report["ops"]
