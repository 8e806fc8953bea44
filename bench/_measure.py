"""Shared by the bench scripts: run one child process, report wall time and peak RSS."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import NamedTuple


def byte_compile() -> None:
    """Byte-compile nsbridge's modules, as installing its wheel with pip does, so that
    measured start-ups load them from __pycache__: where PYTHONDONTWRITEBYTECODE is set
    (it is on the machines these results come from) an editable checkout would otherwise
    be compiled from source at every start, 0.1-0.2 s that users of a pip install never
    pay."""
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parent.parent / "nsbridge", quiet=1)


class Sample(NamedTuple):
    """One child process's run: wall seconds, peak RSS MiB (os.wait4: the child itself),
    stdout, and CPU seconds (user + system, its waited-for children included)."""
    wall_s: float
    peak_mib: float
    stdout: str
    cpu_s: float


def measure(argv: list[str]) -> Sample:
    """One child process, run to its end and measured."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise RuntimeError(f"{argv[:3]} failed ({code}):\n{err.decode()[-2000:]}")
    return Sample(wall, usage.ru_maxrss / 1024.0, out.decode().strip(),
                  usage.ru_utime + usage.ru_stime)


PROFILE = """
import cProfile, pstats, runpy, sys
mode, target, *rest = sys.argv[1:]
profiler = cProfile.Profile()
try:
    if mode == "-m":
        sys.argv = [target, *rest]
        profiler.runcall(runpy.run_module, target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        profiler.runcall(exec, compile(target, "<bench>", "exec"), {"__name__": "__main__"})
except SystemExit:
    pass
stats = pstats.Stats(profiler, stream=sys.stderr)
print("== by cumulative time, nsbridge's own functions ==", file=sys.stderr)
stats.sort_stats("cumulative").print_stats("nsbridge", 40)
print("== by own time, everything ==", file=sys.stderr)
stats.sort_stats("tottime").print_stats(25)
"""


def print_profile(argv: list[str]) -> None:
    """Run one measured command (``[python, -m, module, ...]`` or ``[python, -c, code,
    ...]``) under cProfile and print where the time goes: nsbridge's functions by
    cumulative time, then everything by own time. Profiling slows Python code down, so the
    times are for finding hot spots, not for results."""
    assert argv[1] in ("-m", "-c"), "print_profile runs python -m MODULE or python -c CODE"
    subprocess.run([argv[0], "-c", PROFILE, *argv[1:]], check=True)


def write_result(out: Path, benchmark: str, **fields: object) -> None:
    """Write a bench's results as JSON with the date and the machine it ran on."""
    import json
    import platform

    result = {"benchmark": benchmark, "date": time.strftime("%Y-%m-%d"),
              "machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count(), "processor": platform.processor() or None},
              **fields}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")
