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

A plain file of 16 MiB or more is cut into byte ranges at event boundaries (a ``},{``
followed by a key Kineto writes first) and read in parallel, the ranges' columns put back
in file order. With the C scanner, which runs without the GIL, threads of this process
read them, four ranges per thread (of THREAD_BLOCK at most) taken in turn, each range
read and scanned whole (_ThreadedRead); ``read_ahead`` starts them before the analysis
modules are imported, and until those are, the threads keep what the scanner gives
without converting it (that needs the GIL, which the imports hold). Without the scanner,
one forked process per CPU (at most 4) reads a range each. Any doubt (no boundary found,
a range that does not decode alone, no fork) falls back to the single reader. The frame
is identical either way.

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

import collections
import gzip
import io
import itertools
import json
import multiprocessing
import os
import queue
import re
import signal
import threading
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Optional, Union

import msgspec
import numpy as np

from ._event_columns import EventColumns
from ._quotes import repair_quotes

_native_scan: Optional[Callable[[bytes, int], Optional[tuple[Any, ...]]]]
try:
    from ._scan import scan as _native_scan
except ImportError:   # built without a C compiler: msgspec reads every batch
    _native_scan = None

BLOCK = 2 * 1024 * 1024   # a batch's structs, strings and buffer copies are alive together:
                          # 2 MiB blocks read as fast as 8 MiB and peak 50 MiB lower at 1M events
# a reader thread's range at most, read and scanned whole: each read and each scan gives
# up the GIL, and taking it back waits for the main thread (5 ms or more while it imports);
# a range in one piece waits twice, not a dozen times. 16 MiB: two of them in flight
# and the kept columns stay within the peak the analysis reaches anyway (32 MiB: +15 MiB)
THREAD_BLOCK = 16 * 1024 * 1024
LAST_RANGE = 256 * 1024    # the reader threads' last range, the array's end: read apart
PARALLEL_MIN_BYTES = 16 * 1024 * 1024
RANGES_PER_READER = 4      # byte ranges per reader thread: a thread that started early takes more
_SPLIT_WINDOW = 4 * 1024 * 1024
MAX_PENDING = 4 * BLOCK   # bytes without a decodable event before the file is called corrupt
# one event's bytes at most (a bound on memory, gzip bombs included): no torch event comes near
MAX_EVENT = 256 * 1024 * 1024
# an event boundary followed by a key Kineto writes first: not plausible inside a string
_SPLIT = re.compile(rb'\}\s*,\s*(?=\{\s*"(?:ph|cat|name|pid|tid|ts|dur|args)"\s*:)')
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
_NON_FINITE = re.compile(rb"-?(?:NaN|Infinity)\b")


NO_RAW = msgspec.Raw(b"")
NAN = float("nan")
# NaN, the default of the Optional[int] fields below: outside their decoded type on purpose
# (a float in the JSON still fails the strict struct); typed Any, as mypy wants an int
ABSENT_INT: Any = NAN


class Args(msgspec.Struct, gc=False):
    """The ``args`` fields the analysis reads. Strict types decode fastest; a batch that
    does not fit them is decoded generically (see _decode_batch)."""

    # absent numbers default to NaN, not None: numpy turns a list of numbers into an array
    # several times faster when it holds no None
    ext: Optional[int] = msgspec.field(name="External id", default=ABSENT_INT)
    ext_lower: Optional[int] = msgspec.field(name="external id", default=ABSENT_INT)
    correlation: Optional[int] = ABSENT_INT
    # JSON values kept as raw text: msgspec takes Raw only outside a Union, so an absent
    # field is an empty Raw and a JSON null the text "null" (parse._event_columns.raw_text)
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=NO_RAW)
    types: msgspec.Raw = msgspec.field(name="Input type", default=NO_RAW)
    strides: msgspec.Raw = msgspec.field(name="Input Strides", default=NO_RAW)
    nbytes: Union[int, float, None, msgspec.UnsetType] = msgspec.field(name="bytes",
                                                                       default=msgspec.UNSET)
    Bytes: Union[int, float, None] = NAN
    device: Union[int, None, msgspec.UnsetType] = msgspec.UNSET
    device_id: Optional[int] = msgspec.field(name="Device Id", default=ABSENT_INT)
    kernel_file: Optional[str] = None
    allocated: Union[int, float, None] = msgspec.field(name="Total Allocated", default=NAN)
    reserved: Union[int, float, None] = msgspec.field(name="Total Reserved", default=NAN)
    addr: Union[int, float, None] = msgspec.field(name="Addr", default=NAN)
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


class EventTooLarge(Exception):
    """One event runs over MAX_EVENT bytes; the message follows the file's name."""


def stream_events(path: Path, gzipped: bool, columns: EventColumns,
                  workers: Optional[int] = None) -> dict[str, Any]:
    """Feed every event of the file to ``columns``; return the other top-level keys.

    A plain (not gzip) file of PARALLEL_MIN_BYTES or more is split at event boundaries and
    read by ``workers`` processes (default: the CPU count, at most 4); the frame is the same.

    Raises:
        NotATrace: no ``"traceEvents": [`` in the file.
        msgspec.DecodeError, OSError, EOFError: malformed JSON or a broken gzip stream.
    """
    workers = _workers(workers)
    if not gzipped and workers > 1 and path.stat().st_size >= PARALLEL_MIN_BYTES:
        result = _parallel(path, columns, workers)
        if result is not None:
            return result
    with (gzip.open(path, "rb") if gzipped else path.open("rb")) as fh:
        blocks = _ReadAhead(fh)
        try:
            buffer, header = _find_events_start(blocks)
            for block in blocks:
                buffer = _check_progress(_consume(buffer + block, columns), blocks.consumed,
                                         len(buffer))
            tail = _consume_tail(buffer, columns, blocks.consumed - len(buffer))
        finally:
            blocks.close()
    return _metadata(header, tail)


def _check_progress(pending: bytes, read: int, before: int) -> bytes:
    """Fail once more than MAX_PENDING bytes in a row hold no decodable event: a corrupt
    byte or a run of garbage, found in time linear in the file (each byte is tried a
    bounded number of times) and in bounded memory. Bytes that are only unfinished (one
    event holding a string of many MiB) are read on, checked again each time they double
    (``before``: the pending bytes' length at the last call), up to MAX_EVENT.

    Raises:
        CorruptTrace: a byte that is not JSON.
        EventTooLarge: an unfinished event of more than MAX_EVENT bytes.
    """
    if _doublings(len(pending)) <= _doublings(before):
        return pending
    start = read - len(pending)
    error = _corrupt(pending, start, f"; no event decodes in the {len(pending) / 2**20:.0f} "
                                     f"MiB from byte {start:,}")
    if isinstance(error, CorruptTrace):
        raise error
    if len(pending) <= MAX_EVENT:
        return pending
    raise EventTooLarge(f"holds an event of more than {MAX_EVENT / 2**20:g} MiB (from byte "
                        f"{start:,} of its JSON text), more than nsbridge reads in one event")


def _doublings(size: int) -> int:
    """How many times ``size`` pending bytes doubled past MAX_PENDING (0: not past it)."""
    return 0 if size <= MAX_PENDING else ((size - 1) // MAX_PENDING).bit_length()


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
    or a range does not decode on its own (the caller then reads the file sequentially).
    With the C scanner, threads of this process read them (_ThreadedRead; one started by
    read_ahead for this file takes over); without it, forked processes do."""
    if _native_scan is not None:
        reads = _take_early(path) or _ThreadedRead.start(
            path, threads=workers - 1, pieces=workers * RANGES_PER_READER)
        return None if reads is None else reads.finish(columns)
    split = _split(path, workers)
    if split is None:
        return None
    header, ranges = split
    children: list[tuple[Any, Any]] = []
    try:
        context = multiprocessing.get_context("fork")
        children = [_start_child(context, str(path), r) for r in ranges[1:]]
        own = EventColumns()   # the parent's range is kept as read, not exported and merged
        own_tail = _read_range_into(own, str(path), *ranges[0])
        parts = [_receive(c) for _, c in children]
    except CorruptTrace:
        raise
    except _FALLBACK_ERRORS:
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


def _split(path: Path, pieces: int,
           last_bytes: int = 0) -> Optional[tuple[bytes, list[tuple[int, int, bool]]]]:
    """(the header before the events array, ``pieces`` byte ranges (begin, end, last) of
    the array cut at event boundaries, and with ``last_bytes`` one more range of about
    that many bytes at the end), or None when no safe cut is found."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(min(size, BLOCK * 4))
        match = _KEY.search(head)
        if match is None:
            return None
        header = head[:match.start()].rstrip().rstrip(b",").removeprefix(b"\xef\xbb\xbf")
        start = match.end()
        begins, ends = [start], []
        for k in range(1, pieces):
            target = start + (size - start) * k // pieces
            found = _boundary_after(fh, target)
            if found is None or target + found[0] <= begins[-1]:
                return None
            ends.append(target + found[0] + 1)    # just after the closing brace
            begins.append(target + found[1])      # the next event's opening brace
        target = size - last_bytes
        found = _boundary_after(fh, target) if last_bytes and target > begins[-1] else None
        if found is not None and target + found[0] > begins[-1]:   # else no such range
            ends.append(target + found[0] + 1)
            begins.append(target + found[1])
    ends.append(size)
    return header, [(b, e, i == len(begins) - 1) for i, (b, e) in enumerate(zip(begins, ends))]


def _boundary_after(fh: BinaryIO, at: int) -> Optional[tuple[int, int]]:
    """(start, end) of the first _SPLIT boundary within _SPLIT_WINDOW bytes after ``at``,
    relative to ``at``: a short look first, as one is nearly always close."""
    for window in (min(64 * 1024, _SPLIT_WINDOW), _SPLIT_WINDOW):
        fh.seek(at)
        found = _SPLIT.search(fh.read(window))
        if found is not None:
            return found.start(), found.end()
    return None


def _file_key(path: Path) -> tuple[str, int, int]:
    """A file as read_ahead remembers it: an edit or a replacement changes the key."""
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


class _ThreadedRead:
    """A plain trace's byte ranges read by threads of this process: the C scanner runs
    without the GIL, so the scans use every core with no copy of the columns between
    processes, and a read can start before the analysis modules are imported
    (read_ahead). Each thread takes the next unread range until none is left (a thread
    that started earlier takes more) and keeps one EventColumns, so each distinct string
    is converted once per thread; the ranges' batches are put in file order at the end.

    Until the caller joins (finish), a thread only reads and scans, which hold the GIL for
    a moment: the scans' Python side (EventColumns.add_scanned) waits, kept as the scanner
    gave it. Run beside the caller's imports, which hold the GIL nearly throughout, it
    took a range 35 ms of waiting for 3 ms of work. Once the caller joins, every thread,
    the caller's included, converts what was kept, into its own columns."""

    def __init__(self, path: Path, header: bytes, ranges: list[tuple[int, int, bool]]) -> None:
        self.path, self.header, self.ranges = path, header, ranges
        self._next = itertools.count()     # next() on it is atomic: the ranges' dispenser
        # per range: (the columns that hold it, its first and last+1 batch, its tail)
        self._read: list[Optional[tuple[EventColumns, int, int, bytes]]] = [None] * len(ranges)
        self._errors: list[tuple[int, BaseException]] = []
        self._threads: list[threading.Thread] = []
        self._kept: collections.deque[tuple[int, Any]] = collections.deque()
        self._joined = threading.Event()   # set by finish() (or cancel()): convert now

    @classmethod
    def start(cls, path: Path, threads: int, pieces: int) -> Optional["_ThreadedRead"]:
        """Split the file (in ranges of THREAD_BLOCK at most) and start ``threads``
        reader threads; None: no safe split."""
        pieces = max(pieces, 2, -(-path.stat().st_size // THREAD_BLOCK))
        split = _split(path, pieces, last_bytes=LAST_RANGE)
        if split is None:
            return None
        reads = cls(path, *split)
        for _ in range(threads):
            thread = threading.Thread(target=reads._work, daemon=True, name="nsbridge-reader")
            thread.start()
            reads._threads.append(thread)
        return reads

    def _work(self) -> None:
        columns = EventColumns()
        k = -1
        try:
            while not self._errors:
                self._convert_kept(columns)
                k = next(self._next)
                if k >= len(self.ranges):
                    break
                begin, end, last = self.ranges[k]
                scanned = None if last else _scan_range(str(self.path), begin, end)
                if self._joined.is_set():
                    self._convert(columns, k, scanned)
                else:   # the last range (small) or a declined one, too, is read later
                    self._kept.append((k, scanned))
            self._joined.wait()
            self._convert_kept(columns)
        except BaseException as exc:   # raised in the caller's thread by finish()
            self._errors.append((k, exc))

    def _convert_kept(self, columns: EventColumns) -> None:
        """Once the caller joins: the kept ranges, taken in turn by every thread."""
        while self._joined.is_set() and not self._errors:
            try:
                k, scanned = self._kept.popleft()
            except IndexError:
                return
            self._convert(columns, k, scanned)

    def _convert(self, columns: EventColumns, k: int, scanned: Any) -> None:
        """Range ``k`` into ``columns``: the scanner's columns, or (None, or a text they
        hold that does not decode) the range read again in blocks."""
        first = columns.batches
        tail = b""
        if scanned is None or not columns.add_scanned(scanned):
            tail = _read_range_into(columns, str(self.path), *self.ranges[k],
                                    block=THREAD_BLOCK)
        self._read[k] = (columns, first, columns.batches, tail)

    def cancel(self) -> None:
        """Stop the threads after the ranges they are reading (the read is let go)."""
        self._errors.append((len(self.ranges), _Cancelled()))
        self._joined.set()

    def finish(self, columns: EventColumns) -> Optional[dict[str, Any]]:
        """Read along until no range is left, then fill ``columns`` in file order and
        return the trace's other keys; None when a range did not decode on its own (the
        caller reads the file sequentially).

        Raises:
            CorruptTrace: a damaged byte, named by its offset in the file.
        """
        self._joined.set()
        self._work()
        for thread in self._threads:
            thread.join()
        if self._errors:
            _, first_error = min(self._errors, key=lambda error: error[0])
            if not isinstance(first_error, CorruptTrace) and isinstance(first_error,
                                                                        _FALLBACK_ERRORS):
                return None
            raise first_error
        mappings: dict[int, Optional[np.ndarray]] = {}
        for part, first, last, _ in self._read:   # type: ignore[misc]
            if id(part) not in mappings:
                mappings[id(part)] = columns.codes_for(part)
                columns.skipped.update(part.skipped)
            columns.append_batches(part, first, last, mappings[id(part)])
        return _metadata(self.header, self._read[-1][3])   # type: ignore[index]


_EARLY: dict[tuple[str, int, int], _ThreadedRead] = {}


class _Cancelled(Exception):
    """A read started ahead of a file that changed before it was taken over."""


def _take_early(path: Path) -> Optional[_ThreadedRead]:
    """The read read_ahead started for this file, if the file is unchanged since; reads
    of an earlier version of it are cancelled and let go."""
    key = _file_key(path)
    for started in [k for k in _EARLY if k[0] == key[0]]:
        reads = _EARLY.pop(started)
        if started == key:
            return reads
        reads.cancel()
    return None


def read_ahead(path: Union[str, Path], workers: Optional[int] = None) -> None:
    """Start reading a large plain trace on background threads now; a later read of the
    same, unchanged file (``read_trace``, ``nsbridge.analyze``) takes over and reads
    along. ``nsbridge analyze FILE`` calls it before importing the analysis, whose
    imports hold one core for about 0.3 s while the scans, which release the GIL, run on
    the other. Does nothing where the threaded reader would not run (no C scanner, a
    gzipped or small file, not a trace) or the file cannot be read now."""
    path = Path(path)
    try:
        key = _file_key(path)
        if _native_scan is None or key in _EARLY or key[1] < PARALLEL_MIN_BYTES:
            return
        with path.open("rb") as fh:
            if fh.read(2) == b"\x1f\x8b":   # gzip: read sequentially, inflated ahead
                return
        workers = _workers(workers)
        if workers < 2:
            return
        reads = _ThreadedRead.start(path, threads=workers - 1,
                                    pieces=workers * RANGES_PER_READER)
    except OSError:
        return
    if reads is not None:
        _EARLY[key] = reads


def _workers(workers: Optional[int]) -> int:
    """Readers of a large plain file: the CPU count (at most 4) unless given."""
    return workers or min(os.cpu_count() or 1, 4)


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
        codes: dict[str, np.ndarray] = {}
        numbers: dict[str, np.ndarray] = {}
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


def _scan_range(path: str, begin: int, end: int) -> Optional[tuple[Any, ...]]:
    """The scanner's columns for the events in bytes [begin, end) of the file (whole
    events, cut by _split), or None: declined, or no scanner built."""
    with open(path, "rb") as fh:
        fh.seek(begin)
        data = fh.read(end - begin)
    return _scan_batch(data, len(data)) if len(data) == end - begin else None


def _read_range_into(columns: EventColumns, path: str, begin: int, end: int,
                     last: bool, block: int = BLOCK) -> bytes:
    """Decode the events in bytes [begin, end) of the file into ``columns``, ``block``
    bytes at a time; return what follows the array when ``last`` (else b"")."""
    with open(path, "rb") as fh:
        fh.seek(begin)
        remaining = end - begin
        buffer = b""
        while remaining > 0:
            data = fh.read(min(block, remaining))
            if not data:
                break
            remaining -= len(data)
            buffer = _check_progress(_consume(buffer + data, columns), end - remaining,
                                     len(buffer))
    if last:
        return _consume_tail(buffer, columns, end - remaining - len(buffer))
    body = buffer.strip()
    if body and _decode_batch(b"[" + body + b"]", columns) is not None:
        raise _SplitError()
    return b""


class _SplitError(Exception):
    """A worker's byte range did not decode on its own."""


# a parallel read that fails with these is retried by one sequential reader
_FALLBACK_ERRORS = (msgspec.DecodeError, _SplitError, AssertionError, OSError)


class _ReadAhead:
    """A file's blocks, read (for gzip: decompressed) up to ``depth`` blocks ahead by a
    helper thread. zlib and the C scanner both release the GIL, so a gzipped trace is
    inflated on one core while the previous block is scanned on another. ``consumed``:
    the bytes handed out so far (where a plain ``fh.tell()`` would be). ``close()`` stops
    the helper; call it before the file closes."""

    def __init__(self, fh: io.BufferedIOBase, depth: int = 2) -> None:
        self.consumed = 0
        self._queue: queue.Queue[tuple[bytes, Optional[BaseException]]] = queue.Queue(depth)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._produce, args=(fh,), daemon=True,
                                        name="nsbridge-read-ahead")
        self._thread.start()

    def _produce(self, fh: io.BufferedIOBase) -> None:
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


def _consume(buffer: bytes, columns: EventColumns, split: bool = True) -> bytes:
    """Decode the complete events at the front of ``buffer``; return the rest. A batch
    that fails at a byte before its end moves the next try before that byte. A large
    batch the scanner declines is read BLOCK bytes at a time (with ``split``), so msgspec
    decodes only the blocks that need it."""
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
        if split and cut + 1 > 2 * BLOCK:
            return _consume_blocks(buffer, columns)
        failed_at = _decode_batch(b"[" + buffer[:cut + 1] + b"]", columns)
        if failed_at is None:
            return buffer[buffer.index(b"{", cut + 1):]
        end = min(end, failed_at - 1)   # "[" came first: byte k of the batch is k - 1 here
    return buffer


def _consume_blocks(buffer: bytes, columns: EventColumns) -> bytes:
    """``_consume`` of ``buffer`` BLOCK bytes at a time, as the sequential reader reads."""
    pending = b""
    for at in range(0, len(buffer), BLOCK):
        pending = _consume(pending + buffer[at:at + BLOCK], columns, split=False)
    return pending


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


def _decode_leniently(data: bytes, exc: Union[msgspec.DecodeError, UnicodeDecodeError],
                      columns: EventColumns) -> Optional[int]:
    """A batch msgspec refuses for what Python's json reads (``NaN``, ``Infinity``, a lone
    surrogate escape) or for bytes that are not UTF-8 (read as U+FFFD): decoded by the
    stdlib, so only the events holding odd values are skipped later. A batch with torch's
    bare double quotes in a string is decoded once they are escaped (parse._quotes). Else
    the failing byte."""
    if isinstance(exc, UnicodeDecodeError):
        at = exc.start
    else:
        at = _error_offset(exc, len(data))
        if "surrogate" not in str(exc) and not _NON_FINITE.match(data, at):
            repaired = repair_quotes(data) if "truncated" not in str(exc) else data
            if repaired == data or _decode_batch(repaired, columns) is not None:
                return at
            return None
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
    """The trace's top-level keys (NaN and Infinity read as the stdlib reads them, torch's
    bare double quotes escaped)."""
    try:
        value = _GENERIC.decode(data)
    except msgspec.DecodeError:
        try:
            value = json.loads(repair_quotes(data))
        except ValueError:
            raise msgspec.DecodeError("the keys around traceEvents are not valid JSON") from None
    return value if isinstance(value, dict) else {}
