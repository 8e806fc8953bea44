"""Exact-match lookups of numeric ids (External id, correlation) by sorting, not hashing.

``pd.Series.map`` with a float index hashes every query in Python-level machinery; one
sort of the keys and a binary search per query does the same lookup several times faster
on millions of GPU events.
"""

from __future__ import annotations

import numpy as np


def first_match(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the position of the first entry of ``keys`` equal to it, or -1.
    NaN matches nothing (as a missing id); -0.0 matches 0.0."""
    keys = np.asarray(keys)
    queries = np.asarray(queries)
    out = np.full(len(queries), -1, dtype=np.int64)
    if not len(keys) or not len(queries):
        return out
    order = np.argsort(keys, kind="stable")       # equal keys: the first one leads
    ordered = keys[order]
    leads = np.ones(len(ordered), dtype=bool)
    leads[1:] = ordered[1:] != ordered[:-1]
    distinct, where = ordered[leads], order[leads]
    at = np.minimum(np.searchsorted(distinct, queries), len(distinct) - 1)
    hit = distinct[at] == queries
    out[hit] = where[at[hit]]
    return out
