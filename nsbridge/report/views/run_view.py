"""The sections about the run rather than one measurement: what profiling cost
(overhead), the notes the passes left, and the sources of each figure."""

from __future__ import annotations

from typing import Any, Optional

from ..document.document import EVERYWHERE, HTML, IN_FILES, Items, Section
from ...contract.report import Report


def overhead_section(report: Report) -> Optional[Section]:
    overhead = report.get("overhead")
    if not overhead:
        return None
    return Section("overhead", "Profiler overhead", [], lead=overhead["note"],
                   views=EVERYWHERE if overhead.get("ratio") else IN_FILES)


def notes_section(report: Report) -> Optional[Section]:
    notes = report.get("notes")
    return Section("notes", "Notes", [Items(list(notes))]) if notes else None


def sources_section(report: Report) -> Optional[Section]:
    sources = report.get("sources") or {}
    if not sources:
        return None
    return Section("sources", "Sources", [Items([f"{k}: {v}" for k, v in sources.items()])],
                   views=frozenset({HTML}), folded=True)
