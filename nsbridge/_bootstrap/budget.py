"""A recording's budget: how long and how much memory the profiler may take before it stops.

torch.profiler keeps every event in the process's memory until the trace is written, so a
recording that runs on (a script whose first step never comes, a step of 20 LBFGS closures)
grows until the OOM killer ends the script. A watchdog thread checks the budget a few times
a second: elapsed seconds (only while waiting for a first step, or in a time window) and the
process's resident anonymous memory grown since the recording started (the library code
CUDA maps is not events), capped at half the memory the machine had available. The
profiler can only be stopped on the thread that started it (the main thread), so the
watchdog never touches it: it has the main thread run a Python SIGURG handler between
bytecodes (``_thread.interrupt_main``, no real signal, so no C library sees EINTR; on
Python 3.9 a real SIGURG to the main thread). A stop that fails is recorded in ``error``,
never raised into the script.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Optional

# the signal the watchdog sends the main thread (ignored by default, rarely used by scripts)
BUDGET_SIGNAL = signal.SIGURG
MIB = 1024 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> Optional[int]:
    """This process's resident anonymous memory (resident minus file-backed and shared
    pages, Linux /proc), None elsewhere. The profiler's events live there; the code pages
    CUDA's libraries map when the context starts (hundreds of MiB) do not."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            fields = statm.read().split()
        return (int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def available_bytes() -> Optional[int]:
    """MemAvailable of /proc/meminfo, None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_limit_bytes(max_record_mib: float) -> int:
    """The growth a recording may cause: the profile's limit, at most half the memory the
    machine has available when the script starts."""
    limit = int(max_record_mib * MIB)
    free = available_bytes()
    return min(limit, free // 2) if free else limit


def _ask_main_thread() -> None:
    """Run the BUDGET_SIGNAL handler on the main thread."""
    if sys.version_info >= (3, 10):
        _thread.interrupt_main(BUDGET_SIGNAL)
    else:
        signal.pthread_kill(threading.main_thread().ident or 0, BUDGET_SIGNAL)


class RecordingBudget:
    """Watches one recording at a time; calls ``on_over(reason)`` on the main thread."""

    def __init__(self, memory_limit: int, on_over: Callable[[str], None],
                 poll_s: float = 0.2) -> None:
        self.memory_limit = memory_limit
        self._on_over = on_over
        self._poll_s = poll_s
        self._since: Optional[float] = None
        self._seconds: Optional[float] = None
        self._rss0 = 0
        self._fired = False
        self._stop = threading.Event()
        self._previous: Any = None
        self._thread: Optional[threading.Thread] = None
        self.peak_growth = 0
        self.error: Optional[str] = None

    def start(self) -> None:
        """Install the handler (main thread only) and start the watchdog."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(BUDGET_SIGNAL, self._handler)
        self._thread = threading.Thread(target=self._watch, name="nsbridge-budget", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the watchdog; give the signal back unless the script took it meanwhile."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            if signal.getsignal(BUDGET_SIGNAL) == self._handler:
                signal.signal(BUDGET_SIGNAL, self._previous or signal.SIG_DFL)
            self._thread = None

    def watch(self, seconds: Optional[float]) -> None:
        """A new recording starts now: limit it to ``seconds`` (None: memory only)."""
        self._since, self._seconds = time.monotonic(), seconds
        self._rss0 = resident_bytes() or 0
        self._fired = False
        self.peak_growth = 0

    def ask_again(self) -> None:
        """The recording could not be stopped now: the watchdog asks again at its next look."""
        self._fired = False

    def idle(self) -> None:
        """Nothing is recorded now: nothing to watch."""
        self._since = None

    @property
    def watching(self) -> bool:
        """Whether a recording is being watched."""
        return self._since is not None

    def elapsed(self) -> float:
        """Seconds since the watched recording started (0 when none is)."""
        return 0.0 if self._since is None else time.monotonic() - self._since

    def over(self) -> Optional[str]:
        """Why the current recording is over its budget ("time" or "memory"), else None."""
        if self._since is None:
            return None
        rss = resident_bytes()
        if rss is not None:
            self.peak_growth = max(self.peak_growth, rss - self._rss0)
            if rss - self._rss0 > self.memory_limit:
                return "memory"
        if self._seconds is not None and self.elapsed() > self._seconds:
            return "time"
        return None

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            if not self._fired and self.over() is not None:
                self._fired = True
                _ask_main_thread()

    def _handler(self, signum: int, frame: Any) -> None:
        reason = self.over()
        if reason is not None:
            try:
                self._on_over(reason)
            except Exception as exc:   # never into the script: the report says it
                self.error = f"stopping the recording failed: {type(exc).__name__}: {exc}"
        elif self._fired:   # the watchdog's own request: the budget is no longer over
            self._fired = False
        elif callable(self._previous):   # a real signal the script may handle
            self._previous(signum, frame)
