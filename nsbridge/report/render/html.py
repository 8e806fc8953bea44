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
import re
from functools import lru_cache
from importlib.resources import files
from typing import Any, Collection

from .compose import Composed, Head
from ..document.document import HTML, Items, Section, Table, Text
from ..document.escape import terminal
from ..document.formats import is_number
PERFETTO = "https://ui.perfetto.dev"
FIRST = ("recommendations",)   # sections drawn before the charts and the op table
_URL = re.compile(r"https?://[^\s<>\"')]+[^\s<>\"').,;:]")


def html_page(composed: Composed) -> str:
    """The whole page from the report composed with every row and its charts: the head,
    the verdict card, the charts, then every section of report/render/sections.py."""
    e = _esc
    head = composed.head
    perfetto = (f" · <code>{e(head.trace)}</code> (in this folder) opens in "
                f"<a href='{PERFETTO}'>{PERFETTO}</a>" if head.trace else "")
    body = [f"<header><h1>nsbridge {e(head.command)}: <code>{e(head.target)}</code>"
            f"</h1><p>Status: <b>{e(head.status)}</b>{perfetto}</p></header>"]
    body += [f"<p class='err'>{e(line)}</p>" for line in head.trouble]
    body.append(_summary(head))
    shown = [s for s in composed.sections if HTML in s.views]
    # what to do first, then the charts, then the long tables
    body += [_section(s) for s in shown if s.key in FIRST]
    body.append(_charts(composed.charts, composed.chart_titles))
    body += [_section(s) for s in shown if s.key not in FIRST]
    data = json.dumps(composed.charts).replace("<", "\\u003c").replace(
        ">", "\\u003e").replace("&", "\\u0026")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>nsbridge {e(head.command)}: {e(head.target)}</title>"
            f"<style>{_asset('report.css')}</style></head><body>{''.join(body)}"
            f"<script type='application/json' id='nsbridge-data'>{data}</script>"
            f"<script>{_asset('chart.umd.min.js')}</script><script>{_asset('report.js')}</script>"
            "</body></html>\n")


def _summary(head: Head) -> str:
    """The verdict with its evidence (where the run concludes one; else what was
    recorded), steps, window and machine."""
    e = _esc
    parts = [f"<p id='{label.lower()}'>{label}: {e(text)}</p>" for label, text in head.context]
    verdict = _verdict(head)
    if not (verdict or parts):
        return ""
    top = (f"<section id='verdict' class='card'>{verdict}" if verdict
           else "<section id='recorded' class='card'><h2>What was recorded</h2>")
    return top + "".join(parts) + "</section>"


def _verdict(head: Head) -> str:
    if not head.verdict:
        return ""
    e = _esc
    css = {"!": " class='err'", "-": "", "~": "", "?": " class='muted'", ">": " class='muted'"}
    return (f"<h2>{e(head.verdict[0])}: <span class='verdict'>{e(head.verdict[1])}</span>"
            "</h2><ul>" + "".join(f"<li{css[kind]}>{e(text)}</li>"
                                  for kind, text in head.verdict_lines) + "</ul>")


def _charts(data: dict[str, Any], titles: dict[str, str]) -> str:
    boxes = [f"<figure class='chart'><figcaption>{_esc(titles[k])}</figcaption>"
             f"<canvas id='chart-{k}'></canvas></figure>" for k in titles if k in data]
    boxes += [f"<figure class='chart'><figcaption>{_esc(c['title'])}</figcaption>"
              f"<canvas id='chart-pass-{_esc(c['id'])}'></canvas></figure>"
              for c in data.get("pass_charts", [])]
    return f"<section id='charts'>{''.join(boxes)}</section>" if boxes else ""


def _section(section: Section) -> str:
    e = _esc
    lead = f"<p>{_linked(section.lead)}</p>" if section.lead else ""
    shown = section.shown_in(HTML)
    toggled = [b for b in shown if isinstance(b, Table) and b.toggle]
    parts, first = [], True
    for block in shown:
        if len(toggled) > 1 and block in toggled:
            if first:
                parts.append(_toggle_bar(toggled))
            parts.append(f"<div class='toggled' data-toggle='{e(block.html_id)}'"
                         + ("" if first else " hidden") + f">{_block(block)}</div>")
            first = False
        else:
            parts.append(_block(block))
    if section.folded:
        return (f"<section id='{e(section.key)}'><details><summary><h2>{e(section.title)}</h2>"
                f"</summary>{lead}{''.join(parts)}</details></section>")
    return (f"<section id='{e(section.key)}'><h2>{e(section.title)}</h2>{lead}{''.join(parts)}"
            "</section>")


def _toggle_bar(tables: list[Table]) -> str:
    """Buttons that show one of a section's interactive tables at a time."""
    e = _esc
    buttons = "".join(f"<button type='button' data-show='{e(t.html_id)}' aria-pressed="
                      f"'{'true' if i == 0 else 'false'}'>{e(t.toggle)}</button>"
                      for i, t in enumerate(tables))
    return f"<p class='toggle-bar'>Group by: {buttons}</p>"


def _block(block: Any) -> str:
    e = _esc
    if isinstance(block, Text):
        text = _linked(block.text)
        return f"<p class='muted'>{text}</p>" if block.note else f"<p>{text}</p>"
    if isinstance(block, Items):
        lead = f"<p>{_linked(block.lead)}</p>" if block.lead else ""
        tag = "ol" if block.numbered else "ul"
        return (lead + f"<{tag}>" + "".join(f"<li>{_linked(item)}</li>" for item in block.items)
                + f"</{tag}>")
    assert isinstance(block, Table)
    if block.sortable:
        return _sortable(block)
    table = _table(block.header, block.rows, block.code)
    if block.folded:
        return f"<details><summary>{e(block.lead or 'table')}</summary>{table}</details>"
    return (f"<p>{e(block.lead)}</p>" if block.lead else "") + table


def _sortable(block: Table) -> str:
    """An interactive table (report.js sorts it by a header click and filters its rows by
    name): a header row of sources over the column names (when given), each row's
    details folded under its name."""
    e = _esc
    ident = e(block.html_id or "table")
    parts = [f"<p><input class='row-filter' type='search' placeholder='filter ops by name' "
             f"aria-label='filter ops' data-table='{ident}'> <span class='row-count' "
             f"data-table='{ident}'>{len(block.rows)} rows</span></p>"
             f"<table id='{ident}' class='sortable'><thead>"]
    sources = [source for source, width in block.groups for _ in range(width)]
    if block.groups:
        parts.append("<tr class='sources'>" + "".join(
            f"<th colspan='{n}'>{e(s)}</th>" for s, n in block.groups) + "</tr>")
    numeric = [i > 0 and bool(block.rows) and all(is_number(r[i]) for r in block.rows)
               for i in range(len(block.header))]
    parts.append("<tr>" + "".join(
        f"<th data-col='{i}' data-numeric='{'1' if numeric[i] else '0'}'"
        + (f" title='{e(sources[i])}'" if i < len(sources) else "") + f">{e(h)}</th>"
        for i, h in enumerate(block.header)) + "</tr></thead><tbody>")
    for i, row in enumerate(block.rows):
        items = "".join(f"<li>{e(d)}</li>" for d in (block.details[i] if i < len(block.details)
                                                   else []))
        name = (f"<details><summary><code>{e(row[0])}</code></summary><ul>{items}</ul>"
                f"</details>" if items else f"<code>{e(row[0])}</code>")
        parts.append(f"<tr data-name='{e(row[0])}'><td>{name}</td>"
                     + "".join(f"<td data-v='{e(_sort_value(c))}'"
                               + (" class='t'" if not numeric[j + 1] else "") + f">{e(c)}</td>"
                               for j, c in enumerate(row[1:]))
                     + "</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def _table(header: list[str], rows: Any, code: Collection[int] = frozenset()) -> str:
    """An escaped table; the columns in ``code`` (names, paths) set as code; numbers
    right-aligned, text left-aligned."""
    def cell(i: int, value: Any) -> str:
        text = _esc(value)
        if i in code:
            return f"<td class='t'><code>{text}</code></td>"
        return f"<td>{text}</td>" if is_number(str(value)) else f"<td class='t'>{text}</td>"
    return ("<table><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(cell(i, v) for i, v in enumerate(row)) + "</tr>"
                      for row in rows) + "</table>")


def _sort_value(cell: str) -> str:
    """A numeric cell sorts by its number; '-' (not measured) sorts last."""
    try:
        return repr(float(cell.lstrip("±")))
    except ValueError:
        return "" if cell == "-" else cell


def _linked(text: str) -> str:
    """``text`` escaped, its http(s) addresses made links (matched in the escaped text, so
    an address can hold no quote or angle bracket that would leave the attribute)."""
    return _URL.sub(lambda m: f"<a href='{m.group(0)}'>{m.group(0)}</a>", _esc(text))


def _esc(value: Any) -> str:
    """``value`` as HTML text, its control characters shown as escapes (escape.terminal)."""
    return html.escape(terminal(value), quote=True)


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    """A file of report/assets/ (Chart.js, the page's CSS and script), safe to inline."""
    return files("nsbridge").joinpath(f"report/assets/{name}").read_text(
        encoding="utf-8").replace("</script", "<\\/script")
