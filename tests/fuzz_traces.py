"""A seeded mutator of torch.profiler traces, for the fuzz test (tests/test_fuzz_traces.py).

``mutate(seed_bytes, rng)`` returns the bytes of one mutated trace: structural mutations of
the decoded JSON (key deletion, wrong types, NaN/Infinity, huge and negative numbers,
unicode and control characters, bare-array form, renamed steps) or raw byte mutations (flips,
truncation, insertion, a BOM, NUL runs). The same seed always gives the same case, so a
failure is replayed from its case number alone.
"""

from __future__ import annotations

import copy
import json
import math
import random
from typing import Any, Callable

WEIRD_STRINGS = ["", " ", "<script>alert(1)</script>", "a|b`c`", "\x1b[31mred\x1b[0m",
                 "\r\n", "\u202eevil", "é✓𝄞", "\udcff", "ProfilerStep#warmup",
                 "ProfilerStep#", "ProfilerStep#-1", "ProfilerStep#99999999999999999999",
                 "cudaDeviceSynchronize", "aten::mm", "%s%n{0}", "\x00", "[]", "nan"]
WEIRD_NUMBERS: list[Any] = [0, -1, -1e300, 1e300, 2 ** 63, -(2 ** 63), 2 ** 70, 0.5, 1e-300,
                            math.nan, math.inf, -math.inf]
WEIRD_VALUES: list[Any] = [None, True, False, [], {}, [1, [2]], {"a": 1}, "12", "x", *WEIRD_NUMBERS,
                           *WEIRD_STRINGS]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s"]
ARG_KEYS = ["External id", "external id", "correlation", "Input Dims", "Input type",
            "Input Strides", "device", "Device Id", "bytes", "stream", "Python id",
            "Python parent id"]
SHAPE_KEYS = ["Input Dims", "Input type", "Input Strides"]
WORK_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul",
            "aten::convolution", "aten::cudnn_convolution", "aten::_convolution")


def _weird(rng: random.Random) -> Any:
    """A fresh copy of one odd value (a shared one would be mutated by later cases)."""
    return copy.deepcopy(rng.choice(WEIRD_VALUES))


def mutate(seed: bytes, rng: random.Random) -> bytes:
    """One mutated trace from a valid trace's bytes (uncompressed JSON)."""
    if rng.random() < 0.25:
        return _mutate_bytes(seed, rng)
    doc = json.loads(seed)
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        doc = rng.choice(_STRUCTURAL)(doc, rng)
    return json.dumps(doc, allow_nan=True, ensure_ascii=rng.random() < 0.5).encode(
        "utf-8", "surrogatepass")


def _events(doc: Any) -> list[Any]:
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc["traceEvents"]
    return doc if isinstance(doc, list) else []


def _some(doc: Any, rng: random.Random) -> list[dict[str, Any]]:
    """A few events of the document, favouring ones with the fields analysis uses."""
    events = [e for e in _events(doc) if isinstance(e, dict)]
    if not events:
        return []
    return [rng.choice(events) for _ in range(rng.choice((1, 1, 3, 20)))]


def _delete_key(doc: Any, rng: random.Random) -> Any:
    key = rng.choice(EVENT_KEYS)
    for event in _some(doc, rng):
        event.pop(key, None)
    return doc


def _delete_key_everywhere(doc: Any, rng: random.Random) -> Any:
    key = rng.choice(["ts", "ph", "dur", "args", "cat", "name"])
    for event in _events(doc):
        if isinstance(event, dict):
            event.pop(key, None)
    return doc


def _wrong_type(doc: Any, rng: random.Random) -> Any:
    key = rng.choice(EVENT_KEYS)
    for event in _some(doc, rng):
        event[key] = _weird(rng)
    return doc


def _wrong_arg(doc: Any, rng: random.Random) -> Any:
    key = rng.choice(ARG_KEYS)
    for event in _some(doc, rng):
        args = event.get("args")
        if isinstance(args, dict):
            args[key] = _weird(rng)
        else:
            event["args"] = _weird(rng)
    return doc


def _wrong_shape_of_work_ops(doc: Any, rng: random.Random) -> Any:
    """Odd shapes, dtypes or strides (a number, an object, text) on the matmul and
    convolution ops, whose shapes the analysis reads (Tensor Cores, work signatures,
    the width rule of the recommendations)."""
    key = rng.choice(SHAPE_KEYS)
    value = _weird(rng)
    for event in _events(doc):
        if isinstance(event, dict) and event.get("name") in WORK_OPS \
                and isinstance(event.get("args"), dict):
            event["args"][key] = copy.deepcopy(value)
    return doc


def _weird_name(doc: Any, rng: random.Random) -> Any:
    for event in _some(doc, rng):
        event["name"] = rng.choice(WEIRD_STRINGS) + rng.choice(["", str(event.get("name"))])
    return doc


def _weird_number(doc: Any, rng: random.Random) -> Any:
    key = rng.choice(["ts", "dur", "pid", "tid"])
    for event in _some(doc, rng):
        event[key] = rng.choice(WEIRD_NUMBERS)
    return doc


def _replace_event(doc: Any, rng: random.Random) -> Any:
    events = _events(doc)
    if events:
        events[rng.randrange(len(events))] = _weird(rng)
    return doc


def _duplicate_or_drop(doc: Any, rng: random.Random) -> Any:
    events = _events(doc)
    if events:
        i = rng.randrange(len(events))
        if rng.random() < 0.5:
            events.insert(rng.randrange(len(events) + 1), json.loads(json.dumps(events[i])))
        else:
            del events[i:i + rng.choice((1, 10, 1000))]
    return doc


def _top_level(doc: Any, rng: random.Random) -> Any:
    choice = rng.random()
    if choice < 0.3:
        return _events(doc)                          # Chrome's bare-array form
    if isinstance(doc, dict):
        key = rng.choice(["traceEvents", "deviceProperties", "distributedInfo",
                          "baseTimeNanoseconds", "schemaVersion"])
        if choice < 0.6:
            doc.pop(key, None)
        else:
            doc[key] = _weird(rng)
    return doc


def _rename_steps(doc: Any, rng: random.Random) -> Any:
    for event in _events(doc):
        if isinstance(event, dict) and str(event.get("name", "")).startswith("ProfilerStep#"):
            event["name"] = rng.choice(["ProfilerStep#warmup", "ProfilerStep#",
                                        "ProfilerStep#1", "ProfilerStep#x", event["name"]])
    return doc


def _shift_times(doc: Any, rng: random.Random) -> Any:
    scale = rng.choice([-1, 0, 1e9, 1e-9])
    for event in _some(doc, rng):
        for key in ("ts", "dur"):
            if isinstance(event.get(key), (int, float)):
                event[key] = event[key] * scale
    return doc


_STRUCTURAL: list[Callable[[Any, random.Random], Any]] = [
    _delete_key, _delete_key_everywhere, _wrong_type, _wrong_arg, _wrong_shape_of_work_ops,
    _weird_name, _weird_number, _replace_event, _duplicate_or_drop, _top_level, _rename_steps,
    _shift_times]


def _mutate_bytes(seed: bytes, rng: random.Random) -> bytes:
    data = bytearray(seed)
    kind = rng.randrange(6)
    if kind == 0:                                        # flip bytes
        for _ in range(rng.choice((1, 1, 4, 32))):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:                                      # truncate
        del data[rng.randrange(len(data)):]
    elif kind == 2:                                      # insert garbage
        at = rng.randrange(len(data))
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 8, 64))))
    elif kind == 3:                                      # a BOM in front
        data[0:0] = b"\xef\xbb\xbf"
    elif kind == 4:                                      # a run of NULs
        at = rng.randrange(len(data))
        data[at:at + rng.choice((1, 100, 10_000))] = b"\x00" * rng.choice((1, 100, 10_000))
    else:                                                # a valid head, then repeated tail
        data += data[rng.randrange(len(data)):]
    return bytes(data)
