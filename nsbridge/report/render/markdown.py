"""report.md, sized for a GitHub issue or PR comment: the head (status, verdict, steps,
machine), then each section of sections.py, and the definitions folded. Everything from
a trace or a script is escaped where it is placed: names as code spans in tables
(escape.md_code), other text as Markdown text (escape.md_cell, md_text), a folded
table's summary as HTML text (it sits in an HTML block, where Markdown escapes would show)."""

from __future__ import annotations

import html
import re
import textwrap
from typing import Any, Collection, Iterable, Optional

from .compose import Composed, Head
from ..document.definitions import markdown_block
from ..document.document import MARKDOWN, Items, Table, Text
from ..document.escape import md_cell, md_code, md_text, terminal

_MARKS = {"!": "**contended:** ", "-": "", "~": "", "?": "*", ">": ""}
WIDTH = 180      # no prose line of report.md is wider (a table row is one line whatever it holds)
_ITEM = re.compile(r"(?:[-*]|\d+\.) ")
_OPENS_BLOCK = re.compile(r"[-+*>#=|<`~]|\d+[.)]$")


def markdown(composed: Composed, key_averages_file: Optional[str] = None) -> str:
    """report.md, sized to paste in a PR comment (about 80 lines) from the report composed
    with its tables cut to the run's ``analysis.top_ops`` rows (report.render.files.pages),
    the definitions folded at the end, with the name of torch's own ``key_averages``
    table file when there is one."""
    md = _head(composed.head)
    for section in composed.sections:
        if MARKDOWN not in section.views:
            continue
        body = [md_text(section.lead)] if section.lead else []
        for block in section.shown_in(MARKDOWN):
            body += _block(block)
        if body and not body[0]:
            body = body[1:]     # a heading needs no blank line after it
        if section.folded:
            md += ["", f"<details><summary>{md_cell(section.title)}</summary>", "", *body, "",
                   "</details>"]
        else:
            md += ["", f"## {md_cell(section.title)}", *body]
    footer = md_text("Tables show their top rows; report.html and report.json have every row.")
    if key_averages_file:
        footer += (" " + md_text("torch.profiler's own key_averages() table: ")
                   + md_code(key_averages_file))
    md += ["", *markdown_block(footer)]
    return "\n".join(wrapped(md)) + "\n"


def wrapped(lines: Iterable[str], width: int = WIDTH) -> list[str]:
    """``lines`` with every prose line (a paragraph or list item; not a table row, heading,
    HTML tag or fenced block) wider than ``width`` broken at spaces into Markdown soft line
    breaks: the page renders the same, and reads in a terminal or a diff. A list item's
    continuation is indented under its text; a word wider than ``width`` stays whole."""
    out: list[str] = []
    fenced = False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        if fenced or len(line) <= width or line.startswith(("|", "#", "<")):
            out.append(line)
            continue
        item = _ITEM.match(line)
        out += _broken(line, width, " " * (item.end() if item else 0))
    return out


def _broken(line: str, width: int, indent: str) -> list[str]:
    """``line`` broken at spaces, greedily; a line never starts with a word Markdown reads
    as the start of a block (a list marker, a quote, a heading, a table cell)."""
    words = line.split(" ")
    out, current = [], words[0]
    for word in words[1:]:
        if len(current) + 1 + len(word) <= width or not word:
            current += " " + word
            continue
        head, _, last = current.rpartition(" ")
        if not _OPENS_BLOCK.match(word):
            out.append(current)
            current = indent + word
        elif head.strip() and not _OPENS_BLOCK.match(last):   # the word before goes with it
            out.append(head)
            current = indent + last + " " + word
        else:
            current += " " + word
    return out + [current]


def _head(head: Head) -> list[str]:
    """Title, status, error, what a stopped or failed run kept, verdict, steps, machine."""
    md = [f"# nsbridge {head.command}: {md_cell(head.target)}", "",
          f"Status: **{md_cell(head.status)}**"]
    for line in head.trouble:
        md += ["", md_text(line)]
    if head.verdict:
        md += ["", f"## {head.verdict[0]}: {md_cell(head.verdict[1])}", ""]
        md += [f"- {_MARKS[kind]}{md_cell(text)}" + ("*" if kind == "?" else "")
               for kind, text in head.verdict_lines]
    for label, text in head.context:
        md += ["", f"{label}: {md_text(text)}"]
    return md


def _block(block: Any) -> list[str]:
    if isinstance(block, Text):
        return ["", f"({md_text(block.text)})" if block.note else md_text(block.text)]
    lead = ["", md_text(block.lead)] if block.lead else []
    if isinstance(block, Items):
        return lead + [""] + [f"{f'{i}.' if block.numbered else '-'} {md_text(item)}"
                              for i, item in enumerate(block.items[:block.brief], 1)]
    assert isinstance(block, Table)
    rows = table(block.header, block.rows[:block.brief], block.code)
    if block.folded:    # as report.html folds it: the lead is the summary, raw HTML text
        summary = textwrap.wrap(html.escape(terminal(block.lead or "table"), quote=False), WIDTH)
        return ["", "<details><summary>", *summary, "</summary>", *rows, "", "</details>"]
    return lead + rows


def table(header: list[str], rows: list[list[str]], code: Collection[int] = ()) -> list[str]:
    """A Markdown table after a blank line: the columns in ``code`` (names) as code spans
    (escape.md_code), the others as text (escape.md_cell)."""
    def cell(i: int, value: Any) -> str:
        return md_code(value) if i in code else md_cell(value)
    return (["", "| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell(i, v) for i, v in enumerate(row)) + " |" for row in rows])
