"""Every JSON type in every field the torch trace reader scans.

The fields are the reader's own declarations: the keys of an event and of its ``args`` that
``parse._stream`` decodes (the C scanner, parse/_scan.c, scans the same ones), and the
top-level keys ``parse.torch_trace`` reads. Each case puts one value of another JSON type
(null, a bool, a list, an object, a string, a huge or negative number) into one field, in
one event or in every event that has it, of one real trace. Each case is read the three
ways (C scanner, msgspec, stdlib), which must agree, then analysed and loaded as a user
would; the only exceptions that may escape are nsbridge's documented errors. The fast tier
runs every FAST_STRIDE-th case, `-m slow` one seed and placement of every field and value
the fast tier left (tests/sweeps.py), NSBRIDGE_FUZZ=all all of them (3,000 and more).
"""

from __future__ import annotations

import copy
import gzip
import itertools
import json
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import pandas as pd
import pytest

import nsbridge
from nsbridge.errors import NsbridgeError
from nsbridge.parse import _stream
from nsbridge.parse.torch_trace import read_trace

from sweeps import fast_share, slow_share

DATA = Path(__file__).parent / "data" / "torch"
SEEDS = ("inference_rank_1_2022-10_libkineto.json.gz",   # 2022: capitalised categories
         "triton_example_a100_2024-10.json.gz",          # driver-API launches, kernel_file
         "mi250_rocm6.2_2024-12.json.gz",                # ROCm, ProfilerStep ranges
         "h200/input_bound_h200.json.gz")                # nsbridge's own H200 capture
WRONG: list[Any] = [None, True, False, [], [1, [2]], {}, {"a": 1}, "", "12", "x",
                    2 ** 70, -(2 ** 63), 1e308, -1, 0.5]
EVENT_FIELDS = (_stream.Event.__struct_config__.tag_field,   # "ph", the kind of event
                *(f for f in _stream.Event.__struct_encode_fields__ if f != "args"))
ARGS_FIELDS = _stream.Args.__struct_encode_fields__
TOP_FIELDS = ("traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds",
              "distributedInfo.rank", "distributedInfo.world_size", "deviceProperties.0.name")
FAST_STRIDE = 37


class Case(NamedTuple):
    seed: str
    field: str          # an event key, "args.KEY", or a top-level key (dotted into objects)
    value: Any
    every: bool         # in every event that has the field, else in one

    def __str__(self) -> str:
        where = "every event" if self.every else "one event"
        return f"{self.seed}: {self.field} = {json.dumps(self.value)} in {where}"


def _cases() -> list[Case]:
    fields = [*EVENT_FIELDS, *(f"args.{key}" for key in ARGS_FIELDS)]
    per_event = [Case(seed, field, value, every) for seed, field, value, every in
                 itertools.product(SEEDS, fields, WRONG, (False, True))]
    top = [Case(seed, field, value, False)
           for seed, field, value in itertools.product(SEEDS, TOP_FIELDS, WRONG)]
    return per_event + top


CASES = _cases()


def _holders(events: list[Any], field: str) -> Iterator[dict[str, Any]]:
    """The objects a field lives in: events (or their args) that have it; when none has
    it, the complete events (or their args) that could."""
    inner = field.startswith("args.")
    def place(event: dict[str, Any]) -> Any:
        return event.get("args") if inner else event
    key = field.split(".", 1)[1] if inner else field
    objects = [e for e in events if isinstance(e, dict) and isinstance(place(e), dict)]
    having = [place(e) for e in objects if key in place(e)]
    return iter(having or [place(e) for e in objects if e.get("ph") == "X"])


def mutated(doc: dict[str, Any], case: Case) -> dict[str, Any]:
    """The seed's document with the case's value in its field."""
    doc = copy.deepcopy(doc)
    if case.field in TOP_FIELDS:
        *path, last = case.field.split(".")
        holder: Any = doc
        for step in path:
            holder = holder[int(step)] if isinstance(holder, list) else holder.setdefault(
                step, {})
        if isinstance(holder, list):
            holder[int(last)] = copy.deepcopy(case.value)
        else:
            holder[last] = copy.deepcopy(case.value)
        return doc
    key = case.field.split(".", 1)[-1] if case.field.startswith("args.") else case.field
    holders = list(_holders(doc["traceEvents"], case.field))
    for holder in holders if case.every else holders[len(holders) // 2:][:1]:
        holder[key] = copy.deepcopy(case.value)
    return doc


def _read_three_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C scanner, msgspec alone and the stdlib read the same frame, or all refuse."""
    outcomes: list[Any] = []
    for native, streaming in ((True, True), (False, True), (False, False)):
        with monkeypatch.context() as patch:
            if not native:
                patch.setattr(_stream, "_native_scan", None)
            try:
                outcomes.append(read_trace(path, streaming=streaming, workers=1).events)
            except NsbridgeError as refused:
                outcomes.append(type(refused))
    first = outcomes[0]
    for other in outcomes[1:]:
        if isinstance(first, pd.DataFrame) and isinstance(other, pd.DataFrame):
            pd.testing.assert_frame_equal(other, first)
        else:
            assert other == first


def _run(cases: list[Case], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = {name: json.loads(gzip.open(DATA / name).read()) for name in SEEDS}
    escaped: list[str] = []
    for number, case in enumerate(cases):
        folder = tmp_path / str(number)
        folder.mkdir()
        trace = folder / "trace.json"
        trace.write_text(json.dumps(mutated(seeds[case.seed], case)))
        try:
            _read_three_ways(trace, monkeypatch)
            nsbridge.analyze([trace], out=folder / "run")
            nsbridge.load(folder / "run")
        except NsbridgeError:
            pass    # a documented, one-paragraph refusal is a right answer to bad input
        except Exception as escape:   # noqa: BLE001 - the test is that nothing else escapes
            escaped.append(f"{case}: {type(escape).__name__}: {escape}"[:300])
    assert not escaped, f"{len(escaped)} of {len(cases)} cases escaped:\n" + "\n".join(
        escaped[:20])


def test_the_cases_cover_every_scanned_field_and_json_type() -> None:
    assert len(CASES) >= 3000
    fields = {case.field for case in CASES}
    assert {"ph", "ts", "dur", "name", "args.External id", "args.Input Dims", "args.grid",
            "args.Total Allocated", "args.Addr"} <= fields
    kinds = {type(value) for value in WRONG}
    assert {type(None), bool, list, dict, str, int, float} <= kinds


def test_a_case_puts_its_value_where_it_says() -> None:
    doc = json.loads(gzip.open(DATA / SEEDS[2]).read())
    changed = mutated(doc, Case(SEEDS[2], "args.External id", [1, [2]], True))
    ids = [e["args"]["External id"] for e in changed["traceEvents"]
           if isinstance(e.get("args"), dict) and "External id" in e["args"]]
    assert ids and all(value == [1, [2]] for value in ids)
    one = mutated(doc, Case(SEEDS[2], "ts", "x", False))
    assert sum(e.get("ts") == "x" for e in one["traceEvents"]) == 1
    top = mutated(doc, Case(SEEDS[2], "distributedInfo.rank", {}, False))
    assert top["distributedInfo"]["rank"] == {}


def test_wrong_types_in_scanned_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every FAST_STRIDE-th case."""
    _run(fast_share(CASES, FAST_STRIDE), tmp_path, monkeypatch)


def _field_and_value(case: Case) -> tuple[str, str]:
    return case.field, json.dumps(case.value)


def test_the_slow_share_holds_every_field_and_value() -> None:
    cases = fast_share(CASES, FAST_STRIDE) + slow_share(CASES, FAST_STRIDE, _field_and_value)
    assert {_field_and_value(c) for c in cases} == {_field_and_value(c) for c in CASES}
    assert {c.seed for c in cases} == set(SEEDS) and {c.every for c in cases} == {True, False}


@pytest.mark.slow
def test_wrong_types_in_every_scanned_field(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _run(slow_share(CASES, FAST_STRIDE, _field_and_value), tmp_path, monkeypatch)
