"""The frames of ``load()`` against report.json's declared types (nsbridge/contract/report.py).

Each frame's rows are one declared record of the report: every column must be a field that
record declares, with a type of the same kind (a number for int64 and float64, a string for
str, a flag for bool, a list or object for object), and every scalar field the record
declares must be a column, or be named below with the reason it is not. A field added to
the types and not to the frame (or the other way) fails here.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest

from nsbridge.contract import report as C
from nsbridge.contract.introspect import bare, hints, is_typed_dict
from nsbridge.report import frames as F
from nsbridge.report.views.timeline_view import NSYS_OP_DTYPES

# frame -> (its columns and dtypes, the declared record of one row)
FRAMES: dict[str, tuple[dict[str, str], Any]] = {
    "ops": (F.OPS, C.Op),
    "ops nsys_*": (NSYS_OP_DTYPES, C.OpNsys),
    "kernels": (F.KERNELS, C.DeviceWork),
    "op_shapes": (F.OP_SHAPES, C.OpGroupsByShape),
    "op_sources": (F.OP_SOURCES, C.OpGroupsBySource),
    "memory": (F.MEMORY, C.MemoryPoints),          # each column one of the lists
    "steps": ({**F.STEPS, **F.STEPS_RUNS}, C.StepsPerStep),
    "sync_points": (F.SYNC_POINTS, C.SyncPoint),
    "gaps": (F.GAPS, C.DeviceIdleGap),
    "timeline_ops": (F.TIMELINE_OPS, C.TimelineOp),
    "timeline_gaps": (F.TIMELINE_GAPS, C.TimelineIdleGap),
    "ranks": (F.RANKS, C.DistributedRank),
}
# ops[]'s per-pass objects, flattened to KEY_name columns (frames._op_row)
FLATTENED = {("ops", "tensor_cores"): C.TensorCoreMark, ("ops", "nsys"): C.OpNsys,
             ("ops", "ncu"): None}   # ncu's quantities are named by the profile's metric set
# counts declared as numbers of 0 or more (a whole number is one) while their column is an
# integer; declaring them int would refuse a report that wrote 3.0. The list only shrinks.
COUNTS_DECLARED_AS_NUMBERS = {("ops", "calls"), ("steps", "run"), ("sync_points", "count")}
# torch's shape text, parsed into lists by the frame (frames._shape)
PARSED_FROM_TEXT = {("op_shapes", "shape")}
KINDS = {"int64": (int,), "Int64": (int,), "float64": (float, int), "str": (str,),
         "bool": (bool,), "object": (list, dict)}


def _kind(declared: Any) -> Any:
    inner = bare(declared)
    if inner is Any:
        return Any
    origin = typing.get_origin(inner) or inner
    if origin is typing.Literal:
        return str
    return dict if is_typed_dict(inner) else origin


@pytest.mark.parametrize("frame", sorted(FRAMES))
def test_every_column_is_a_declared_field_of_the_same_kind(frame: str) -> None:
    columns, record = FRAMES[frame]
    declared = hints(record)
    flattened = {f"{key}_{name}": kind for (where, key), inner in FLATTENED.items()
                 if where == frame and inner for name, kind in hints(inner).items()}
    wrong = []
    for column, dtype in columns.items():
        field = declared.get(column, flattened.get(column))
        if field is None:
            wrong.append(f"{column}: not declared in {record.__name__}")
            continue
        kind = _kind(field)
        if frame == "memory":                      # a column per list of points
            kind = float
        if kind is float and dtype in ("int64", "Int64") and (
                frame, column) in COUNTS_DECLARED_AS_NUMBERS:
            continue
        if (frame, column) in PARSED_FROM_TEXT and kind is str and dtype == "object":
            continue
        if kind is not Any and kind not in KINDS[dtype]:
            wrong.append(f"{column}: {dtype} column, declared {field}")
    assert not wrong, f"r.{frame}:\n" + "\n".join(wrong)


def _undeclared_columns(frame: str, columns: dict[str, str], record: Any) -> list[str]:
    """The scalar fields ``record`` declares that the frame has no column for."""
    return [key for key, field in hints(record).items() if key not in columns
            and (frame, key) not in FLATTENED and _kind(field) in (int, float, str, bool)]


@pytest.mark.parametrize("frame", sorted(FRAMES))
def test_every_declared_scalar_is_a_column(frame: str) -> None:
    columns, record = FRAMES[frame]
    missing = _undeclared_columns(frame, columns, record)
    assert not missing, f"{record.__name__} declares {missing}, which r.{frame} lacks"


def test_the_exceptions_are_still_needed() -> None:
    for frame, column in COUNTS_DECLARED_AS_NUMBERS:
        columns, record = FRAMES[frame]
        assert columns[column] in ("int64", "Int64") and _kind(hints(record)[column]) is float
    for frame, column in PARSED_FROM_TEXT:
        columns, record = FRAMES[frame]
        assert columns[column] == "object" and _kind(hints(record)[column]) is str


def test_a_field_added_to_a_record_only_is_found() -> None:
    """The check, shown to fail: the gaps' record declaring one more scalar."""
    widened = typing.TypedDict("widened", {**hints(C.DeviceIdleGap), "new_us": float},
                               total=False)
    assert _undeclared_columns("gaps", F.GAPS, widened) == ["new_us"]
