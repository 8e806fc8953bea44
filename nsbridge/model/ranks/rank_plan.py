"""Which ranks of a distributed run get the expensive per-kernel pass (Nsight Compute).

Replaying kernels costs minutes per rank, and the ranks of one job mostly do the same
work, so two are enough: the slowest rank (where the time goes) and the median rank (a
typical one to compare it with). "Slowest" uses the straggler's own measure: work outside
collectives when the ranks communicate (their step times even out while they wait for each
other), else the step time. Input: report["distributed"]; no I/O.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ...errors import DeepError
from .collectives import COMMUNICATION_OP
from ...contract.report import Distributed, DistributedRank, PickedRank


def pick_ranks(distributed: Distributed,
               asked: Optional[Sequence[int]] = None) -> list[PickedRank]:
    """[{rank, role, reason}]: the ranks named in ``asked`` (role "asked"), else the
    slowest and the median of the ranks that were profiled and ended well.

    Raises:
        DeepError: an asked-for rank the run does not have, or no rank to profile.
    """
    rows = {rank: r for r in distributed.get("ranks") or [] if (rank := r.get("rank")) is not None}
    usable = {rank: r for rank, r in rows.items()
              if r.get("status") == "ok" and r.get("profiled") and r.get("step_ms") is not None}
    if asked:
        unknown = [r for r in asked if r not in rows]
        if unknown:
            raise DeepError(f"--ranks {','.join(map(str, unknown))}: the run has ranks "
                            f"{', '.join(map(str, sorted(rows)))} only.")
        return [{"rank": r, "role": "asked", "reason": "asked for with --ranks"}
                for r in sorted(set(asked))]
    if not usable:
        raise DeepError("No rank of this run was profiled and ended well, so there is no "
                        "rank to choose for the deep pass: triage the ranks again first.")
    metric = (distributed.get("straggler") or {}).get("metric") or "step_ms"
    what = ("works outside collectives" if metric == "work_ms_per_step"
            else "takes per step")
    value = {rank: _metric(r, metric) for rank, r in usable.items()}
    ordered = sorted(value, key=lambda rank: (value[rank], rank))
    slowest = ordered[-1]
    median = ordered[(len(ordered) - 1) // 2]
    straggler = (distributed.get("straggler") or {}).get("rank")
    picks: list[PickedRank] = [{"rank": slowest, "role": "slowest", "reason": (
        f"the slowest rank: {what} {value[slowest]:.2f} ms"
        + (", the straggler" if straggler == slowest else "")
        + f" (of {len(usable)} ranks)")}]
    if median != slowest:
        picks.append({"rank": median, "role": "median", "reason": (
            f"the median rank: {what} {value[median]:.2f} ms, a typical rank to compare "
            f"rank {slowest} with")})
    return sorted(picks, key=lambda p: p["rank"])


def refuse_communication_ops(ops: Sequence[str]) -> None:
    """DeepError for collective ops: their kernels wait for every other rank, so replaying
    them on some ranks only never ends."""
    comm = [op for op in ops if COMMUNICATION_OP.search(op)]
    if comm:
        raise DeepError(
            f"{', '.join(comm)}: communication ops' kernels (NCCL) wait for every other rank, "
            "and Nsight Compute's replay of them on some ranks only would never end. The deep "
            "pass on several ranks profiles compute ops; see communication in the timeline "
            "pass (--nsys: NCCL kernels and their overlap with compute) and in the cross-rank "
            "report's collectives.")


def _metric(rank: DistributedRank, metric: str) -> float:
    """The rank's number the straggler was judged by (``work_ms_per_step``, else or
    without it ``step_ms``; usable ranks have one)."""
    work = rank.get("work_ms_per_step") if metric == "work_ms_per_step" else None
    return float(work if work is not None else rank.get("step_ms") or 0.0)
