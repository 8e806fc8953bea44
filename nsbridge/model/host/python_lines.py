"""The script's own Python line around a host event, from the trace's stacks (with_stack).

A trace recorded with stacks has ``python_function`` ranges named ``FILE(LINE): FUNC``.
The line that matters to a user is the innermost frame in their own code: frames in
site-packages, in torch, in nsbridge's own hooks and built-ins (``<built-in ...>``) are
climbed past.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from ... import schema as S
from .nesting import at_rows, build_host_tree

FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.*)$")
NSBRIDGE_DIR = str(Path(__file__).resolve().parents[1]) + "/"


def has_stacks(events: pd.DataFrame) -> bool:
    """Whether the trace holds Python frames (it was recorded with with_stack)."""
    return bool((events[S.CAT] == S.PYTHON_FUNCTION).any())


def python_frames(events: pd.DataFrame, pid: Any, tid: Any,
                  probe: np.ndarray) -> list[Optional[tuple[str, int, str]]]:
    """(file, line, function) of the innermost frame of the script's own code around each
    point (thread ``pid``/``tid`` at time ``probe``), or None. The line is where torch's
    tracer saw the frame start: a function's first line, or for a frame already running
    when the recording began, the line it was on then."""
    if not has_stacks(events):
        return [None] * len(probe)
    py = build_host_tree(events, (S.PYTHON_FUNCTION,))
    names = at_rows(events, py.rows, S.NAME).astype(str).to_numpy()
    parsed = [FRAME.match(n) for n in names]
    frames = [(m["file"], int(m["line"]), m["func"]) if m is not None and _is_own(m["file"])
              else None for m in parsed]
    own = np.array([f is not None for f in frames], dtype=bool)
    pos = py.nearest(py.enclosing(pd.Series(pid), pd.Series(tid), probe), own)
    return [frames[p] if p >= 0 else None for p in pos]


def python_lines(events: pd.DataFrame, pid: Any, tid: Any,
                 probe: np.ndarray) -> tuple[list[Optional[str]], list[Optional[int]]]:
    """(files, lines) of python_frames, None where the trace has no frame of the script."""
    found = python_frames(events, pid, tid, probe)
    return ([f[0] if f else None for f in found], [f[1] if f else None for f in found])


def _is_own(path: str) -> bool:
    return not ("site-packages" in path or "torch/" in path or path.startswith("<")
                or path.startswith(NSBRIDGE_DIR) or "/nsbridge/_bootstrap/" in path)
