"""Repair of the bare double quotes torch writes inside JSON strings.

Kineto writes range names, Python frames and the trace's own path into its Chrome trace
without escaping them: ``record_function('load "batch"')`` becomes
``"name": "load "batch"",`` and a run under ``runs/a"b`` ends the file with
``"traceName": "runs/a"b/trace.json" }``. (It turns backslashes into ``/`` and drops
control characters, so a bare ``"`` is the only thing left unescaped.) Such a file is
not JSON; the readers call ``repair_quotes`` on a batch that fails to decode, and only
then, so a well-formed trace costs nothing.

The rule: a string that is an object's value ends at the first ``"`` followed by what may
follow a value there (``}``, or ``,`` and a key and its ``:``); every ``"`` before that one
is part of the name and is escaped. One regular expression does it, matching only strings
that hold such a quote. A name that itself holds ``", "key": "`` reads as torch's own text
would parse; no repair can tell it apart.
"""

from __future__ import annotations

import re

_WS = rb"[ \t\r\n]*"
# a string's characters up to its next bare quote, newline or end: an unrolled loop that the
# lookahead and back-reference make atomic (Python 3.9's re has no possessive quantifier),
# so a long string is scanned once, never backtracked into
_RUN = rb'[^"\\\n]*(?:\\.[^"\\\n]*)*'
# what may follow an object's value: the object's end, or a comma, a key and its colon
_CLOSE = (rb"(?:" + _WS + rb"(?:\}(?=" + _WS + rb"(?:[,\]}]|\Z))|," + _WS + rb'"' + _RUN
          + rb'"' + _WS + rb":))")
# a key and its colon, then its string value holding at least one quote that does not end it
# (the key anchors the match: a ": " inside a name is never taken for a value's start)
_BROKEN = re.compile(
    rb'(?P<key>"(?=(?P<k>' + _RUN + rb'))(?P=k)"' + _WS + rb":" + _WS + rb')"(?P<body>(?=(?P<a>'
    + _RUN + rb"))(?P=a)(?:\"(?!" + _CLOSE + rb")(?=(?P<b>" + _RUN + rb"))(?P=b))+)\"(?="
    + _CLOSE + rb")")
_BARE_QUOTE = re.compile(rb'(?<!\\)((?:\\\\)*)"')


def repair_quotes(data: bytes) -> bytes:
    """``data`` with the quotes inside object string values escaped (see the module's
    rule); the same bytes when there is nothing to repair."""
    return _BROKEN.sub(_escaped, data)


def _escaped(match: re.Match[bytes]) -> bytes:
    return match["key"] + b'"' + _BARE_QUOTE.sub(rb'\1\\"', match["body"]) + b'"'
