"""The streaming reader (the C scanner, msgspec for what it declines) and the stdlib reader
give identical frames; tests/test_native_scanner.py holds the scanner to msgspec."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nsbridge.parse import _stream
from nsbridge.errors import TraceFormatError
from nsbridge.parse.torch_trace import read_trace, streaming_available

from conftest import SHARED_REAL, TORCH_DATA

pytestmark = pytest.mark.skipif(not streaming_available(), reason="msgspec not installed")

FIXTURES = sorted(TORCH_DATA.rglob("*.json.gz"))
SHARED = sorted(SHARED_REAL.rglob("*.json.gz")) if SHARED_REAL.is_dir() else []


def _same(path: Path) -> None:
    fast, slow = read_trace(path, streaming=True), read_trace(path, streaming=False)
    pd.testing.assert_frame_equal(fast.events, slow.events)
    assert (fast.rank, fast.base_time_ns, fast.device_properties) == (
        slow.rank, slow.base_time_ns, slow.device_properties)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixtures_identical_in_small_blocks(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "BLOCK", 4096)  # many block boundaries inside events
    _same(path)


@pytest.mark.slow      # every real trace of ../shared, ~10 s: the full suite's
@pytest.mark.skipif(not SHARED, reason="../shared fixtures not beside the repository")
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_every_shared_trace_identical(path: Path) -> None:
    _same(path)


def test_plain_json_and_awkward_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "BLOCK", 64)
    events = [
        {"ph": "X", "cat": "kernel", "name": "k<{a}, {b}>}]", "pid": 0, "tid": 7, "ts": 5,
         "dur": 2, "args": {"External id": 3, "correlation": 9, "bytes": None, "Bytes": 4}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1,
         "dur": 10, "args": {"Input Dims": [[2, 3], [3, 4]], "External id": 3}},
        {"ph": "X", "cat": "user_annotation", "name": "odd", "pid": 1, "tid": 1, "ts": 2,
         "dur": 1, "args": ["not", "an", "object"]},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
         "ts": 3, "args": {"Bytes": 512, "Device Id": 0}},
        {"ph": "f", "cat": "ac2g", "id": 9, "ts": 6},
        {"ph": "B", "name": "begin-end style, not read", "ts": 7},
        {"name": "no ph at all", "ts": 8},
        {"ph": "M", "name": "thread_name", "args": {"name": "main"}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 4,
         "dur": 1, "args": {"external id": 3, "correlation": 9}},
    ]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}],
           "traceEvents": events, "traceName": "x", "distributedInfo": {"rank": 3}}
    for name, text in (("a.json", json.dumps(doc, indent=2)),
                       ("b.json", json.dumps(doc, separators=(",", ":"))),
                       ("c.json", json.dumps(events))):
        path = tmp_path / name
        path.write_text(text)
        _same(path)
    trace = read_trace(tmp_path / "a.json", streaming=True)
    assert trace.rank == 3 and trace.device_properties[0]["name"] == "GPU"
    kernel = trace.events[trace.events["cat"] == "kernel"].iloc[0]
    assert kernel["name"] == "k<{a}, {b}>}]" and pd.isna(kernel["bytes"])
    assert set(trace.events["cat"]) == {"kernel", "cpu_op", "user_annotation",
                                        "cpu_instant_event", "cuda_runtime"}
    assert trace.events.loc[trace.events["name"] == "aten::mm", "input_dims"].item() == "[[2,3],[3,4]]"


def test_gzip_streams_the_same_as_plain(tmp_path: Path) -> None:
    src = TORCH_DATA / "h100_bert-small_2025-07.json.gz"
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.open(src).read())
    pd.testing.assert_frame_equal(read_trace(src).events, read_trace(plain).events)


def _forked_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parallel reader of an install without the C scanner: forked processes."""
    monkeypatch.setattr(_stream, "_native_scan", None)


@pytest.mark.parametrize("readers", ["threads",
                                     pytest.param("processes", marks=pytest.mark.slow)])
@pytest.mark.parametrize("workers", [2, 3])
def test_parallel_ranges_give_the_same_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             workers: int, readers: str) -> None:
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(TORCH_DATA / "h100_bert-small_2025-07.json.gz").read())
    sequential = read_trace(plain, streaming=False).events
    if readers == "processes":
        _forked_readers(monkeypatch)
    monkeypatch.setattr(_stream, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(_stream, "BLOCK", 64 * 1024)
    columns = _stream.EventColumns()
    meta = _stream._parallel(plain, columns, workers)
    assert meta is not None                      # the file was really split
    pd.testing.assert_frame_equal(columns.finish(), sequential)
    monkeypatch.setattr(_stream.os, "cpu_count", lambda: workers)
    pd.testing.assert_frame_equal(read_trace(plain, streaming=True).events, sequential)


@pytest.mark.slow      # forked readers
def test_a_child_reader_that_dies_unanswered_falls_back_to_one_reader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked reader killed before it answers (the OOM killer) leaves the parent reading
    the file alone, never waiting forever; a child's exception reaches the parent."""
    import os

    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(TORCH_DATA / "h100_bert-small_2025-07.json.gz").read())
    sequential = read_trace(plain, streaming=False).events
    _forked_readers(monkeypatch)
    monkeypatch.setattr(_stream, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(_stream, "_child_read", lambda *args: os._exit(9))
    assert _stream._parallel(plain, _stream.EventColumns(), 2) is None
    pd.testing.assert_frame_equal(read_trace(plain, streaming=True, workers=2).events,
                                  sequential)

    def fails(send, *args):
        send.send((False, PermissionError("no read access")))
    monkeypatch.setattr(_stream, "_child_read", fails)
    assert _stream._parallel(plain, _stream.EventColumns(), 2) is None   # OSError: fallback

    def dies_midway(send, *args):   # the header, then killed before the arrays
        send.send((True, ([None], {}, b"", [(True, "name", "<i4")])))
        os._exit(9)
    monkeypatch.setattr(_stream, "_child_read", dies_midway)
    assert _stream._parallel(plain, _stream.EventColumns(), 2) is None


def test_no_safe_split_falls_back_to_one_reader(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(50)]}, separators=(",", ":")))
    monkeypatch.setattr(_stream, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(_stream, "_SPLIT_WINDOW", 4)   # too small to see any boundary
    assert _stream._parallel(path, _stream.EventColumns(), 2) is None
    assert len(read_trace(path, streaming=True).events) == 50


def _many_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """A real trace repeated into ~60 blocks of 64 KiB."""
    monkeypatch.setattr(_stream, "BLOCK", 64 * 1024)
    monkeypatch.setattr(_stream, "MAX_PENDING", 3 * 64 * 1024)
    trace = json.loads(gzip.open(TORCH_DATA / "h100_bert-small_2025-07.json.gz").read())
    trace["traceEvents"] = trace["traceEvents"] * 3
    return json.dumps(trace).encode()


def test_a_corrupt_byte_fails_in_linear_time_naming_its_offset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(_many_blocks(tmp_path, monkeypatch))
    at = len(data) // 10
    data[at] = 0x01
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(data))
    attempts = []
    decode = _stream._decode_batch
    monkeypatch.setattr(_stream, "_decode_batch",
                        lambda chunk, columns: attempts.append(len(chunk)) or decode(chunk, columns))
    with pytest.raises(TraceFormatError, match=f"corrupt at byte {at:,} "):
        read_trace(bad, streaming=True)
    blocks = len(data) // _stream.BLOCK + 1
    # each block is tried a bounded number of times (quadratic: 64 tries of a growing buffer)
    assert len(attempts) <= 3 * blocks and sum(attempts) <= 4 * len(data)


def test_garbage_after_a_valid_head_fails_in_bounded_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    head = _many_blocks(tmp_path, monkeypatch)[:200_000]
    bad = tmp_path / "nul.json"
    bad.write_bytes(head + b"\0" * (40 * _stream.BLOCK))
    seen = []
    check = _stream._check_progress
    monkeypatch.setattr(_stream, "_check_progress",
                        lambda pending, read, before: seen.append(len(pending))
                        or check(pending, read, before))
    with pytest.raises(TraceFormatError, match="corrupt at byte 200,000 "):
        read_trace(bad, streaming=True)
    assert max(seen) <= _stream.MAX_PENDING + _stream.BLOCK     # never the whole file
    assert len(seen) < 10                                       # stopped long before its end


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("where", [0.5, 0.97, 1.0])
def test_a_corrupt_byte_anywhere_is_named_by_its_offset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: float, workers: int) -> None:
    """Also in the last MAX_PENDING bytes (the tail of the array) and in a parallel
    reader's range (threads, 4 ranges each): the offset is the file's, never a batch's."""
    data = bytearray(_many_blocks(tmp_path, monkeypatch))
    end = data.index(b'], "schemaVersion"')              # the end of the events array
    at = data.rindex(b'{"', 0, int(end * where))          # an event's opening brace
    data[at] = ord("#")
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(data))
    monkeypatch.setattr(_stream, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(_stream.os, "cpu_count", lambda: workers)
    with pytest.raises(TraceFormatError, match=f"corrupt at byte {at:,} "):
        read_trace(bad, streaming=True)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_real_traces_take_the_typed_fast_path(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batch of a well-formed real trace (shapes, dtype lists, kernel grids, memory
    totals) fits the typed structs: none falls back to decoding generic dicts, the slow
    path that a field type msgspec cannot hold (a Raw inside a Union) once sent every
    shaped batch to. The C scanner is switched off: this is the reader without it."""
    from nsbridge.parse import _stream
    from nsbridge.parse._event_columns import EventColumns

    def refuse(self: EventColumns, events: list) -> None:
        raise AssertionError(f"generic decode of {len(events)} events")

    monkeypatch.setattr(_stream, "_scan_batch", lambda data, end=-1: None)
    monkeypatch.setattr(EventColumns, "add_dicts", refuse)
    columns = EventColumns()
    _stream.stream_events(path, path.suffix == ".gz", columns, workers=1)
    assert len(columns.finish()) > 0


@pytest.mark.slow      # forked readers
def test_parallel_workers_end_quietly_under_nsbridges_sigterm_handler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture) -> None:
    """The CLI turns SIGTERM into Stopped; forked readers must not inherit that (a pool
    ending its workers printed a Stopped traceback from each)."""
    import signal

    from nsbridge.errors import stop_on_sigterm

    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(TORCH_DATA / "h100_bert-small_2025-07.json.gz").read())
    _forked_readers(monkeypatch)
    monkeypatch.setattr(_stream, "BLOCK", 64 * 1024)
    previous = signal.getsignal(signal.SIGTERM)
    stop_on_sigterm()
    try:
        for _ in range(3):
            assert _stream._parallel(plain, _stream.EventColumns(), 3) is not None
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Stopped" not in err


def _big_plain_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    """A real trace as plain JSON, read in parallel in 64 KiB blocks; its frame as the
    stdlib reader reads it."""
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(TORCH_DATA / "h100_bert-small_2025-07.json.gz").read())
    monkeypatch.setattr(_stream, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(_stream, "BLOCK", 64 * 1024)
    return plain, read_trace(plain, streaming=False).events


def test_a_read_started_ahead_is_taken_over(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """read_ahead starts the reader threads; read_trace of the same file joins them (no
    second split) and gives the stdlib reader's frame; read_ahead leaves alone what it
    cannot speed up, and a file changed since is read afresh."""
    import nsbridge

    plain, expected = _big_plain_trace(tmp_path, monkeypatch)
    splits = []
    split = _stream._split
    monkeypatch.setattr(_stream, "_split", lambda *a, **k: splits.append(a) or split(*a, **k))
    nsbridge.read_ahead(plain, workers=2)
    assert len(splits) == 1 and len(_stream._EARLY) == 1
    pd.testing.assert_frame_equal(read_trace(plain, workers=2).events, expected)
    assert len(splits) == 1 and not _stream._EARLY          # taken over, not split again

    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (gz, tmp_path / "missing.json", TORCH_DATA / "mi250_rocm6.2_2024-12.json.gz"):
        nsbridge.read_ahead(path, workers=2)
    nsbridge.read_ahead(plain, workers=1)                    # one reader: nothing to start
    assert len(splits) == 1 and not _stream._EARLY

    nsbridge.read_ahead(plain, workers=2)
    early = next(iter(_stream._EARLY.values()))
    data = plain.read_bytes()
    plain.write_bytes(data.replace(b'"ph": "X"', b'"ph":  "X"', 1))   # edited since
    assert len(read_trace(plain, workers=2).events) == len(expected)
    assert len(splits) == 3 and not _stream._EARLY           # read afresh; the old one let go
    for thread in early._threads:                            # and its threads end
        thread.join(timeout=30)
        assert not thread.is_alive()


def test_reader_threads_convert_nothing_until_the_caller_joins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read started ahead scans every range but keeps the scanner's columns as they are
    (converting them takes the GIL, which the caller's imports hold; the last range, with
    the array's end, is not even scanned): nothing is converted until read_trace joins;
    then every thread converts, and the frame is the stdlib reader's. A range whose kept
    columns do not convert is read again."""
    import threading
    import time

    import nsbridge
    from nsbridge.parse._event_columns import EventColumns

    plain, expected = _big_plain_trace(tmp_path, monkeypatch)
    converted: list[str] = []
    add_scanned = EventColumns.add_scanned

    def add(self: Any, scanned: Any) -> bool:
        converted.append(threading.current_thread().name)
        return len(converted) != 2 and add_scanned(self, scanned)   # the 2nd does not

    monkeypatch.setattr(EventColumns, "add_scanned", add)
    nsbridge.read_ahead(plain, workers=2)
    early = next(iter(_stream._EARLY.values()))
    deadline = time.monotonic() + 30
    while len(early._kept) < len(early.ranges) and time.monotonic() < deadline:
        time.sleep(0.01)                  # the one reader takes every range alone
    assert len(early._kept) == len(early.ranges) and converted == []
    assert early._kept[-1][1] is None     # the last, with the array's end, is read later
    pd.testing.assert_frame_equal(read_trace(plain, workers=2).events, expected)
    assert len(converted) >= len(early.ranges) and not early._kept


def test_a_failing_reader_thread_falls_back_or_fails_the_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error in any reader thread reaches the caller: a range that does not decode
    alone (or an I/O error) makes one sequential reader read the file instead; anything
    else fails the read with it. The other threads stop taking ranges."""
    plain, expected = _big_plain_trace(tmp_path, monkeypatch)
    scan_range = _stream._scan_range
    started = []

    def failing(error: BaseException) -> Any:
        def scan(path: str, begin: int, end: int) -> Any:
            started.append(begin)
            if len(started) == 3:
                raise error
            return scan_range(path, begin, end)
        return scan

    monkeypatch.setattr(_stream, "_scan_range", failing(_stream._SplitError()))
    assert _stream._parallel(plain, _stream.EventColumns(), 2) is None
    assert len(started) < 7                     # 2 threads x 4 ranges, the last read apart
    started.clear()                                          # fails again: read alone
    pd.testing.assert_frame_equal(read_trace(plain, workers=2).events, expected)
    started.clear()
    monkeypatch.setattr(_stream, "_scan_range", failing(MemoryError()))
    with pytest.raises(MemoryError):
        _stream._parallel(plain, _stream.EventColumns(), 2)


def test_a_large_block_the_scanner_declines_is_read_in_small_blocks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reader threads read large blocks; one the scanner declines (here for an escaped key
    in one event) is read BLOCK bytes at a time, so msgspec decodes only the small block
    that holds the odd event, not the whole large one. The frame is the stdlib reader's."""
    plain, _ = _big_plain_trace(tmp_path, monkeypatch)
    text = plain.read_bytes()
    middle = text.index(b"},", len(text) // 3) + 2
    odd = b'{"ph": "X", "cat": "cpu_op", "\\u006eame": "odd", "pid": 1, "tid": 1, "ts": 1.5},'
    plain.write_bytes(text[:middle] + odd + text[middle:])
    expected = read_trace(plain, streaming=False).events
    monkeypatch.setattr(_stream, "THREAD_BLOCK", 1 << 30)
    monkeypatch.setattr(_stream, "BLOCK", 16 * 1024)
    decoded: list[int] = []
    decode_batch = _stream._decode_batch
    monkeypatch.setattr(_stream, "_decode_batch",
                        lambda data, columns: decoded.append(len(data))
                        or decode_batch(data, columns))
    pd.testing.assert_frame_equal(read_trace(plain, workers=2).events, expected)
    assert decoded and max(decoded) <= 2 * _stream.BLOCK < len(text) // 8


def test_gzip_read_ahead_stops_its_thread_on_success_and_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper thread that inflates blocks ahead of the scan ends with the read, and a
    broken gzip stream fails the read in the reader's thread as before."""
    import threading
    import time

    def helpers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "nsbridge-read-ahead"]

    src = TORCH_DATA / "h100_bert-small_2025-07.json.gz"
    assert len(read_trace(src, streaming=True).events) > 0 and not helpers()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(src.read_bytes()[:len(src.read_bytes()) // 2])
    with pytest.raises(TraceFormatError):
        read_trace(cut, streaming=True)
    assert not helpers()
    garbage = tmp_path / "garbage.json.gz"   # fails after a few blocks, many more to come
    garbage.write_bytes(gzip.compress(b'{"traceEvents": [' + b"\0" * (40 * _stream.BLOCK)))
    closed = []
    close = _stream._ReadAhead.close
    monkeypatch.setattr(_stream._ReadAhead, "close",
                        lambda self: closed.append(self) or close(self))
    with pytest.raises(TraceFormatError, match="corrupt"):
        read_trace(garbage, streaming=True)
    assert len(closed) == 1 and not helpers()
    with gzip.open(garbage, "rb") as fh:      # stopped while blocked on a full queue
        ahead = _stream._ReadAhead(fh)
        assert len(next(ahead)) == _stream.BLOCK
        while ahead._queue.qsize() < 2:
            time.sleep(0.01)
        ahead.close()
        assert not helpers()


def test_adopt_takes_over_a_reader_and_refuses_to_mix() -> None:
    """The parallel reader keeps its own range by adopting it: the same frame and counts
    as the columns it read, and no silent mix with columns that already hold events."""
    from nsbridge.parse._event_columns import EventColumns

    own = EventColumns()
    own.add_dicts([{"ph": "X", "name": "a", "cat": "cpu_op", "ts": 1, "dur": 2}, 7])
    expected = own.skipped.copy()
    columns = EventColumns()
    columns.adopt(own)
    frame = columns.finish()
    assert frame["name"].tolist() == ["a"] and columns.skipped == expected and expected
    with pytest.raises(ValueError):
        busy = EventColumns()
        busy.add_dicts([{"ph": "X", "name": "b", "ts": 1, "dur": 1}])
        busy.adopt(EventColumns())


@pytest.mark.slow
def test_joining_the_batches_gives_their_memory_back(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """finish() hands the heap's free pages back before and once the columns are joined
    (the reader's buffers and the batches' small arrays, freed, would otherwise stay in
    the process's RSS to its end), and release_free_memory really does on glibc: freed
    small arrays leave the RSS."""
    import os
    import platform
    import sys

    import numpy as np

    from nsbridge.parse import _event_columns

    calls = []
    monkeypatch.setattr(_event_columns, "release_free_memory", lambda: calls.append(1))
    read_trace(TORCH_DATA / "h100_bert-small_2025-07.json.gz")
    assert calls == [1, 1]         # the reader's garbage before the join, the batches after
    monkeypatch.undo()
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":   # no process
        pytest.skip("malloc_trim is glibc's")

    def rss_mib() -> float:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    small = [np.ones(8_000) for _ in range(4_000)]    # 64 KB each on the heap: 244 MiB
    keep = small[::50]                                # a few stay, holding little
    del small
    before = rss_mib()
    _event_columns.release_free_memory()
    assert rss_mib() < before - 100, (before, rss_mib())
    assert len(keep) == 80
