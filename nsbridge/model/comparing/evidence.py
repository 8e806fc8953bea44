"""Is there a slowdown at all? The gate's significance question, with its false-alarm bound.

A gate judges many quantities at once (the step time and every gated op) and may look at
the data several times (after 3 pairs, 4, ... up to ``--max-processes``). Each look and
each quantity is a chance to call unchanged code slower, so the chances are budgeted
(docs/explanation/gate-rule.md):

- **per quantity**, a one-sided paired t test of a slowdown (the mean log change B/A
  over the pairs above 0, K - 1 degrees of freedom): only a slowdown fails a gate, so no
  share of the bound is spent on speed-ups; an op whose statistic (median or 10th
  percentile) was chosen from two counts as two tests (its p-value doubled, Bonferroni
  over the choice);
- **over the quantities of one look**, Holm's weighted step-down procedure at that
  look's share of the bound, the step time weighted as all the ops together (half the
  share to the step, the other half to the ops, split by each op's share of the op time):
  the family-wise error rate of the look is at most that share, whatever the dependence
  between ops;
- **over the looks**, the bound ``ALPHA`` is spent as the pairs grow (``Budget``): by
  the look with the j-th of L possible pair counts, ALPHA (j / L)^2 in all, so the early
  looks, whose few pairs could only show a huge change, spend little, and by the union
  bound the chance that unchanged code is ever called slower, at any look and in any
  quantity, is at most ``ALPHA``. A look decides PASS without spending anything: a pass
  is not a false alarm.

So a slowdown is *significant* only when the data show it at that budgeted level; the
gate's threshold then asks whether it is large enough to fail the gate
(model.comparing.change.judge_evidence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

ALPHA = 0.01     # the most often a gate may call unchanged code changed, all told

_EPS = 1e-15
_TINY = 1e-300


@dataclass(frozen=True)
class Budget:
    """The gate's false-alarm bound ``alpha``, spent over the looks at ``first`` to
    ``most`` pairs (one look by default: all of it at once)."""

    alpha: float = ALPHA
    first: int = 2
    most: int = 2

    @property
    def looks(self) -> int:
        return looks(self.first, self.most)

    def spent_by(self, pairs: int) -> float:
        """The share of the bound spent by the look at ``pairs`` pairs, all told."""
        j = min(max(pairs - self.first + 1, 0), self.looks)
        return self.alpha * (j / self.looks) ** 2

    def at(self, pairs: int) -> float:
        """The share of the bound the look at ``pairs`` pairs may spend (its Holm level);
        a look past ``most`` (a folder judged again with more pairs) spends what is left
        at ``most``, nothing more."""
        pairs = min(max(pairs, self.first), self.most)
        return self.spent_by(pairs) - self.spent_by(pairs - 1)


def looks(first: int, last: int) -> int:
    """How many looks a gate that starts at ``first`` pairs and may grow, a pair at a
    time, to ``last`` pairs can take."""
    return max(last - first + 1, 1)


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if df <= 0 or math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def slowdown_p(point: float, spread: float, pairs: int) -> float:
    """The one-sided p-value of a mean paired change ``point`` (log) with standard
    deviation ``spread`` over ``pairs`` pairs: no change, against a slowdown. Identical
    pairs (no spread) with a slowdown are as significant as can be."""
    if pairs < 2:
        return 1.0
    if spread <= 0.0:
        return 0.0 if point > 0.0 else 1.0
    two = t_two_sided_p(point / (spread / math.sqrt(pairs)), pairs - 1)
    return two / 2.0 if point > 0 else 1.0 - two / 2.0


def holm(p_values: Mapping[str, float], alpha: float,
         weights: Mapping[str, float] | None = None) -> set[str]:
    """The names whose no-change hypothesis Holm's step-down procedure rejects at
    family-wise level ``alpha``; with ``weights`` (1 where not given), the weighted
    procedure (Holm 1979): the remaining hypotheses ordered by p / w, each rejected while
    p <= alpha * w / (the weights still in play), which holds the same level."""
    weight = {name: float((weights or {}).get(name, 1.0)) for name in p_values}
    ordered = sorted(p_values.items(), key=lambda item: (item[1] / weight[item[0]], item[0]))
    left = sum(weight.values())
    rejected: set[str] = set()
    for name, p in ordered:
        if p > alpha * weight[name] / left:
            break
        rejected.add(name)
        left -= weight[name]
    return rejected


def significant(p_values: Mapping[str, float], budget: Budget, pairs: int,
                primary: str | None = None,
                shares: Mapping[str, float] | None = None) -> set[str]:
    """The quantities whose slowdown is significant at the look at ``pairs`` pairs. The
    ``primary`` quantity (the step time) carries half the look's share, the others the
    other half together: the step, which every slowdown shows in, is not diluted by the
    number of ops judged beside it. With ``shares`` (each op's share of the step's op
    time, both sides alike), the ops' half is split in proportion to them, at least
    ``MIN_WEIGHT`` each: a slowdown costs the step its size times the op's share, so the
    bound goes where a slowdown could fail the gate (an op of 1% must slow by the whole
    floor's worth to matter, which needs little of it); without, equally."""
    weights = {name: op_weight(name, shares) for name in p_values if name != primary}
    if primary is not None and primary in p_values:
        weights[primary] = max(sum(weights.values()), MIN_WEIGHT)
    return holm(p_values, budget.at(pairs), weights)


MIN_WEIGHT = 0.01   # an op's least weight by share (the gate's --min-share default)


def op_weight(name: str, shares: Mapping[str, float] | None) -> float:
    """An op's Holm weight: its share of the op time (at least MIN_WEIGHT), 1 without
    shares."""
    if shares is None:
        return 1.0
    return max(float(shares.get(name, 0.0)), MIN_WEIGHT)


def chosen_p(p: float, choices: int) -> float:
    """A p-value of a statistic picked from ``choices`` candidates, made valid whatever
    picked it (Bonferroni over the candidates)."""
    return min(1.0, p * max(choices, 1))


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of a rate ``successes / trials``."""
    if trials <= 0:
        return (0.0, 1.0)
    rate = successes / trials
    centre = rate + z * z / (2 * trials)
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials))
    scale = 1 + z * z / trials
    return (max(0.0, (centre - half) / scale), min(1.0, (centre + half) / scale))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            result *= c * d
        if abs(c * d - 1.0) < _EPS:
            break
    return result

