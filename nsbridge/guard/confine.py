"""The folders nsbridge may read and run from while it works for an MCP client.

Outside the MCP server nothing is confined. The server (and the ``nsbridge`` process it
starts for each command, given ``--confine``) holds its roots with ``confined_to``; every
path nsbridge takes from a file or a folder listing (a rank summary's trace, a
``child.json``'s traces, a folder's members, report.json, a manifest's script and folder)
goes through ``readable`` before it is opened, so a file outside the roots is never read,
parsed or quoted. The roots are a context variable: they hold on this thread (and on
threads started with its context, as anyio's workers are), not on a plain
``threading.Thread`` or a worker process, whose paths the parent checks first.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from ..errors import OutsideRootsError

_ROOTS: ContextVar[Optional[tuple[Path, ...]]] = ContextVar("nsbridge_roots", default=None)


@contextlib.contextmanager
def confined_to(roots: Iterable[Union[str, Path]]) -> Iterator[tuple[Path, ...]]:
    """While open, ``readable`` refuses every path outside ``roots`` (resolved)."""
    held = tuple(Path(r).resolve() for r in roots)
    token = _ROOTS.set(held)
    try:
        yield held
    finally:
        _ROOTS.reset(token)


def roots_in_force() -> Optional[tuple[Path, ...]]:
    """The roots held now, or None when nothing is confined."""
    return _ROOTS.get()


def inside(path: Path, roots: Iterable[Path]) -> bool:
    """Whether the resolved ``path`` is one of ``roots`` or lies under one."""
    return any(path == root or root in path.parents for root in roots)


def readable(path: Union[str, Path]) -> Path:
    """``path`` (as given) when nothing is confined or it resolves, symlinks followed, to a
    place under the roots in force.

    Raises:
        OutsideRootsError: it resolves outside every root (the message names the path, never
            what the file holds).
    """
    held = _ROOTS.get()
    given = Path(path)
    if held is not None and not inside(given.resolve(), held):
        raise OutsideRootsError(
            f"{str(given)[:500]} leads outside the folders this server may use "
            f"({', '.join(map(str, held))}), symlinks followed: it was not read. Keep the "
            "files a run, a summary or a folder names inside those folders, or start the "
            "server with --root FOLDER to allow another.")
    return given
