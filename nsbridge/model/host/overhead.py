"""The profiler's own cost: measured steps against unprofiled steps of the same process.

The ratio is median(measured step) / median(unprofiled step) with a 95% bootstrap
interval (each side resampled on its own). What the report says depends on where that
interval lies: above 1x, the profiler slowed the steps by about that much; around 1x, the
overhead is not measurable within the interval; below 1x, the machine's speed changed
during the run and no overhead can be read off it; on a contended machine, the difference
may be the contention's, so it is not called the profiler's.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..stats import LEVEL, resample_indices
from ...contract.report import Overhead
from ...schema.records import ChildStep


def profiler_overhead(child_steps: Sequence[ChildStep], contended: bool = False,
                      threads: Optional[float] = None) -> Overhead:
    """{profiled_steps, unprofiled_steps, profiled_step_ms, unprofiled_step_ms, ratio,
    ratio_ci, kind, note}; kind: slower, not-measurable, faster, contended, too-few.
    ``threads``: torch's intra-op threads in the process (advice does not ask for one
    thread when it ran with one)."""
    profiled = np.asarray([s["wall_ms"] for s in child_steps if s["phase"] == "active"])
    bare = np.asarray([s["wall_ms"] for s in child_steps if s["phase"] == "unprofiled"])
    result: Overhead = {"profiled_steps": int(profiled.size),
                              "unprofiled_steps": int(bare.size), "profiled_step_ms": None,
                              "unprofiled_step_ms": None, "ratio": None, "ratio_ci": None,
                              "kind": "too-few", "note": None}
    if profiled.size:
        result["profiled_step_ms"] = round(float(np.median(profiled)), 3)
    if bare.size:
        result["unprofiled_step_ms"] = round(float(np.median(bare)), 3)
    if not profiled.size or not bare.size or not result["unprofiled_step_ms"]:
        result["note"] = ("not enough unprofiled steps to compare (the schedule's wait steps, "
                          "or steps after the measured window, give the baseline)")
        return result
    ratio = float(np.median(profiled) / np.median(bare))
    low, high = _ratio_interval(profiled, bare)
    result.update({"ratio": round(ratio, 3), "ratio_ci": [round(low, 3), round(high, 3)]})
    span = (f"{ratio:.2f}x the unprofiled ones (95% interval {low:.2f}-{high:.2f}x; "
            f"{profiled.size} measured, {bare.size} unprofiled steps)")
    if contended:
        result["kind"] = "contended"
        result["note"] = ("not known on this run: the machine was contended while the script "
                          "ran, so measured and unprofiled steps differ by the contention as "
                          "much as by the profiler (report.json keeps the ratio); measure on "
                          "a quieter machine" + ("" if threads == 1 else
                                                 ", or with nsbridge triage --threads 1"))
    elif low > 1.0:
        result["kind"] = "slower"
        result["note"] = (f"the profiler slowed the measured steps by {100 * (ratio - 1):.0f}% "
                          f"({span}): their absolute CPU times are inflated by about that much; "
                          "shares and rankings are less affected")
    elif high < 1.0:
        result["kind"] = "faster"
        result["note"] = (f"measured steps ran faster than unprofiled ones ({span}): the "
                          "machine's speed changed during the run (other load, clocks, caches), "
                          "so the profiler's overhead cannot be read off this run; run "
                          "again on a quieter machine, or with more steps")
    else:
        bound = 100 * max(1.0 - low, high - 1.0)
        result["kind"] = "not-measurable"
        result["note"] = (f"the profiler's overhead is not measurable within ±{bound:.0f}%: "
                          f"measured steps took {span}; more steps narrow it (a script that "
                          "runs more steps after the window, or schedule.active in a "
                          "profile)")
    return result


def _ratio_interval(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """95% bootstrap interval of median(a) / median(b); the point when a side has one step."""
    if a.size < 2 and b.size < 2:
        point = float(np.median(a) / np.median(b))
        return point, point
    ma = np.median(a[resample_indices(a.size, seed=1)], axis=1)
    mb = np.median(b[resample_indices(b.size, seed=2)], axis=1)
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(ma / mb, [tail, 100 - tail])
    return float(low), float(high)
