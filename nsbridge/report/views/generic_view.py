"""A section no view knows (a new pass without a registered view): its scalars as items,
each list of records as a table, so every pass is shown as it is."""

from __future__ import annotations

from typing import Any, Optional

from ..document.document import Items, Section, Table


def generic_section(key: str, value: Any, limit: Optional[int]) -> Section:
    """A section no view knows: its scalars as items, each list of records as a table."""
    if not isinstance(value, dict):
        return Section(key, key, [Items([_scalar(value)])])
    items = [f"{name}: {_scalar(v)}" for name, v in value.items()
             if not _is_records(v)]
    blocks: list[Any] = [Items(items)] if items else []
    for name, records in value.items():
        if _is_records(records):
            header = list(dict.fromkeys(k for r in records for k in r))
            blocks.append(Table(header, [[_scalar(r.get(h)) for h in header]
                                         for r in records[:limit]], lead=f"{name}:"))
    return Section(key, key, blocks)


def _is_records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _scalar(value: Any) -> str:
    """A value as a cell: '-' for None, lists and dicts in short."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return f"{len(value)} item(s)"
    return str(value)
