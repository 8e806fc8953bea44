"""torch.profiler (Kineto) Chrome trace -> EVENTS frame (see nsbridge.schema).

Reads .json and .json.gz (detected by content, not name) from every torch generation in
the fixtures: 2022 capitalised categories and lower-case ``external id``, integer and
fractional timestamps, driver-API (Triton) launches, ROCm traces. Only the fields the
analysis needs become columns, batch by batch, so no object per event is kept.

Two readers give identical frames: a streaming one (msgspec, the default when installed;
see parse._stream) and a stdlib ``json`` one that loads the whole file (the fallback).
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import pandas as pd

from .. import schema as S
from ..guard.confine import readable
from ..errors import EmptyTraceError, TraceFormatError, TraceNotFoundError
from ._event_columns import EventColumns
from ._quotes import repair_quotes

BOM = b"\xef\xbb\xbf"   # a UTF-8 byte-order mark, which some editors write before JSON

msgspec: Optional[ModuleType]
try:  # the fast streaming reader; the stdlib reader below gives the same frame
    import msgspec

    from ._stream import EventTooLarge, NotATrace, stream_events
except ImportError:  # pragma: no cover - exercised by forcing streaming=False in tests
    msgspec = None

_BATCH = 100_000


@dataclass
class TorchTrace:
    """One parsed trace: its events frame and the top-level metadata."""

    path: Path
    events: pd.DataFrame
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    base_time_ns: int | None = None
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def has_device(self) -> bool:
        """True when the trace holds GPU activity (kernels, copies or memsets)."""
        return bool(self.events[S.CAT].isin(S.GPU_CATS).any())

    def notes(self) -> list[str]:
        """One report note per reason events were skipped or repaired while reading."""
        return [f"{self.path.name}: {count:,} {reason}"
                for reason, count in sorted(self.skipped.items())]


def streaming_available() -> bool:
    """True when the msgspec streaming reader is installed."""
    return msgspec is not None


def read_trace(path: str | Path, *, streaming: Optional[bool] = None,
               workers: Optional[int] = None) -> TorchTrace:
    """Parse one torch.profiler trace file.

    Args:
        streaming: True for the msgspec streaming reader, False for the stdlib reader,
            None (default) for streaming when msgspec is installed.
        workers: processes the streaming reader may split a large plain file across
            (None: its default; 1 inside a worker process of its own).

    Raises:
        TraceNotFoundError: the path does not exist.
        TraceFormatError: not JSON, truncated/corrupt gzip or JSON, or not a trace.
        EmptyTraceError: a trace without any complete or instant events.
        OutsideRootsError: confined (nsbridge.guard.confine), the file lies outside the roots.
    """
    path = readable(path)
    if not path.is_file():
        raise TraceNotFoundError(f"Trace file {path} does not exist. Pass a torch.profiler "
                                 "trace (.json or .json.gz) or a folder that holds them.")
    gzipped = _check_start(path)
    columns = EventColumns()
    use_stream = streaming_available() if streaming is None else streaming
    try:
        meta = (stream_events(path, gzipped, columns, workers=workers) if use_stream
                else _read_whole(path, columns))
    except (OSError, EOFError, zlib.error) as exc:
        raise _gzip_error(path, exc) from exc
    except _NOT_A_TRACE_TYPES as exc:
        raise TraceFormatError(_not_a_trace(path)) from exc
    except _BEYOND_LIMITS as exc:
        raise TraceFormatError(_beyond_limits(path, exc)) from exc
    except ValueError as exc:  # json.JSONDecodeError and msgspec.DecodeError
        truncated = "truncated" in str(exc) or "not closed" in str(exc) or (
            isinstance(exc, json.JSONDecodeError) and exc.pos >= len(exc.doc) - 2)
        if truncated:
            raise TraceFormatError(
                f"{path} is not valid JSON: it ends early (truncated). A trace cut off while "
                "being written (a killed job, a full disk) cannot be analysed; capture it "
                "again.") from exc
        detail = str(exc) if str(exc).startswith("it is corrupt") else f"it is corrupt ({exc})"
        raise TraceFormatError(
            f"{path} is not valid JSON: {detail}. A damaged copy (a bad transfer, a disk "
            "error) or a file that is not a trace; copy or capture it again.") from exc
    events = columns.finish()
    if events.empty and columns.skipped:
        raise TraceFormatError(
            f"{path} holds no event nsbridge can read: " + "; ".join(
                f"{count:,} {reason}" for reason, count in sorted(columns.skipped.items()))
            + ". It is not a torch.profiler trace as export_chrome_trace writes it, or it "
            "was damaged; capture or copy it again.")
    if events.empty:
        raise EmptyTraceError(
            f"{path} is a torch.profiler trace with no events: the profiler recorded "
            "nothing. Check that the profiled code ran inside the profiler's active steps "
            "(schedule) and that the trace was exported after prof.stop().")
    dist = meta.get("distributedInfo") or {}
    dist = dist if isinstance(dist, dict) else {}
    properties = meta.get("deviceProperties")
    return TorchTrace(path=path, events=events, skipped=dict(columns.skipped),
                      device_properties=[p for p in properties if isinstance(p, dict)]
                      if isinstance(properties, list) else [],
                      rank=_int_or_none(dist.get("rank")),
                      world_size=_int_or_none(dist.get("world_size")),
                      base_time_ns=_int_or_none(meta.get("baseTimeNanoseconds")))


class _NotATraceError(Exception):
    """JSON without a traceEvents list (stdlib reader)."""


_NOT_A_TRACE_TYPES: tuple = (_NotATraceError,) + ((NotATrace,) if msgspec is not None else ())
# JSON nested past the decoders' recursion limit; one event over the streaming reader's bound
_BEYOND_LIMITS: tuple = (RecursionError,) + ((EventTooLarge,) if msgspec is not None else ())


def _check_start(path: Path) -> bool:
    """Whether the file is gzip; raises TraceFormatError unless it starts like JSON."""
    with path.open("rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
    try:
        with (gzip.open(path, "rb") if gzipped else path.open("rb")) as fh:
            head = fh.read(256)
    except (OSError, EOFError, zlib.error) as exc:
        raise _gzip_error(path, exc) from exc
    if not head:
        raise TraceFormatError(
            f"{path} is empty (0 bytes{' once decompressed' if gzipped else ''}): a trace whose "
            "writing never started or failed (a killed job, a full disk). Capture it again.")
    if not head.removeprefix(BOM).lstrip().startswith((b"{", b"[")):
        raise TraceFormatError(
            f"{path} is not a text or gzip file holding JSON, so not a torch.profiler trace "
            "(expected Chrome-trace JSON, .json or .json.gz, as export_chrome_trace writes).")
    return gzipped


def _read_whole(path: Path, columns: EventColumns) -> dict[str, Any]:
    raw = read_inflated(path)
    try:
        doc = json.loads(raw.decode("utf-8-sig", errors="replace"))   # as the streaming reader
    except json.JSONDecodeError:   # torch's bare double quotes in a name or path, escaped
        repaired = repair_quotes(raw)
        if repaired == raw:
            raise
        doc = json.loads(repaired.decode("utf-8-sig", errors="replace"))
    del raw
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise _NotATraceError()
    events = doc.pop("traceEvents")
    for start in range(0, len(events), _BATCH):
        columns.add_dicts(events[start:start + _BATCH])
    return doc


_INFLATE_BLOCK = 4 << 20


def read_inflated(path: Path) -> bytes:
    """A file's bytes, inflated when it is gzip (read in blocks: faster than
    ``gzip.decompress``, which grows its output buffer as it goes)."""
    with path.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    if not gzipped:
        return path.read_bytes()
    with gzip.open(path, "rb") as fh:
        return b"".join(iter(lambda: fh.read(_INFLATE_BLOCK), b""))


def _gzip_error(path: Path, exc: BaseException) -> TraceFormatError:
    return TraceFormatError(
        f"{path} is a gzip file that cannot be decompressed ({exc}); it is truncated or "
        "corrupt. Copy it again from where it was written, or re-export the trace.")


def _beyond_limits(path: Path, exc: BaseException) -> str:
    what = (f"nests JSON values more than about {sys.getrecursionlimit():,} levels deep, "
            "deeper than nsbridge reads" if isinstance(exc, RecursionError) else str(exc))
    return (f"{path} {what}. torch.profiler writes nothing like it (its events nest a few "
            "levels and hold no string of that size): this is not a trace as "
            "export_chrome_trace writes it. Pass the trace torch wrote.")


def _not_a_trace(path: Path) -> str:
    return (f"{path} is JSON but not a torch.profiler trace: it has no 'traceEvents' list. "
            "Export one with prof.export_chrome_trace(...) or tensorboard_trace_handler, or "
            "run `nsbridge triage` on the script to capture one.")


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None
