"""Streaming torch-trace reader: the file in blocks, decoded by msgspec into slim structs.

Why msgspec: it decodes JSON straight into typed structs and skips every field the
analysis does not name, without building a dict per event. On the 1M-event benchmark trace
(194 MB) decoding into these structs takes about 0.9 s where a stdlib json.load takes 6 s
and 0.9 GB (bench/results/trace_scale.json); orjson, also fast, still builds a dict per
event and needs the whole document in memory.
The reader never holds the whole file: it reads BLOCK bytes at a time (through gzip when
compressed), cuts the ``traceEvents`` array at an event boundary, decodes that slice as a
JSON array and hands the structs to EventColumns, which keeps arrays only.

Finding a boundary without scanning every byte in Python: candidates are ``}`` followed by
``,`` and ``{`` (whitespace allowed); a candidate inside a string or a nested object leaves
an unbalanced slice that does not decode, so the reader simply tries the previous one. A
batch whose events do not fit the structs (an ``args`` that is not an object, say) is
decoded generically instead, so odd events never fail the file.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Optional, Union

import msgspec

from ._event_columns import EventColumns

BLOCK = 8 * 1024 * 1024
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")


class Args(msgspec.Struct, gc=False):
    """The ``args`` fields the analysis reads. Strict types decode fastest; a batch that
    does not fit them is decoded generically (see _decode_batch)."""

    ext: Optional[int] = msgspec.field(name="External id", default=None)
    ext_lower: Optional[int] = msgspec.field(name="external id", default=None)
    correlation: Optional[int] = None
    dims: Optional[msgspec.Raw] = msgspec.field(name="Input Dims", default=None)
    nbytes: Union[int, float, None, msgspec.UnsetType] = msgspec.field(name="bytes",
                                                                       default=msgspec.UNSET)
    Bytes: Union[int, float, None] = None
    device: Union[int, None, msgspec.UnsetType] = msgspec.UNSET
    device_id: Optional[int] = msgspec.field(name="Device Id", default=None)


class Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event (``"ph": "X"``). The ``ph`` tag picks the struct while decoding, so
    flow and metadata events (a third of a Kineto trace) are never decoded field by field."""

    cat: Optional[str] = None
    name: Optional[str] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Optional[float] = None
    dur: Optional[float] = 0
    args: Optional[Args] = None
    ph = "X"


class Instant(Event, tag="i"):
    """An instant event (memory allocations)."""

    ph = "i"


class Skipped(msgspec.Struct, gc=False, tag_field="ph"):
    """Flow and metadata events, which the analysis never reads: decoded to nothing. A
    ``ph`` outside these tags fails validation and its batch is decoded generically."""

    ph = None


class FlowStart(Skipped, tag="s"):
    pass


class FlowEnd(Skipped, tag="f"):
    pass


class Metadata(Skipped, tag="M"):
    pass


_EVENTS = msgspec.json.Decoder(list[Union[Event, Instant, FlowStart, FlowEnd, Metadata]])
_GENERIC = msgspec.json.Decoder()


class NotATrace(Exception):
    """The stream holds JSON without a traceEvents array."""


def stream_events(path: Path, gzipped: bool, columns: EventColumns) -> dict[str, Any]:
    """Feed every event of the file to ``columns``; return the other top-level keys.

    Raises:
        NotATrace: no ``"traceEvents": [`` in the file.
        msgspec.DecodeError, OSError, EOFError: malformed JSON or a broken gzip stream.
    """
    with (gzip.open(path, "rb") if gzipped else path.open("rb")) as fh:
        blocks = _blocks(fh)
        buffer, header = _find_events_start(blocks)
        for block in blocks:
            buffer = _consume(buffer + block, columns)
        tail = _consume_tail(buffer, columns)
    meta = _decode_object(header + b"}") if header.strip() not in (b"{", b"") else {}
    if tail:
        meta.update(_decode_object(b"{" + tail))
    return meta


def _blocks(fh: BinaryIO) -> Iterator[bytes]:
    while True:
        block = fh.read(BLOCK)
        if not block:
            return
        yield block


def _find_events_start(blocks: Iterator[bytes]) -> tuple[bytes, bytes]:
    """(bytes after ``"traceEvents": [``, the header before the key, comma-trimmed)."""
    head = b""
    for block in blocks:
        head += block
        match = _KEY.search(head)
        if match:
            return head[match.end():], head[:match.start()].rstrip().rstrip(b",")
        if head.lstrip().startswith(b"[") and len(head) > 64:  # a bare list of events
            return head.lstrip()[1:], b""
    if head.lstrip().startswith(b"["):
        return head.lstrip()[1:], b""
    raise NotATrace()


def _consume(buffer: bytes, columns: EventColumns) -> bytes:
    """Decode the complete events at the front of ``buffer``; return the rest."""
    end = len(buffer)
    for _ in range(64):
        cut = buffer.rfind(b"}", 0, end)
        if cut < 0:
            return buffer
        end = cut
        if _BOUNDARY.match(buffer, cut) and _decode_batch(b"[" + buffer[:cut + 1] + b"]",
                                                          columns):
            return buffer[buffer.index(b"{", cut + 1):]
    return buffer


def _consume_tail(buffer: bytes, columns: EventColumns) -> bytes:
    """Decode the last events; return what follows the array (trailing keys)."""
    if buffer.lstrip().startswith(b"]"):
        rest = buffer.lstrip()[1:]
    else:
        for match in _ARRAY_END.finditer(buffer):
            if _decode_batch(b"[" + buffer[:match.end()], columns):
                rest = buffer[match.end():]
                break
        else:
            _GENERIC.decode(b"[" + buffer)  # raises the decoder's own account of the fault
            raise msgspec.DecodeError("the traceEvents array is not closed (truncated file?)")
    rest = rest.lstrip().lstrip(b",")
    return rest if rest.strip() not in (b"}", b"") else b""


def _decode_batch(data: bytes, columns: EventColumns) -> bool:
    """Decode one JSON array of events into ``columns``; False if it is not valid JSON."""
    try:
        columns.add_records(_EVENTS.decode(data), msgspec.UNSET)
    except msgspec.ValidationError:  # odd events: decode this batch generically
        try:
            columns.add_dicts(_GENERIC.decode(data))
        except msgspec.DecodeError:
            return False
    except msgspec.DecodeError:
        return False
    return True


def _decode_object(data: bytes) -> dict[str, Any]:
    value = _GENERIC.decode(data)
    return value if isinstance(value, dict) else {}
