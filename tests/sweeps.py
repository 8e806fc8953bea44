"""How much of a fuzzer's sweep each test tier runs.

A sweep lists every (field, value) pair of an input, each in several variants: seed files,
one record or every record. The fast tier runs every ``stride``-th case. The slow tier
(``make test``) runs a covering share: one variant of every (field, value) pair the fast
tier left, each pair's variant taken in turn so the seeds and "one or every" alternate down
the sweep. ``NSBRIDGE_FUZZ=all`` (``make fuzz``) runs every case, as before a release.
"""

from __future__ import annotations

import os
from typing import Callable, Hashable, Sequence, TypeVar

Case = TypeVar("Case")

EVERY_CASE = os.environ.get("NSBRIDGE_FUZZ") == "all"


def fast_share(cases: Sequence[Case], stride: int) -> list[Case]:
    """The fast tier's cases: every ``stride``-th."""
    return list(cases[::stride])


def slow_share(cases: Sequence[Case], stride: int,
               pair: Callable[[Case], Hashable]) -> list[Case]:
    """The slow tier's cases, those of the fast tier excepted: every one under
    NSBRIDGE_FUZZ=all, else one variant of each ``pair(case)`` the fast tier did not
    already cover, the n-th pair's variant being its (n mod variants)-th."""
    rest = [case for number, case in enumerate(cases) if number % stride]
    if EVERY_CASE:
        return rest
    covered = {pair(case) for case in fast_share(cases, stride)}
    variants: dict[Hashable, list[Case]] = {}
    for case in rest:
        if pair(case) not in covered:
            variants.setdefault(pair(case), []).append(case)
    return [group[turn % len(group)] for turn, group in enumerate(variants.values())]


def seeded(first: int, cases: int, share: int = 4) -> range:
    """The seeded cases a random fuzzer's slow test runs from ``first``: all ``cases`` under
    NSBRIDGE_FUZZ=all, one in ``share`` of them otherwise."""
    return range(first, first + (cases if EVERY_CASE else cases // share))
