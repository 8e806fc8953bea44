"""The answer both comparisons give (`diff` of two runs, model.comparing.diff; the interleaved gate,
model.comparing.paired): which rows gate, what each regression is named with, why the data cannot
decide, and the facts printed around them. Rows arrive judged (model.comparing.change)."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from . import change as C
from .work import OpWork, describe_change, more_work, signature_changes
from ...contract.check import held_to_types
from ...contract.comparison import (Blocker, ComparedRow, ComparedStep, Comparison, MemoryChange,
                                    Noise, Regression, SamplesPair, Syncs)
from ...contract.report import Report, SyncPoint, verdict_label

NAMED_OPS = 3   # ops one reason names; the table marks the rest (row["decides"])
# an op whose work changed: the kinds of signature change, as a row's basis names them
WORK_KINDS = ("dtype", "layout", "shapes")
SOURCES = {True: "torch.profiler self device time", False: "torch.profiler self CPU time"}


def judge_work(row: ComparedRow, a: Optional[OpWork], b: Optional[OpWork], point: float,
               fail_above: float, floor_us: float) -> None:
    """Judge what an op computes before how long it took (in place): another dtype,
    layout or input shapes makes it different work (model.comparing.change.different_work,
    on the judged change ``point``, a log, and the top of the row's interval); more calls
    per step, priced per signature, a regression of work whatever the timing noise
    (model.comparing.work.more_work)."""
    if a is None or b is None:
        return
    kinds = signature_changes(a, b)
    if kinds:
        kind = next(k for k in WORK_KINDS if k in kinds)
        before, after = kinds[kind]
        a_us, b_us = row.get("a_us"), row.get("b_us")
        per_call = (b_us / b.calls) / (a_us / a.calls) \
            if a.calls and b.calls and a_us and b_us else None
        added = row.get("added_us") or 0.0
        high = row["_log"][2] if row.get("_log") else point
        added_high = (row.get("added_ci_us") or [None, None])[1]
        status = C.different_work(point, high, fail_above, added,
                                  added if added_high is None else added_high, floor_us)
        work = describe_change(kind, before, after)
        row.update({"basis": kind, "work": work, "per_call_ratio": C.rounded(per_call, 3),
                    "status": status})
        if status == "inconclusive":
            row["why"] = (f"{row['op']} {work}: its time {show_pct(row.get('change_pct'))} "
                          f"(95% interval {show_ci(row.get('ci_pct'))}) could be no slower or "
                          f"+{fail_above:g}% slower: its interval holds both")
    more = more_work(a, b, row.get("a_us"), row.get("b_us"))
    if more and row["status"] != "regressed" and (
            more["pct"] > fail_above and more["added_us"] >= floor_us
            and more["added_us"] > fail_above / 100.0 * (row.get("a_us") or 0.0)):
        row.update({"status": "regressed", "basis": "calls", "more_work": more,
                    "work": f"runs {more['calls_b']:g} calls per step instead of "
                            f"{more['calls_a']:g}, priced {more['priced']}: about "
                            f"{more['added_us'] / 1e3:+.3f} ms per step"})


def answer(a: Report, b: Report, *, rows: list[ComparedRow],
           step: Optional[ComparedStep], blockers: list[Blocker], fail_above: float,
           min_step_share: float, ops: Sequence[str], device: bool, mode: str,
           samples: SamplesPair, advice: list[str], reasons: list[str],
           noise: Noise, memory: Optional[MemoryChange] = None) -> Comparison:
    """The result dict of a comparison (docs/how-to/ci-perf-gate.md): ``a`` and ``b`` are
    the first report of each side (their verdicts, machines and sync points are shown).

    The outcome: not comparable -> inconclusive; any regression (an op's, or the step
    time's) -> regression; else the step time decides (inconclusive when its interval
    holds both no change and the threshold; an interval wider than the threshold passes
    only when it lies wholly under it), and ops the
    data could not decide are listed without blocking a pass: their spread between
    processes is larger than the step's (one op's loss is often another's gain). An op
    whose slowdown the interval shows but the comparison cannot put on the code (the same
    work, one process per side or a contended machine: ``significant``) does block it.
    With ``ops`` (gate only these) or without a step time, those ops decide instead.
    ``memory`` (model.comparing.memory_change): a peak that rose beyond its threshold is a
    regression too; one the processes cannot agree on is a reason to be inconclusive."""
    source = SOURCES[device]
    regressions = [named(r, source) for r in rows if r["gated"] and r["status"] == "regressed"]
    if memory is not None and memory["status"] == "regressed":
        regressions.append(memory_regression(memory))
    deciding = step if step is not None and not ops else None
    if deciding is not None and deciding["status"] == "regressed":
        regressions.insert(0, named(as_op(deciding, basis="time"), deciding["source"]))
    unsure = [r for r in rows if r["gated"] and r["status"] == "inconclusive"]
    reasons = [f"not comparable: {p['text']}" for p in blockers] + reasons
    if memory is not None and memory["status"] == "inconclusive":
        reasons.append(f"the peak memory's median rose {memory['rise_mib']:+.1f} MiB (threshold "
                       f"{memory['threshold_mib']:g} MiB) but the processes' peaks overlap: "
                       "more processes per side would settle it")
    if deciding is not None:
        # a slowdown the data shows but cannot put on the code (one process per side, a
        # contended machine) keeps a decided step from passing: it is evidence, not noise;
        # so does other work (a dtype, layout or shapes) whose time the data cannot size
        reasons += _significant_reasons([r for r in unsure if r.get("significant")],
                                        fail_above)
        reasons += work_reasons([r for r in unsure if not r.get("significant")], fail_above)
        if deciding["status"] == "inconclusive":
            reasons.append(deciding.get("why")
                           or unsure_reason(as_op(deciding), fail_above))
        detectable = deciding.get("half_width_pct")
        what = "the step time's 95% interval is"
    else:
        reasons += [_why(r, fail_above) for r in unsure if r.get("basis") not in WORK_KINDS]
        reasons += work_reasons(unsure, fail_above)
        detectable = C.detectable([r for r in rows if r.get("half_width_pct") is not None
                                   and r["gated"]])
        what = "the judged ops' 95% intervals are (base-time-weighted median)"
    # a wide interval that lies wholly under +T has excluded the slowdown the gate looks
    # for: it passes (saying how far up it reaches); only an undecided one is too noisy
    undecided_step = deciding is None or deciding["status"] == "inconclusive"
    if detectable is not None and detectable > fail_above and not regressions \
            and undecided_step:
        reasons.append(f"too noisy to see a +{fail_above:g}% change: {what} ±{detectable:.0f}% "
                       "wide")
    outcome = C.outcome(blockers, regressions, reasons)
    decisive = {r["what"] for r in regressions} | (
        {r["op"] for r in unsure} if outcome == "inconclusive" else set())
    for row in rows:
        row["decides"] = row["op"] in decisive
    rows.sort(key=lambda r: not r["decides"])      # stable: the mode's order after them
    for row in rows + ([step] if step else []):
        working_values_dropped(row)
    result: Comparison = {
        "outcome": outcome, "exit_code": C.EXIT_CODES[outcome], "mode": mode,
        "reasons": reasons, "advice": advice if outcome == "inconclusive" else [],
        "comparability": blockers, "source": source, "fail_above_pct": fail_above,
        "min_step_share_pct": round(100.0 * min_step_share, 3), "samples": samples,
        **noise, "detectable_pct": detectable, "step": step,
        "verdict": {"a": verdict_label(a), "b": verdict_label(b)},
        "machine": {"a": a.get("machine"), "b": b.get("machine")},
        "syncs": syncs(a, b), "ops": rows, "regressions": regressions,
        "inconclusive": [r["op"] for r in unsure], "memory": memory,
        "undecided": [_why(r, fail_above) for r in unsure
                      if deciding is not None and not r.get("significant")
                      and r.get("basis") not in WORK_KINDS]}
    held_to_types(result, Comparison, "the comparison", copied=("machine",))
    return result


def memory_regression(memory: MemoryChange) -> Regression:
    """The peak memory's rise as a regression, naming what holds the added bytes."""
    top = memory["rises"][0] if memory["rises"] else None
    held = (f"; most of it {top['kind']} of {' / '.join(x for x in (top['module'], top['op'], top['line']) if x)} "
            f"(+{top['added_mib']:.1f} MiB)" if top else "")
    base = memory["a_peak_mib"][1]
    pct = round(100.0 * memory["rise_mib"] / base, 1) if base > 0 else None
    return {"what": "peak memory", "basis": "memory", "source": f"torch.profiler memory events "
            f"({memory['device']})", "change_pct": pct, "ci_pct": None, "added_ms": None,
            "detail": f"peak +{memory['rise_mib']:.1f} MiB (every new process at least "
                      f"+{memory['least_rise_mib']:.1f}; threshold {memory['threshold_mib']:g} "
                      f"MiB){held}"}


def as_op(step: ComparedStep, basis: Optional[str] = None) -> ComparedStep:
    """The step time as a row named like an op ('step time'), for the words ops get."""
    row: ComparedStep = {**step, "op": "step time"}
    if basis:
        row["basis"] = basis
    return row


def working_values_dropped(row: ComparedRow) -> None:
    """The judging's working values (contract.comparison: keys starting with ``_``) taken
    out of a row before the answer leaves."""
    row.pop("_log", None)
    row.pop("_cause", None)
    row.pop("_p", None)
    row.pop("_p_faster", None)


def _significant_reasons(rows: list[ComparedRow], fail_above: float) -> list[str]:
    """One reason per cause: the ops whose slowdown the data shows but cannot put on the
    code for one cause (``_cause``: a contended machine, one process per side) are named
    together, so a contended run reads as one sentence, not one per op."""
    by_cause: dict[Optional[str], list[ComparedRow]] = {}
    for row in rows:
        by_cause.setdefault(row.get("_cause"), []).append(row)
    return [same_work_reason(group, cause) if cause else _why(row, fail_above)
            for cause, group in by_cause.items() for row in (group if not cause else group[:1])]


def same_work_reason(rows: list[ComparedRow], cause: str) -> str:
    """'aten::mm +12.0% (95% interval +3.1%..+21.7%), ... beyond the drift with the same
    calls, shapes and dtypes in both runs: ``cause``': the first NAMED_OPS of ``rows``
    (the largest: table order) named, percents shown as the table shows them (show_pct)."""
    changes = ", ".join(f"{r['op']} {show_pct(r['change_pct'])} (95% interval "
                        f"{show_ci(r['ci_pct'])})" for r in rows[:NAMED_OPS])
    if len(rows) > NAMED_OPS:
        changes += f" and {len(rows) - NAMED_OPS} more ops (in the op table)"
    return (f"{changes} beyond the drift with the same calls, shapes and dtypes in both "
            f"runs: {cause}")


def work_reasons(rows: list[ComparedRow], fail_above: float) -> list[str]:
    """One reason per change of work among ``rows`` whose time the data cannot size (a
    dtype switch touches every op: one sentence for it, not one per op), its first
    NAMED_OPS ops named with their change and interval (table order: the largest first);
    rows of unchanged work are left out."""
    by_work: dict[str, list[ComparedRow]] = {}
    for row in rows:
        if row.get("basis") in WORK_KINDS:
            by_work.setdefault(str(row.get("work")), []).append(row)
    out = []
    for work, group in by_work.items():
        if len(group) == 1:
            out.append(_why(group[0], fail_above))
            continue
        times = ", ".join(f"{r['op']} {show_pct(r['change_pct'])} (95% interval "
                          f"{show_ci(r['ci_pct'])})" for r in group[:NAMED_OPS])
        if len(group) > NAMED_OPS:
            times += f" and {len(group) - NAMED_OPS} more ops (in the op table)"
        out.append(f"{len(group)} ops each {work}; their times could be no slower or "
                   f"+{fail_above:g}% slower (each interval holds both): {times}")
    return out


def _why(row: ComparedRow, fail_above: float) -> str:
    return str(row.get("why") or unsure_reason(row, fail_above))


def named(row: ComparedRow, source: str) -> Regression:
    """One regression as the gate names it: what, the value gated, its basis and source."""
    basis = row.get("basis", "time")
    entry: Regression = {"what": row["op"], "basis": basis, "source": source,
             "change_pct": row.get("change_pct"), "ci_pct": row.get("ci_pct"),
             "added_ms": _ms(row.get("added_us")), "detail": None}
    if basis == "calls":
        more = row["more_work"]
        entry.update({"source": "torch.profiler call counts", "change_pct": more["pct"],
                      "ci_pct": None, "added_ms": _ms(more["added_us"]),
                      "detail": f"{more['calls_b']:g} calls per step instead of "
                                f"{more['calls_a']:g}, priced {more['priced']}"})
    elif basis in WORK_KINDS:
        ratio = row.get("per_call_ratio")
        entry["source"] = f"torch.profiler input {'types' if basis == 'dtype' else basis} " \
                          f"and {source.split('torch.profiler ')[-1]}"
        entry["detail"] = row["work"] + (f": x{ratio:.2f} time per call" if ratio else "")
    elif basis == "new":
        entry.update({"change_pct": None, "ci_pct": None, "detail": "only the new run has it"})
    return entry


def unsure_reason(row: ComparedRow, fail_above: float) -> str:
    """Why a change cannot be decided: its interval holds no change and the threshold."""
    return (f"{row['op']} {show_pct(row['change_pct'])} (95% interval {show_ci(row['ci_pct'])}) "
            f"could be no change or a +{fail_above:g}% slowdown: its interval holds both")


def syncs(a: Report, b: Report) -> Syncs:
    """Sync points only the new run has, those it no longer has, and those whose line moved.

    A site is its code where the profiled process recorded it (kind, file, function and
    the statement's text: an edit above it moves its line, not the site), else its kind
    and file:line, else (no line: a trace's implicit sync) its kind and op.
    """
    sa, sb = _sites(a), _sites(b)
    return {"new": sorted(_shown(sb[k]) for k in sb.keys() - sa.keys()),
            "vanished": sorted(_shown(sa[k]) for k in sa.keys() - sb.keys()),
            "moved": sorted(f"{_shown(sb[k])} (was line {sa[k].get('line')})"
                            for k in sa.keys() & sb.keys()
                            if sa[k].get("line") != sb[k].get("line"))}


def _sites(report: Report) -> dict[tuple[Any, ...], SyncPoint]:
    """Each sync point of a report by its identity (syncs), the first of each."""
    out: dict[tuple[Any, ...], SyncPoint] = {}
    for p in report.get("sync_points", []):
        if not p.get("file"):
            key: tuple[Any, ...] = (p["kind"], p.get("op"))
        elif p.get("code"):
            key = (p["kind"], p["file"], p.get("function"), p["code"])
        else:
            key = (p["kind"], p["file"], p["line"])
        out.setdefault(key, p)
    return out


def _shown(point: SyncPoint) -> str:
    return (f"{point['kind']} at {point['file']}:{point['line']}" if point.get("file")
            else f"{point['kind']} in {point.get('op') or 'no op'}")


def show_pct(value: Optional[float], digits: int = 1) -> str:
    """A percent change for people: signed, clipped to ±999% (the JSON keeps the value)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value > C.DISPLAY_LIMIT_PCT:
        return f">+{C.DISPLAY_LIMIT_PCT:.0f}%"
    return f"{value:+.{digits}f}%"


def show_ci(ci: Optional[Sequence[Optional[float]]]) -> str:
    """An interval of percent changes, each end as show_pct gives it."""
    if not ci or ci[0] is None:
        return "-"
    return f"{show_pct(ci[0])}..{show_pct(ci[1])}"


def _ms(us: Optional[float]) -> Optional[float]:
    return None if us is None else round(us / 1e3, 3)
