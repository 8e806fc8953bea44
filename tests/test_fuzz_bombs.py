"""Inputs built to break the trace, nsys and ncu readers (issue 48, "No bomb gets through"):
torch's unescaped double quotes, JSON nested past any decoder's depth, strings of many MiB,
lists where numbers belong, impossible nsys times, ncu exports joined with ``cat``."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import sys
import sqlite3
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest

from conftest import DATA, TORCH_DATA, run_nsbridge
from nsbridge.errors import NcuFormatError, TraceFormatError
from nsbridge.model.device.timeline import join
from nsbridge.parse import _stream
from nsbridge.parse._quotes import repair_quotes
from nsbridge.parse.ncu import read_ncu
from nsbridge.parse.nsys_sqlite import read_nsys_sqlite
from nsbridge.parse.torch_trace import read_trace
from nsbridge.report.render.merged_trace import merged_trace_json

QUOTED = DATA / "quoted" / "torch2.13_cpu_quoted_names.json.gz"
BERT = TORCH_DATA / "h100_bert-small_2025-07.json.gz"
NCU_RAW = sorted((DATA / "ncu").glob("*.raw.csv"))


def _read_all_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The trace read by the C scanner (when built), by msgspec alone and by the stdlib."""
    frames = [read_trace(path, streaming=True, workers=1)]
    with monkeypatch.context() as patch:
        patch.setattr(_stream, "_native_scan", None)
        frames.append(read_trace(path, streaming=True, workers=1))
    frames.append(read_trace(path, streaming=False))
    return frames


def test_torch_bare_quotes_read_as_torch_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = gzip.decompress(QUOTED.read_bytes())
    with pytest.raises(ValueError):
        json.loads(raw)                       # as torch wrote it, the file is not JSON
    names = {'load "batch"', '"', 'load"er.py(6): step', 'load"er.py(14): <module>'}
    traces = _read_all_ways(QUOTED, monkeypatch)
    for trace in traces:
        assert names <= set(trace.events["name"].astype(str))
        pd.testing.assert_frame_equal(trace.events, traces[0].events)
    valid = json.dumps(json.loads(repair_quotes(raw)), indent=1).encode()
    assert repair_quotes(valid) == valid          # valid JSON is left as it is


@pytest.mark.parametrize("path", sorted(TORCH_DATA.rglob("*.json.gz")), ids=lambda p: p.name)
def test_the_repair_leaves_every_real_trace_as_it_is(path: Path) -> None:
    raw = gzip.decompress(path.read_bytes())
    assert repair_quotes(raw) == raw


@pytest.mark.skipif(not _stream.native_scanner(), reason="without the scanner, processes read")
def test_quoted_names_read_the_same_in_parallel_ranges(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(gzip.decompress(QUOTED.read_bytes()))
    whole = read_trace(path, workers=1)
    monkeypatch.setattr(_stream, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(_stream, "THREAD_BLOCK", 16 * 1024)
    monkeypatch.setattr(_stream, "LAST_RANGE", 4 * 1024)
    pd.testing.assert_frame_equal(read_trace(path, workers=3).events, whole.events)


def test_the_merged_trace_of_a_quoted_trace_is_json_with_the_names() -> None:
    merged = json.loads(merged_trace_json(gzip.decompress(QUOTED.read_bytes()), {}))
    assert merged["traceName"] == '/tmp/fx/my "proj"/trace.json'
    assert 'load "batch"' in {e.get("name") for e in merged["traceEvents"]}


@pytest.mark.parametrize("name", ['f("a", "b")', 'a", "b', 'x": "y', 'a"}b', '""', 'é "ü"'])
def test_names_with_quotes_beside_json_punctuation_are_repaired(name: str) -> None:
    text = ('{"traceEvents": [{\n  "ph": "X", "cat": "user_annotation",\n  "name": "' + name
            + '",\n  "pid": 1, "args": {"a": "' + name + '", "b": 1}\n}], "traceName": "/x/'
            + name + '/t.json" }')
    doc = json.loads(repair_quotes(text.encode()))
    assert doc["traceEvents"][0]["name"] == doc["traceEvents"][0]["args"]["a"] == name
    assert doc["traceName"] == f"/x/{name}/t.json"


def _with_event(tmp_path: Path, event: str) -> Path:
    """The real H100 trace with ``event`` (JSON text) as its first event."""
    text = gzip.decompress(BERT.read_bytes()).decode()
    path = tmp_path / "trace.json"
    path.write_text(text.replace('"traceEvents": [', '"traceEvents": [' + event + ",", 1))
    return path


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_json_nested_past_the_decoders_is_a_trace_format_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, depth: int) -> None:
    path = _with_event(tmp_path, '{"ph": "X", "name": "n", "cat": "cpu_op", "ts": 1, "dur": 1, '
                       '"args": {"x": ' + "[" * depth + "]" * depth + "}}")
    # the decoders' depth is Python's recursion limit, which a library imported by an
    # earlier test may have raised: hold it at Python's default here
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        _read_each_way_refused(path, monkeypatch)
    finally:
        sys.setrecursionlimit(limit)


def _read_each_way_refused(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for streaming, scanner in ((True, True), (True, False), (False, True)):
        with monkeypatch.context() as patch:
            if not scanner:
                patch.setattr(_stream, "_native_scan", None)
            with pytest.raises(TraceFormatError, match="levels deep"):
                read_trace(path, streaming=streaming, workers=1)


def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 64 KiB, MAX_PENDING 192 KiB: a string of 1 MiB runs over both."""
    monkeypatch.setattr(_stream, "BLOCK", 64 * 1024)
    monkeypatch.setattr(_stream, "MAX_PENDING", 3 * 64 * 1024)


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_string_longer_than_max_pending_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                gzipped: bool) -> None:
    _small_blocks(monkeypatch)
    path = _with_event(tmp_path, '{"ph": "X", "name": "long", "cat": "cpu_op", "pid": 1, '
                       '"tid": 1, "ts": 1, "dur": 1, "args": {"Python stack": "'
                       + "a" * (1 << 20) + '"}}')
    if gzipped:
        path = path.rename(tmp_path / "trace.json.gz")
        path.write_bytes(gzip.compress(path.read_bytes()))
    trace = read_trace(path, streaming=True, workers=1)
    assert "long" in set(trace.events["name"].astype(str))
    assert len(trace.events) == len(read_trace(BERT).events) + 1


def test_an_event_over_max_event_is_refused_by_its_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _small_blocks(monkeypatch)
    monkeypatch.setattr(_stream, "MAX_EVENT", 512 * 1024)
    path = _with_event(tmp_path, '{"ph": "X", "name": "n", "args": {"s": "'
                       + "a" * (1 << 20) + '"}}')
    with pytest.raises(TraceFormatError, match=r"an event of more than 0\.5 MiB") as error:
        read_trace(path, streaming=True, workers=1)
    assert "truncated" not in str(error.value)


def test_a_truncated_file_is_still_called_truncated(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _small_blocks(monkeypatch)
    path = tmp_path / "cut.json"
    path.write_bytes(gzip.decompress(BERT.read_bytes())[:400_000])
    with pytest.raises(TraceFormatError, match="truncated"):
        read_trace(path, streaming=True, workers=1)


@pytest.mark.parametrize("event", [
    '{"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": [2, 3]}',
    '{"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": {"a": 1}}',
    '{"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": "2"}',
    '{"ph": "X", "name": "b", "cat": "kernel", "pid": 1, "tid": 1, "ts": 1, "dur": 2, '
    '"args": {"device": [0, 1]}}',
    '{"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": [1], "dur": 2}',
    '{"ph": "i", "name": "b", "cat": "cpu_instant_event", "pid": 1, "tid": 1, "ts": [[1, 2]]}',
])
def test_lists_in_number_fields_of_a_one_event_batch_never_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, event: str) -> None:
    """A batch whose values are all equal-length lists was a 2-D array ("Per-column arrays
    must each be 1-dimensional"): now the event is read without the value, or skipped."""
    path = tmp_path / "one.json"
    path.write_text('{"traceEvents": [' + event + "]}")
    for streaming, scanner in ((True, True), (True, False), (False, True)):
        with monkeypatch.context() as patch:
            if not scanner:
                patch.setattr(_stream, "_native_scan", None)
            try:
                trace = read_trace(path, streaming=streaming, workers=1)
            except TraceFormatError as error:    # the only event had no usable timestamp
                assert "usable timestamp" in str(error)
                continue
            assert trace.events["dur"].between(0, 3).all()


def _damaged_nsys(tmp_path: Path, edit: Callable[[sqlite3.Connection], None]) -> Path:
    path = tmp_path / "damaged.sqlite"
    shutil.copy(DATA / "nsys" / "h100_2gpu_1s.sqlite", path)
    with sqlite3.connect(path) as conn:
        edit(conn)
    conn.close()
    return path


@pytest.mark.parametrize("end", [-2**63, 2**63 - 1])
def test_an_nsys_row_with_impossible_times_is_left_out_with_a_note(tmp_path: Path,
                                                                   end: int) -> None:
    memset = "CUPTI_ACTIVITY_KIND_MEMSET"
    path = _damaged_nsys(tmp_path, lambda conn: conn.execute(
        f'UPDATE {memset} SET "end" = ? WHERE rowid = (SELECT min(rowid) FROM {memset})',
        (end,)))
    export = read_nsys_sqlite(path)
    clean = read_nsys_sqlite(DATA / "nsys" / "h100_2gpu_1s.sqlite")
    assert len(export.memset) == len(clean.memset) - 1
    assert any("1 memset row(s) end before they start or last longer" in n for n in export.notes)
    busy = join(export).summary["gpu_busy_pct"]
    assert 0 <= busy <= 100 and busy == pytest.approx(join(clean).summary["gpu_busy_pct"],
                                                       abs=0.5)


def _cat(tmp_path: Path, *files: Path) -> Path:
    path = tmp_path / "joined.csv"
    path.write_bytes(b"".join(f.read_bytes() for f in files))
    return path


def test_ncu_exports_joined_with_cat_read_one_after_another(tmp_path: Path) -> None:
    parts = [read_ncu(f) for f in NCU_RAW]
    joined = read_ncu(_cat(tmp_path, *NCU_RAW))
    assert len(joined.launches) == sum(len(p.launches) for p in parts)
    assert joined.launches["launch"].is_unique
    assert len(joined.metrics) == sum(len(p.metrics) for p in parts)
    kernels = [k for p in parts for k in p.launches["kernel"]]
    assert list(joined.launches["kernel"]) == kernels
    assert any(f"{len(NCU_RAW)} ncu exports joined into one file" in n for n in joined.notes)


def test_ncu_exports_of_different_pages_joined_are_refused(tmp_path: Path) -> None:
    details = tmp_path / "details.csv"
    with details.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit",
                         "Metric Value"])
        writer.writerow(["0", "k", "GPU Speed Of Light Throughput", "Duration", "ns", "10"])
    with pytest.raises(NcuFormatError, match="different pages"):
        read_ncu(_cat(tmp_path, NCU_RAW[0], details))


SCRIPT = """
import torch
x = torch.randn(32, 32)
for _ in range(4):
    with torch.profiler.record_function('load "batch"'):
        y = x @ x
"""


@pytest.mark.slow
def test_triage_with_quotes_in_a_range_the_folder_and_out_is_a_whole_run(tmp_path: Path) -> None:
    folder = tmp_path / 'my "proj"'
    folder.mkdir()
    (folder / 'tr"ain.py').write_text(SCRIPT)
    result = run_nsbridge("triage", "--out", 'runs/a"b', "--format", "json", 'tr"ain.py',
                          cwd=folder)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "ok"
    run = folder / "runs" / 'a"b'
    with (run / "ops.csv").open(newline="") as fh:
        assert 'load "batch"' in {row[0] for row in csv.reader(fh)}
    merged = json.loads(gzip.decompress((run / "merged.json.gz").read_bytes()))
    assert 'load "batch"' in {e.get("name") for e in merged["traceEvents"]}
