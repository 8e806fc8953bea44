"""report.html: one self-contained page (no network) with charts, a sortable and
filterable op table, and every section of the report.

Charts use Chart.js (MIT, vendored in ``assets/``, inlined into each page, about 210 kB):
a well-kept canvas library, so no chart is drawn by hand. The page's own style and script
are ``assets/report.css`` and ``assets/report.js``, inlined the same way. The page is written server-side
with every string HTML-escaped (control and bidirectional characters shown as escapes, as in
the terminal), so it reads without JavaScript; the script only draws the
charts from a JSON blob (``<`` ``>`` ``&`` escaped as unicode, so no trace string can close
the script element) and sorts and filters the op table through the DOM, never innerHTML.
"""

from __future__ import annotations

import html
import json
from functools import lru_cache
from importlib.resources import files
from typing import Any, Optional

from .. import schema as S
from .escape import terminal
from .render import (MEMORY_NOTE, NCU_RANK_HEADER, RANK_HEADER, TIMELINE_HEADER,
                     TIMELINE_RANK_HEADER, _attribution, _early_line, _gap_host, _ncu_findings,
                     _ncu_line, _step_line, _timeline_line, _timeline_rows, _where,
                     distributed_lines, error_text, kernel_rate, machine_line, op_table,
                     outcome_line, per_step_cell, rank_rows, shown_recommendations,
                     shown_verdict, tool_rank_rows, verdict_headline, verdict_lines,
                     verdict_title, window_line)

TOP_CHART = 15


def html_page(report: dict[str, Any]) -> str:
    """The whole page."""
    e = _esc
    body = [f"<header><h1>nsbridge {e(report['command'])}: <code>{e(report['target'])}</code>"
            f"</h1><p>Status: <b>{e(report['status'])}</b></p></header>"]
    if report.get("error"):
        body.append(f"<p class='err'>Error: {e(error_text(report['error']))}</p>")
    outcome = outcome_line(report)
    if outcome:
        body.append(f"<p id='outcome' class='err'>{e(outcome)}</p>")
    body.append(_summary(report))
    body.append(_charts(report))
    body.append(_ops(report))
    body.append(_syncs(report))
    body.append(_device(report))
    body.append(_timeline(report))
    body.append(_ranks(report))
    body.append(_ncu(report))
    body.append(_notes(report))
    data = json.dumps(chart_data(report)).replace("<", "\\u003c").replace(
        ">", "\\u003e").replace("&", "\\u0026")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>nsbridge {e(report['command'])}: {e(report['target'])}</title>"
            f"<style>{_asset('report.css')}</style></head><body>{''.join(body)}"
            f"<script type='application/json' id='nsbridge-data'>{data}</script>"
            f"<script>{_asset('chart.umd.min.js')}</script><script>{_asset('report.js')}</script>"
            "</body></html>\n")


def chart_data(report: dict[str, Any]) -> dict[str, Any]:
    """What the charts draw (only what the report has)."""
    out: dict[str, Any] = {}
    per_step = (report.get("steps") or {}).get("per_step") or []
    if per_step:
        out["steps"] = {"labels": [f"run {s['run']} step {s['step']}" if "run" in s
                                   else str(s["step"]) for s in per_step],
                        "phases": {p[:-3]: [s[p] for s in per_step] for p in
                                   ("data_ms", "forward_ms", "backward_ms", "optimizer_ms",
                                    "other_ms")}}
    ops = [op for op in report.get("ops", []) if op.get(S.CPU_SELF_US) is not None][:TOP_CHART]
    if ops:
        series = {"torch.profiler self CPU ms": [op[S.CPU_SELF_US] / 1e3 for op in ops]}
        if report.get("device"):
            series["torch.profiler self device ms"] = [(op[S.DEVICE_SELF_US] or 0) / 1e3
                                                      for op in ops]
        if any(op.get("nsys") for op in ops):
            series["nsys kernel ms"] = [((op.get("nsys") or {}).get("kernel_us") or 0) / 1e3
                                        for op in ops]
        out["ops"] = {"labels": _labels(ops), "series": series}
        memory = [op for op in ops if op.get(S.MEM_MIB) is not None]
        if memory and any(op[S.MEM_MIB] or op.get(S.MEM_NET_MIB) for op in memory):
            out["memory"] = {"labels": _labels(memory),
                             "gross": [op[S.MEM_MIB] for op in memory],
                             "net": [op.get(S.MEM_NET_MIB) for op in memory]}
    device = report.get("device")
    if device and device.get("idle_gaps"):
        steps = report.get("steps") or {}
        window = (steps.get("mean") or {}).get("wall_ms", 0) * (steps.get("count") or 0)
        out["gaps"] = {"window_ms": window, "busy_pct": device["busy_pct"],
                       "labels": [terminal(f"{g['dur_us'] / 1e3:.2f} ms idle, host in "
                                           f"{g['host_op'] or 'Python between ops'}")
                                  for g in device["idle_gaps"]],
                       "spans": [[g["start_us"] / 1e3, (g["start_us"] + g["dur_us"]) / 1e3]
                                 for g in device["idle_gaps"]]}
    ncu_ops = [op for op in report.get("ops", []) if op.get("ncu")][:8]
    if ncu_ops:
        keys = {"SM %": "sm_pct", "memory %": "memory_pct",
                "achieved occupancy %": "achieved_occupancy_pct", "tensor pipe %": "tensor_pct",
                "L2 hit %": "l2_hit_pct"}
        out["ncu"] = {"labels": _labels(ncu_ops),
                      "series": {label: [op["ncu"].get(k) for op in ncu_ops]
                                 for label, k in keys.items()}}
    return out


def _labels(ops: list[dict[str, Any]]) -> list[str]:
    """Op names for the charts, control characters shown as escapes."""
    return [terminal(op["name"]) for op in ops]


def _summary(report: dict[str, Any]) -> str:
    """The verdict with its evidence (where the run concludes one; else what was recorded),
    steps, window, machine and the recommendations."""
    e = _esc
    parts = []
    step = _step_line(report)
    if step:
        parts.append(f"<p>Steps: {e(step)}</p>")
    window = window_line(report)
    if window:
        parts.append(f"<p id='window'>Window: {e(window)}</p>")
    machine = machine_line(report.get("machine"))
    if machine:
        parts.append(f"<p id='machine'>Machine: {e(machine)}</p>")
    recommendations = shown_recommendations(report)
    if recommendations:
        parts.append("<h3>Recommendations</h3><ol id='recommendations'>")
        for r in recommendations:
            badge = "<span class='badge'>addresses the verdict</span> " if r.get(
                "addresses_verdict") else ""
            parts.append(f"<li>{badge}<b>{e(r['title'])}</b>: {e(r['why'])}.<br>Fix: "
                         f"<code>{e(r['fix'])}</code> (<a href='{e(r['url'])}'>docs</a>)</li>")
        parts.append("</ol>")
    verdict = _verdict(report)
    if not (verdict or parts):
        return ""
    head = (f"<section id='verdict' class='card'>{verdict}" if verdict
            else "<section id='recorded' class='card'><h2>What was recorded</h2>")
    return head + "".join(parts) + "</section>"


def _verdict(report: dict[str, Any]) -> str:
    verdict = shown_verdict(report)
    if not verdict:
        return ""
    e = _esc
    css = {"!": " class='err'", "-": "", "~": "", "?": " class='muted'", ">": " class='muted'"}
    return (f"<h2>{e(verdict_title(report))}: <span class='verdict'>"
            f"{e(verdict_headline(verdict))}</span></h2><ul>"
            + "".join(f"<li{css[kind]}>{e(text)}</li>" for kind, text in verdict_lines(verdict))
            + "</ul>")


def _charts(report: dict[str, Any]) -> str:
    data = chart_data(report)
    titles = {"steps": "Step time per measured step, by phase (ms)",
              "ops": "Top ops: time by source (ms)",
              "gaps": "Longest GPU idle gaps over the measured window (ms from its start)",
              "memory": "Memory per op: gross vs net (MiB)",
              "ncu": "Nsight Compute per op (% of peak / hit rate)"}
    boxes = [f"<figure class='chart'><figcaption>{_esc(titles[k])}</figcaption>"
             f"<canvas id='chart-{k}'></canvas></figure>" for k in titles if k in data]
    return f"<section id='charts'>{''.join(boxes)}</section>" if boxes else ""


def _ops(report: dict[str, Any]) -> str:
    if not report["ops"]:
        return ""
    e = _esc
    header, rows = op_table(report, len(report["ops"]))
    sources = [_source_of(h) for h in header]
    groups, last = [], None
    for source in sources:
        if source == last:
            groups[-1][1] += 1
        else:
            groups.append([source, 1])
            last = source
    parts = ["<section id='ops'><h2>Ops</h2><p><input id='op-filter' type='search' "
             "placeholder='filter ops by name' aria-label='filter ops'> <span id='op-count'>"
             f"{len(rows)} ops</span></p><table id='op-table'><thead><tr class='sources'>"
             + "".join(f"<th colspan='{n}'>{e(s)}</th>" for s, n in groups) + "</tr><tr>"]
    parts += [f"<th data-col='{i}' title='{e(src)}'>{e(h)}</th>"
              for i, (h, src) in enumerate(zip(header, sources))]
    parts.append("</tr></thead><tbody>")
    for op, row in zip(report["ops"], rows):
        work = [("kernel", k) for k in op.get("kernels") or []][:10] + [
            (c["kind"], c) for c in op.get("copies") or []][:5]
        items = "".join(f"<li>{e(kind)} <code>{e(k['name'])}</code> x{k['calls']}, "
                        f"{k['device_us'] / 1e3:.3f} ms</li>" for kind, k in work)
        name = (f"<details><summary><code>{e(row[0])}</code></summary><ul>{items}</ul>"
                f"</details>" if items else f"<code>{e(row[0])}</code>")
        parts.append(f"<tr data-name='{e(row[0])}'><td>{name}</td>"
                     + "".join(f"<td data-v='{e(_sort_value(c))}'>{e(c)}</td>" for c in row[1:])
                     + "</tr>")
    parts.append(f"</tbody></table><p class='muted'>{e(MEMORY_NOTE)}</p></section>")
    return "".join(parts)


def _syncs(report: dict[str, Any]) -> str:
    if not report["sync_points"]:
        return ""
    e = _esc
    rows = "".join(
        f"<tr><td>{e(p['kind'])}</td><td><code>{e(_where(p))}</code></td><td><code>"
        f"{e(p['op'] or '')}</code></td><td>{p['count']}</td><td>{e(p['counted_over'])}</td>"
        f"<td>{e(per_step_cell(p))}</td><td>{p['host_ms']:.3f}</td><td>"
        f"{'-' if p.get('gpu_idle_ms') is None else format(p['gpu_idle_ms'], '.3f')}</td></tr>"
        for p in report["sync_points"])
    return ("<section id='syncs'><h2>Sync points (host waits for the device)</h2><table><tr>"
            "<th>kind</th><th>where</th><th>op</th><th>count</th><th>counted over</th>"
            "<th>per step</th><th>host ms</th><th>GPU idle after ms</th></tr>"
            f"{rows}</table></section>")


def _device(report: dict[str, Any]) -> str:
    dev = report.get("device")
    if not dev:
        return ""
    e = _esc
    parts = [f"<section id='device'><h2>Device</h2><p>Busy {dev['busy_pct']:.1f}% of the "
             f"measured window, {dev['kernels']} kernels ({e(kernel_rate(dev))}); "
             f"attribution: {e(_attribution(dev['attribution']))}</p>"]
    early = _early_line(dev)
    if early:
        parts.append(f"<p>Launched before the window: {e(early)}</p>")
    if dev["idle_gaps"]:
        parts.append(_table(["device", "gap ms", "at ms", "host was in"],
                            [[g["device"], f"{g['dur_us'] / 1e3:.3f}",
                              f"{g['start_us'] / 1e3:.3f}", g["host_op"] or "Python between ops"]
                             for g in dev["idle_gaps"]], code={3}))
    return "".join(parts) + "</section>"


def _timeline(report: dict[str, Any]) -> str:
    t = report.get("timeline")
    if not t:
        return ""
    e = _esc
    parts = [f"<section id='timeline'><h2>Timeline (Nsight Systems)</h2><p>"
             f"{e(_timeline_line(t))}</p>"]
    if t["ops"]:
        parts.append(_table(TIMELINE_HEADER, _timeline_rows(t, 50), code={0}))
    if t["idle_gaps"]:
        parts.append("<ul>" + "".join(f"<li>GPU {g['device']} idle {g['dur_us'] / 1e3:.3f} ms "
                                      f"while the host was in {e(_gap_host(g))}</li>"
                                      for g in t["idle_gaps"]) + "</ul>")
    if t.get("ranks"):
        parts.append(f"<h3>Per rank</h3><p>The tables above are rank {e(t['shown_rank'])}'s.</p>"
                     + _table(TIMELINE_RANK_HEADER, tool_rank_rows(t, "timeline"), code={8}))
    return "".join(parts) + "</section>"


def _ranks(report: dict[str, Any]) -> str:
    dist = report.get("distributed")
    if not dist:
        return ""
    items = "".join(f"<li>{_esc(line)}</li>" for line in distributed_lines(dist))
    with_file = report.get("command") == "analyze"   # each rank's trace file
    header = RANK_HEADER + (["file"] if with_file else [])
    table = _table(header, rank_rows(dist, with_file),
                   code={len(RANK_HEADER)} if with_file else set())
    return (f"<section id='ranks'><h2>Ranks</h2>{table}"
            f"<ul>{items}</ul></section>")


def _ncu(report: dict[str, Any]) -> str:
    ncu = report.get("ncu")
    if not ncu:
        return ""
    e = _esc
    parts = [f"<section id='ncu'><h2>Kernels (Nsight Compute)</h2><p>{e(_ncu_line(ncu))}</p>"]
    findings = _ncu_findings(report)
    if findings:
        parts.append(_table(["op", "finding", "numbers"], findings, code={0}))
    if ncu.get("ranks"):
        parts.append(f"<h3>Per rank</h3><p>The findings are rank {e(ncu['shown_rank'])}'s.</p>"
                     + _table(NCU_RANK_HEADER, tool_rank_rows(ncu, "ncu"), code={5}))
    cols = [("sm_pct", "SM %"), ("memory_pct", "mem %"),
            ("achieved_occupancy_pct", "occupancy %"), ("tensor_pct", "tensor %"),
            ("l2_hit_pct", "L2 hit %")]
    parts.append("<details><summary>Profiled launches</summary><table><tr><th>launch</th>"
                 "<th>op</th><th>kernel</th><th>µs</th>" + "".join(f"<th>{h}</th>" for _, h in cols)
                 + "</tr>" + "".join(
                     f"<tr><td>{e(k['launch'])}</td><td><code>{e(k.get('op') or '-')}</code></td>"
                     f"<td><code>{e(k['kernel'])}</code></td><td>{_fmt(_div(k.get('duration_ns'), 1e3))}</td>"
                     + "".join(f"<td>{_fmt(k.get(c))}</td>" for c, _ in cols) + "</tr>"
                     for k in ncu["kernels"]) + "</table></details>")
    return "".join(parts) + "</section>"


def _notes(report: dict[str, Any]) -> str:
    e = _esc
    parts = []
    if report.get("overhead"):
        parts.append(f"<h2>Profiler overhead</h2><p>{e(report['overhead']['note'])}</p>")
    if report.get("notes"):
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in report["notes"])
                     + "</ul>")
    parts.append("<h2>Sources</h2><ul>" + "".join(
        f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in report.get("sources", {}).items()) + "</ul>")
    return f"<section id='notes'>{''.join(parts)}</section>"


def _table(header: list[str], rows: Any, code: set[int] = frozenset()) -> str:
    """An escaped table; the columns in ``code`` (names, paths) set as code."""
    def cell(i: int, value: Any) -> str:
        text = _esc(value)
        return f"<td><code>{text}</code></td>" if i in code else f"<td>{text}</td>"
    return ("<table><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(cell(i, v) for i, v in enumerate(row)) + "</tr>"
                      for row in rows) + "</table>")


def _source_of(header: str) -> str:
    if header.startswith("nsys "):
        return "Nsight Systems"
    if header.startswith("ncu "):
        return "Nsight Compute"
    return "torch.profiler"


def _sort_value(cell: str) -> str:
    """A numeric cell sorts by its number; '-' (not measured) sorts last."""
    try:
        return repr(float(cell.lstrip("±")))
    except ValueError:
        return "" if cell == "-" else cell


def _div(value: Optional[float], by: float) -> Optional[float]:
    return None if value is None else value / by


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else _esc(value)


def _esc(value: Any) -> str:
    """``value`` as HTML text, its control characters shown as escapes (escape.terminal)."""
    return html.escape(terminal(value), quote=True)


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    """A file of report/assets/ (Chart.js, the page's CSS and script), safe to inline."""
    return files("nsbridge").joinpath(f"report/assets/{name}").read_text(
        encoding="utf-8").replace("</script", "<\\/script")
