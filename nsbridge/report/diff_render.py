"""`nsbridge diff` output: text, Markdown (a PR comment) or JSON. Formatting only.

Everything taken from the runs (paths, op names, scripts, sync sites, reasons that quote
them) goes through report.escape: control characters are shown escaped in the terminal,
Markdown is escaped in md, so a name can neither drive the terminal nor break the table.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from .escape import md_cell, terminal
from .wording import machine_line

HEADER = ["op", "A µs/step", "B µs/step", "raw %", "beyond drift %", "95% interval",
          "added ms/step", "status"]


def render_diff(result: dict[str, Any], fmt: str = "text", top: int = 15) -> str:
    """The comparison of two runs in ``fmt`` (text, md or json)."""
    if fmt == "json":
        return json.dumps(result, indent=2)
    md = fmt == "md"
    esc = md_cell if md else terminal
    lines = [("## " if md else "") + f"nsbridge diff: {esc(result['a_label'])} -> "
             f"{esc(result['b_label'])}", "", _outcome_line(result), ""]
    for problem in result["comparability"]:
        lines.append(f"Not comparable: {esc(problem['text'])}")
    lines.append(_verdict_line(result, esc))
    for side in ("a", "b"):
        text = machine_line(result["machine"][side])
        if text:
            lines.append(f"Machine {side.upper()}: {esc(text)}")
    samples = result["samples"]
    lines.append(f"Samples: A {samples['a']['steps']} measured steps from {samples['a']['runs']} "
                 f"process(es), B {samples['b']['steps']} from {samples['b']['runs']}")
    step = result.get("step")
    if step and step["delta_pct"] is not None:
        lines.append(f"Step time ({step['source']}): {step['a_us'] / 1e3:.2f} -> "
                     f"{step['b_us'] / 1e3:.2f} ms ({step['delta_pct']:+.1f}%, 95% interval "
                     f"{_ci(step['ci_pct'])}): {step['status']}")
    noise = (f"; between-process op noise ±{result['op_noise_pct']:.1f}% added to each "
             "interval" if result.get("op_noise_pct") is not None else "")
    detect = (f"; detectable change about ±{result['detectable_pct']:.0f}%"
              if result.get("detectable_pct") is not None else "")
    lines.append(f"Ops compared by {result['source']} (mean per step); run-wide drift "
                 f"{result['drift_pct']:+.1f}%, each op judged beyond it{noise}{detect}. Gate: "
                 f"+{result['fail_above_pct']:g}% beyond the drift with the 95% interval above "
                 f"no change, adding at least {result['min_step_share_pct']:g}% of the base step")
    rows = [[esc(r["op"]), _num(r["a_us"]), _num(r["b_us"]), _signed(r["delta_pct"]),
             _signed(r["beyond_drift_pct"]), _ci(r["ci_pct"]), _signed(_ms(r["added_us"]), 3),
             r["status"] + ("" if r["gated"] or r["status"] == "not gated" else " (not gated)")]
            for r in result["ops"][:top]]
    lines += ["", *(_md_table(HEADER, rows) if md else _text_table(HEADER, rows))]
    syncs = result["syncs"]
    for kind in ("new", "vanished"):
        if syncs[kind]:
            lines.append(f"{kind.capitalize()} sync points: {esc(', '.join(syncs[kind]))}")
    lines += ["", _conclusion(result, esc)]
    if result["advice"]:
        lines.append("What would settle it: " + esc("; ".join(result["advice"])))
    return "\n".join(lines)


def _outcome_line(result: dict[str, Any]) -> str:
    outcome = result["outcome"]
    return {"pass": "Outcome: PASS (exit 0)", "regression": "Outcome: REGRESSION (exit 1)",
            "inconclusive": "Outcome: INCONCLUSIVE (exit 4): the data cannot decide"}[outcome]


def _conclusion(result: dict[str, Any], esc: Callable[[str], str]) -> str:
    if result["outcome"] == "regression":
        return "REGRESSED: " + esc("; ".join(_regression(r) for r in result["regressions"]))
    if result["outcome"] == "inconclusive":
        return "INCONCLUSIVE: " + esc("; ".join(result["reasons"]))
    return (f"PASS: nothing gated got slower by more than {result['fail_above_pct']:g}% beyond "
            "the drift and its noise")


def _regression(r: dict[str, Any]) -> str:
    if r["delta_pct"] is None:
        return f"{r['what']} (new, {r['added_ms']:+.3f} ms per step, {r['source']})"
    if r.get("basis") == "work":
        return (f"{r['what']} does {r['delta_pct']:+.1f}% more work: {r['detail']}, about "
                f"{r['added_ms']:+.3f} ms per step ({r['source']})")
    return (f"{r['what']} {r['delta_pct']:+.1f}% (95% interval {_ci(r['ci_pct'])}, "
            f"{r['added_ms']:+.3f} ms per step; {r['source']})")


def _verdict_line(result: dict[str, Any], esc: Callable[[str], str]) -> str:
    a, b = result["verdict"]["a"], result["verdict"]["b"]
    return (f"Verdict: {esc(a or 'none')} -> {esc(b or 'none')}"
            + ("" if a == b else " (changed)"))


def _ci(ci: Optional[list[Optional[float]]]) -> str:
    if not ci or ci[0] is None:
        return "-"
    return f"{ci[0]:+.1f}..{ci[1]:+.1f}%"


def _ms(us: Optional[float]) -> Optional[float]:
    return None if us is None else us / 1e3


def _num(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def _signed(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:+.{digits}f}"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table of cells already escaped."""
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(r) + " |" for r in rows])


def _text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [fmt(header), *(fmt(r) for r in rows)]
