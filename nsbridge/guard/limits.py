"""The range of every number a user or an agent gives nsbridge, declared once: the CLI's
options (_options.py) and the MCP server's tool arguments (agent/mcp_server.py) both check
these, so `--threads 100000`, `threads=10**6`, `runs=0` or a NaN threshold are refused the
same way, in one line, before anything runs. Also the sizes of what is taken in and
echoed back (argument strings, lists, strings in an answer)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional, Union

Number = Union[int, float]


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Bound:
    """A closed range ``low``..``high`` for the argument ``name`` (finite: NaN and the
    infinities are never in it); ``high_means`` says what the upper bound is."""

    name: str
    low: Number
    high: Number
    integer: bool = True
    high_means: str = ""

    def refusal(self, value: object, name: Optional[str] = None) -> Optional[str]:
        """None when ``value`` is in range, else the one-line reason (naming the argument
        ``name``, default the bound's)."""
        name = name or self.name
        kind = "a whole number" if self.integer else "a finite number"
        ok_type = isinstance(value, int) if self.integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type:
            return f"{name} must be {kind} from {self.span()}; got {_short(value)}"
        number = float(value)  # type: ignore[arg-type]
        if not (math.isfinite(number) and self.low <= number <= self.high):
            return f"{name} must be {kind} from {self.span()}; got {_short(value)}"
        return None

    def span(self) -> str:
        """The range as said to the user: ``1 to 8 (the usable cores)``."""
        return f"{self.low:g} to {self.high:g}" + (f" ({self.high_means})" if self.high_means
                                                   else "")


THREADS = Bound("threads", 1, usable_cores(), high_means="the usable cores")
RUNS = Bound("runs", 1, 50)
PROCESSES = Bound("processes", 1, 50)
MAX_PROCESSES = Bound("max processes", 1, 50)
BUDGET_S = Bound("budget", 1, 7 * 24 * 3600, integer=False, high_means="a week")
STEPS = Bound("steps", 3, 1000)
TIMEOUT_S = Bound("timeout", 0.1, 7 * 24 * 3600, integer=False, high_means="a week")
TOP = Bound("top", 1, 1000)                     # rows of a summary table
DEEP_TOP = Bound("deep top", 1, 50)             # ops Nsight Compute profiles
ROWS = Bound("n", 1, 50)                        # rows an MCP query answers with
JOBS = Bound("jobs", 1, 1024)                   # worker processes of analyze
NPROC_PER_NODE = Bound("nproc per node", 1, 1024)   # ranks nsbridge starts on this machine
NODE_RANK = Bound("node rank", 0, (1 << 20) - 1)    # schema.records.MAX_RANKS - 1
FAIL_ABOVE_PCT = Bound("fail above", 0, 10_000, integer=False)
MIN_STEP_SHARE_PCT = Bound("min step share", 0, 100, integer=False)
FAIL_ABOVE_MIB = Bound("fail above MiB", 0, 1 << 30, integer=False)

ARG_CHARS = 4096        # the longest string argument (a path, an op name, a script argument)
ARG_ITEMS = 1000        # the most entries of a list argument (paths, script arguments, ops)
ECHO_CHARS = 2000       # the longest string an MCP answer carries (op names, messages)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def clipped(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters in all)"
