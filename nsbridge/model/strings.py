"""String tests on name columns, evaluated once per distinct name, not once per row.

A trace of millions of events holds a few thousand distinct names; pandas' ``.str``
methods would run Python per row. ``name_mask`` factorizes the column (hashing in C) and
applies the predicate to the distinct values only.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd


def name_mask(values: Any, predicate: Callable[[str], Any]) -> np.ndarray:
    """Boolean array: ``predicate(value)`` for each entry (False for missing values)."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    hits = np.fromiter((bool(predicate(str(u))) for u in uniques), dtype=bool,
                       count=len(uniques))
    if not len(hits):
        return np.zeros(len(codes), dtype=bool)
    return np.where(codes >= 0, hits[codes], False)


def starts_with(values: Any, prefix: str | tuple[str, ...]) -> np.ndarray:
    return name_mask(values, lambda s: s.startswith(prefix))


def thread_codes(pid: Any, tid: Any) -> tuple[np.ndarray, list[str]]:
    """(code per row, "pid/tid" key per code) without building a string per row."""
    pid_codes, pid_uniques = pd.factorize(np.asarray(pid, dtype=object))
    tid_codes, tid_uniques = pd.factorize(np.asarray(tid, dtype=object))
    pair = pid_codes.astype(np.int64) * max(len(tid_uniques), 1) + tid_codes
    codes, uniques = pd.factorize(pair)
    keys = [f"{pid_uniques[p // max(len(tid_uniques), 1)]}/{tid_uniques[p % max(len(tid_uniques), 1)]}"
            for p in uniques]
    return codes, keys
