"""The profiler's known noise in a profiled script's stderr, kept out of the terminal.

torch.profiler's C++ side prints lines no user asked for on every run: kineto's
``USDT: ... profiler_start`` / ``profiler_stop`` pairs and the CPU allocator's "Memory block
of unknown size was allocated before the profiling started" warning. ``NoiseFilter`` takes
the child's stderr as bytes arrive and passes everything else on at once, byte for byte
(a partial line, such as a progress bar's ``\\r`` update, is held back only while it could
still become a noise line); ``pump`` writes the noise to the run's log instead. ``-v``
(``show(True)``) turns the filter off.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import IO, Any, Optional

# a line of noise, from its first byte, after the "[rankN]:" torchrun puts before each line
# of a rank's output (add patterns here; each needs its start in NOISE_PREFIXES)
_RANK = rb"^(?:\[rank\d+\]:)?"
_RANK_PREFIX = re.compile(rb"\[rank\d+\]:")
NOISE_LINES = (
    re.compile(_RANK + rb"USDT:"),
    re.compile(_RANK + rb"\[W\d+ [^\]]*CPUAllocator\.cpp:\d+\] Memory block of unknown "
               rb"size was allocated before the profiling started"),
)
# how each noise line starts: a partial line that may still become one is held back
NOISE_PREFIXES = (b"USDT:", b"[W", b"[rank")
READ_SIZE = 65536

_shown = False


def show(on: bool = True) -> None:
    """Pass the profiler's noise through too (``nsbridge -v``)."""
    global _shown
    _shown = on


def shown() -> bool:
    return _shown


def is_noise(line: bytes) -> bool:
    return any(pattern.match(line) for pattern in NOISE_LINES)


def _may_become_noise(partial: bytes) -> bool:
    """Whether a partial line, past a whole "[rankN]:" prefix, may still become noise."""
    rank = _RANK_PREFIX.match(partial)
    rest = partial[rank.end():] if rank else partial
    return any(rest[:len(p)] == p[:len(rest)] for p in NOISE_PREFIXES)


class NoiseFilter:
    """Splits a byte stream into what passes and the noise lines (each whole, with its
    newline). Only whole lines starting at a line start are judged."""

    def __init__(self) -> None:
        self._held = b""          # a partial line that may still become noise
        self._mid_line = False    # the last bytes passed on ended inside a line

    def feed(self, chunk: bytes) -> tuple[bytes, list[bytes]]:
        """(the bytes to pass on now, the noise lines found) for the next ``chunk``."""
        data, self._held = self._held + chunk, b""
        passed: list[bytes] = []
        noise: list[bytes] = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            line = data[start:end + 1]
            (passed if self._mid_line or not is_noise(line) else noise).append(line)
            self._mid_line, start = False, end + 1
        rest = data[start:]
        if rest and not self._mid_line and _may_become_noise(rest):
            self._held = rest
        elif rest:
            passed.append(rest)
            self._mid_line = True
        return b"".join(passed), noise

    def flush(self) -> bytes:
        """What is still held back, at the end of the stream."""
        held, self._held = self._held, b""
        return held


def pump(stream: IO[bytes], sink: Any, log: Path) -> None:
    """Copy ``stream`` to ``sink`` (a text stream; its binary buffer when it has one) as
    it arrives, the noise lines to ``log``. The stream is drained to its end whatever
    happens, so the script never blocks on a full pipe: a log that cannot be written (a
    full disk) loses only the noise, a closed terminal only what it would have shown."""
    out = getattr(sink, "buffer", None)
    noise_log = _NoiseLog(log)
    noise_filter = NoiseFilter()
    try:
        while True:
            chunk = os.read(stream.fileno(), READ_SIZE)
            passed, noise = noise_filter.feed(chunk) if chunk else (noise_filter.flush(), [])
            if passed:
                _write(out, sink, passed)
            if noise:
                noise_log.write(b"".join(noise))
            if not chunk:
                return
    finally:
        stream.close()
        noise_log.close()


class _NoiseLog:
    """The run's noise log, created at the first noise line; given up, quietly, at the
    first write that fails."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._file: Optional[IO[bytes]] = None
        self._failed = False

    def write(self, data: bytes) -> None:
        if self._failed:
            return
        try:
            self._file = self._file or self._path.open("ab")
            self._file.write(data)
            self._file.flush()
        except OSError:
            self._failed = True
            self.close()

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


def _write(out: Optional[IO[bytes]], sink: Any, data: bytes) -> None:
    """Pass bytes on; a sink that is gone (a closed terminal or pipe) takes nothing more."""
    try:
        if out is not None:
            out.write(data)
            out.flush()
        else:
            sink.write(data.decode("utf-8", errors="replace"))
            sink.flush()
    except (OSError, ValueError):
        pass
