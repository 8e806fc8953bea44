"""One change between two runs, judged against the gate's threshold: `diff` (two runs,
model.comparing.diff) by ``judge``, the interleaved gate (pairs of processes,
model.comparing.paired) by ``judge_evidence``, which asks first whether the change is
significant at the gate's false-alarm budget (model.comparing.evidence).

Every judged quantity (an op's time per step, the step time) comes as a log ratio B/A with
a 95% interval [low, high], and the time it adds per step. Against the threshold T
(``--fail-above``, percent) and the floor (``--min-step-share`` of the base step), for
`diff` its interval decides:

- **regressed**: the interval lies above no change and reaches T (a real slowdown that may
  be as large as T), and the time added is at least the floor;
- **inconclusive**: the interval holds both no change and T, and the time it could add
  reaches the floor: more measurement would settle it;
- **too small to matter**: a slowdown whose added time, even at the interval's top, stays
  under the floor (or, when real, under the floor at its estimate);
- **slower**: a real slowdown whose interval stays under T (below the gate's threshold);
- **within noise**: an interval around no change that stays under T;
- **faster** / **improved**: an interval below no change, by less / more than T.

So a regression is never called on a change the interval cannot tell from none, a pass
never on a change the interval cannot tell from T, and noise is never an improvement.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from ...contract.comparison import Blocker, ComparedRow, Outcome, Regression
from ...schema import exit_codes as X

Z = 1.96
# Student's t, 97.5th percentile, by degrees of freedom 1..30 (two-sided 95%)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
EXIT_CODES = {"pass": X.OK, "regression": X.ERROR, "inconclusive": X.INCONCLUSIVE}
# statuses of a judged change, and what a gate makes of each
GATING = {"regressed": "regression", "inconclusive": "inconclusive"}
DISPLAY_LIMIT_PCT = 999.0    # percentages past this print as ">+999%"


def t975(df: float) -> float:
    """The two-sided 95% Student t quantile for ``df`` degrees of freedom (1.96 past 30)."""
    return Z if df > 30 else _T975[max(int(df), 1) - 1]


def judge(point: float, low: float, high: float, fail_above: float, added_us: float,
          added_high_us: float, floor_us: float) -> str:
    """The status of one change (module docstring); logs of B/A, times in µs per step."""
    limit = math.log1p(fail_above / 100.0)
    if high >= limit:
        if added_high_us < floor_us or (low > 0 and added_us < floor_us):
            return "too small to matter"
        return "regressed" if low > 0 else "inconclusive"
    if low > 0:
        return "slower"
    if high < 0:
        return "improved" if point < -limit else "faster"
    return "within noise"


def judge_evidence(point: float, high: float, significant: bool, fail_above: float,
                   added_us: float, added_high_us: float, floor_us: float) -> str:
    """The status of one change the interleaved gate judged (docs/explanation/gate-rule.md):
    ``significant`` says whether the data show a change in the estimate's direction at
    all, at the gate's budgeted false-alarm level (model.comparing.evidence): a slowdown
    when ``point`` > 0, a speed-up when < 0. The threshold T then sizes it:

    - **regressed**: a significant slowdown whose estimate is at least T/2 and whose 95%
      interval reaches T, adding at least the floor;
    - **slower**: a significant slowdown whose 95% interval stays under T (below the
      threshold);
    - **inconclusive**: no significant slowdown while the interval reaches T (no change
      and T both fit the data), or a significant one under T/2 with T in its interval;
    - **too small to matter**: a slowdown whose added time stays under the floor (at its
      estimate when significant, else even at the interval's top);
    - **faster** / **improved**: a significant speed-up, by less / more than T (asked at
      the same budgeted level as a slowdown, but it fails nothing: a dozen unchanged ops
      are not "improved" by one chance interval below no change);
    - **within noise**: anything else.
    """
    limit = math.log1p(fail_above / 100.0)
    if significant and point > 0:
        if added_us < floor_us:
            return "too small to matter"
        if high < limit:
            return "slower"
        return "regressed" if point >= limit / 2.0 else "inconclusive"
    if high >= limit:
        return "too small to matter" if added_high_us < floor_us else "inconclusive"
    if significant and point < 0:
        return "improved" if point < -limit else "faster"
    return "within noise"


def different_work(point: float, high: float, fail_above: float, added_us: float,
                   added_high_us: float, floor_us: float) -> str:
    """The status of an op whose work changed (another dtype, layout or input shapes; logs
    of B/A, times in µs per step): the change of work is certain (noise never changes what
    an op computes), so its time is only sized, not tested for being a change at all:

    - **regressed**: its estimate is more than T% longer, adding the floor;
    - **inconclusive**: its estimate is under T but its 95% interval reaches T, where the
      time it could add reaches the floor (a float64 matmul measured -13% on a contended
      machine, interval -100%..>+999%, was passed as just "different work");
    - **different work**: the interval stays under T (or the time under the floor)."""
    limit = math.log1p(fail_above / 100.0)
    if point > limit and added_us >= floor_us:
        return "regressed"
    if high >= limit and added_high_us >= floor_us:
        return "inconclusive"
    return "different work"


def half_width_pct(low: Optional[float], high: Optional[float]) -> Optional[float]:
    """Half the width of an interval of log ratios, as a percent change."""
    if low is None or high is None:
        return None
    return round(100.0 * math.expm1((high - low) / 2.0), 2)


def detectable(rows: list[ComparedRow]) -> Optional[float]:
    """The change the comparison could see in most of the judged time: the base-time-
    weighted median of the judged rows' interval half-widths (percent)."""
    ok = [(r["half_width_pct"], r["a_us"]) for r in rows
          if r.get("half_width_pct") is not None and r.get("a_us")]
    if not ok:
        return None
    widths = np.array([w for w, _ in ok])
    weights = np.array([t for _, t in ok])
    order = np.argsort(widths)
    cum = np.cumsum(weights[order])
    return round(float(widths[order][np.searchsorted(cum, cum[-1] / 2.0)]), 1)


def pct(log_ratio: Optional[float]) -> Optional[float]:
    """A log ratio as a percent change (2 decimals)."""
    return None if log_ratio is None else round(100.0 * math.expm1(log_ratio), 2)


def interval_pct(low: Optional[float], high: Optional[float]) -> Optional[list[Optional[float]]]:
    return None if low is None else [pct(low), pct(high)]


def rounded(value: Optional[float], digits: int = 3) -> Optional[float]:
    return None if value is None else round(float(value), digits)


def outcome(blockers: list[Blocker], regressions: list[Regression],
            reasons: list[str]) -> Outcome:
    """pass, regression or inconclusive: not comparable first, then any regression, then
    anything that keeps the data from deciding."""
    if blockers:
        return "inconclusive"
    if regressions:
        return "regression"
    return "inconclusive" if reasons else "pass"
