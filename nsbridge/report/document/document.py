"""The report as a document: sections of text, item lists and tables, before any format.

report/render/sections.py builds the list of sections from report.json; the three renderers
(terminal.py, markdown.py, html.py in report/render/) each walk that one list. A block
says which renderers show it (``views``) and how many rows the terminal's short summary
keeps (``brief``); everything else about the look is the renderer's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

TERMINAL, MARKDOWN, HTML = "terminal", "markdown", "html"
EVERYWHERE = frozenset({TERMINAL, MARKDOWN, HTML})
IN_FILES = frozenset({MARKDOWN, HTML})    # report.md and report.html, not the terminal


@dataclass(frozen=True)
class Text:
    """A paragraph (``note``: an aside, shown in parentheses or muted)."""

    text: str
    note: bool = False
    views: frozenset[str] = EVERYWHERE


@dataclass(frozen=True)
class Items:
    """A list of sentences, after an optional lead-in line."""

    items: list[str]
    lead: Optional[str] = None
    numbered: bool = False
    brief: Optional[int] = None       # items the terminal shows (None: all)
    views: frozenset[str] = EVERYWHERE


@dataclass(frozen=True)
class Table:
    """A table of text cells, after an optional lead-in line.

    ``code``: columns of names or paths (set as code); ``groups``: (source, columns) runs
    of the header for a second header row; ``details``: per row, sub-items the HTML page
    folds under the row's first cell; ``html_id`` with ``sortable``: the HTML page's
    interactive table (sorted by a click on a header, filtered by name); ``toggle``: the
    label of its button when a section has several interactive tables, one shown at a
    time; ``folded``: the HTML page folds the whole table under its lead."""

    header: list[str]
    rows: list[list[str]]
    lead: Optional[str] = None
    code: frozenset[int] = frozenset()
    brief: Optional[int] = None       # rows the terminal shows (None: all it is given)
    groups: list[tuple[str, int]] = field(default_factory=list)
    details: list[list[str]] = field(default_factory=list)
    html_id: Optional[str] = None
    sortable: bool = False
    toggle: Optional[str] = None
    folded: bool = False
    views: frozenset[str] = EVERYWHERE


Block = Union[Text, Items, Table]


@dataclass(frozen=True)
class Section:
    """One section: ``key`` (its anchor), ``title`` (``brief_title`` in the terminal),
    ``lead`` (the sentence after the title: on the title's line in the terminal) and its
    blocks; ``folded``: report.md and report.html fold it under its title."""

    key: str
    title: str
    blocks: list[Block]
    lead: Optional[str] = None
    brief_title: Optional[str] = None
    views: frozenset[str] = EVERYWHERE
    folded: bool = False

    def shown_in(self, view: str) -> list[Block]:
        """The blocks ``view`` shows."""
        return [block for block in self.blocks if view in block.views]


def without_empty_columns(header: list[str], rows: list[list[str]],
                          keep: int = 1) -> tuple[list[str], list[list[str]]]:
    """The table without the columns (after the first ``keep``) that are '-' in every row:
    what was not measured is not shown as a column of dashes."""
    shown = [i for i in range(len(header))
             if i < keep or not rows or any(row[i] != "-" for row in rows)]
    return [header[i] for i in shown], [[row[i] for i in shown] for row in rows]
