"""The one place nsbridge starts other processes: argument lists, never a shell."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

# How long a child may take to write its partial results after being asked to stop.
STOP_GRACE_S = 60.0


@dataclass(frozen=True)
class ChildOutcome:
    """How a child process ended."""

    returncode: int
    wall_s: float
    timed_out: bool
    interrupted: bool
    killed: bool


def run_passthrough(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                    timeout: Optional[float]) -> ChildOutcome:
    """Run argv with the terminal's stdin/stdout/stderr, as the user would.

    On timeout the child gets SIGTERM (it saves what it has), then SIGKILL after a grace
    period. On Ctrl-C the child, in the same process group, gets SIGINT from the terminal
    too; nsbridge forwards one in case the signal reached only nsbridge, then waits.
    """
    started = time.monotonic()
    proc = subprocess.Popen(list(argv), cwd=str(cwd), env=dict(env))
    timed_out = interrupted = killed = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGTERM)
        killed = _wait_or_kill(proc)
    except KeyboardInterrupt:
        interrupted = True
        proc.send_signal(signal.SIGINT)
        killed = _wait_or_kill(proc)
    return ChildOutcome(returncode=proc.returncode, wall_s=round(time.monotonic() - started, 3),
                        timed_out=timed_out, interrupted=interrupted, killed=killed)


def _wait_or_kill(proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + STOP_GRACE_S
    while True:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            return False
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return True
        except KeyboardInterrupt:  # more Ctrl-C while waiting: keep waiting for the files
            continue
