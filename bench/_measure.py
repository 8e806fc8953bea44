"""Shared by the bench scripts: run one child process, report wall time and peak RSS."""

from __future__ import annotations

import os
import subprocess
import time


def measure(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB from os.wait4, stdout) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise RuntimeError(f"{argv[:3]} failed ({code}):\n{err.decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024.0, out.decode().strip()
