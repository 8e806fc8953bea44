"""The one place nsbridge starts other processes: argument lists, never a shell."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping, Optional, Sequence

from .process_tree import descendants, end_leftovers

# How long a child may take to write its partial results after being asked to stop: after
# Ctrl-C, after --timeout (a quarter of the timeout, 10 to 60 s: --timeout bounds the whole
# command), and (shorter: the launcher that sent it will not wait long) SIGTERM.
STOP_GRACE_S = 60.0
SIGNAL_GRACE_S = 10.0


def timeout_grace(timeout: float) -> float:
    """Seconds a timed-out child gets to write what it recorded before it is killed."""
    return min(STOP_GRACE_S, max(SIGNAL_GRACE_S, timeout / 4))


class Stopped(BaseException):
    """nsbridge itself got SIGTERM (a launcher or scheduler ending the job)."""


def stop_on_sigterm() -> None:
    """Turn SIGTERM into Stopped, so a running pass ends its child before nsbridge exits."""
    def handler(signum: int, frame: object) -> None:
        raise Stopped()

    signal.signal(signal.SIGTERM, handler)


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
                    timeout: Optional[float]) -> ChildOutcome:
    """Run argv with the terminal's stdin/stdout/stderr, as the user would.

    On timeout the child gets SIGTERM (it saves what it has), then SIGKILL after a grace
    period. On Ctrl-C the child, in the same process group, gets SIGINT from the terminal
    too; nsbridge forwards one in case the signal reached only nsbridge, then waits. Either
    way the processes the script started are ended after it.
    """
    started = time.monotonic()
    proc = subprocess.Popen(list(argv), cwd=str(cwd),
                            env={**env, "NSBRIDGE_PARENT_PID": str(os.getpid())})
    return _supervise(proc, timeout, started)


def _supervise(proc: subprocess.Popen, timeout: Optional[float], started: float) -> ChildOutcome:
    """Wait for a child; on timeout SIGTERM it, on Ctrl-C forward SIGINT; then wait, or kill.
    Whatever the child started is ended too once the child is done (process_tree)."""
    timed_out = interrupted = killed = terminated = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        killed = _stop(proc, signal.SIGTERM, timeout_grace(timeout or 0.0))
    except KeyboardInterrupt:
        interrupted = True
        killed = _stop(proc, signal.SIGINT, STOP_GRACE_S)
    except Stopped:
        terminated = True
        killed = _stop(proc, signal.SIGTERM, SIGNAL_GRACE_S)
    return ChildOutcome(returncode=proc.returncode, wall_s=round(time.monotonic() - started, 3),
                        timed_out=timed_out, interrupted=interrupted, killed=killed,
                        terminated=terminated)


def _stop(proc: subprocess.Popen, signum: int, grace: float) -> bool:
    """Signal the child, wait for it (or kill it), then end the processes it started."""
    family = descendants(proc.pid)
    proc.send_signal(signum)
    killed = _wait_or_kill(proc, grace, family)
    end_leftovers(family)
    return killed


def run_filtered(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                 timeout: Optional[float], log: Path, hide: re.Pattern,
                 echo: bool = True) -> ChildOutcome:
    """Like run_passthrough, but the tool's output is also written to ``log`` and lines
    matching ``hide`` (progress bars) go only to the log. The profiled script's own output,
    which a profiler passes on, still reaches the terminal (unless ``echo`` is off: then
    everything goes only to the log)."""
    started = time.monotonic()
    with log.open("w", encoding="utf-8", errors="replace") as log_file:
        proc = subprocess.Popen(list(argv), cwd=str(cwd), env=dict(env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        lock = threading.Lock()
        pumps = [threading.Thread(target=_pump, args=(stream, sink if echo else None,
                                                      log_file, lock, hide), daemon=True)
                 for stream, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for pump in pumps:
            pump.start()
        outcome = _supervise(proc, timeout, started)
        for pump in pumps:
            pump.join(timeout=10)
    return outcome


def run_captured(argv: Sequence[str], *, timeout: float = 600) -> tuple[int, str]:
    """Run a tool to completion; return (exit code, stdout+stderr). Missing tool -> 127."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              errors="replace")
    except FileNotFoundError as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired as exc:
        return 124, f"{argv[0]} did not finish within {timeout:.0f} s: {exc}"
    return done.returncode, (done.stdout or "") + (done.stderr or "")


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
