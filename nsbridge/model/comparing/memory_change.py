"""Memory between two sides of a comparison: the peak and the memory held at each step's
end, per process, and the module, op and line that hold the added bytes.

Allocation sizes do not depend on the machine's speed, so a process's peak repeats from
process to process far more closely than its times do; still, the answer is decided only
where every process agrees: a regression when the lowest new peak is above the highest base
peak by more than the threshold (``--fail-above-mib``; by default the larger of
DEFAULT_PCT of the base peak and DEFAULT_FLOOR_MIB), undecided when the medians differ by
more than it but the processes' ranges do not, a pass otherwise. The added bytes are named
from the holders at each side's peak (model.device.memory_holders): the (kind, module,
op, line) groups whose MiB rose most.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ...contract.comparison import MemoryChange, MemoryRise
from ...contract.report import Memory, Report

DEFAULT_PCT = 20.0          # of the base peak: the default threshold...
DEFAULT_FLOOR_MIB = 16.0    # ...but never under this many MiB
TOP_RISES = 3


def memory_change(base: Sequence[Report], new: Sequence[Report],
                  fail_above_mib: Optional[float] = None) -> Optional[MemoryChange]:
    """The peaks of both sides and the verdict on them; None when a side has no memory
    section (a trace recorded without profile_memory) or the sides' levels differ in
    kind (allocator totals on one side, levels since the window start on the other)."""
    mem_a = [m for r in base if (m := r.get("memory")) and m.get("peak_mib") is not None]
    mem_b = [m for r in new if (m := r.get("memory")) and m.get("peak_mib") is not None]
    peaks_a = np.array([float(m.get("peak_mib") or 0.0) for m in mem_a])
    peaks_b = np.array([float(m.get("peak_mib") or 0.0) for m in mem_b])
    if not mem_a or not mem_b or {bool(m.get("relative")) for m in mem_a + mem_b} == {True, False}:
        return None
    held_a, held_b = _held(mem_a), _held(mem_b)
    base_peak = float(np.median(peaks_a))
    threshold = (float(fail_above_mib) if fail_above_mib is not None
                 else max(abs(base_peak) * DEFAULT_PCT / 100.0, DEFAULT_FLOOR_MIB))
    rise = float(np.median(peaks_b)) - base_peak
    surely = float(peaks_b.min() - peaks_a.max())
    status = ("regressed" if surely > threshold else
              "inconclusive" if rise > threshold else "pass")
    return {
        "status": status, "threshold_mib": round(threshold, 3),
        "threshold_from": "--fail-above-mib" if fail_above_mib is not None
        else f"max({DEFAULT_PCT:g}% of the base peak, {DEFAULT_FLOOR_MIB:g} MiB)",
        "relative": bool(mem_a[0].get("relative")), "device": mem_b[0].get("device"),
        "a_peak_mib": _range(peaks_a), "b_peak_mib": _range(peaks_b),
        "rise_mib": round(rise, 3), "least_rise_mib": round(surely, 3),
        "a_held_mib": _range(held_a) if len(held_a) else None,
        "b_held_mib": _range(held_b) if len(held_b) else None,
        "rises": _rises(mem_a[0], mem_b[0]),
    }


def _held(mems: list[Memory]) -> np.ndarray:
    """Memory held at the last measured step's end, one per process that has it."""
    return np.array([float(ends[-1]) for m in mems if (ends := m.get("per_step_end_mib"))])


def _range(values: np.ndarray) -> list[float]:
    """[lowest, median, highest] over the side's processes."""
    return [round(float(values.min()), 3), round(float(np.median(values)), 3),
            round(float(values.max()), 3)]


def _rises(a: Memory, b: Memory) -> list[MemoryRise]:
    """The holder groups whose MiB at the peak rose most from A's first process to B's."""
    def groups(m: Memory) -> dict[tuple, float]:
        rows = (m.get("holders") or {}).get("rows") or []
        out: dict[tuple, float] = {}
        for r in rows:
            key = (r["kind"], r.get("module"), r.get("op"), r.get("line"))
            out[key] = out.get(key, 0.0) + float(r.get("mib") or 0.0)
        return out

    ga, gb = groups(a), groups(b)
    rises = sorted(((gb[k] - ga.get(k, 0.0), k) for k in gb), key=lambda x: -x[0])
    return [{"kind": k[0], "module": k[1], "op": k[2], "line": k[3], "added_mib": round(d, 3)}
            for d, k in rises[:TOP_RISES] if d > 0.05]
