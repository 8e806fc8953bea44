"""The small records (manifest.json, child.json, summary.json, the job mailbox) are declared
once, as TypedDicts in schema.records; the check their readers run is derived from those
declarations, so a field declared there is checked, and a required one refused when absent."""

from __future__ import annotations

from typing import Annotated, Optional, TypedDict

import pytest

from nsbridge.schema import records as R
from nsbridge.schema.records import Required
from nsbridge.schema.shape import _SIGNED, shape_of


def test_a_field_declared_on_the_record_is_checked_when_read_back() -> None:
    good = {"status": "ok", "exit_code": 0, "steps": [{"index": 0, "wall_ms": 1.5,
                                                       "phase": "active", "nsbridge_ms": 0.2}]}
    assert R.record_problem(good, R.CHILD_SHAPE) is None
    # nsbridge_ms is declared on ChildStep only: its check comes from there
    bad = {**good, "steps": [{**good["steps"][0], "nsbridge_ms": "fast"}]}
    assert R.record_problem(bad, R.CHILD_SHAPE) == \
        'steps[0].nsbridge_ms is "fast", not a number of 0 or more'
    assert R.record_problem({"exit_code": 0}, R.CHILD_SHAPE) == "status is missing"


def test_ranks_and_file_names_keep_their_bounds() -> None:
    summary = {"rank": 2, "world_size": 2, "status": "ok", "exit_code": 0}
    assert R.record_problem(summary, R.SUMMARY_SHAPE) is None
    assert R.record_problem({**summary, "world_size": 0}, R.SUMMARY_SHAPE) == \
        f"world_size is 0, not a whole number from 1 to {R.MAX_RANKS}"
    assert R.record_problem({**summary, "trace": "../elsewhere.json"}, R.SUMMARY_SHAPE) == \
        'trace is "../elsewhere.json", not a file name in the record\'s folder'
    spec = {"target": "train.py", "args": [], "module": False, "cwd": ".", "profile": "default",
            "pass_id": "p1"}
    word = {"pass": "timeline", "go": True, "spec": {**spec, "ranks": [0, -1]}}
    assert R.record_problem({**word, "spec": {**spec, "ranks": [0, 1]}}, R.WORD_SHAPE) is None
    assert R.record_problem({**word, "spec": {"ranks": [0, 1]}}, R.WORD_SHAPE) == \
        "spec.target is missing"                     # a spec no rank could run
    assert R.record_problem(word, R.WORD_SHAPE) == \
        f"spec.ranks[1] is -1, not a whole number from 0 to {R.MAX_RANKS - 1}"


class _Inner(TypedDict):
    n: int


class _Declared(TypedDict, total=False):
    name: Required[str]
    at: Annotated[float, _SIGNED]
    inner: Optional[_Inner]
    items: list[_Inner]


def test_the_shape_follows_the_declaration() -> None:
    shape = shape_of(_Declared)
    assert set(shape) == {"name", "at", "inner", "items"}
    assert R.record_problem({"at": -3.0}, shape) == "name is missing"
    assert R.record_problem({"name": "x", "at": -3.0, "inner": {}}, shape) == "inner.n is missing"
    assert R.record_problem({"name": "x", "items": [{"n": True}]}, shape) == \
        "items[0].n is true, not a number of 0 or more"
    with pytest.raises(TypeError, match="cannot hold"):
        shape_of(set)
