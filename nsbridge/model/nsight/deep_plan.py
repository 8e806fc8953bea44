"""Which ops the deep pass profiles, how many launches, and what it will cost.

Inputs are the run's report (ops[] with their kernels per measured window, steps count)
and the deep profile. No I/O.
"""

from __future__ import annotations

import difflib
from typing import Any, Optional, Sequence

from ... import schema as S
from ...errors import DeepError
from .ncu import short_family
from ...contract.report import NcuCapture, NcuChosenOp, NcuPlan, NcuPlannedOp, Op, Report
from ...schema.records import Manifest, ManifestPass


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


def choose(ops: list[Op], *, kernels: Sequence[str] = (), top: Optional[int] = None,
           min_kernel_us: float = 0.0) -> list[NcuChosenOp]:
    """The ops to profile, each {op, reason}: the named ones, or the ``top`` with the most
    device self time whose kernels average at least ``min_kernel_us`` per launch."""
    if kernels:
        check_ops(kernels, [op["name"] for op in ops])
        return [{"op": op, "reason": "asked for with --kernel"} for op in kernels]
    timed = [(op, device_us) for op in ops if (device_us := op.get(S.DEVICE_SELF_US))]
    ranked = sorted(timed, key=lambda pair: -pair[1])
    total = sum(device_us for _, device_us in ranked) or 1.0
    chosen: list[NcuChosenOp] = []
    skipped: list[str] = []
    for rank, (op, device_us) in enumerate(ranked, 1):
        launches = sum(k.get("calls") or 0 for k in op.get("kernels") or [])
        kernel_us = sum(k.get("device_us") or 0.0 for k in op.get("kernels") or [])
        if not launches:
            skipped.append(op["name"])  # copies and memsets only: nothing for ncu
            continue
        mean = kernel_us / launches
        if mean < min_kernel_us:
            skipped.append(op["name"])
            continue
        chosen.append({"op": op["name"],
                       "reason": f"#{rank} by device time: {device_us / 1e3:.3f} ms "
                                 f"({100 * device_us / total:.0f}% of GPU time), "
                                 f"{launches} kernel launches averaging {mean:.1f} µs"})
        if top is not None and len(chosen) >= top:
            break
    if not chosen:
        raise DeepError("No op of the run has kernels long enough to profile (device time from "
                        "kernels averaging at least "
                        f"{min_kernel_us:g} µs). Triage on a GPU first, or name ops with "
                        "--kernel.")
    return chosen


def plan(chosen: list[NcuChosenOp], ops: list[Op], steps: int,
         deep: Any, script_s: Optional[float]) -> NcuPlan:
    """Launch skip/count and the time estimate. Per op: expected kernels (names), launches
    per measured step from the triage (None when the triage had no GPU) and ``ranges``, the
    NVTX op ranges its kernels can run within (see nvtx_ranges). Launch counts cover every
    kernel a filter can match, the chosen ops' and those of ops nested in the same ranges
    (a convolution's bias add), so a skip never lands inside a profiled step.

    ``captures``: the ncu runs, each {ops, ranges, launch_skip, launch_count}. One for all
    the ops while a step's worth of their launches fits under ``max_launches``; else one
    per op, each with its share of the cap, since one shared window that stops early in a
    step would never reach the ops that run late in it (the backward's)."""
    by_name = {op["name"]: op for op in ops}
    steps = max(steps, 1)
    rows: list[NcuPlannedOp] = []
    known = True
    kernel_s = 0.0
    for choice in chosen:
        op: Op = by_name.get(choice["op"]) or {"name": choice["op"]}
        kernels = op.get("kernels") or []
        launches = sum(k.get("calls") or 0 for k in kernels)
        per_step = launches / steps if launches else None
        known = known and per_step is not None
        mean_us = (sum(k.get("device_us") or 0.0 for k in kernels) / launches if launches
                   else 0.0)
        kernel_s += (per_step or 0.0) * deep.profile_steps * mean_us / 1e6
        rows.append({**choice, "kernels": [k["name"] for k in kernels[:5]],
                     "launches_per_step": per_step, "ranges": nvtx_ranges(choice["op"], op),
                     "kernel_families": sorted({short_family(k["name"]) for k in kernels})})
    every = [row.get("ranges") or [] for row in rows]
    shared = _window([r for ranges in every for r in ranges], ops, steps, deep,
                     deep.max_launches, known)
    if shared["capped"] and len(rows) > 1:
        share = max(deep.max_launches // len(rows), 1)
        captures: list[NcuCapture] = [
            {"ops": [row["op"]], **_window(row.get("ranges") or [], ops, steps, deep, share,
                                           known)} for row in rows]
    else:
        captures = [{"ops": [row["op"] for row in rows], **shared}]
    count = sum(c.get("launch_count") or 0 for c in captures)
    replay_s = count * deep.passes_per_kernel * deep.seconds_per_pass + kernel_s * deep.passes_per_kernel
    return {"ops": rows, "captures": captures,
            "launch_skip": captures[0]["launch_skip"] if len(captures) == 1 else None,
            "launch_count": count, "capped": any(c.get("capped") for c in captures),
            "passes_per_kernel": deep.passes_per_kernel,
            "estimate_s": round(replay_s + (script_s or 0.0) * 1.5 * len(captures), 1),
            "estimate_note": ("replay passes x seconds per pass" + (
                f" + the script's own run time x 1.5 per ncu run ({len(captures)})"
                if script_s else "")),
            "launch_counts_known": known}


def _window(ranges: list[str], ops: list[Op], steps: int, deep: Any, cap: int,
            known: bool) -> NcuCapture:
    """One ncu run's filter and launch window: ``skip_steps`` steps' worth of the launches
    the ranges match skipped, ``profile_steps`` steps' worth profiled, at most ``cap``."""
    ranges = list(dict.fromkeys(ranges))
    wanted = set(ranges)
    per_step = sum(k.get("calls") or 0 for op in ops for k in op.get("kernels") or []
                   if wanted & {op["name"], *(k.get("within") or ())}) / steps
    if known:
        skip = int(round(per_step * deep.skip_steps))
        count = int(round(per_step * deep.profile_steps))
    else:
        skip, count = 0, cap
    return {"ranges": ranges, "launch_skip": skip, "launch_count": min(max(count, 1), cap),
            "capped": count > cap}


def nvtx_ranges(name: str, op: Op) -> list[str]:
    """The op ranges the op's kernels run within in nsbridge's NVTX passes: its own name,
    then the ops enclosing it in the trace (its kernels' ``within``, innermost first). The
    passes range only the ops a dispatch mode sees, so a nested op's kernels
    (``aten::cudnn_convolution``'s) run within an enclosing one (``aten::convolution``)."""
    out = [name]
    for kernel in op.get("kernels") or []:
        out += [w for w in kernel.get("within") or () if w not in out]
    return out


def describe(p: NcuPlan) -> str:
    """The plan as printed before ncu starts."""
    runs = p.get("captures") or []
    rows = p.get("ops") or []
    if len(runs) > 1:
        head = (f"Deep pass plan: {len(rows)} op(s), one ncu run each (a step's worth of "
                f"their launches together is over the cap), {p['launch_count']} launches in "
                "all")
    else:
        head = (f"Deep pass plan: {len(rows)} op(s), skip {p['launch_skip']} matching "
                f"launches (warm-up), profile {p['launch_count']}")
    lines = [f"{head}, about {p['passes_per_kernel']} replay passes per kernel, estimated "
             f"{p['estimate_s']:g} s"]
    for row in rows:
        per_step = row.get("launches_per_step")
        lines.append(f"  {row['op']}: {'unknown' if per_step is None else f'{per_step:g}'} "
                     f"launches per step; {row['reason']}")
        run = next((c for c in runs if len(runs) > 1 and c["ops"] == [row["op"]]), None)
        if run is not None:
            lines.append(f"    its ncu run: skip {run['launch_skip']} matching launches, "
                         f"profile {run['launch_count']}")
        ranges = row.get("ranges") or []
        if len(ranges) > 1:
            lines.append(f"    its kernels run within: {', '.join(ranges[1:])} "
                         "(nested op: matched in those NVTX ranges too)")
        kernels = row.get("kernels") or []
        if kernels:
            lines.append(f"    expected kernels: {'; '.join(k[:70] for k in kernels)}")
    if p["capped"]:
        lines.append("  (launch count capped by the profile's max_launches)")
    if not p["launch_counts_known"]:
        lines.append("  (launches per step unknown: the triage had no GPU; profiling the first "
                     "matching launches)")
    return "\n".join(lines)


def plan_for_run(report: Report, manifest: Manifest, deep: Any, *,
                 kernels: Sequence[str] = (), top: Optional[int] = None,
                 candidates: Optional[list[Op]] = None) -> NcuPlan:
    """The deep pass's plan for a run (its report and manifest): the chosen ops (from
    ``candidates``, default every op: ``kernels``, else the ``top`` ones, by default the
    deep profile's top) and their launches, timed by the torch.profiler pass. One planner
    for one process and for the ranks of a job.

    Raises:
        DeepError: nothing to profile (see choose).
    """
    ops = report.get("ops") or []
    if not kernels and top is None:
        top = deep.top
    chosen = choose(ops if candidates is None else candidates, kernels=kernels, top=top,
                    min_kernel_us=deep.min_kernel_us)
    empty: ManifestPass = {}
    torch_pass = next((p for p in manifest.get("passes", [])
                       if p.get("name", "").startswith("torch.profiler")), empty)
    steps = report.get("steps")
    return plan(chosen, ops, int(steps.get("count") or 1) if steps else 1, deep,
                torch_pass.get("wall_s"))

