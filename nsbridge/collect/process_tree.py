"""A process's descendants, so that the end of a profiled script ends what it started too.

Linux /proc: each thread's ``children`` file lists the processes it started, and the
start time (field 22 of ``stat``) tells a process from a later one that reuses its PID.
nsbridge makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so that what
a script started comes to nsbridge, not to init, when the script's process dies first
(SIGKILL, the OOM killer): ``orphans`` finds those. Elsewhere the tree is empty and only
the direct child is stopped.
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
    left after ``grace`` seconds; the ones that had become this process's children are
    reaped. Returns the PIDs that were signalled."""
    alive = [p for p, start in processes.items() if _start_time(p) == start]
    for pid in alive:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(p, processes[p]) for p in alive):
        time.sleep(0.05)
    for pid in alive:
        if _running(pid, processes[pid]):
            _signal(pid, signal.SIGKILL)
    _reap(set(alive) & set(_children(os.getpid())))   # only those signalled here
    return alive


def subreaper(on: bool) -> bool:
    """Linux: adopt the orphans of this process's descendants while ``on`` (see the module
    docstring); nsbridge is one only while it supervises a child, so a process that uses
    it as a library (a notebook, a test runner) is left as it was. True when it took
    effect."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on)) == 0
    except (OSError, AttributeError):
        return False


def reap_adopted(exclude: set[int], since: int) -> None:
    """Collect the exit status of adopted orphans that ended on their own (zombies that
    started at or after ``since``, not in ``exclude``: this process's own children)."""
    ended = [pid for pid in _children(os.getpid())
             if pid not in exclude and _zombie_since(pid, since)]
    _reap(set(ended), within=0.0)


def orphans(exclude: set[int], since: int) -> dict[int, int]:
    """This process's children that it did not start itself (not in ``exclude``) and that
    started at or after ``since`` (clock ticks since boot, as ``ticks_now`` gives): the
    orphans of a descendant that died, adopted as subreaper, with their own descendants."""
    found: dict[int, int] = {}
    for pid in _children(os.getpid()):
        start = _start_time(pid)
        if pid in exclude or start is None or start < since:
            continue
        found[pid] = start
        found.update(descendants(pid))
    return found


def ticks_now() -> int:
    """Now, in the unit of a process's start time (clock ticks since boot)."""
    try:
        return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))
    except (AttributeError, OSError, ValueError):   # not Linux: no tree to sweep anyway
        return 0


PR_SET_CHILD_SUBREAPER = 36


def _reap(pids: set[int], within: float = 1.0) -> None:
    """Collect the exit status of adopted processes, so none is left a zombie."""
    deadline = time.monotonic() + within
    for pid in pids:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.02)


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


def _zombie_since(pid: int, since: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return fields[0] == "Z" and int(fields[19]) >= since
    except (OSError, ValueError, IndexError):
        return False


def _running(pid: int, start: int) -> bool:
    return _start_time(pid) == start


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
