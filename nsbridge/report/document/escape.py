"""Text from runs (op names, paths, scripts' messages) made safe to print.

``terminal`` (nsbridge.guard.printable) shows control, format and separator characters as Python
escapes, so a name cannot move the cursor, recolour or erase a terminal, or reorder text.
``md_cell`` also escapes Markdown, so a name cannot break a table row or a comment, start a
code span or inject HTML; ``md_text`` is ``md_cell`` for
text that starts a paragraph, heading or list item of its own; ``md_code`` sets a name as a
code span in a table cell. ``csv_cell`` makes a text cell of a CSV file safe for a
spreadsheet.
"""

from __future__ import annotations

import re

from ...guard.printable import printable as terminal   # the one escape for every view

_MARKDOWN = re.compile(r"[\\`*_\[\]|~]")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# what opens a block at the start of a line: heading, list item, rule, setext underline
_BLOCK_START = re.compile(r"^(\s*)(#{1,6}|[+=-]+|\d{1,9}[.)])(?=\s|$)")
_BACKTICKS = re.compile("`+")


def md_cell(text: object) -> str:
    """``text`` for Markdown, in a table cell or a line: control characters as in
    ``terminal``, ``\\ ` * _ [ ] | ~`` backslash-escaped, ``& < >`` as HTML entities. It
    renders as the literal text and stays on one line."""
    shown = _MARKDOWN.sub(lambda m: "\\" + m.group(), terminal(text))
    return "".join(_ENTITIES.get(ch, ch) for ch in shown)


def md_text(text: object) -> str:
    """``md_cell`` for text that begins a Markdown line of its own (a paragraph, or a list
    item after ``- ``): a leading ``#``, ``+``, ``-``, ``=`` or ``1.`` is escaped too, so it
    cannot turn the line into a heading, a list or a rule."""
    return _BLOCK_START.sub(_escape_marker, md_cell(text))


def _escape_marker(match: re.Match[str]) -> str:
    """'\\# ', '\\- ', '1\\. ': the block marker a line starts with, escaped."""
    indent, marker = match[1], match[2]
    if marker[0].isdigit():
        return indent + marker[:-1] + "\\" + marker[-1]
    return indent + "\\" + marker


_FORMULA_START = ("=", "+", "-", "@")    # what a spreadsheet reads as a formula (OWASP)


def csv_cell(value: object) -> object:
    """``value`` for a CSV cell: text with control characters as in ``terminal`` (so a CR
    or LF in a name never splits its row) and a single quote put before a leading ``=``,
    ``+``, ``-`` or ``@`` (so a spreadsheet shows it as text, never runs it as a formula;
    a leading tab or CR is already ``\\t``/``\\r``). Anything else (a number, a
    negative one included, a flag, a missing value) is returned as it is."""
    if not isinstance(value, str):
        return value
    text = terminal(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def md_code(text: object) -> str:
    """``text`` as a code span for a Markdown table cell ("" when empty): control characters
    as in ``terminal``, ``|`` as ``\\|`` (the table's escape, undone inside the span), set
    between more backticks than any run it holds. A code span shows its text literally:
    ``<script>`` in it is text, never HTML."""
    shown = terminal(text).replace("|", "\\|")
    if not shown:
        return ""
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(shown)), default=0) + 1)
    pad = " " if (shown[0] == "`" or shown[-1] == "`"
                  or (shown[0] == shown[-1] == " " and shown.strip())) else ""
    return f"{fence}{pad}{shown}{pad}{fence}"
