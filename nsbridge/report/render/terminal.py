"""The short text printed after a run: the head (status, verdict, steps, machine), then
each section of report/render/sections.py as the terminal shows it (``brief`` rows). Every line
is escaped (escape.terminal) as it is printed, so no name, path or message from a trace
or a script can drive the terminal."""

from __future__ import annotations

import textwrap
from typing import Any, Collection, Optional

from .compose import Head, compose
from ..document.document import TERMINAL, Items, Table, Text
from ..document.escape import terminal
from ..document.formats import is_number
from ...contract.report import Report

PERFETTO = "https://ui.perfetto.dev"
NAME_WIDTH = 44
MIN_NAME_WIDTH = 20   # narrower than this a name no longer tells the op
MIN_TEXT_WIDTH = 24   # other text columns (sites, paths) are cut in the middle down to this
WIDTH = 120   # text lines wrap here (tables do not: their names are clipped instead)


def terminal_summary(report: Report, run_dir: Optional[str], top: int = 10) -> str:
    """The summary, tables cut to ``top`` rows (fewer where a block says so)."""
    composed = compose(report, top)
    lines = _head(composed.head)
    for section in composed.sections:
        if TERMINAL not in section.views:
            continue
        title = section.brief_title or section.title
        lines += ["", *wrapped(f"{title}: {section.lead}" if section.lead else f"{title}:")]
        for block in section.shown_in(TERMINAL):
            lines += _block(block)
    if run_dir:
        trace = composed.head.trace
        # one line, never wrapped: scripts and people copy the path from it
        lines += ["", terminal(f"Run directory: {run_dir}  (report.md, report.html"
                               + (f", {trace} opens in {PERFETTO}" if trace else "") + ")")]
    return "\n".join(lines)


def wrapped(text: str, indent: str = "", bullet: str = "") -> list[str]:
    """``text`` escaped for the terminal and wrapped to WIDTH columns: the first line starts
    with ``indent`` + ``bullet``, the others hang under the text (words are never split,
    so a long path stays whole on a line of its own)."""
    hang = indent + " " * (len(bullet) if bullet else 2)
    return textwrap.wrap(terminal(text), WIDTH, initial_indent=indent + bullet,
                         subsequent_indent=hang, break_long_words=False,
                         break_on_hyphens=False) or [indent + bullet.rstrip()]


def _head(head: Head) -> list[str]:
    """Status, error, what a stopped or failed run kept, the verdict, steps and machine."""
    lines = wrapped(f"nsbridge {head.command}: {head.target}  [status: {head.status}]")
    for line in head.trouble:
        lines += wrapped(line, "  ")
    if head.verdict:
        lines += ["", *wrapped(f"{head.verdict[0]}: {head.verdict[1]}")]
        for kind, text in head.verdict_lines:
            lines += wrapped(text, "  ", f"{kind} ")
    context = [w for label, text in head.context for w in wrapped(f"{label}: {text}")]
    return lines + ([""] + context if context else [])


def _block(block: Any) -> list[str]:
    if isinstance(block, Text):
        return wrapped(f"({block.text})" if block.note else block.text, "  ")
    lead = wrapped(block.lead, "  ") if block.lead else []
    if isinstance(block, Items):
        return lead + [line for i, item in enumerate(block.items[:block.brief], 1)
                       for line in wrapped(item, "  ", f"{i}. " if block.numbered else "- ")]
    assert isinstance(block, Table)
    return ([""] if lead else []) + lead + aligned(block.header, block.rows[:block.brief],
                                                   code=block.code)


def aligned(header: list[str], rows: list[list[str]], name_width: int = NAME_WIDTH,
            code: Collection[int] = frozenset()) -> list[str]:
    """The lines of an aligned table, its cells escaped before they are measured and its
    first column (names) clipped to ``name_width``; columns of numbers right-aligned,
    the others left-aligned. A table wider than WIDTH gives way in steps until it fits:
    its column names go on two lines, the op names are cut further, then text columns
    (prose first, ``code`` columns such as a sync's `file:line` last; the rightmost
    first) are cut in the middle, and last the rightmost columns are left out with a line naming them
    (report.md has every cell whole)."""
    rows = [[terminal(c) for c in r] for r in rows]
    numeric = [i > 0 and all(is_number(r[i]) for r in rows) for i in range(len(header))]
    heads = [[h] for h in header]
    limits = [name_width] + [10_000] * (len(header) - 1)   # the widest each cell may be

    def widths() -> list[int]:
        return [max([len(x) for x in heads[i]] + [min(len(r[i]), limits[i]) for r in rows])
                for i in range(len(heads))]

    def over() -> int:
        w = widths()
        return 2 + sum(w) + 2 * (len(w) - 1) - WIDTH

    if over() > 0:
        heads = [heads[0]] + [_two_lines(h) for h in header[1:]]
    if over() > 0:
        limits[0] = max(min(limits[0], widths()[0]) - over(), MIN_NAME_WIDTH)
    text = [i for i in range(1, len(header)) if not numeric[i]]
    # prose before code, the rightmost first (tables put what matters most on the left)
    for i in sorted(text, key=lambda i: (i in code, -i)):
        if over() > 0:
            limits[i] = max(widths()[i] - over(), MIN_TEXT_WIDTH)
    left_out: list[str] = []
    while over() > 0 and len(heads) > 2:
        left_out.insert(0, header[len(heads) - 1])
        heads, limits = heads[:-1], limits[:-1]
    w = widths()
    rows = [[_cut(c, w[i]) for i, c in enumerate(r[:len(w)])] for r in rows]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(c.rjust(n) if numeric[i] else c.ljust(n)
                                for i, (c, n) in enumerate(zip(cells, w)))
    depth = max(len(h) for h in heads)
    head = [line([([""] * (depth - len(h)) + h)[k] for h in heads]) for k in range(depth)]
    note = (wrapped(f"(left out here to fit {WIDTH} columns: {', '.join(left_out)}; in "
                    "report.md)", "  ") if left_out else [])
    return head + [line(r) for r in rows] + note


def _cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut in the middle so that both ends still tell
    ('aten::cu…norm_backward' from aten::cudnn_batch_norm_backward; a site keeps its
    line: 'main() at …/train_cnn.py:64')."""
    if len(text) <= width:
        return text
    tail = (width - 1) * 2 // 3
    return text[: width - 1 - tail] + "…" + text[len(text) - tail:]


def _two_lines(name: str) -> list[str]:
    """A column name split at the space nearest its middle ('launch lat µs' -> 'launch',
    'lat µs'); a one-word name stays on the second line."""
    spaces = [i for i, c in enumerate(name) if c == " "]
    if not spaces:
        return ["", name]
    cut = min(spaces, key=lambda i: abs(i - len(name) / 2))
    return [name[:cut], name[cut + 1:]]
