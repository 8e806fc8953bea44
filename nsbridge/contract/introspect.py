"""What a declared report type is made of: its fields, its items, and what a value of it
is in words; and every key path a type declares, for the reference page and its tests."""

from __future__ import annotations

import typing
from functools import lru_cache
from typing import Any, Optional, Union

import msgspec

__all__ = ["bare", "declared_paths", "described", "expected", "hints", "is_required",
           "is_typed_dict", "member"]


def member(kind: Any, key: Optional[str]) -> Any:
    """The declared type of ``kind``'s field ``key``, or of its items (``key`` None)."""
    if key is not None and is_typed_dict(kind):
        return hints(kind).get(key, Any)
    args = typing.get_args(kind)
    return args[-1] if args else Any


def bare(kind: Any) -> Any:
    """``kind`` without Optional, Required and Annotated."""
    while True:
        origin = typing.get_origin(kind)
        if origin is Union:
            kinds = [k for k in typing.get_args(kind) if k is not type(None)]
            kind = kinds[0] if len(kinds) == 1 else Any
        elif origin is typing.Annotated:
            kind = typing.get_args(kind)[0]
        elif _is_presence(origin):
            kind = typing.get_args(kind)[0]
        else:
            return kind


def expected(kind: Any) -> str:
    """What a value of declared type ``kind`` is, in words."""
    bounds = next((m for m in _metadata(kind) if isinstance(m, msgspec.Meta)), None)
    kind = bare(kind)
    origin = typing.get_origin(kind) or kind
    if origin is typing.Literal:
        return " or ".join(f'"{v}"' for v in typing.get_args(kind))
    if origin in (float, int):
        whole = "a whole number" if origin is int else "a number"
        if bounds is not None and bounds.gt == 0:
            return f"{whole} above 0"
        if bounds is not None and bounds.ge == 0:
            return f"{whole} of 0 or more"
        return f"a finite {whole[2:]}" if origin is float else whole
    if origin is str:
        return "a non-empty string" if bounds is not None and bounds.min_length else "a string"
    if origin is bool:
        return "true or false"
    if origin is list:
        return "a list"
    if origin is dict or is_typed_dict(kind):
        return "an object"
    return "another value"


def _metadata(kind: Any) -> tuple[Any, ...]:
    """The Annotated metadata on ``kind``, under Optional and Required."""
    while True:
        origin = typing.get_origin(kind)
        if origin is typing.Annotated:
            return tuple(typing.get_args(kind)[1:])
        args = [k for k in typing.get_args(kind) if k is not type(None)]
        if origin in (None, list, dict) or not args:
            return ()
        kind = args[0]


def is_typed_dict(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, dict) and hasattr(kind, "__total__")


@lru_cache(maxsize=None)
def hints(kind: Any) -> dict[str, Any]:
    return typing.get_type_hints(kind, include_extras=True)


def declared_paths(kind: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every key path ``kind`` declares, depth first in declaration order, with its declared
    type: ``("ops[].kernels[].name", str)``. A list of objects adds ``[]`` to the path."""
    found: list[tuple[str, Any]] = []
    for key, inner in hints(kind).items():
        path = f"{prefix}.{key}" if prefix else key
        found.append((path, inner))
        items = bare(inner)
        while typing.get_origin(items) is list:
            path += "[]"
            items = bare(typing.get_args(items)[0])
        if is_typed_dict(items):
            found += declared_paths(items, path)
    return found


def described(kind: Any) -> str:
    """A declared type in words, for the reference page: 'null or a list of: an object'."""
    inner = bare(kind)
    if inner is Any:
        return "any value"
    if typing.get_origin(inner) is list:
        words = f"a list of: {described(typing.get_args(inner)[0])}"
    else:
        words = expected(kind)
    return f"null or {words}" if _optional(kind) else words


def _optional(kind: Any) -> bool:
    """Whether ``kind`` admits null (Optional, under Required and Annotated)."""
    while True:
        origin = typing.get_origin(kind)
        if origin is Union:
            return type(None) in typing.get_args(kind)
        if origin is typing.Annotated or _is_presence(origin):
            kind = typing.get_args(kind)[0]
        else:
            return kind is Any


def is_required(kind: Any) -> bool:
    """Whether a field of declared type ``kind`` is declared ``Required`` (always present)."""
    return str(typing.get_origin(kind)).endswith(".Required")


def _is_presence(origin: Any) -> bool:
    """Whether ``origin`` is Required or NotRequired (typing's or typing_extensions')."""
    return str(origin).endswith((".Required", ".NotRequired"))
