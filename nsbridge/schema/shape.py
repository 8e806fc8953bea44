"""Shapes of the small JSON records (schema.records) as plain values, and the check that
names the first field that is not of its shape: stdlib only, so the profiled process can
check what it reads. report.json has typed declarations of its own (nsbridge.contract).

A shape is a dict (an object with those keys), a one-item list (a list of such items), or
an atom (a leaf and its test); every field may be missing or null unless ``_Required``.
Numbers must be finite, 0 or more, and below ``HUGE`` (a 401-digit integer is not a time).

A record is declared once, as a TypedDict (schema.records); ``shape_of`` derives its shape
from the declaration: a TypedDict is an object of its fields (``Required`` ones
``_Required``, and all of a total one's), ``list[X]`` a list of X, ``Annotated[X, atom]`` that atom, and str, bool,
int, float and Any the atoms of those (a number: finite, 0 or more).
"""

from __future__ import annotations

import json
import math
import typing
from typing import Any, Callable, NamedTuple, Optional, Union


__all__ = ["HUGE", "Shape", "describe", "misshapen", "record_shape", "shape_of"]

HUGE = 1e18   # above any count, byte size or microsecond total a run can hold


class _Misshapen(Exception):
    """A field a reader uses is missing or of the wrong type."""


class _Atom(NamedTuple):
    """A leaf of the shape: what it must be, and the test."""

    what: str
    test: Callable[[Any], bool]


class _Required(NamedTuple):
    """A field that must be present (not missing, not null)."""

    shape: "Field"


def _is_number(value: Any) -> bool:
    """A finite number of 0 or more, below HUGE (an int too long for a float is not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value) and 0 <= value < HUGE
    except OverflowError:
        return False


def _is_signed(value: Any) -> bool:
    return _is_number(abs(value)) if isinstance(value, (int, float)) else False


# a field's shape: an atom, a required field, an object's fields, or [its items' shape]
Field = Union[_Atom, _Required, "Shape", list["Field"]]
Shape = dict[str, Field]     # an object's shape: its fields by key

_ANY = _Atom("anything", lambda v: True)
_TEXT = _Atom("a string", lambda v: isinstance(v, str))
_FLAG = _Atom("true or false", lambda v: isinstance(v, bool))
_NUMBER = _Atom("a number of 0 or more", _is_number)
_SIGNED = _Atom("a finite number", _is_signed)


_ATOMS = {str: _TEXT, bool: _FLAG, int: _NUMBER, float: _NUMBER, Any: _ANY, object: _ANY}


def record_shape(declared: type) -> Shape:
    """The shape of a record declared as a TypedDict (an object's fields).

    Raises:
        TypeError: ``declared`` is not a TypedDict, or holds a type a record cannot hold.
    """
    shape = shape_of(declared)
    if not isinstance(shape, dict):
        raise TypeError(f"{declared!r} is not a record (a TypedDict)")
    return shape


def shape_of(declared: Any) -> Field:
    """The shape of a declared type (see the module's docstring).

    Raises:
        TypeError: a type a record cannot hold (a bug in a declaration).
    """
    if isinstance(declared, type) and issubclass(declared, dict) and hasattr(declared,
                                                                              "__total__"):
        fields = typing.get_type_hints(declared, include_extras=True)
        return {key: _Required(shape_of(kind)) if _required(kind, declared.__total__)
                else shape_of(kind) for key, kind in fields.items()}
    origin, args = typing.get_origin(declared), typing.get_args(declared)
    if origin is typing.Annotated:
        return next(m for m in args[1:] if isinstance(m, _Atom))
    if _presence(declared):
        return shape_of(args[0])
    if origin is Union:
        kinds = [k for k in args if k is not type(None)]
        return shape_of(kinds[0]) if len(kinds) == 1 else _ANY
    if origin is list:
        return [shape_of(args[0])]
    if origin is dict or declared is dict:
        return {}
    if declared in _ATOMS:
        return _ATOMS[declared]
    raise TypeError(f"a record cannot hold {declared!r}")


def _required(kind: Any, total: bool) -> bool:
    """Whether a field declared ``kind`` in a TypedDict of ``total`` must be present."""
    mark = _presence(kind)
    return mark == "Required" or (total and mark != "NotRequired")


def _presence(kind: Any) -> str:
    """'Required' or 'NotRequired' where ``kind`` is marked so (typing's or
    typing_extensions'), else ''."""
    name = str(typing.get_origin(kind))
    return next((mark for mark in ("NotRequired", "Required") if name.endswith("." + mark)), "")


def misshapen(record: object, shape: Shape) -> Optional[str]:
    """The first field of ``record`` that does not have ``shape``, as 'FIELD is X, not Y';
    None when all do."""
    try:
        _conform(record, shape, "")
    except _Misshapen as bad:
        return str(bad)
    return None


def _conform(value: object, shape: Field, field: str) -> None:
    """Raise _Misshapen naming ``field`` where ``value`` is not of ``shape``."""
    if isinstance(shape, _Required):
        if value is None:
            raise _Misshapen(f"{field} is missing")
        shape = shape.shape
    if value is None:
        return
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise _Misshapen(f"{field} is {describe(value)}, not an object")
        for key, inner in shape.items():
            _conform(value.get(key), inner, f"{field}.{key}" if field else key)
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise _Misshapen(f"{field} is {describe(value)}, not a list")
        for i, item in enumerate(value):
            _conform(item, _Required(shape[0]), f"{field}[{i}]")
    elif isinstance(shape, _Atom) and not shape.test(value):
        raise _Misshapen(f"{field} is {describe(value)}, not {shape.what}")


def describe(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
