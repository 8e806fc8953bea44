"""Text from runs (op names, paths, scripts' names and messages) made safe for a terminal,
a Markdown file or a web page: every character that is not shown as itself is written as
its Python escape, so no name can move the cursor, recolour or erase a terminal, reorder
what is read ("Trojan source"), or hide in plain sight.

Escaped: Unicode's control characters (Cc: C0, DEL, C1), its format characters (Cf: the
bidirectional controls, zero-width spaces and joiners, the soft hyphen, the byte order
mark, the Arabic letter mark, tag characters, ...) and the line and paragraph separators
(Zl, Zp), as the running Python's Unicode database classes them.
"""

from __future__ import annotations

import re
import unicodedata

_ASCII_CONTROL = re.compile("[\x00-\x1f\x7f]")
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


def printable(text: object) -> str:
    """``text`` with each hidden character written as its Python escape (ESC as ``\\x1b``,
    a newline as ``\\n``, U+202E as ``\\u202e``); everything else unchanged."""
    text = str(text)
    if text.isascii():      # the common case: names and paths, one regex
        return _ASCII_CONTROL.sub(_escape, text)
    return "".join(_escape_char(ch) if unicodedata.category(ch) in _HIDDEN else ch
                   for ch in text)


def _escape(match: re.Match[str]) -> str:
    return _escape_char(match.group())


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if ch in "\n\r\t":
        return ch.encode("unicode_escape").decode("ascii")
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
