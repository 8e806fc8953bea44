"""`nsbridge diff` output: text, Markdown (a PR comment) or JSON. Formatting only."""

from __future__ import annotations

import json
from typing import Any, Optional


def render_diff(result: dict[str, Any], fmt: str = "text", top: int = 15) -> str:
    """The comparison of two runs in ``fmt`` (text, md or json)."""
    if fmt == "json":
        return json.dumps(result, indent=2)
    md = fmt == "md"
    lines = [("## " if md else "") + f"nsbridge diff: {result['a_label']} -> {result['b_label']}",
             ""]
    lines.append(_verdict_line(result))
    step = result.get("step")
    if step and step["delta_pct"] is not None:
        lines.append(f"Step time: {step['a_us'] / 1e3:.2f} -> {step['b_us'] / 1e3:.2f} ms "
                     f"({step['delta_pct']:+.1f}%, noise ±{step['noise_pct']:.1f}%): "
                     f"{step['status']}")
    lines.append(f"Ops compared by {result['source']}; run-wide drift "
                 f"{result['drift_pct']:+.1f}% (each op is judged beyond it); gate: "
                 f"+{result['fail_above_pct']:g}% outside noise, adding at least "
                 f"{result['min_step_share_pct']:g}% of the base step")
    header = ["op", "A µs/step", "B µs/step", "change %", "noise ±%", "status"]
    rows = [[r["op"], _num(r["a_us"]), _num(r["b_us"]),
             "-" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}",
             "-" if r["noise_pct"] is None else f"{r['noise_pct']:.1f}",
             r["status"] + ("" if r["gated"] else " (not gated)")]
            for r in result["ops"][:top]]
    lines += ["", *(_md_table(header, rows) if md else _text_table(header, rows))]
    syncs = result["syncs"]
    for kind in ("new", "vanished"):
        if syncs[kind]:
            lines.append(f"{kind.capitalize()} sync points: {', '.join(syncs[kind])}")
    lines.append("")
    if result["regressions"]:
        lines.append("REGRESSED: " + "; ".join(_regression(r) for r in result["regressions"]))
    else:
        lines.append("No regression above the threshold.")
    return "\n".join(lines)


def _regression(r: dict[str, Any]) -> str:
    if r["delta_pct"] is None:
        return f"{r['what']} (new, {r['source']})"
    return f"{r['what']} {r['delta_pct']:+.1f}% ({r['source']}, noise ±{r['noise_pct']:.1f}%)"


def _verdict_line(result: dict[str, Any]) -> str:
    a, b = result["verdict"]["a"], result["verdict"]["b"]
    return f"Verdict: {a} -> {b}" + ("" if a == b else " (changed)")


def _num(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows])


def _text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [fmt(header), *(fmt(r) for r in rows)]
