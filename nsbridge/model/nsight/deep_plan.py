"""Which ops the deep pass profiles, how many launches, and what it will cost.

Inputs are the run's report (ops[] with their kernels per measured window, steps count)
and the deep profile. No I/O.
"""

from __future__ import annotations

import difflib
from typing import Any, Optional, Sequence

from ... import schema as S
from ...errors import DeepError


def check_ops(wanted: Sequence[str], known: Sequence[str]) -> None:
    """Raise DeepError naming each op the run does not have, with a did-you-mean."""
    missing = [op for op in wanted if op not in known]
    if not missing:
        return
    parts = []
    for op in missing:
        close = difflib.get_close_matches(op, known, n=3, cutoff=0.5)
        parts.append(f"'{op}'" + (f" (did you mean {', '.join(repr(c) for c in close)}?)"
                                  if close else ""))
    raise DeepError(f"The run has no op {' or '.join(parts)}. Its ops by device time are: "
                    f"{', '.join(known[:8]) or 'none'}. Pass an op name exactly as the "
                    "report's ops table spells it (--kernel aten::addmm), or use --top N.")


def choose(ops: list[dict[str, Any]], *, kernels: Sequence[str] = (), top: Optional[int] = None,
           min_kernel_us: float = 0.0) -> list[dict[str, Any]]:
    """The ops to profile, each {op, reason}: the named ones, or the ``top`` with the most
    device self time whose kernels average at least ``min_kernel_us`` per launch."""
    if kernels:
        check_ops(kernels, [op["name"] for op in ops])
        return [{"op": op, "reason": "asked for with --kernel"} for op in kernels]
    ranked = sorted((op for op in ops if op.get(S.DEVICE_SELF_US)),
                    key=lambda op: -op[S.DEVICE_SELF_US])
    total = sum(op[S.DEVICE_SELF_US] for op in ranked) or 1.0
    chosen, skipped = [], []
    for rank, op in enumerate(ranked, 1):
        launches = sum(k["calls"] for k in op.get("kernels") or [])
        kernel_us = sum(k["device_us"] for k in op.get("kernels") or [])
        if not launches:
            skipped.append(op["name"])  # copies and memsets only: nothing for ncu
            continue
        mean = kernel_us / launches
        if mean < min_kernel_us:
            skipped.append(op["name"])
            continue
        chosen.append({"op": op["name"],
                       "reason": f"#{rank} by device time: {op['device_self_us'] / 1e3:.3f} ms "
                                 f"({100 * op['device_self_us'] / total:.0f}% of GPU time), "
                                 f"{launches} kernel launches averaging {mean:.1f} µs"})
        if top is not None and len(chosen) >= top:
            break
    if not chosen:
        raise DeepError("No op of the run has kernels long enough to profile (device time from "
                        "kernels averaging at least "
                        f"{min_kernel_us:g} µs). Triage on a GPU first, or name ops with "
                        "--kernel.")
    return chosen


def plan(chosen: list[dict[str, Any]], ops: list[dict[str, Any]], steps: int,
         deep: Any, script_s: Optional[float]) -> dict[str, Any]:
    """Launch skip/count and the time estimate. Per op: expected kernels (names) and
    launches per measured step from the triage; None when the triage had no GPU."""
    by_name = {op["name"]: op for op in ops}
    steps = max(steps, 1)
    rows, per_step_total, known = [], 0.0, True
    kernel_s = 0.0
    for choice in chosen:
        op = by_name.get(choice["op"], {})
        kernels = op.get("kernels") or []
        launches = sum(k["calls"] for k in kernels)
        per_step = launches / steps if launches else None
        known = known and per_step is not None
        per_step_total += per_step or 0.0
        mean_us = sum(k["device_us"] for k in kernels) / launches if launches else 0.0
        kernel_s += (per_step or 0.0) * deep.profile_steps * mean_us / 1e6
        rows.append({**choice, "kernels": [k["name"] for k in kernels[:5]],
                     "launches_per_step": per_step})
    if known:
        skip = int(round(per_step_total * deep.skip_steps))
        count = int(round(per_step_total * deep.profile_steps))
    else:
        skip, count = 0, deep.max_launches
    capped = count > deep.max_launches
    count = min(max(count, 1), deep.max_launches)
    replay_s = count * deep.passes_per_kernel * deep.seconds_per_pass + kernel_s * deep.passes_per_kernel
    return {"ops": rows, "launch_skip": skip, "launch_count": count, "capped": capped,
            "passes_per_kernel": deep.passes_per_kernel,
            "estimate_s": round(replay_s + (script_s or 0.0) * 1.5, 1),
            "estimate_note": ("replay passes x seconds per pass" + (
                " + the script's own run time x 1.5" if script_s else "")),
            "launch_counts_known": known}


def describe(p: dict[str, Any]) -> str:
    """The plan as printed before ncu starts."""
    lines = [f"Deep pass plan: {len(p['ops'])} op(s), skip {p['launch_skip']} matching "
             f"launches (warm-up), profile {p['launch_count']}, about "
             f"{p['passes_per_kernel']} replay passes per kernel, estimated {p['estimate_s']:g} s"]
    for row in p["ops"]:
        per_step = row["launches_per_step"]
        lines.append(f"  {row['op']}: {'unknown' if per_step is None else f'{per_step:g}'} "
                     f"launches per step; {row['reason']}")
        if row["kernels"]:
            lines.append(f"    expected kernels: {'; '.join(k[:70] for k in row['kernels'])}")
    if p["capped"]:
        lines.append("  (launch count capped by the profile's max_launches)")
    if not p["launch_counts_known"]:
        lines.append("  (launches per step unknown: the triage had no GPU; profiling the first "
                     "matching launches)")
    return "\n".join(lines)


def plan_for_run(report: dict[str, Any], manifest: dict[str, Any], deep: Any, *,
                 kernels: Sequence[str] = (), top: Optional[int] = None,
                 candidates: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """The deep pass's plan for a run (its report and manifest): the chosen ops (from
    ``candidates``, default every op: ``kernels``, else the ``top`` ones, by default the
    deep profile's top) and their launches, timed by the torch.profiler pass. One planner
    for one process and for the ranks of a job.

    Raises:
        DeepError: nothing to profile (see choose).
    """
    ops = report.get("ops", [])
    if not kernels and top is None:
        top = deep.top
    chosen = choose(ops if candidates is None else candidates, kernels=kernels, top=top,
                    min_kernel_us=deep.min_kernel_us)
    torch_pass: dict[str, Any] = next((p for p in manifest.get("passes", [])
                                       if p["name"].startswith("torch.profiler")), {})
    return plan(chosen, ops, (report.get("steps") or {}).get("count", 1), deep,
                torch_pass.get("wall_s"))

