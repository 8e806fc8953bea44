"""Nsight Compute units -> one base spelling per quantity; nothing is guessed.

ncu prints auto-scaled units unless told ``--print-units base`` (and sometimes even then),
and the spellings changed across releases: 2022 ``msecond``, ``Mbyte``, ``cycle/usecond``;
2024+ ``ms``, ``Mbyte``, ``Ghz``, ``Gbyte/s``. Prefixes are decimal (``Kbyte`` = 1000
bytes: checked against the same report printed both ways). Base spellings here:

- time ``ns`` (ncu's own base for durations), rates per second ``/s``, frequency ``hz``;
- bytes ``byte``; counts (cycle, inst, sector, warp, block, thread, register, ...) as
  printed, without prefix; ``%`` as is.

A unit nsbridge does not know is returned as printed with ``known=False``, so callers can
say so instead of mixing scales silently.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_PREFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "P": 1e15}
_TIME = {"second": 1.0, "s": 1.0}
_COUNTS = {"byte", "hz", "cycle", "inst", "sector", "sectors", "warp", "block", "thread",
           "register", "request", "wavefront", "SM", "cluster", "instruction", "pixel", "bit",
           "warps", "blocks", "threads", "sample", "pass", "branches", "branch", "1"}
_PART = re.compile(r"^(?P<prefix>[numKMGTP]?)(?P<base>[A-Za-z]+|1)$")


class Unit(NamedTuple):
    """A normalised unit: multiply the printed value by ``factor`` to get ``unit``."""

    unit: str
    factor: float
    known: bool


def normalise(unit: str) -> Unit:
    """The base spelling of an ncu unit and the factor to get there."""
    unit = (unit or "").strip()
    if unit in ("", "%"):
        return Unit(unit, 1.0, True)
    parts = unit.split("/")
    if len(parts) > 2:
        return Unit(unit, 1.0, False)
    num = _part(parts[0], numerator=True)
    if num is None:
        return Unit(unit, 1.0, False)
    if len(parts) == 1:
        return Unit(num[0], num[1], True)
    den = _part(parts[1], numerator=False)
    if den is None:
        return Unit(unit, 1.0, False)
    return Unit(f"{num[0]}/{den[0]}", num[1] / den[1], True)


def _part(text: str, numerator: bool) -> tuple[str, float] | None:
    """(base spelling, factor) of one side of a unit, or None when unknown."""
    if text == "%":
        return "%", 1.0
    match = _PART.match(text)
    if not match:
        return None
    prefix, base = match["prefix"], match["base"]
    if text in _COUNTS or text in _TIME:   # a bare base ("byte", "s"): no prefix read
        prefix, base = "", text
    if base in _TIME:
        # durations in ns (ncu's base); "per second" in a denominator
        return ("ns", _PREFIX[prefix] * 1e9) if numerator else ("s", _PREFIX[prefix])
    if base in ("hz", "Hz"):
        return "hz", _PREFIX[prefix]
    if base in _COUNTS:
        return base, _PREFIX[prefix]
    return None

