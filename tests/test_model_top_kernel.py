"""The verdict's top kernel, grouped on integer codes, against pandas' own ranking
(groupby("name").sum() sorted descending) on random kernels with tied sums and repeats."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsbridge.model.analysis import _top_kernel


@pytest.mark.parametrize("seed", range(30))
def test_top_kernel_equals_pandas_ranking(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    names = np.array([f"k{i}" for i in rng.integers(0, 12, n)], dtype=object)
    if seed % 5 == 0:
        names[rng.random(n) < 0.2] = None            # missing names: groupby drops them
        names[0] = "k0"
    kernels = pd.DataFrame({"name": names, "dur": rng.choice([1.0, 2.0, 0.5, 3.25], n)})
    total = float(kernels["dur"].sum())
    by_name = kernels.groupby("name")["dur"].sum().sort_values(ascending=False)
    assert _top_kernel(kernels, total) == {"name": str(by_name.index[0]),
                                           "share": float(by_name.iloc[0] / total)}
