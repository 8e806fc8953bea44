"""model.keys.first_match against pandas' own lookup (Series.map over the keys' first
occurrences), on random ids with repeats, missing ids, -0.0 and empty inputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsbridge.model.keys import first_match


def _pandas_first_match(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    positions = pd.Series(np.arange(len(keys)), index=keys)
    positions = positions[positions.index.notna() & ~positions.index.duplicated()]
    found = pd.Series(queries, dtype=np.float64).map(positions).to_numpy()
    return np.where(np.isnan(found), -1, np.nan_to_num(found, nan=-1)).astype(np.int64)


@pytest.mark.parametrize("seed", range(40))
def test_first_match_equals_a_pandas_map(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(-5, 40, int(rng.integers(0, 200))).astype(np.float64)
    queries = rng.integers(-8, 45, int(rng.integers(0, 300))).astype(np.float64)
    for values in (keys, queries):
        if len(values):
            values[rng.random(len(values)) < 0.1] = np.nan
    if seed % 4 == 0 and len(keys) and len(queries):
        keys[0], queries[-1] = -0.0, 0.0
    assert np.array_equal(first_match(keys, queries), _pandas_first_match(keys, queries))


def test_large_ids_match_exactly() -> None:
    """Kineto ids beyond 2**32 and neighbours one apart stay distinct."""
    keys = np.array([2.0**40, 2.0**40 + 1, 7.0, 2.0**40])
    queries = np.array([2.0**40 + 1, 2.0**40, 8.0, 7.0])
    assert first_match(keys, queries).tolist() == [1, 0, -1, 2]
