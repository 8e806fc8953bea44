"""The one place nsbridge starts other processes: argument lists, never a shell."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Optional, Sequence

from ..errors import Stopped
from . import noise
from .process_tree import (descendants, end_leftovers, orphans, reap_adopted, subreaper,
                           ticks_now)

# How long a child may take to write its partial results after being asked to stop: after
# Ctrl-C, after --timeout (a quarter of the timeout, 10 to 60 s: --timeout bounds the whole
# command), and (shorter: the launcher that sent it will not wait long) SIGTERM.
STOP_GRACE_S = 60.0
SIGNAL_GRACE_S = 10.0
UMASK_ENV = "NSBRIDGE_UMASK"   # the user's umask, octal, for a child a tool started
LEFTOVER_GRACE_S = 1.0         # what a script started gets to end after SIGTERM, then SIGKILL
WATCH_EVERY_S = 0.5            # how often the running child's process tree is noted
_STARTED: set[int] = set()     # supervised children nsbridge started: never taken for orphans
PR_SET_PDEATHSIG = 1           # linux/prctl.h


def timeout_grace(timeout: float) -> float:
    """Seconds a timed-out child gets to write what it recorded before it is killed."""
    return min(STOP_GRACE_S, max(SIGNAL_GRACE_S, timeout / 4))


@dataclass(frozen=True)
class ChildOutcome:
    """How a child process ended."""

    returncode: int
    wall_s: float
    timed_out: bool
    interrupted: bool
    killed: bool
    terminated: bool = False     # nsbridge itself got SIGTERM and ended the child


def run_passthrough(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                    timeout: Optional[float], noise_log: Optional[Path] = None) -> ChildOutcome:
    """Run argv with the terminal's stdin/stdout/stderr, as the user would.

    With ``noise_log`` the child's stderr goes through collect.noise: the profiler's known
    noise lines go to that file, everything else to nsbridge's stderr as it comes (unless
    ``noise.show()`` asked for everything). On timeout the child gets SIGTERM (it saves
    what it has), then SIGKILL after a grace period. On Ctrl-C the child, in the same
    process group, gets SIGINT from the terminal too; nsbridge forwards one in case the
    signal reached only nsbridge, then waits. Either way the processes the script started
    are ended after it.
    """
    started = time.monotonic()
    filtered = noise_log is not None and not noise.shown()
    proc, since = _start(argv, cwd=cwd,
                         env={**env, "NSBRIDGE_PARENT_PID": str(os.getpid())},
                         stderr=subprocess.PIPE if filtered else None)
    pump = None
    if filtered and proc.stderr is not None and noise_log is not None:
        pump = threading.Thread(target=noise.pump, args=(proc.stderr, sys.stderr, noise_log),
                                daemon=True)
        pump.start()
    outcome = _supervise(proc, timeout, started, since)
    if pump is not None:
        pump.join(timeout=10)
    return outcome


def _start(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
           **streams: Any) -> tuple[subprocess.Popen, int]:
    """Start a supervised child, nsbridge a subreaper first (process_tree), the child
    armed to die with nsbridge; with the time it was started, as process start times count
    it."""
    subreaper(True)
    since = ticks_now() + 1   # not this tick: the caller may have started one of its own in it
    proc = subprocess.Popen(list(argv), cwd=str(cwd), env=dict(env),
                            preexec_fn=_dies_with_this_process(), **streams)
    _STARTED.add(proc.pid)
    return proc, since


def _dies_with_this_process() -> Optional[Callable[[], None]]:
    """Linux: what the child runs between fork and exec so that the kernel sends it
    SIGTERM when nsbridge dies (SIGKILL, the OOM killer), where nothing of nsbridge's can
    end it: ``prctl(PR_SET_PDEATHSIG)``, kept across exec. SIGTERM, as the bootstrap arms
    it again in a profiled process (it ends what the script started; nsys, ncu and
    torchrun end their targets on it). The thread that starts the child waits for it
    (``_supervise``), as the signal follows that thread. The call is resolved here, so the
    child only makes two system calls (preexec_fn's caveat is code that takes locks after
    a fork). None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent, term = os.getpid(), int(signal.SIGTERM)

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, term)
        if os.getppid() != parent:     # nsbridge died before the signal was armed
            os._exit(1)
    return arm


def _supervise(proc: subprocess.Popen, timeout: Optional[float], started: float,
               since: int) -> ChildOutcome:
    """Wait for a child; on timeout SIGTERM it, on Ctrl-C forward SIGINT; then wait, or kill.
    However the child ends, what it started is ended within LEFTOVER_GRACE_S after it: its
    process tree, noted while it ran, and what it left to nsbridge as subreaper (``since``:
    when the child was started, process_tree.ticks_now(): nsbridge's own older children, a
    multiprocessing pool's server, are never taken for its orphans)."""
    family: dict[int, int] = {}
    timed_out = interrupted = killed = terminated = False
    try:
        _wait_noting(proc, family, None if timeout is None else started + timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        killed = _stop(proc, signal.SIGTERM, timeout_grace(timeout or 0.0), family)
    except KeyboardInterrupt:
        interrupted = True
        killed = _stop(proc, signal.SIGINT, STOP_GRACE_S, family)
    except Stopped:
        terminated = True
        killed = _stop(proc, signal.SIGTERM, SIGNAL_GRACE_S, family)
    _STARTED.discard(proc.pid)
    end_leftovers({**family, **orphans(_STARTED, since)}, grace=LEFTOVER_GRACE_S)
    reap_adopted(_STARTED, since)
    if not _STARTED:
        subreaper(False)
    return ChildOutcome(returncode=proc.returncode, wall_s=round(time.monotonic() - started, 3),
                        timed_out=timed_out, interrupted=interrupted, killed=killed,
                        terminated=terminated)


def _wait_noting(proc: subprocess.Popen, family: dict[int, int],
                 deadline: Optional[float]) -> None:
    """Wait for the child, noting its process tree every WATCH_EVERY_S; TimeoutExpired
    at ``deadline`` (monotonic seconds)."""
    while True:
        step = WATCH_EVERY_S if deadline is None else min(
            WATCH_EVERY_S, max(deadline - time.monotonic(), 0.0))
        try:
            proc.wait(timeout=step)
            return
        except subprocess.TimeoutExpired:
            family.update(descendants(proc.pid))
            if deadline is not None and time.monotonic() >= deadline:
                raise


def _stop(proc: subprocess.Popen, signum: int, grace: float, family: dict[int, int]) -> bool:
    """Signal the child and wait for it (or kill it), noting the processes it starts
    meanwhile."""
    family.update(descendants(proc.pid))
    proc.send_signal(signum)
    return _wait_or_kill(proc, grace, family)


def run_filtered(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                 timeout: Optional[float], log: Path, hide: re.Pattern,
                 echo: bool = True) -> ChildOutcome:
    """Like run_passthrough, but the tool's output is also written to ``log`` and lines
    matching ``hide`` (progress bars) go only to the log. The profiled script's own output,
    which a profiler passes on, still reaches the terminal (unless ``echo`` is off: then
    everything goes only to the log). The tool gets ``NSBRIDGE_UMASK``: nsys starts its
    target with umask 0, and nsbridge's bootstrap sets the user's umask back from it."""
    started = time.monotonic()
    with log.open("w", encoding="utf-8", errors="replace") as log_file:
        proc, since = _start(argv, cwd=cwd, env={**env, UMASK_ENV: f"{current_umask():o}"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lock = threading.Lock()
        pumps = [threading.Thread(target=_pump, args=(stream, sink if echo else None,
                                                      log_file, lock, hide), daemon=True)
                 for stream, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for pump in pumps:
            pump.start()
        outcome = _supervise(proc, timeout, started, since)
        for pump in pumps:
            pump.join(timeout=10)
    return outcome


@dataclass(frozen=True)
class Captured:
    """A tool's exit status and its two streams, kept apart: data is read from ``stdout``
    alone (or from a file the tool writes), so what a tool or its libraries print around
    it (warnings, banners) cannot corrupt it."""

    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """Both streams, for logs and error messages."""
        return self.stdout + self.stderr


def run_captured(argv: Sequence[str], *, timeout: float = 600,
                 env: Optional[Mapping[str, str]] = None) -> Captured:
    """Run a tool to completion and capture its streams (``env``: its environment, default
    this process's). Missing tool: code 127."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              errors="replace", env=None if env is None else dict(env))
    except FileNotFoundError as exc:
        return Captured(127, "", str(exc))
    except subprocess.TimeoutExpired as exc:
        return Captured(124, "", f"{argv[0]} did not finish within {timeout:.0f} s: {exc}")
    return Captured(done.returncode, done.stdout or "", done.stderr or "")


def current_umask() -> int:
    """This process's file-mode creation mask (read from /proc, else set and put back)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def honour_umask(*paths: Path) -> None:
    """Take from files a tool created the permission bits this process's umask denies
    (nsys writes some with 0666 or 0664, whatever the user's umask)."""
    mask = current_umask()
    for path in paths:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & mask:
                path.chmod(mode & ~mask)
        except FileNotFoundError:
            continue


async def start_group(argv: Sequence[str], *, cwd: Path) -> Any:
    """Start argv (anyio, for the MCP server's commands) in a process group of its own, so
    that ``signal_group`` reaches everything it starts: stdin the null device, stdout a
    pipe, stderr this process's. Returns the anyio Process."""
    import anyio

    return await anyio.open_process(list(argv), cwd=str(cwd), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=None,
                                    start_new_session=True)


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to the process group ``pgid`` (start_group's), if it is still there."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def which(name: str, path: Optional[str] = None) -> Optional[str]:
    """Absolute path of an executable on PATH (or the given search path), or None."""
    return shutil.which(name, path=path)


def _pump(stream: IO[bytes], sink: Optional[IO[str]], log_file: IO[str], lock: threading.Lock,
          hide: re.Pattern) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        with lock:
            log_file.write(line)
        if sink is not None and not hide.search(line):
            sink.write(line)
            sink.flush()
    stream.close()


def _wait_or_kill(proc: subprocess.Popen, grace: float = STOP_GRACE_S,
                  family: Optional[dict[int, int]] = None) -> bool:
    """Wait up to ``grace`` seconds, then kill; ``family`` gathers the child's processes
    meanwhile (those it starts while saving are ended too)."""
    deadline = time.monotonic() + grace
    while True:
        try:
            proc.wait(timeout=min(max(deadline - time.monotonic(), 0.1), 0.5))
            return False
        except subprocess.TimeoutExpired:
            if family is not None:
                family.update(descendants(proc.pid))
            if time.monotonic() < deadline:
                continue
            proc.kill()
            proc.wait()
            return True
        except (KeyboardInterrupt, Stopped):  # more signals while waiting: keep waiting
            continue
