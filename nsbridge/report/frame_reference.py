"""The frames' column reference, read from report/frames.py's docstring, the one place it
is written: tests/test_load.py holds it to the frames of real runs, and
docs/reference/frames.md is rendered from it (``markdown``)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from . import frames

_MEANING_AT = 49          # the meaning column's indent in the docstring's tables
_HEAD = re.compile(r"^r\.(\w+): (.*)$")


class Column(NamedTuple):
    """One documented column; ``when``: the [bracketed] condition it is listed under, None
    when every frame of its kind has it."""

    column: str
    dtype: str
    unit: str
    meaning: str
    when: Optional[str]


class Frame(NamedTuple):
    """One frame: its attribute on a loaded run, what a row is, its columns."""

    name: str
    about: str
    columns: list[Column]


def preamble() -> str:
    """The docstring's text before the first frame, less its summary line: dtypes, units."""
    doc = frames.__doc__ or ""
    first = re.search(r"^r\.\w+:", doc, re.MULTILINE)
    return doc[:first.start() if first else len(doc)].strip().split("\n\n", 1)[-1]


def frame_reference() -> list[Frame]:
    """Every frame's entry, in the docstring's order."""
    out: list[Frame] = []
    about: list[str] = []
    when: Optional[str] = None
    for line in (frames.__doc__ or "").splitlines():
        head = _HEAD.match(line)
        if head:
            out.append(Frame(head[1], "", []))
            about, when = [head[2]], None
        elif not out:
            continue
        elif line.startswith(" " * _MEANING_AT) and out[-1].columns:
            last = out[-1].columns[-1]
            out[-1].columns[-1] = last._replace(meaning=f"{last.meaning} {line.strip()}")
        elif line.startswith("    "):
            text = line.strip()
            if text.startswith("["):
                when = text.strip("[]")
                continue
            column, dtype, unit, meaning = (text.split(None, 3) + [""])[:4]
            if column != "column":
                out[-1].columns.append(Column(column, dtype, unit, meaning, when))
        elif line.strip() and not out[-1].columns:
            about.append(line.strip())
        if out and not out[-1].about and not line.strip():
            out[-1] = out[-1]._replace(about=" ".join(about))
    return out


def markdown() -> str:
    """The reference as Markdown: the preamble, then a table per frame."""
    parts = [_text(preamble())]
    for frame in frame_reference():
        parts.append(f"## `run.{frame.name}`\n\n{_text(frame.about)}")
        rows = ["| column | dtype | unit | meaning |", "|---|---|---|---|"]
        when = None
        for c in frame.columns:
            if c.when != when:
                when = c.when
                rows.append(f"| *{_cell(when or '')}* | | | |")
            rows.append(f"| `{c.column}` | {c.dtype} | {c.unit} | {_cell(c.meaning)} |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _text(text: str) -> str:
    """reST literals as Markdown's; a ``<`` outside them escaped (``<NA>`` is no tag)."""
    pieces = text.replace("``", "`").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(pieces))


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")
