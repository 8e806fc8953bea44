"""Progress on stderr for the steps that take time (profiling, nsys export, parsing,
analysis, ncu replay), with their elapsed time. Silent unless the CLI turns it on (`-q`
keeps it off); never on stdout and never in a file.

A step the profiled script runs in prints a line when it starts (the script's own output
follows); other steps show a spinner on a terminal. A step that took a second or more
prints its elapsed time when it ends.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from .guard.printable import printable

_enabled = False


def enable(on: bool = True) -> None:
    """Turn progress output on (the CLI does, unless -q) or off (library default)."""
    global _enabled
    _enabled = on


@contextmanager
def step(label: str, script_output: bool = False) -> Iterator[None]:
    """Report ``label`` while the block runs; ``script_output``: the user's script prints
    meanwhile, so no spinner, a start line instead."""
    if not _enabled:
        yield
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False)
    label = escape(printable(label))     # a script's name can hold escape sequences
    started = time.monotonic()
    if script_output:
        console.print(f"[dim]nsbridge: {label} ...[/dim]", soft_wrap=True)
        yield
    elif console.is_terminal:
        with console.status(f"nsbridge: {label}"):
            yield
    else:
        yield
    elapsed = time.monotonic() - started
    if elapsed >= 1.0:
        console.print(f"[dim]nsbridge: {label}: done in {elapsed:.1f} s[/dim]", soft_wrap=True)
