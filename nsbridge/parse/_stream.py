"""Streaming torch-trace reader: the file in blocks, each block scanned into columns.

Each batch of events goes first to the C scanner (parse/_scan.c), which writes the
columns straight from the JSON text with no Python object per event (about 0.4 s of CPU
for the 1M-event benchmark trace, 194 MB). Whatever it is not sure of (an odd type, an
escaped key, JSON it would have to guess at) it declines, and msgspec decodes that batch
into slim typed structs instead, or, when even those do not fit, into generic values. Both
give the same columns; tests/test_native_scanner.py holds them to it. Without a C
compiler at install time the scanner is absent and msgspec reads everything (about 3x
slower). Why msgspec for the rest: it decodes straight into typed structs, skipping every
field the analysis does not name; orjson builds a dict per event and needs the whole
document in memory.
The reader never holds the whole file: it reads BLOCK bytes at a time (through gzip when
compressed, inflated by a helper thread a block or two ahead of the scan), cuts the
``traceEvents`` array at an event boundary, reads that slice (in place for the scanner, as
a JSON array for msgspec) and hands the result to EventColumns, which keeps arrays only.

A plain file of 64 MiB or more is cut into as many byte ranges as there are CPUs (at most
4) at event boundaries (a ``},{`` followed by a key Kineto writes first), read by forked
workers and merged in order; any doubt (no boundary found, a range that does not decode
alone, no fork) falls back to the single reader. The frame is identical either way.

Finding a boundary without scanning every byte in Python: candidates are ``}`` followed by
``,`` and ``{`` (whitespace allowed); a candidate inside a string or a nested object leaves
an unbalanced slice that does not decode, so the reader simply tries the previous one. A
batch whose events do not fit the structs (an ``args`` that is not an object, say) is
decoded generically instead, so odd events never fail the file.

A damaged file fails in linear time and bounded memory: a batch that fails at a byte
moves the next try before that byte (msgspec names it), and once MAX_PENDING bytes in a
row hold no decodable event the reader stops, naming the offset of the first bad byte.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import queue
import re
import signal
import threading
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Optional, Union

import msgspec
import numpy as np

from ._event_columns import EventColumns

try:
    from ._scan import scan as _native_scan
except ImportError:   # built without a C compiler: msgspec reads every batch
    _native_scan = None

BLOCK = 2 * 1024 * 1024   # a batch's structs, strings and buffer copies are alive together:
                          # 2 MiB blocks read as fast as 8 MiB and peak 50 MiB lower at 1M events
PARALLEL_MIN_BYTES = 64 * 1024 * 1024
_SPLIT_WINDOW = 4 * 1024 * 1024
MAX_PENDING = 4 * BLOCK   # bytes without a decodable event before the file is called corrupt
# an event boundary followed by a key Kineto writes first: not plausible inside a string
_SPLIT = re.compile(rb'\}\s*,\s*(?=\{\s*"(?:ph|cat|name|pid|tid|ts|dur|args)"\s*:)')
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
_NON_FINITE = re.compile(rb"-?(?:NaN|Infinity)\b")


NO_RAW = msgspec.Raw(b"")
NAN = float("nan")


class Args(msgspec.Struct, gc=False):
    """The ``args`` fields the analysis reads. Strict types decode fastest; a batch that
    does not fit them is decoded generically (see _decode_batch)."""

    # absent numbers default to NaN, not None: numpy turns a list of numbers into an array
    # several times faster when it holds no None
    ext: Optional[int] = msgspec.field(name="External id", default=NAN)
    ext_lower: Optional[int] = msgspec.field(name="external id", default=NAN)
    correlation: Optional[int] = NAN
    # JSON values kept as raw text: msgspec takes Raw only outside a Union, so an absent
    # field is an empty Raw and a JSON null the text "null" (parse._event_columns.raw_text)
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=NO_RAW)
    types: msgspec.Raw = msgspec.field(name="Input type", default=NO_RAW)
    nbytes: Union[int, float, None, msgspec.UnsetType] = msgspec.field(name="bytes",
                                                                       default=msgspec.UNSET)
    Bytes: Union[int, float, None] = NAN
    device: Union[int, None, msgspec.UnsetType] = msgspec.UNSET
    device_id: Optional[int] = msgspec.field(name="Device Id", default=NAN)
    kernel_file: Optional[str] = None
    allocated: Union[int, float, None] = msgspec.field(name="Total Allocated", default=NAN)
    reserved: Union[int, float, None] = msgspec.field(name="Total Reserved", default=NAN)
    grid: msgspec.Raw = NO_RAW
    block: msgspec.Raw = NO_RAW
    registers: Union[int, float, None] = msgspec.field(name="registers per thread",
                                                       default=None)
    smem: Union[int, float, None] = msgspec.field(name="shared memory", default=None)


class Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event (``"ph": "X"``). The ``ph`` tag picks the struct while decoding, so
    flow and metadata events (a third of a Kineto trace) are never decoded field by field."""

    cat: Optional[str] = None
    name: Optional[str] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Optional[float] = None
    dur: Optional[float] = None
    args: Args = msgspec.field(default_factory=Args)   # a JSON null: decoded generically
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


def _scan_batch(data: bytes, end: int = -1) -> Optional[tuple[Any, ...]]:
    """The C scanner's columns for a JSON array of events (with ``end``: the elements in
    data[:end], no brackets), or None (declined, or no scanner built)."""
    return None if _native_scan is None else _native_scan(data, end)


def _scanned_into(columns: EventColumns, data: bytes, end: int) -> bool:
    """Whether the C scanner read the events in data[:end] (elements, no brackets) into
    ``columns``; on False nothing was added."""
    scanned = _scan_batch(data, end)
    return scanned is not None and columns.add_scanned(scanned)


def native_scanner() -> bool:
    """Whether the C trace scanner (parse/_scan.c) was built and is in use."""
    return _native_scan is not None


class NotATrace(Exception):
    """The stream holds JSON without a traceEvents array."""


class CorruptTrace(msgspec.DecodeError):
    """A run of bytes holds no decodable event: the file is damaged there (no fallback to
    another reading can help)."""


def stream_events(path: Path, gzipped: bool, columns: EventColumns,
                  workers: Optional[int] = None) -> dict[str, Any]:
    """Feed every event of the file to ``columns``; return the other top-level keys.

    A plain (not gzip) file of PARALLEL_MIN_BYTES or more is split at event boundaries and
    read by ``workers`` processes (default: the CPU count, at most 4); the frame is the same.

    Raises:
        NotATrace: no ``"traceEvents": [`` in the file.
        msgspec.DecodeError, OSError, EOFError: malformed JSON or a broken gzip stream.
    """
    workers = workers or min(os.cpu_count() or 1, 4)
    if not gzipped and workers > 1 and path.stat().st_size >= PARALLEL_MIN_BYTES:
        result = _parallel(path, columns, workers)
        if result is not None:
            return result
    with (gzip.open(path, "rb") if gzipped else path.open("rb")) as fh:
        blocks = _ReadAhead(fh)
        try:
            buffer, header = _find_events_start(blocks)
            for block in blocks:
                buffer = _check_progress(_consume(buffer + block, columns), blocks.consumed)
            tail = _consume_tail(buffer, columns, blocks.consumed - len(buffer))
        finally:
            blocks.close()
    return _metadata(header, tail)


def _check_progress(pending: bytes, read: int) -> bytes:
    """Fail once more than MAX_PENDING bytes in a row hold no decodable event: a corrupt
    byte or a run of garbage, found in time linear in the file (each byte is tried a
    bounded number of times) and in bounded memory."""
    if len(pending) <= MAX_PENDING:
        return pending
    raise _corrupt(pending, read - len(pending),
                   f"; no event decodes in the {len(pending) / 2**20:.0f} MiB from byte "
                   f"{read - len(pending):,}")


def _corrupt(pending: bytes, start: int, why: str = "") -> msgspec.DecodeError:
    """The error for bytes that do not decode, ``pending`` starting at byte ``start`` of
    the JSON text: CorruptTrace naming the first bad byte, or a plain DecodeError saying
    the array is not closed when the bytes are only cut short (a truncated file)."""
    try:
        _GENERIC.decode(b"[" + pending)
        at = len(pending)
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            return msgspec.DecodeError("the traceEvents array is not closed (truncated file?)")
        at = max(_error_offset(exc, len(pending) + 1) - 1, 0)
    return CorruptTrace(
        f"it is corrupt at byte {start + at:,} of its JSON text "
        f"({_show(pending[max(at - 20, 0):at])} then {_show(pending[at:at + 20])}){why}")


def _show(data: bytes) -> str:
    """A short, printable view of some bytes (repr escapes control characters)."""
    return repr(data.decode("utf-8", errors="replace"))


def _metadata(header: bytes, tail: bytes) -> dict[str, Any]:
    meta = _decode_object(header + b"}") if header.strip() not in (b"{", b"") else {}
    if tail:
        meta.update(_decode_object(b"{" + tail))
    return meta


def _parallel(path: Path, columns: EventColumns, workers: int) -> Optional[dict[str, Any]]:
    """Read byte ranges of the events array in parallel; None when no safe split is found
    or a range does not decode on its own (the caller then reads the file sequentially)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(min(size, BLOCK * 4))
    match = _KEY.search(head)
    if match is None:
        return None
    header = head[:match.start()].rstrip().rstrip(b",").removeprefix(b"\xef\xbb\xbf")
    start = match.end()
    begins, ends = [start], []
    with path.open("rb") as fh:
        for k in range(1, workers):
            target = start + (size - start) * k // workers
            fh.seek(target)
            found = _SPLIT.search(fh.read(_SPLIT_WINDOW))
            if found is None or target + found.start() <= begins[-1]:
                return None
            ends.append(target + found.start() + 1)    # just after the closing brace
            begins.append(target + found.end())        # the next event's opening brace
    ends.append(size)
    ranges = [(b, e, i == len(begins) - 1) for i, (b, e) in enumerate(zip(begins, ends))]
    children: list[tuple[Any, Any]] = []
    try:
        context = multiprocessing.get_context("fork")
        children = [_start_child(context, str(path), r) for r in ranges[1:]]
        own = EventColumns()   # the parent's range is kept as read, not exported and merged
        own_tail = _read_range_into(own, str(path), *ranges[0])
        parts = [_receive(c) for _, c in children]
    except CorruptTrace:
        raise
    except (msgspec.DecodeError, _SplitError, AssertionError, OSError):
        return None  # a bad split, or no child processes here (daemon, fork refused)
    finally:
        for process, connection in children:
            connection.close()
            if process.is_alive():     # the parent failed first: its answer is not needed
                process.terminate()
            process.join()
    columns.adopt(own)
    tail = own_tail
    for exported, part_tail in parts:
        columns.merge(exported)
        tail = part_tail or tail
    return _metadata(header, tail)


def _start_child(context: Any, path: str, byte_range: tuple[int, int, bool]) -> tuple[Any, Any]:
    """A forked process reading one byte range; (process, the end its answer arrives on).
    The answer is received by the parent's own thread, not a pool's result thread: glibc
    gives each thread its own heap, and memory a helper thread unpickled into stays
    there, unused by the analysis (10 MiB more peak RSS at 1M events)."""
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child_read, args=(send, path) + byte_range, daemon=True)
    process.start()
    send.close()
    return process, receive


def _child_read(send: Any, path: str, begin: int, end: int, last: bool) -> None:
    """A child's work: its range's columns, or the exception reading them raised. The
    arrays travel as raw bytes after a small pickled header: pickled, each would be copied
    twice more on the way (about 0.1 s for half of a 1M-event trace)."""
    _default_sigterm()
    try:
        (table, codes, numbers, skipped), tail = _read_range(path, begin, end, last)
    except Exception as exc:   # the parent re-raises it
        send.send((False, exc))
        send.close()
        return
    arrays = [(True, name, values) for name, values in codes.items()] + [
        (False, name, values) for name, values in numbers.items()]
    send.send((True, (table, skipped, tail,
                      [(is_code, name, values.dtype.str) for is_code, name, values in arrays])))
    for _, _, values in arrays:
        send.send_bytes(np.ascontiguousarray(values).data.cast("B"))
    send.close()


def _receive(connection: Any) -> tuple[Any, bytes]:
    """A child's columns; its exception raised here; _SplitError if it died unanswered."""
    try:
        ok, value = connection.recv()
        if not ok:
            raise value
        table, skipped, tail, layout = value
        codes, numbers = {}, {}
        for is_code, name, dtype in layout:
            (codes if is_code else numbers)[name] = np.frombuffer(connection.recv_bytes(),
                                                                   dtype=dtype)
    except EOFError:           # killed (the OOM killer, a signal): read sequentially instead
        raise _SplitError() from None
    return (table, codes, numbers, skipped), tail


def _default_sigterm() -> None:
    """A forked worker ends quietly on SIGTERM: it must not inherit nsbridge's handler,
    which raises Stopped and prints a traceback from a reader the parent is ending."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _read_range(path: str, begin: int, end: int, last: bool) -> tuple[Any, bytes]:
    """The exported columns of the events in bytes [begin, end) of the file (a forked
    worker's share), and what follows the array when ``last``."""
    columns = EventColumns()
    tail = _read_range_into(columns, path, begin, end, last)
    return columns.export(), tail


def _read_range_into(columns: EventColumns, path: str, begin: int, end: int,
                     last: bool) -> bytes:
    """Decode the events in bytes [begin, end) of the file into ``columns``; return what
    follows the array when ``last`` (else b"")."""
    with open(path, "rb") as fh:
        fh.seek(begin)
        remaining = end - begin
        buffer = b""
        while remaining > 0:
            block = fh.read(min(BLOCK, remaining))
            if not block:
                break
            remaining -= len(block)
            buffer = _check_progress(_consume(buffer + block, columns), end - remaining)
    if last:
        return _consume_tail(buffer, columns, end - remaining - len(buffer))
    body = buffer.strip()
    if body and _decode_batch(b"[" + body + b"]", columns) is not None:
        raise _SplitError()
    return b""


class _SplitError(Exception):
    """A worker's byte range did not decode on its own."""


class _ReadAhead:
    """A file's blocks, read (for gzip: decompressed) up to ``depth`` blocks ahead by a
    helper thread. zlib and the C scanner both release the GIL, so a gzipped trace is
    inflated on one core while the previous block is scanned on another. ``consumed``:
    the bytes handed out so far (where a plain ``fh.tell()`` would be). ``close()`` stops
    the helper; call it before the file closes."""

    def __init__(self, fh: BinaryIO, depth: int = 2) -> None:
        self.consumed = 0
        self._queue: queue.Queue[tuple[bytes, Optional[BaseException]]] = queue.Queue(depth)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._produce, args=(fh,), daemon=True,
                                        name="nsbridge-read-ahead")
        self._thread.start()

    def _produce(self, fh: BinaryIO) -> None:
        try:
            while not self._stop.is_set():
                block = fh.read(BLOCK)
                self._put((block, None))
                if not block:
                    return
        except BaseException as exc:   # a broken gzip stream: raised in the reader's thread
            self._put((b"", exc))

    def _put(self, item: tuple[bytes, Optional[BaseException]]) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def __iter__(self) -> "_ReadAhead":
        return self

    def __next__(self) -> bytes:
        if self._finished:
            raise StopIteration
        block, error = self._queue.get()
        if error is not None or not block:
            self._finished = True
            if error is not None:
                raise error
            raise StopIteration
        self.consumed += len(block)
        return block

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _find_events_start(blocks: Iterator[bytes]) -> tuple[bytes, bytes]:
    """(bytes after ``"traceEvents": [``, the header before the key, comma-trimmed)."""
    head = b""
    for block in blocks:
        head += block
        head = head[3:] if head.startswith(b"\xef\xbb\xbf") else head   # a UTF-8 BOM
        match = _KEY.search(head)
        if match:
            return head[match.end():], head[:match.start()].rstrip().rstrip(b",")
        if head.lstrip().startswith(b"[") and len(head) > 64:  # a bare list of events
            return head.lstrip()[1:], b""
    if head.lstrip().startswith(b"["):
        return head.lstrip()[1:], b""
    raise NotATrace()


def _consume(buffer: bytes, columns: EventColumns) -> bytes:
    """Decode the complete events at the front of ``buffer``; return the rest. A batch
    that fails at a byte before its end moves the next try before that byte."""
    end = len(buffer)
    for _ in range(64):
        cut = buffer.rfind(b"}", 0, end)
        if cut < 0:
            return buffer
        end = cut
        if not _BOUNDARY.match(buffer, cut):
            continue
        if _scanned_into(columns, buffer, cut + 1):   # read in place, no copy of the batch
            return buffer[buffer.index(b"{", cut + 1):]
        failed_at = _decode_batch(b"[" + buffer[:cut + 1] + b"]", columns)
        if failed_at is None:
            return buffer[buffer.index(b"{", cut + 1):]
        end = min(end, failed_at - 1)   # "[" came first: byte k of the batch is k - 1 here
    return buffer


def _consume_tail(buffer: bytes, columns: EventColumns, start: int) -> bytes:
    """Decode the last events (``buffer`` starts at byte ``start`` of the JSON text);
    return what follows the array (trailing keys)."""
    if buffer.lstrip().startswith(b"]"):
        rest = buffer.lstrip()[1:]
    else:
        for match in _ARRAY_END.finditer(buffer):
            if _decode_batch(b"[" + buffer[:match.end()], columns) is None:
                rest = buffer[match.end():]
                break
        else:
            rest = _consume_odd_tail(buffer, columns, start)
    rest = rest.lstrip().lstrip(b",")
    return rest if rest.strip() not in (b"}", b"") else b""


def _consume_odd_tail(buffer: bytes, columns: EventColumns, start: int) -> bytes:
    """The array's end when its last entries are not objects (``..., 7, null]``), found by
    the stdlib's raw_decode; what follows it. Only for such rare tails: it is slower.

    Raises:
        CorruptTrace, msgspec.DecodeError: the tail does not decode (see _corrupt).
    """
    text = "[" + buffer.decode("utf-8", errors="replace")
    try:
        events, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        raise _corrupt(buffer, start) from None
    columns.add_dicts(events)
    return text[end:].encode("utf-8")


def _decode_batch(data: bytes, columns: EventColumns) -> Optional[int]:
    """Decode one JSON array of events into ``columns``. None when it did; else where it
    is malformed (msgspec's byte offset, or the end for a truncated batch). The C scanner
    reads the batch when it can; whatever it declines, msgspec reads."""
    scanned = _scan_batch(data)
    if scanned is not None and columns.add_scanned(scanned):
        return None
    try:
        columns.add_records(_EVENTS.decode(data), msgspec.UNSET)
    except msgspec.ValidationError:  # odd events: decode this batch generically
        try:
            columns.add_dicts(_GENERIC.decode(data))
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            return _decode_leniently(data, exc, columns)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        return _decode_leniently(data, exc, columns)
    return None


def _decode_leniently(data: bytes, exc: ValueError, columns: EventColumns) -> Optional[int]:
    """A batch msgspec refuses for what Python's json reads (``NaN``, ``Infinity``, a lone
    surrogate escape) or for bytes that are not UTF-8 (read as U+FFFD): decoded by the
    stdlib, so only the events holding odd values are skipped later. Else the failing byte."""
    if isinstance(exc, UnicodeDecodeError):
        at = exc.start
    else:
        at = _error_offset(exc, len(data))
        if "surrogate" not in str(exc) and not _NON_FINITE.match(data, at):
            return at
    try:
        events = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        return at
    columns.add_dicts(events if isinstance(events, list) else [events])
    return None


def _error_offset(exc: msgspec.DecodeError, size: int) -> int:
    found = _AT_BYTE.search(str(exc))
    return int(found.group(1)) if found else size


def _decode_object(data: bytes) -> dict[str, Any]:
    """The trace's top-level keys (NaN and Infinity read as the stdlib reads them)."""
    try:
        value = _GENERIC.decode(data)
    except msgspec.DecodeError:
        try:
            value = json.loads(data)
        except ValueError:
            raise msgspec.DecodeError("the keys around traceEvents are not valid JSON") from None
    return value if isinstance(value, dict) else {}
