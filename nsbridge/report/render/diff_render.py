"""`nsbridge diff` and `nsbridge gate` output: text, Markdown (a PR comment) or JSON.
Formatting only: every value comes from the comparison's result (model.comparing.gate_answer).

Changes print in percent and times in ms per step; percentages past +999% print as
">+999%" (the JSON keeps the value). Everything taken from the runs (paths, op names,
scripts, sync sites, reasons that quote them) goes through report.document.escape: control
characters are shown escaped in the terminal, Markdown is escaped in md, so a name can
neither drive the terminal nor break the table.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Optional

from ...model.comparing.gate_answer import show_ci, show_pct
from ..document.escape import md_cell, terminal
from ..document.head import machine_line
from ..document.wording import is_autograd_wrapper
from ...contract.comparison import ComparedRow, Comparison, MemoryChange, Regression, SideSamples

HEADER = ["op", "judged on", "A ms/step", "B ms/step", "change", "95% interval",
          "added ms/step (95%)", "status"]


def memory_line(memory: Optional[MemoryChange]) -> Optional[str]:
    """Peak memory: both sides' medians (and ranges), the rise, the threshold, the status
    and what holds the added bytes."""
    if not memory:
        return None

    def side(r: list[float]) -> str:
        return (f"{r[1]:.1f}" if r[0] == r[2] else f"{r[1]:.1f} ({r[0]:.1f}-{r[2]:.1f})")

    since = " since the window's start" if memory["relative"] else ""
    rises = "; ".join(f"{r['kind']} {' / '.join(x for x in (r['module'], r['op'], r['line']) if x)} "
                      f"+{r['added_mib']:.1f} MiB" for r in memory["rises"])
    return (f"Peak memory{since} on {memory['device']}: {side(memory['a_peak_mib'])} -> "
            f"{side(memory['b_peak_mib'])} MiB ({memory['rise_mib']:+.1f} MiB; threshold "
            f"{memory['threshold_mib']:g} MiB, {memory['threshold_from']}): {memory['status']}"
            + (f"; added at the peak: {rises}" if rises else ""))


def render_diff(result: Comparison, fmt: str = "text", top: int = 15) -> str:
    """The comparison of two runs (or of a gate's pairs) in ``fmt`` (text, md or json)."""
    if fmt == "json":
        return json.dumps(result, indent=2)
    md = fmt == "md"
    esc = md_cell if md else terminal
    command = "gate" if result.get("mode") == "interleaved" else "diff"
    lines = [("## " if md else "") + f"nsbridge {command}: {esc(result['a_label'])} -> "
             f"{esc(result['b_label'])}", "", _outcome_line(result), ""]
    for problem in result["comparability"]:
        lines.append(f"Not comparable: {esc(problem['text'])}")
    lines.append(_verdict_line(result, esc))
    for side in ("a", "b"):
        text = machine_line(result["machine"][side])
        if text:
            lines.append(f"Machine {side.upper()}: {esc(text)}")
    lines.append(_samples_line(result))
    step = result.get("step")
    a_us, b_us = (step.get("a_us"), step.get("b_us")) if step else (None, None)
    if step and step.get("change_pct") is not None and a_us is not None and b_us is not None:
        lines.append(f"Step time: {a_us / 1e3:.2f} -> {b_us / 1e3:.2f} ms "
                     f"({show_pct(step['change_pct'])}, 95% interval "
                     f"{show_ci(step['ci_pct'])}): {step['status']}")
        lines.append(f"  measured as the {step['source']}")
        unscaled = _unscaled(result)
        if unscaled:
            lines.append(f"  {unscaled}")
    lines.append(_method_line(result))
    memory = memory_line(result.get("memory"))
    if memory:
        lines.append(esc(memory))
    shown = [r for r in result["ops"]
             if r.get("decides") or not is_autograd_wrapper(r["op"])][:top]
    rows = [_row(r, esc) for r in shown]
    lines += ["", *(_md_table(HEADER, rows) if md else _text_table(HEADER, rows))]
    for r in shown:
        if r.get("work"):
            lines.append(f"  {esc(r['op'])} {esc(r['work'])}")
    syncs = result["syncs"]
    for kind in ("new", "vanished", "moved"):
        if syncs.get(kind):
            lines.append(f"{kind.capitalize()} sync points: {esc(', '.join(syncs[kind]))}")
    lines += ["", _conclusion(result, esc)]
    if result.get("undecided") and result["outcome"] == "pass":
        lines.append("Not decided, and not blocking (the step time is decided; single ops "
                     "vary more between processes): " + esc("; ".join(result["undecided"])))
    if result["advice"]:
        lines.append("What would settle it: " + esc("; ".join(result["advice"])))
    return "\n".join(lines)


def _unscaled(result: Comparison) -> str:
    """The step's change as the clock read it, before the machine's speed was taken out,
    and how far the speed moved between the processes."""
    speed, unscaled = result.get("speed"), (result.get("step") or {}).get("unscaled")
    if speed and speed.get("why"):
        return f"not scaled by the machine's speed: {speed['why']}"
    if not speed or not unscaled:
        return ""
    return (f"as timed, without the machine's speed taken out: "
            f"{show_pct(unscaled['change_pct'])} ({show_ci(unscaled['ci_pct'])}); the speed "
            f"probe took {show_pct(speed['change_pct'])} on B, ±{speed['spread_pct']:.1f}% "
            "between processes")


def _outcome_line(result: Comparison) -> str:
    outcome = result["outcome"]
    if outcome == "pass":
        seen = result.get("detectable_pct")
        top = ((result.get("step") or {}).get("ci_pct") or [None, None])[1]
        if seen is not None and seen > result.get("fail_above_pct", math.inf) \
                and top is not None:
            return (f"Outcome: PASS (exit 0): no slowdown beyond {top:+.1f}% (the top of the "
                    f"step time's 95% interval, ±{seen:.1f}% wide: under the +"
                    f"{result['fail_above_pct']:g}% threshold however noisy)"
                    + _machine_caveat(result))
        step = result.get("step") or {}
        if step.get("status") == "improved":
            return (f"Outcome: PASS (exit 0): step time {show_pct(step['change_pct'])} (95% "
                    f"interval {show_ci(step['ci_pct'])}), faster" + _machine_caveat(result))
        if step.get("why") and top is not None and top < 0:      # a speed-up unconfirmed:
            return f"Outcome: PASS (exit 0): {step['why']}"      # its why names the cause
        return ("Outcome: PASS (exit 0)" + (f": no change beyond ±{seen:.1f}% (the smallest "
                                            "change this comparison could see)"
                                            if seen is not None else ""))
    return {"regression": "Outcome: REGRESSION (exit 1)",
            "inconclusive": "Outcome: INCONCLUSIVE (exit 4): the data cannot decide"}[outcome]


def _machine_caveat(result: Comparison) -> str:
    """What a contended side means for a change in speed: part of it may be the machine's."""
    contended = result.get("contended") or []
    if not contended:
        return ""
    return (f"; run {' and '.join(contended)} ran on a contended machine, so part of the "
            "difference may be the machine's, not the code's")


def _samples_line(result: Comparison) -> str:
    a, b = result["samples"]["a"], result["samples"]["b"]
    def side(s: SideSamples) -> str:
        used, scaled = s.get("used_steps"), s.get("scaled_processes")
        waited = []
        if used is not None and used < s["steps"]:
            waited.append(f"{s['steps'] - used} left out: the process waited for a CPU")
        if scaled:
            waited.append(f"in {scaled} process(es) most steps waited: every step counted, "
                          "scaled by its running share")
        return (f"{s['steps']} measured steps from {s['runs']} process(es)"
                + (f" ({'; '.join(waited)})" if waited else ""))
    if result.get("mode") == "interleaved":
        return (f"Samples: {result['pairs']} interleaved pairs (A, B, then B, A, ...)"
                f"{_growth(result)}: A {side(a)}, B {side(b)}")
    return f"Samples: A {side(a)}, B {side(b)}"


def _growth(result: Comparison) -> str:
    """How a growing gate reached its pairs: ', after 3 inconclusive looks (3, 4, 5 pairs)'
    and why it stopped when it did not decide."""
    gate = result.get("gate") or {}
    looks = gate.get("looks") or []
    earlier = [str(look["pairs"]) for look in looks[:-1]]
    why = {"max processes": f"; stopped at --max-processes {gate.get('max_processes')}",
           "budget": f"; stopped by --budget {gate.get('budget_s'):g} s"
           if isinstance(gate.get("budget_s"), (int, float)) else ""}.get(
               str(gate.get("stopped")), "")
    grown = (f", grown from {earlier[0]} after {len(earlier)} inconclusive look(s)"
             if earlier else "")
    return grown + why


def _method_line(result: Comparison) -> str:
    gate = (f"Gate: a slowdown whose 95% interval lies above no change and reaches "
            f"+{result['fail_above_pct']:g}%, adding at least {result['min_step_share_pct']:g}% "
            "of the base step; other dtypes, layouts, shapes or more calls are judged as "
            "different work, whatever the noise")
    if result.get("mode") == "interleaved":
        return (f"Ops compared by {result['source']} per step, each pair's change B/A "
                f"(median or 10th percentile of the clean steps, as timed or at one "
                f"machine speed, whichever varies less between processes). "
                f"{_evidence_line(result)}")
    noise = (f"; between-process op noise ±{result['op_noise_pct']:.1f}% added to each "
             "interval" if result.get("op_noise_pct") is not None else "")
    return (f"Ops compared by {result['source']} (mean per step); run-wide drift "
            f"{show_pct(result['drift_pct'])} (from {result.get('drift_witnesses', 0)} ops "
            f"whose work did not change), each op judged beyond it{noise}. {gate}")


def _evidence_line(result: Comparison) -> str:
    """The interleaved gate's rule, with the false-alarm budget this answer spent."""
    spent = result.get("false_alarm")
    bound = spent["bound_pct"] if spent else 1
    threshold = f"+{result['fail_above_pct']:g}%"
    budget = (f" (Holm over {spent['tests']} time test(s), {spent['looks']} look(s) "
              f"budgeted)" if spent else "")
    return (f"Gate: a slowdown fails when it is significant, with unchanged code called "
            f"slower in at most {bound:g}% of gates{budget}, when its "
            f"estimate is at least half of {threshold} and its 95% interval reaches "
            f"{threshold}, adding at least {result['min_step_share_pct']:g}% of the base "
            "step; other dtypes, layouts, shapes or more calls are judged as different "
            "work, whatever the noise")


def _row(r: ComparedRow, esc: Callable[[str], str]) -> list[str]:
    added = _ms(r.get("added_us"))
    band = r.get("added_ci_us")
    added_text = "-" if added is None else f"{added:+.3f}" + (
        f" ({_ms(band[0]):+.3f}..{_ms(band[1]):+.3f})"
        if band and band[0] is not None else "")
    status = (r.get("status") or "-") + ("" if r["gated"] or r["status"] in ("not gated", "vanished")
                            else " (not gated)")
    if r["status"] == "within noise" and (r.get("change_pct") or 0.0) < 0 and r.get("why"):
        status += " (a speed-up these runs cannot confirm: see why)"
    return [esc(r["op"]), _basis(r), _num(_ms(r.get("a_us"))), _num(_ms(r.get("b_us"))),
            show_pct(r.get("change_pct")), show_ci(r.get("ci_pct")), added_text, status]


def _basis(r: ComparedRow) -> str:
    basis = r.get("basis") or "time"
    if basis == "time":
        return f"time ({r.get('statistic', 'mean')})" if r.get("ci_pct") else "time"
    return basis


def _conclusion(result: Comparison, esc: Callable[[str], str]) -> str:
    if result["outcome"] == "regression":
        return "REGRESSED: " + esc("; ".join(_regression(r) for r in result["regressions"]))
    if result["outcome"] == "inconclusive":
        return "INCONCLUSIVE: " + esc("; ".join(result["reasons"]))
    step = result.get("step")
    threshold = f"+{result['fail_above_pct']:g}%"
    steps = (f"the step time changed {show_pct(step['change_pct'])} (95% interval "
             f"{show_ci(step['ci_pct'])}), under the {threshold} threshold; "
             if step and step.get("ci_pct") else "")
    change = result.get("memory")
    memory = (f"; the peak memory rose {change['rise_mib']:+.1f} MiB, within "
              f"{change['threshold_mib']:g} MiB" if change else "")
    return (f"PASS: {steps}no gated op regressed by {threshold} or more, and no op does other "
            f"work that costs time{memory}")


def _regression(r: Regression) -> str:
    added = f"{r['added_ms']:+.3f} ms per step" if r.get("added_ms") is not None else ""
    if r["basis"] == "new":
        return f"{r['what']} (new, {added}, {r['source']})"
    if r["basis"] == "memory":
        return f"{r['what']} {show_pct(r['change_pct'])}: {r['detail']} ({r['source']})"
    if r["basis"] == "calls":
        return (f"{r['what']} does {show_pct(r['change_pct'])} more work: {r['detail']}, "
                f"about {added} ({r['source']})")
    if r["basis"] in ("dtype", "layout", "shapes"):
        return (f"{r['what']} {r['detail']}, {show_pct(r['change_pct'])} ({added}; "
                f"{r['source']})")
    return (f"{r['what']} {show_pct(r['change_pct'])} (95% interval {show_ci(r['ci_pct'])}, "
            f"{added}; {r['source']})")


def _verdict_line(result: Comparison, esc: Callable[[str], str]) -> str:
    a, b = result["verdict"]["a"], result["verdict"]["b"]
    return (f"Verdict: {esc(a or 'none')} -> {esc(b or 'none')}"
            + ("" if a == b else " (changed)"))


def _ms(us: Optional[float]) -> Optional[float]:
    return None if us is None else us / 1e3


def _num(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table of cells already escaped."""
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(r) + " |" for r in rows])


def _text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [fmt(header), *(fmt(r) for r in rows)]
