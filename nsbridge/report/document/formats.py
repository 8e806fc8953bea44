"""The formatting vocabulary every view shares: a value as text with its unit and digits
(ms from µs, MiB, percentages, counts with their noun, a table cell by its kind). Numbers
only: no sentences, no layout, no escaping (each renderer escapes where it places text)."""

from __future__ import annotations

import math
from typing import Any, Optional, Union


def ms(us: Optional[float]) -> str:
    return decimals(us, 1e3, 3) or "-"

def file_names(files: Union[str, list[str], None]) -> str:
    """A file name, or several joined ("-" for none)."""
    if isinstance(files, list):
        return ", ".join(files) or "-"
    return files or "-"


def mib(value: Optional[float]) -> str:
    return decimals(value, 1, 2) or "-"

def us_from_ns(ns: Optional[float]) -> Optional[str]:
    return decimals(ns, 1e3, 2)

def ms_or_dash(value: Optional[float]) -> str:
    return decimals(value, 1, 3) or "-"

def decimals(value: Any, unit: float, digits: int) -> Optional[str]:
    """``value / unit`` with ``digits`` decimals; None when it was not measured."""
    number = measured(value)
    return None if number is None else fixed(number / unit, digits)

def measured(value: Any) -> Optional[float]:
    """A measured number as a float; None for None, NaN, infinities and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None

def fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, never '-0.0'."""
    return f"{round(value, digits) + 0.0:.{digits}f}"

def pct(share: float) -> str:
    """A share as a whole percentage ('12%'), never '-0%'."""
    return f"{fixed(100 * share, 0)}%"

def count(n: Optional[int], noun: str) -> str:
    """'no op', '1 op', '41 ops', '2 kernel launches' (None, not counted: 'no op')."""
    n = n or 0
    plural = "es" if noun.endswith(("ch", "sh", "s", "x")) else "s"
    return f"no {noun}" if n == 0 else f"{n} {noun}" + ("" if n == 1 else plural)

def is_number(cell: str) -> bool:
    """A table cell of a number: '12.5', '±3', '4/s', '7%', or '-' (not measured)."""
    text = cell.strip().lstrip("±").removesuffix("/s").removesuffix("%")
    if text == "-":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True

def int_text(value: Optional[float]) -> str:
    return "-" if value is None else str(value)

def cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "ms":
        return ms(value)
    if kind == "pct":
        return decimals(value, 1, 1) or "-"
    return str(value)
