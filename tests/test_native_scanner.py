"""The C trace scanner (nsbridge/parse/_scan.c) against the msgspec reader it replaces.

The scanner either gives exactly the columns the msgspec structs would, or declines a
batch (msgspec then reads it). These tests hold it to that on every real trace, on seeded
mutations of real traces, on numbers of every shape (against Python's own float()), and
check that it declines what it must.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
import struct
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from nsbridge.errors import NsbridgeError
from nsbridge.parse import _stream
from nsbridge.parse._event_columns import SCANNED_NUMBERS, SCANNED_STRINGS, EventColumns
from nsbridge.parse.torch_trace import read_trace

from conftest import SHARED_REAL, TORCH_DATA
from fuzz_traces import mutate

FIXTURES = sorted(TORCH_DATA.rglob("*.json.gz"))
SHARED = sorted(SHARED_REAL.rglob("*.json.gz")) if SHARED_REAL.is_dir() else []


def test_the_scanner_is_built() -> None:
    """`pip install` compiles it (setup.py); without a C compiler nsbridge still works,
    on msgspec alone, and every other test here would be comparing msgspec with itself."""
    assert _stream.native_scanner(), (
        "nsbridge/parse/_scan.c was not built: is a C compiler installed? "
        "(pip install -e . prints the compiler's error)")


def _without_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "_scan_batch", lambda data, end=-1: None)


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """(with the scanner, without it): a TorchTrace each, or the error each raised."""
    outcomes = []
    for scanner in (True, False):
        with monkeypatch.context() as patch:
            if not scanner:
                _without_scanner(patch)
            try:
                outcomes.append(read_trace(path, streaming=True))
            except NsbridgeError as exc:
                outcomes.append(exc)
    return outcomes[0], outcomes[1]


def _assert_same(scanned: Any, plain: Any) -> None:
    if isinstance(plain, Exception):
        assert type(scanned) is type(plain) and str(scanned) == str(plain)
        return
    pd.testing.assert_frame_equal(scanned.events, plain.events, check_exact=True)
    assert scanned.skipped == plain.skipped
    assert (scanned.rank, scanned.base_time_ns, scanned.device_properties) == (
        plain.rank, plain.base_time_ns, plain.device_properties)


@pytest.mark.parametrize("path", FIXTURES + [pytest.param(p, marks=pytest.mark.slow) for p in SHARED],
                         ids=lambda p: f"{p.parent.name}/{p.name}")   # ../shared's: full suite
def test_real_traces_identical_with_and_without_the_scanner(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "BLOCK", 16 * 1024)   # many batches, cut inside events
    _assert_same(*_read_both(path, monkeypatch))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_batch_of_a_real_trace_is_scanned(path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """No batch of a well-formed real trace is declined: a decline is correct but slow,
    and a scanner that declined everything would pass every equality test."""
    def refuse(self: EventColumns, *args: Any) -> None:
        raise AssertionError("a batch was declined by the scanner")

    monkeypatch.setattr(EventColumns, "add_records", refuse)
    monkeypatch.setattr(EventColumns, "add_dicts", refuse)
    columns = EventColumns()
    _stream.stream_events(path, path.suffix == ".gz", columns, workers=1)
    assert len(columns.finish()) > 0


def test_parallel_ranges_scanned_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(TORCH_DATA / "h100_bert-small_2025-07.json.gz").read())
    monkeypatch.setattr(_stream, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(_stream, "BLOCK", 64 * 1024)
    _assert_same(*_read_both(plain, monkeypatch))


def test_mutated_traces_read_the_same_with_and_without_the_scanner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded mutations of real traces (wrong types, NaN, huge numbers, odd unicode,
    flipped and cut bytes): the same frame and notes, or the same error, either way."""
    seeds = [gzip.open(TORCH_DATA / name).read() for name in (
        "inference_rank_1_2022-10_libkineto.json.gz", "h200/input_bound_h200.json.gz",
        "triton_example_a100_2024-10.json.gz")]
    monkeypatch.setattr(_stream, "BLOCK", 8 * 1024)
    for case in range(150):
        trace = tmp_path / f"case-{case}.json"
        trace.write_bytes(mutate(seeds[case % len(seeds)], random.Random(case)))
        scanned, plain = _read_both(trace, monkeypatch)
        try:
            _assert_same(scanned, plain)
        except AssertionError as exc:
            raise AssertionError(f"mutated case {case} differs: {exc}") from None


def _event(**fields: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10.5,
            "dur": 3, **fields}


def _scan_frame(data: bytes) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The frame of a one-batch trace read by the scanner, and by the stdlib dict reader;
    fails if the scanner declined the batch."""
    assert _stream._scan_batch(data) is not None, "the scanner declined the batch"
    columns = EventColumns()
    assert _stream._decode_batch(data, columns) is None
    plain = EventColumns()
    plain.add_dicts(json.loads(data))
    return columns.finish(), plain.finish()


def test_awkward_values_the_scanner_takes() -> None:
    """Escapes, non-ASCII names, numbers and text for ids, nulls, absent fields, shapes
    written with different spacing, kernel launches: the dict reader's frame exactly."""
    events = [
        _event(name="line\nbreak \"quoted\" \\ back/slash \u00e9\u2713\U0001d11e", pid="7",
               tid=-0, args={"External id": None, "external id": 4, "Input Dims": [[2, 3], []],
                             "Input type": ["float", "Scalar"], "bytes": None, "Bytes": 8}),
        _event(name=None, cat=None, ts=-0.0, dur=None, args={"Input Dims": None}),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 12,
         "args": {"Bytes": 2.5e3, "Device Id": 0, "Total Allocated": 1e20,
                  "Total Reserved": 123456789012345678, "Addr": 93969751074944}},
        _event(cat="Kernel", name="void k<1>()", args={
            "grid": [1, 2, 3], "block": [128, 1, 1], "registers per thread": 32,
            "shared memory": 0.0, "device": None, "Device Id": 3, "correlation": 99,
            "kernel_file": "/tmp/x.py", "unknown": {"deep": [1, {"x": [True, False, None]}]}}),
        _event(cat="kernel", args={"grid": None, "block": [1, 1, 1]}),
        _event(cat="Trace", name="dropped category"),
        {"ph": "M", "name": "thread_name", "args": None},
        {"ph": "s", "id": 3, "anything": [1e300, -2.5e-300]},
        _event(pid=None),
    ]
    text = json.dumps(events).encode()
    spaced = text.replace(b"[2, 3]", b"[ 2 ,3 ]")      # the same shape, other spacing
    for data in (text, spaced):
        scanned, plain = _scan_frame(data)
        pd.testing.assert_frame_equal(scanned, plain, check_exact=True)
    assert scanned["input_dims"].iloc[0] == "[[2,3],[]]"
    assert scanned["launch"].dropna().tolist() == ["grid [1,2,3] block [128,1,1] regs 32 smem 0.0"]
    assert scanned["pid"].tolist()[-1] == "None" and scanned["tid"].iloc[0] == "0"


@pytest.mark.parametrize("batch", [
    b'[{"ph":"B","ts":1}]',                              # a phase the structs do not know
    b'[{"ts":1}]',                                       # no phase
    b'[{"ph":"X","args":null}]',                         # args not an object
    b'[{"ph":"X","name":5}]',                            # a number for a name
    b'[{"ph":"X","ts":"5"}]',                            # text for a time
    b'[{"ph":"X","ts":true}]',
    b'[{"ph":"X","pid":1.5}]',                           # a float for an id
    b'[{"ph":"X","args":{"External id":5.0}}]',
    b'[{"ph":"X","args":{"device":2.0}}]',
    b'[{"ph":"X","args":{"registers per thread":"32"}}]',
    b'[{"ph":"X","args":{"kernel_file":3}}]',
    b'[{"ph":"X","ts":1e400}]',                          # out of range
    b'[{"ph":"X","pid":1234567890123456789}]',           # 19 digits
    b'[{"ph":"X","name":"\\ud800"}]',                    # a lone surrogate
    b'[{"ph":"X","name":"\xff"}]',                       # not UTF-8
    b'[{"ph":"X","\\u006eame":"n"}]',                    # an escaped key
    b'[{"ph":"X","ts":1,"ts":2}]',                       # a repeated key
    b'[{"ph":"X","ph":"i"}]',
    b'[{"ph":"X"},7]',                                   # not an object
    b'[{"ph":"X"}',                                      # truncated
    b'[{"ph":"X"}] x',                                   # trailing garbage
    b'[{"ph":"X","ts":01}]',                             # not JSON numbers
    b'[{"ph":"X","ts":1.}]',
    b'[{"ph":"X","ts":NaN}]',
    b'[{"ph":"X","x":[' + b'[' * 80 + b']' * 80 + b']}]',  # deeper than 64
    b'[{"ph":"X","name":"a\tb"}]',                       # a raw control character
])
def test_what_the_scanner_declines(batch: bytes) -> None:
    assert _stream._scan_batch(batch) is None


def test_a_declined_batch_is_read_by_msgspec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same batch through _decode_batch: the scanner declines (a float External id),
    msgspec reads it generically, and the value arrives."""
    columns = EventColumns()
    assert _stream._decode_batch(b'[{"ph":"X","ts":1,"args":{"External id":5.0}}]',
                                 columns) is None
    assert columns.finish()["ext_id"].tolist() == [5.0]


def test_elements_without_brackets() -> None:
    """_consume hands the scanner a batch in place: the elements in data[:end]."""
    data = b' {"ph":"X","ts":1,"name":"a"} ,\n{"ph":"i","ts":2}, {"ph":"X","ts":3'
    end = data.index(b"}, {") + 1
    rows, numbers, _, distinct = _stream._scan_batch(data, end)
    assert rows == 2 and np.frombuffer(numbers[0]).tolist() == [1.0, 2.0]
    assert distinct[SCANNED_STRINGS.index("name")] == [b'"a"']
    assert _stream._scan_batch(data, 0)[0] == 0
    assert _stream._scan_batch(data, end + 1) is None    # a dangling comma
    with pytest.raises(ValueError):
        _stream._scan_batch(data, len(data) + 1)


def _number_texts(rng: random.Random) -> list[str]:
    """Numbers as JSON writes them, weighted to where conversions go wrong: Kineto's
    17-digit timestamps, 19-digit mantissas, halfway cases between two doubles, tiny and
    huge exponents, negative zero."""
    texts = ["0", "-0", "0.0", "-0.0", "1", "-1", "0.1", "0.3", "1e22", "1e23",
             "9007199254740993", "9007199254740993.0", "123456789012345678",
             "-123456789012345678", "1.7976931348623157e308", "2.2250738585072014e-308",
             "5e-324", "4.9e-324", "1e-400", "0.000001", "1E+2", "1e-7"]
    for _ in range(6000):
        kind = rng.randrange(6)
        if kind == 0:     # a Kineto timestamp: 16 integer digits, a fraction of 1-3
            whole = rng.randrange(10**15, 10**16)
            texts.append(f"{whole}.{rng.randrange(1000):0{rng.randint(1, 3)}d}")
            # and from 2^50 on, where eighths, quarters and halves fall on doubles or
            # halfway between two
            whole = rng.randrange(2**50, 2**53)
            texts.append(f"{whole}.{rng.choice([125, 250, 375, 500, 625, 750, 875])}")
        elif kind == 1:   # 15-19 significant digits anywhere around the point
            digits = str(rng.randrange(10**14, 10**19))
            at = rng.randrange(1, len(digits))
            texts.append(f"{digits[:at]}.{digits[at:]}")
        elif kind == 2:   # the exact halfway point between two doubles, and near it
            x = rng.choice([rng.uniform(1e12, 1e16), rng.uniform(1e-3, 1e7), struct.unpack(
                "<d", struct.pack("<Q", rng.randrange(1, 0x7FEFFFFFFFFFFFFF)))[0]])
            mid = (Decimal(x) + Decimal(math.nextafter(x, math.inf))) / 2
            texts.append(str(mid))
            texts.append(f"{mid:.{rng.randint(16, 19)}e}")
        elif kind == 3:   # an integer, 1-18 digits
            texts.append(str(rng.randrange(-10**18 + 1, 10**18)))
        elif kind == 4:   # exponent forms
            texts.append(f"{rng.randrange(1, 10**rng.randint(1, 19))}e{rng.randint(-330, 310)}")
        else:             # a double printed shortest (what json.dumps writes)
            texts.append(repr(rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-20, 20)))
    return texts


_INTEGER = re.compile(r"-?[0-9]+")


def _scanned_ts(text: str) -> Any:
    """The ts the scanner reads from ``"ts": text`` (None: it declined)."""
    scanned = _stream._scan_batch(f'[{{"ph":"X","ts":{text}}}]'.encode())
    return None if scanned is None else np.frombuffer(
        scanned[1][SCANNED_NUMBERS.index("ts")], dtype=np.float64)[0]


def test_numbers_convert_as_python_float_does() -> None:
    """Every number the scanner takes equals float() of its text bit for bit (Python's
    conversion is correctly rounded, as msgspec's is; a JSON integer is an int first, so
    "-0" is 0.0). What neither exact conversion handles is declined, never guessed; all
    of Kineto's timestamps and durations are taken."""
    with localcontext() as exact:
        exact.prec = 2000   # halfway points written out in full
        texts = _number_texts(random.Random(20261127))
    taken = 0
    for text in texts:
        got = _scanned_ts(text)
        if got is None:
            continue
        want = float(int(text)) if _INTEGER.fullmatch(text) else float(text)
        assert got.tobytes() == np.float64(want).tobytes(), f"{text} read as {got!r}"
        taken += 1
    assert taken > len(texts) // 2
    rng = random.Random(5)
    kineto = [f"{rng.randrange(10**15, 10**16)}.{rng.randrange(1000):03d}" for _ in range(3000)]
    kineto += [repr(rng.uniform(0, 1e7)) for _ in range(3000)] + [
        str(rng.randrange(10**12)) for _ in range(1000)]
    assert all(_scanned_ts(text) is not None for text in kineto)


@pytest.mark.parametrize("number", [
    "1.2345678901234567891",            # 20 significant digits
    "1e23",                             # past Clinger's exponent range
    "0." + "0" * 99999 + "1e1000000",   # an exponent too long to hold exactly
    "1" + "0" * 100000 + "e-100000",    # msgspec refuses this one; float() reads 1.0
    "12345678901234567890",             # an integer of 20 digits
])
def test_numbers_it_cannot_convert_exactly_are_declined(number: str) -> None:
    assert _scanned_ts(number) is None


def test_the_scanner_takes_bytes_and_a_sane_end() -> None:
    """Bytes only (immutable while it runs without the GIL); end -1 or within the data."""
    with pytest.raises(TypeError):
        _stream._scan_batch(bytearray(b"[]"))
    with pytest.raises(ValueError):
        _stream._scan_batch(b"[]", -2)
    assert _stream._scan_batch(b"[]") == (0, (b"",) * 9, (b"",) * 10, ([],) * 10)


def test_scanned_columns_that_do_not_decode_add_nothing() -> None:
    """add_scanned refuses a batch whose text does not decode, leaving the columns as they
    were (the batch is then read another way)."""
    columns = EventColumns()
    ok = _stream._scan_batch(b'[{"ph":"X","ts":1,"name":"a"}]')
    assert columns.add_scanned(ok)
    rows, numbers, codes, distinct = ok
    broken = list(distinct)
    broken[SCANNED_STRINGS.index("name")] = [b'"unterminated']
    assert not columns.add_scanned((rows, numbers, codes, tuple(broken)))
    assert columns.finish()["name"].tolist() == ["a"]
