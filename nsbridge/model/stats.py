"""Spread and intervals of per-step samples: the numbers behind every "±" nsbridge prints.

Intervals are bootstrap percentile intervals (seeded, so a report is reproducible). When the
samples come from several processes (``groups``: the run each sample came from, as
``triage --runs`` pools them), the bootstrap is hierarchical: it resamples the processes,
then the steps within each, so the between-process spread, the largest on a shared
machine, widens the interval as it should.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
from ..contract.report import Spread

RESAMPLES = 2000
LEVEL = 0.95
SEED = 20261126


def resample_indices(n: int, groups: Optional[Sequence[Any]] = None,
                     resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n) indices into n samples: plain bootstrap, or hierarchical over
    ``groups`` (one label per sample) when there are at least two groups."""
    rng = np.random.default_rng(seed)
    if n == 0:
        return np.zeros((resamples, 0), dtype=np.int64)
    labels = np.asarray(groups if groups is not None else np.zeros(n))
    codes = np.unique(labels, return_inverse=True)[1].ravel()
    n_groups = int(codes.max()) + 1
    if n_groups < 2:
        return rng.integers(0, n, size=(resamples, n))
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    chosen = rng.integers(0, n_groups, size=(resamples, n_groups))      # groups drawn
    slot = chosen[:, codes]                                             # each sample's draw
    within = np.floor(rng.random((resamples, n)) * sizes[slot]).astype(np.int64)
    return order[starts[slot] + within]


def interval(samples: Union[Sequence[float], np.ndarray], stat: Callable[..., Any] = np.median,
             groups: Optional[Sequence[Any]] = None, level: float = LEVEL
             ) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """(point, low, high) of ``stat`` over the samples; (None, None, None) when empty; the
    interval collapses to the point with one sample (nothing to say about its spread)."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        return None, None, None
    point = float(stat(values))
    if values.size == 1:
        return point, point, point
    boot = stat(values[resample_indices(values.size, groups)], axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(boot, [tail, 100 - tail])
    return point, float(low), float(high)


def summary(samples: Sequence[float], groups: Optional[Sequence[Any]] = None,
            digits: int = 3) -> Optional[Spread]:
    """{n, median, ci_low, ci_high, p10, p90, min, max, mean}: the median with its 95%
    interval, and how the samples spread."""
    values = np.asarray([v for v in samples if v is not None], dtype=np.float64)
    if values.size == 0:
        return None
    point, low, high = interval(values, np.median, groups)
    p10, p90 = np.percentile(values, [10, 90])
    def r(value: Optional[float]) -> Optional[float]:
        return None if value is None else round(value, digits)
    return {"n": int(values.size), "median": r(point), "ci_low": r(low), "ci_high": r(high),
            "p10": r(float(p10)), "p90": r(float(p90)), "min": r(float(values.min())),
            "max": r(float(values.max())), "mean": r(float(values.mean()))}


def half_width_pct(s: Optional[dict[str, Any]]) -> Optional[float]:
    """Half the 95% interval of a ``summary`` as a percent of its median."""
    if not s or not s.get("median"):
        return None
    return round(50.0 * (s["ci_high"] - s["ci_low"]) / s["median"], 1)


def mean_half_widths_pct(rows: Sequence[Sequence[float]],
                         groups: Optional[Sequence[Any]] = None) -> list[Optional[float]]:
    """For each row of per-step samples (all the same length), half its mean's 95%
    interval as a percent of the mean; None for a row without spread to judge."""
    if not rows or len(rows[0]) < 2:
        return [None] * len(rows)
    values = np.asarray(rows, dtype=np.float64)
    means = values.mean(axis=1)
    boot = values[:, resample_indices(values.shape[1], groups)].mean(axis=2)
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(boot, [tail, 100 - tail], axis=1)
    return [round(float(50.0 * (h - lo) / m), 1) if m > 0 else None
            for m, lo, h in zip(means, low, high)]
