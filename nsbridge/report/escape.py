"""Text from runs (op names, paths, scripts' messages) made safe to print.

``terminal`` shows control characters as Python escapes, so a name cannot move the cursor,
recolour or erase a terminal. ``md_cell`` also escapes Markdown, so a name cannot break a
table row or a comment, start a code span or inject HTML.
"""

from __future__ import annotations

import re

# C0, DEL, C1, line/paragraph separators and the bidirectional controls ("Trojan source")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MARKDOWN = re.compile(r"[\\`*_\[\]|~]")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def terminal(text: object) -> str:
    """``text`` with each control character written as its Python escape (ESC as ``\\x1b``,
    CR as ``\\r``, newline as ``\\n``); everything else unchanged."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def md_cell(text: object) -> str:
    """``text`` for Markdown, in a table cell or a line: control characters as in
    ``terminal``, ``\\ ` * _ [ ] | ~`` backslash-escaped, ``& < >`` as HTML entities. It
    renders as the literal text and stays on one line."""
    shown = _MARKDOWN.sub(lambda m: "\\" + m.group(), terminal(text))
    return "".join(_ENTITIES.get(ch, ch) for ch in shown)
