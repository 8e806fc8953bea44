"""String tests on name columns, evaluated once per distinct name, not once per row.

A trace of millions of events holds a few thousand distinct names; pandas' ``.str``
methods would run Python per row. ``name_mask`` factorizes the column and applies the
predicate to the distinct values only. ``factorize`` is pandas' answer, got cheaply: the
trace reader's text columns are Categoricals, whose codes already are the answer; for
other columns, rows holding the same str object (one string table per file) are grouped
by object address first (hashing integers, several times faster than hashing a million
strings) and only one row per group is hashed as a string.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Collection

import numpy as np
import pandas as pd


def name_mask(values: Any, predicate: Callable[[str], Any]) -> np.ndarray:
    """Boolean array: ``predicate(value)`` for each entry (False for missing values). A
    Categorical's predicate runs over its categories, read through its own codes."""
    codes, uniques = value_codes(values)
    hits = np.fromiter((bool(predicate(str(u))) for u in uniques), dtype=bool,
                       count=len(uniques))
    found = np.flatnonzero(hits)
    if not len(found):
        return np.zeros(len(codes), dtype=bool)
    if len(found) == 1:   # one value: a comparison, no gather
        return np.asarray(codes == found[0])
    return np.append(hits, False)[codes]   # a missing value's -1 reads the last: False


def is_in(values: Any, wanted: Collection[str]) -> np.ndarray:
    """``values.isin(wanted)`` as a boolean array, tested once per distinct value (a
    Categorical's categories): pandas' isin maps each row to the wanted codes."""
    wanted = frozenset(wanted)
    return name_mask(values, wanted.__contains__)


def factorize(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of the values as an object array (codes, -1 for missing; uniques in
    order of appearance), hashing one row per distinct object instead of every string:
    rows are first grouped by object identity (the array's slots are pointers, read as
    integers while the array holds the objects alive), then one row of each group is
    factorized by value, so equal strings held as different objects still share a code."""
    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        return _factorize_categorical(pd.Categorical(values))
    values = np.ascontiguousarray(np.asarray(values, dtype=object))
    if not len(values):
        return pd.factorize(values)
    slots = (ctypes.c_ssize_t * len(values)).from_address(values.ctypes.data)
    groups, pointers = pd.factorize(np.frombuffer(memoryview(slots), dtype=np.intp))
    firsts = np.empty(len(pointers), dtype=np.intp)
    firsts[groups[::-1]] = np.arange(len(groups) - 1, -1, -1)
    codes, uniques = pd.factorize(values[firsts])
    return codes[groups], uniques


def value_codes(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, -1 where missing; the distinct values the codes index), the cheapest
    way: a Categorical's own small codes and categories (unused ones included), else
    ``factorize``. A per-value array with one extra last entry is indexed by the codes
    directly, -1 landing on that entry."""
    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        categorical = pd.Categorical(values)
        return np.asarray(categorical.codes), np.asarray(categorical.categories, dtype=object)
    return factorize(values)


def row_groups(*columns: Any) -> tuple[np.ndarray, np.ndarray]:
    """(group code per row, first row of each group) for the tuples of the columns'
    values, codes in order of first appearance as ``groupby(sort=False)`` numbers them. A
    missing value is a value of its own here. Grouping by these codes puts the same rows
    in each group, in the same order, as grouping by the columns, without hashing a
    string per row."""
    n = len(columns[0])
    groups = np.zeros(n, dtype=np.int64)
    width = 1   # the distinct values groups can take so far
    for column in columns:
        codes, uniques = factorize(column)
        if width * (len(uniques) + 1) >= 1 << 62:   # renumber before it could overflow
            groups, seen = pd.factorize(groups)
            width = len(seen)
        groups = groups * (len(uniques) + 1) + (codes + 1)
        width *= len(uniques) + 1
    groups, _ = pd.factorize(groups)   # numbered in order of first appearance
    firsts = np.empty(int(groups.max()) + 1 if n else 0, dtype=np.int64)
    firsts[groups[::-1]] = np.arange(n - 1, -1, -1)   # the last write, the first row, wins
    return groups, firsts


def first_and_distinct(values: Any, groups: np.ndarray,
                       n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group code (0..n-1): its first value that is not missing (None without one)
    and how many different ones it holds: groupby's ``first`` and ``nunique``, on codes
    instead of a string per row."""
    codes, uniques = factorize(values)
    rows = np.flatnonzero(codes >= 0)
    first = np.full(n, -1, dtype=np.int64)
    first[groups[rows][::-1]] = rows[::-1]      # the last write, the first row, wins
    table = np.empty(len(uniques) + 1, dtype=object)   # the last entry, None: for -1
    table[:-1] = uniques
    width = len(uniques) + 1
    pairs = np.unique(groups[rows].astype(np.int64) * width + codes[rows])
    return (table[np.where(first >= 0, codes[np.maximum(first, 0)], -1)],
            np.bincount(pairs // width, minlength=n))


def per_value(values: Any, convert: Callable[[Any], Any]) -> np.ndarray:
    """``convert(value)`` for each entry as an object array, called once per distinct value
    (a missing entry gets ``convert`` of NaN)."""
    codes, uniques = factorize(values)
    table = np.empty(len(uniques) + 1, dtype=object)
    table[:-1] = [convert(u) for u in uniques]
    table[-1] = convert(np.nan)
    return table[codes]


def _factorize_categorical(values: pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """factorize's answer for a Categorical (the trace reader's string columns) from its
    codes alone: the categories used, renumbered in order of first appearance."""
    codes = np.asarray(values.codes, dtype=np.intp)
    categories = np.asarray(values.categories, dtype=object)
    firsts = np.full(len(categories) + 1, len(codes), dtype=np.intp)  # last slot: missing
    firsts[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
    order = np.argsort(firsts[:-1], kind="stable")[:int((firsts[:-1] < len(codes)).sum())]
    renumber = np.full(len(categories) + 1, -1, dtype=np.intp)
    renumber[order] = np.arange(len(order))
    return renumber[codes], categories[order]


def starts_with(values: Any, prefix: str | tuple[str, ...]) -> np.ndarray:
    return name_mask(values, lambda s: s.startswith(prefix))


def thread_codes(pid: Any, tid: Any) -> tuple[np.ndarray, list[str]]:
    """(code per row, "pid/tid" key per code) without building a string per row."""
    pid_codes, pid_uniques = factorize(pid)
    tid_codes, tid_uniques = factorize(tid)
    pair = pid_codes.astype(np.int64) * max(len(tid_uniques), 1) + tid_codes
    codes, uniques = pd.factorize(pair)
    keys = [f"{pid_uniques[p // max(len(tid_uniques), 1)]}/{tid_uniques[p % max(len(tid_uniques), 1)]}"
            for p in uniques]
    return codes, keys
