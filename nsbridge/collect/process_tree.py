"""A process's descendants, so that stopping a profiled script ends what it started too.

Linux /proc: each thread's ``children`` file lists the processes it started, and the
start time (field 22 of ``stat``) tells a process from a later one that reuses its PID.
Elsewhere the tree is empty and only the direct child is stopped.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def descendants(pid: int) -> dict[int, int]:
    """Every process below ``pid``: PID -> start time (clock ticks since boot)."""
    found: dict[int, int] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child in _children(parent):
            start = _start_time(child)
            if start is not None and child not in found:
                found[child] = start
                todo.append(child)
    return found


def end_leftovers(processes: dict[int, int], grace: float = 2.0) -> list[int]:
    """SIGTERM the processes still running (same PID and start time), then SIGKILL those
    left after ``grace`` seconds. Returns the PIDs that were signalled."""
    alive = [p for p, start in processes.items() if _start_time(p) == start]
    for pid in alive:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(p, processes[p]) for p in alive):
        time.sleep(0.05)
    for pid in alive:
        if _running(pid, processes[pid]):
            _signal(pid, signal.SIGKILL)
    return alive


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out += [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
    except OSError:
        return []
    return out


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return None if fields[0] == "Z" else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _running(pid: int, start: int) -> bool:
    return _start_time(pid) == start


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
