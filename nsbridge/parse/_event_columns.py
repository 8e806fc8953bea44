"""Trace events -> EVENTS columns, chunk by chunk, without keeping an object per event.

Both readers (the streaming msgspec one and the stdlib fallback) hand batches of events to
``EventColumns``: columns from the C scanner (``add_scanned``, parse/_scan.c), msgspec
structs (``add_records``) or decoded dicts (``add_dicts``). Each batch becomes numpy arrays
at once; strings are dictionary-encoded against one table for the whole file, so a name
seen a million times is stored once. ``finish()`` returns the EVENTS frame
(nsbridge.schema). All three ways give identical frames; tests hold them to it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import msgspec
import numpy as np

from .. import schema as S

if TYPE_CHECKING:   # imported where a frame is built: reading starts before pandas loads
    import pandas as pd

CAT_ALIASES = {"runtime": S.CUDA_RUNTIME, "driver": S.CUDA_DRIVER, "memcpy": S.MEMCPY,
               "memset": S.MEMSET}
DROP_CATS = {"trace", "overhead", "ac2g", "async_cpu_to_gpu", "async_gpu", "fwdbwd"}
_ARGS, _CAT, _DIMS, _KERNEL_FILE, _NAME, _PH, _PID, _STRIDES, _TID, _TS, _TYPES = (
    attrgetter(a) for a in ("args", "cat", "dims", "kernel_file", "name", "ph", "pid",
                            "strides", "tid", "ts", "types"))
_STRING_COLS = (S.CAT, S.NAME, S.PH, S.PID, S.TID, S.INPUT_DIMS, S.INPUT_TYPES,
                S.INPUT_STRIDES, S.KERNEL_FILE, S.LAUNCH)
_NUMBER_COLS = (S.TS, S.DUR, S.EXT_ID, S.CORRELATION, S.BYTES, S.DEVICE, S.TOTAL_ALLOCATED,
                S.TOTAL_RESERVED, S.ADDR)
# A timestamp or duration at or beyond 2**53 us (about 285 years) is not a time: no float
# holds it to the microsecond, and ns conversions overflow int64
TIME_LIMIT_US = float(2 ** 53)
_SIZE_COLS = (S.BYTES, S.TOTAL_ALLOCATED, S.TOTAL_RESERVED)

# why events are skipped or repaired (EventColumns.skipped keys; report notes quote them)
NOT_AN_OBJECT = "entries of traceEvents that are not JSON objects skipped"
NO_PHASE = "events without a phase (\"ph\") skipped"
NO_TIMESTAMP = ("events without a usable timestamp (missing, not a number, or out of range) "
                "skipped")
NO_DURATION = ("complete events without a usable duration (missing, negative, not a number "
               "or out of range) counted as 0 µs")
NO_SIZE = "byte counts of 8 PiB or more read as unknown"

# a numeric column of a batch: values as decoded, or already an array (add_records)
Numbers = Union[list, np.ndarray]


class EventColumns:
    """Accumulates event batches as arrays; strings share one dictionary per file."""

    def __init__(self) -> None:
        self._strings: dict[Any, int] = {None: 0}
        self._codes: dict[str, list[np.ndarray]] = {c: [] for c in _STRING_COLS}
        self._numbers: dict[str, list[np.ndarray]] = {c: [] for c in _NUMBER_COLS}
        self._cat_cache: dict[Any, Any] = {}
        self._scanned_codes: dict[str, dict[bytes, int]] = {c: {} for c in SCANNED_STRINGS}
        self.skipped: Counter[str] = Counter()   # reason -> events skipped or repaired

    def add_dicts(self, events: Sequence[Any]) -> None:
        """A batch of decoded JSON events (dicts; anything else is skipped and counted)."""
        objects = [e for e in events if isinstance(e, dict)]
        if len(objects) < len(events):
            self.skipped[NOT_AN_OBJECT] += len(events) - len(objects)
        phaseless = sum(1 for e in objects if not isinstance(e.get("ph"), str))
        if phaseless:
            self.skipped[NO_PHASE] += phaseless
        rows = [e for e in objects if e.get("ph") in ("X", "i")]
        args = [a if isinstance(a := e.get("args"), dict) else {} for e in rows]
        self._add(
            cats=[e.get("cat") for e in rows], names=[e.get("name") for e in rows],
            phs=[e["ph"] for e in rows], pids=[e.get("pid") for e in rows],
            tids=[e.get("tid") for e in rows], ts=[e.get("ts") for e in rows],
            durs=[e.get("dur") if e["ph"] == "X" else 0 for e in rows],
            exts=[a.get("external id") if a.get("External id") is None else a["External id"]
                  for a in args],
            corrs=[a.get("correlation") for a in args],
            dims=[None if a.get("Input Dims") is None
                  else json.dumps(a["Input Dims"], separators=(",", ":")) for a in args],
            types=[None if a.get("Input type") is None
                   else json.dumps(a["Input type"], separators=(",", ":")) for a in args],
            strides=[None if a.get("Input Strides") is None
                     else json.dumps(a["Input Strides"], separators=(",", ":")) for a in args],
            nbytes=[a.get("bytes", a.get("Bytes")) for a in args],
            devices=[a.get("device", a.get("Device Id")) for a in args],
            files=[a.get("kernel_file") for a in args],
            allocated=[a.get("Total Allocated") for a in args],
            reserved=[a.get("Total Reserved") for a in args],
            addrs=[a.get("Addr") for a in args],
            launches=[None if a.get("grid") is None else launch_text(
                json.dumps(a["grid"], separators=(",", ":")),
                json.dumps(a.get("block"), separators=(",", ":")),
                a.get("registers per thread"), a.get("shared memory")) for a in args])

    def add_records(self, events: Sequence[Any], unset: Any) -> None:
        """A batch of msgspec structs (parse._stream.Event); ``unset`` marks absent fields
        that fall back to another key. Absent numbers arrive as NaN, so each field is
        pulled out of the batch by a C-level getter."""
        rows = [e for e in events if e.ph == "X" or e.ph == "i"]
        args = list(map(_ARGS, rows))
        number = lambda field: _numeric(list(map(attrgetter(field), args)))  # noqa: E731
        ext = number("ext")
        self._add(
            cats=list(map(_CAT, rows)), names=list(map(_NAME, rows)), phs=list(map(_PH, rows)),
            pids=list(map(_PID, rows)), tids=list(map(_TID, rows)), ts=list(map(_TS, rows)),
            durs=[e.dur if e.ph == "X" else 0 for e in rows],
            exts=np.where(np.isnan(ext), number("ext_lower"), ext),
            corrs=number("correlation"),
            dims=list(map(bytes, map(_DIMS, args))), types=list(map(bytes, map(_TYPES, args))),
            strides=list(map(bytes, map(_STRIDES, args))),
            nbytes=[a.Bytes if a.nbytes is unset else a.nbytes for a in args],
            devices=[a.device_id if a.device is unset else a.device for a in args],
            files=list(map(_KERNEL_FILE, args)), allocated=number("allocated"),
            reserved=number("reserved"), addrs=number("addr"),
            launches=[_launch(a) if a.grid else None for a in args], raw_json=True)

    def _add(self, *, cats: list, names: list, phs: list, pids: list, tids: list, ts: list,
             durs: list, exts: Numbers, corrs: Numbers, dims: list, types: list,
             strides: list, nbytes: list,
             devices: list, files: list, allocated: Numbers, reserved: Numbers,
             addrs: Numbers, launches: list, raw_json: bool = False) -> None:
        """One batch's columns; with ``raw_json`` dims, types and strides are the raw JSON bytes
        (b"" when absent), converted to text once per distinct value."""
        encode = self._encode
        json_text = _raw_bytes_text if raw_json else _same
        self._store({S.CAT: encode(cats, self._category), S.NAME: encode(names, _name),
                     S.PH: encode(phs, _same), S.PID: encode(pids, str),
                     S.TID: encode(tids, str), S.INPUT_DIMS: encode(dims, json_text),
                     S.INPUT_TYPES: encode(types, json_text),
                     S.INPUT_STRIDES: encode(strides, json_text),
                     S.KERNEL_FILE: encode(files, _text), S.LAUNCH: encode(launches, _same),
                     S.TS: _numeric(ts), S.DUR: _numeric(durs),
                     S.EXT_ID: _numeric(exts), S.CORRELATION: _numeric(corrs),
                     S.BYTES: _numeric(nbytes), S.DEVICE: _numeric(devices),
                     S.TOTAL_ALLOCATED: _numeric(allocated),
                     S.TOTAL_RESERVED: _numeric(reserved), S.ADDR: _numeric(addrs)})

    def add_scanned(self, scanned: tuple[int, tuple[bytes, ...], tuple[bytes, ...],
                                         tuple[list[bytes], ...]]) -> bool:
        """A batch as the C scanner gives it (parse/_scan.c: rows, a float64 buffer per
        SCANNED_NUMBERS column, an int32 code buffer and the distinct raw JSON texts per
        SCANNED_STRINGS column). Each distinct text becomes its value as the msgspec
        structs would hold it, then goes through the same conversion as in add_records;
        the file's table remembers the texts already seen. False, with nothing added, when
        a text does not decode (the caller then reads the batch another way)."""
        rows, numbers, codes, distinct = scanned
        batch: dict[str, np.ndarray] = {}
        try:
            for col, local, texts in zip(SCANNED_STRINGS, codes, distinct):
                batch[col] = self._recode(col, np.frombuffer(local, dtype=np.int32), texts)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return False
        for col, values in zip(SCANNED_NUMBERS, numbers):
            batch[col] = np.frombuffer(values, dtype=np.float64)
        self._store(batch)
        return True

    def _recode(self, col: str, local: np.ndarray, texts: list[bytes]) -> np.ndarray:
        """Per-batch codes (-1: absent) of a scanned column as codes of the file's table."""
        seen = self._scanned_codes[col]
        ids = np.empty(len(texts) + 1, dtype=np.int32)
        for i, text in enumerate(texts):
            code = seen.get(text)
            if code is None:
                code = seen[text] = self._strings.setdefault(
                    _SCANNED_VALUE[col](self, text), len(self._strings))
            ids[i] = code
        missing = _SCANNED_VALUE[col](self, None)
        ids[-1] = self._strings.setdefault(missing, len(self._strings))
        return ids[local]

    def _store(self, batch: dict[str, np.ndarray]) -> None:
        """Keep one batch's columns, less the rows of dropped categories."""
        keep = batch[S.CAT] != self._strings[None]   # dropped categories normalise to None
        everything = bool(keep.all())
        for col, values in batch.items():
            store = self._codes if col in self._codes else self._numbers
            store[col].append(values if everything else values[keep])

    def _encode(self, values: list, convert: Callable[[Any], Any]) -> np.ndarray:
        """Codes into the file's string table. Hashing runs in pandas (C); ``convert``
        (str, ...) runs once per distinct value of the batch, not once per event."""
        import pandas as pd

        try:
            local, uniques = pd.factorize(np.fromiter(values, dtype=object, count=len(values)))
        except TypeError:   # an object or array where a string belongs: keyed by its text
            local, uniques = pd.factorize(np.array([_hashable(v) for v in values], dtype=object))
        strings = self._strings
        ids = np.fromiter((strings.setdefault(convert(u), len(strings)) for u in uniques),
                          dtype=np.int32, count=len(uniques))
        missing = strings.setdefault(convert(None), len(strings))
        if not len(ids):
            return np.full(len(values), missing, dtype=np.int32)
        return np.where(local >= 0, ids[local], missing).astype(np.int32)

    def _category(self, raw: Any) -> Any:
        """Lower-case, alias-folded category, or None for categories that are dropped."""
        cached = self._cat_cache.get(raw, _MISSING)
        if cached is _MISSING:
            cat = str(raw or "").lower()
            cached = None if cat in DROP_CATS else CAT_ALIASES.get(cat, cat)
            self._cat_cache[raw] = cached
        return cached

    def export(self) -> tuple[list, dict[str, np.ndarray], dict[str, np.ndarray], Counter]:
        """(string table, string-column codes, numeric columns, skipped): a part read
        elsewhere."""
        table = [None] * len(self._strings)
        for value, code in self._strings.items():
            table[code] = value
        join = lambda parts, dtype: np.concatenate(parts) if parts else np.zeros(0, dtype)  # noqa: E731
        return (table, {c: join(v, np.int32) for c, v in self._codes.items()},
                {c: join(v, np.float64) for c, v in self._numbers.items()}, self.skipped)

    def adopt(self, other: EventColumns) -> None:
        """Take over ``other``'s batches, string table and counts; this one must hold none
        yet. The parallel reader keeps the range it read itself this way, without the
        copies an export and a merge make (0.1 s at 3M events)."""
        if len(self._strings) > 1 or any(self._numbers.values()):
            raise ValueError("adopt() into columns that already hold events")
        self._strings, self._codes, self._numbers = other._strings, other._codes, other._numbers
        self._cat_cache, self._scanned_codes = other._cat_cache, other._scanned_codes
        self.skipped.update(other.skipped)

    @property
    def batches(self) -> int:
        """Batches stored so far (each batch adds one array to every column)."""
        return len(self._numbers[S.TS])

    def codes_for(self, other: EventColumns) -> Optional[np.ndarray]:
        """The codes ``other``'s strings have in this table (adding those it lacks), or
        None when they are the same codes (``other``'s table is this one's so far)."""
        table = [None] * len(other._strings)
        for value, code in other._strings.items():
            table[code] = value
        strings = self._strings
        mapping = np.array([strings.setdefault(v, len(strings)) for v in table], dtype=np.int32)
        return None if np.array_equal(mapping, np.arange(len(mapping))) else mapping

    def append_batches(self, other: EventColumns, first: int, last: int,
                       mapping: Optional[np.ndarray]) -> None:
        """Append ``other``'s batches [first, last) (a byte range another thread read),
        their strings re-coded by ``mapping`` (codes_for; None: already this table's).
        Its skipped counts are not taken: add them once, not per range."""
        for col, parts in other._codes.items():
            self._codes[col].extend(parts[first:last] if mapping is None
                                    else [mapping[p] for p in parts[first:last]])
        for col, parts in other._numbers.items():
            self._numbers[col].extend(parts[first:last])

    def merge(self, part: tuple[list, dict[str, np.ndarray], dict[str, np.ndarray],
                                Counter]) -> None:
        """Append an exported part, re-coding its strings into this table."""
        table, codes, numbers, skipped = part
        self.skipped.update(skipped)
        strings = self._strings
        mapping = np.array([strings.setdefault(v, len(strings)) for v in table], dtype=np.int32)
        for col, values in codes.items():
            self._codes[col].append(mapping[values] if len(values) else values)
        for col, values in numbers.items():
            self._numbers[col].append(values)

    def finish(self) -> pd.DataFrame:
        """The EVENTS frame. Rows without a usable timestamp are dropped, durations that
        are not usable become 0; both are counted in ``skipped``. The batches are let go
        column by column as they are joined (the object is spent afterwards), so a large
        trace is not held twice; the heap's free pages (the reader's buffers, then the
        batches) are given back before and after."""
        import pandas as pd

        release_free_memory()
        table = np.empty(len(self._strings), dtype=object)
        for value, code in self._strings.items():
            table[code] = value
        columns: dict[str, Any] = {}
        for col in S.EVENT_COLUMNS:
            if col in self._codes:
                parts = self._codes.pop(col)
                codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
                columns[col] = _categorical(codes, table)
            else:
                parts = self._numbers.pop(col)
                columns[col] = np.concatenate(parts) if parts else np.zeros(0)
            del parts
        release_free_memory()
        for col in _SIZE_COLS:
            huge = np.abs(columns[col]) >= S.SIZE_LIMIT_BYTES
            if huge.any():
                self.skipped[NO_SIZE] += int(huge.sum())
                columns[col] = np.where(huge, np.nan, columns[col])
        ts, dur = columns[S.TS], columns[S.DUR]
        usable = np.isfinite(ts) & (np.abs(ts) < TIME_LIMIT_US)
        bad_dur = usable & ~(np.isfinite(dur) & (dur >= 0) & (dur < TIME_LIMIT_US))
        if not usable.all():
            self.skipped[NO_TIMESTAMP] += int((~usable).sum())
        if bad_dur.any():
            self.skipped[NO_DURATION] += int(bad_dur.sum())
            columns[S.DUR] = np.where(bad_dur, 0.0, dur)
        frame = pd.DataFrame(columns, copy=False)   # one block per column: no 2-D copy
        if not usable.all():
            frame = frame[usable].reset_index(drop=True)
            for col in _STRING_COLS:
                frame[col] = frame[col].cat.remove_unused_categories()
        return frame


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim; elsewhere
    nothing). The batches are many small arrays on the heap; freed once joined into one
    large array each, their pages would stay counted in the process until it ends. Before
    and after the columns are joined, not after each: that cost 0.07 s at 1M events (each
    column's new arrays faulted in afresh) for no lower peak once the reader threads read
    in blocks of THREAD_BLOCK."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Optional[Callable[[int], int]]:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim   # type: ignore[no-any-return]
    except (OSError, AttributeError):   # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def _categorical(codes: np.ndarray, table: np.ndarray) -> pd.Categorical:
    """String-table codes as a Categorical of the values used, sorted, None as missing
    (what ``astype("category")`` gives) without hashing a string per row: a column of a
    million rows holds a few thousand names, and every later groupby or string test works
    on the small codes, not on a pointer per row."""
    import pandas as pd

    used = np.flatnonzero(np.bincount(codes, minlength=len(table)))
    values = table[used]
    present = np.array([v is not None for v in values], dtype=bool)
    order = np.argsort(values[present].astype(str), kind="stable")
    recode = np.full(len(table), -1, dtype=np.int32)
    recode[used[present][order]] = np.arange(len(order), dtype=np.int32)
    return pd.Categorical.from_codes(np.take(recode, codes),   # take: no fancy-index setup
                                     categories=list(values[present][order]))


def _launch(args: Any) -> Optional[str]:
    """launch_text of a msgspec Args struct (None when its grid is a JSON null)."""
    return _launch_of(bytes(args.grid), bytes(args.block), args.registers, args.smem)


@lru_cache(maxsize=1 << 12, typed=True)   # typed: registers 32 and 32.0 print differently
def _launch_of(grid: bytes, block: bytes, registers: Any, smem: Any) -> Optional[str]:
    """_launch for one distinct configuration (kernels repeat a few of them)."""
    grid_text = raw_text(grid)
    return None if grid_text is None else launch_text(grid_text, raw_text(block) or "null",
                                                      registers, smem)


def _decoded(text: Optional[bytes]) -> Any:
    """A raw JSON value as msgspec decodes it (None for none)."""
    return None if text is None else _JSON.decode(text)


def _scanned_launch(key: Optional[bytes]) -> Optional[str]:
    """A launch configuration from the scanner's key: the raw texts of grid, block,
    registers and shared memory, NUL-separated (empty: absent)."""
    if key is None:
        return None
    grid, block, registers, smem = key.split(b"\0")
    return _launch_of(grid, block, _decoded(registers or None), _decoded(smem or None))


_JSON = msgspec.json.Decoder()
# the scanner's columns, in its order (parse/_scan.c), and how a distinct raw text (None:
# absent) becomes the value stored in the file's string table
SCANNED_STRINGS = (S.CAT, S.NAME, S.PH, S.PID, S.TID, S.INPUT_DIMS, S.INPUT_TYPES,
                   S.INPUT_STRIDES, S.KERNEL_FILE, S.LAUNCH)
SCANNED_NUMBERS = (S.TS, S.DUR, S.EXT_ID, S.CORRELATION, S.BYTES, S.DEVICE,
                   S.TOTAL_ALLOCATED, S.TOTAL_RESERVED, S.ADDR)
_SCANNED_VALUE: dict[str, Callable[[EventColumns, Optional[bytes]], Any]] = {
    S.CAT: lambda self, text: self._category(_decoded(text)),
    S.NAME: lambda self, text: _name(_decoded(text)),
    S.PH: lambda self, text: _decoded(text),
    S.PID: lambda self, text: str(_decoded(text)),
    S.TID: lambda self, text: str(_decoded(text)),
    S.INPUT_DIMS: lambda self, text: _raw_bytes_text(text),
    S.INPUT_TYPES: lambda self, text: _raw_bytes_text(text),
    S.INPUT_STRIDES: lambda self, text: _raw_bytes_text(text),
    S.KERNEL_FILE: lambda self, text: _text(_decoded(text)),
    S.LAUNCH: lambda self, text: _scanned_launch(text),
}


def launch_text(grid: str, block: str, registers: Any, smem: Any) -> str:
    """A kernel's launch configuration in one string (dictionary-encoded like a name)."""
    return (f"grid {grid} block {block}" + (f" regs {registers}" if registers is not None
                                            else "")
            + (f" smem {smem}" if smem is not None else ""))


def _same(value: Any) -> Any:
    return value


def _text(value: Any) -> Any:
    """A string value as text (None stays None): a path written as a number still reads."""
    return None if value is None else _name(value)


def _name(value: Any) -> str:
    """A name as text; a lone surrogate (from a ``\\udcxx`` escape) becomes U+FFFD, so every
    report can be written as UTF-8."""
    text = "" if value is None else str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, type(None))) else json.dumps(
        value, default=str)


class _Missing:
    """Marks a field absent from an event (distinct from an explicit null)."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


def _numeric(values: Numbers) -> np.ndarray:
    """Numbers as float64; anything that is not a number a float can hold is NaN."""
    try:
        numbers = np.array(values, dtype=np.float64)
        if numbers.ndim == 1:   # a batch whose values are all equal-length lists is not
            return numbers
    except (TypeError, ValueError, OverflowError):  # strings, nested values, huge integers
        pass
    return np.array([_number(v) for v in values], dtype=np.float64)


def _number(value: Any) -> float:
    """One value as _numeric reads it: a number (a bool as 0/1, numeric text too), else
    NaN."""
    try:
        return float(value) if isinstance(value, (int, float, str)) else math.nan
    except (ValueError, OverflowError):
        return math.nan


def _raw_bytes_text(data: Optional[bytes]) -> Optional[str]:
    """raw_text of a Raw value's bytes (None: the batch had no value to convert)."""
    return None if data is None else raw_text(data)


def raw_text(raw: Any) -> Optional[str]:
    """A msgspec.Raw JSON value as the dict reader writes it (``json.dumps`` with compact
    separators); None for an absent field (empty) or a JSON null. Values repeat (shapes,
    dtype lists), so each distinct one is converted once."""
    text = bytes(raw)
    if not text or text == b"null":
        return None
    return _compact_json(text)


@lru_cache(maxsize=1 << 16)
def _compact_json(text: bytes) -> str:
    return json.dumps(json.loads(text), separators=(",", ":"))


def readable_events(doc: Any) -> list[dict[str, Any]]:
    """The events of a decoded trace (an object with ``traceEvents``, or Chrome's bare
    array) that pass the reader's rules (``readable_event``). For consumers of the raw
    events (the merged trace), so they read what the EVENTS frame read."""
    raw = doc.get("traceEvents") if isinstance(doc, dict) else doc
    out = []
    for event in raw if isinstance(raw, list) else []:
        event = readable_event(event)
        if event is not None:
            out.append(event)
    return out


def readable_event(event: Any) -> Optional[dict[str, Any]]:
    """The event as the reader reads it, or None when the reader skips it: complete and
    instant events keep a finite ``ts`` (a float) and a usable ``dur`` (else 0, as the
    reader counts it), ``args`` is an object, ``name`` and ``cat`` are strings. Other
    phases pass as they are.

    An event already in that form (nearly all of a real trace) is the input's own dict,
    not a copy; one that needed a repair is a repaired copy. Either way the input is not
    changed, and callers must not change an event in place either."""
    if not isinstance(event, dict) or not isinstance(event.get("ph"), str):
        return None
    if fields_as_read(event["ph"], event.get("name", ""), event.get("cat", ""),
                      event.get("ts"), event.get("dur"),
                      type(event.get("args", _NO_ARGS)) is dict):
        return event
    return _repaired(event)


def fields_as_read(ph: str, name: Any, cat: Any, ts: Any, dur: Any, args_object: bool) -> bool:
    """Whether an event with these fields needs no repair (``_repaired`` would give an
    equal event): checked on the common types only (a float ``ts``, a positive float
    ``dur``); anything else says no."""
    if not args_object or type(name) is not str or type(cat) is not str:
        return False
    if ph != "X" and ph != "i":
        return True
    if type(ts) is not float or not -TIME_LIMIT_US < ts < TIME_LIMIT_US:
        return False
    return ph == "i" or (type(dur) is float and 0.0 < dur < TIME_LIMIT_US)


_NO_ARGS: dict[str, Any] = {}


def _repaired(event: dict[str, Any]) -> Optional[dict[str, Any]]:
    """A copy of the event in the reader's form, or None when the reader skips it."""
    event = dict(event)
    if not isinstance(event.get("args", {}), dict):
        del event["args"]
    for key in ("name", "cat"):
        if key in event and not isinstance(event[key], str):
            event[key] = _name(event[key])
    if event["ph"] in ("X", "i"):
        ts = _time(event.get("ts"))
        if ts is None:
            return None
        event["ts"] = ts
        if event["ph"] == "X":
            event["dur"] = _time(event.get("dur"), nonnegative=True) or 0.0
    return event


def _time(value: Any, nonnegative: bool = False) -> Any:
    """``value`` as a usable time in us (a float), or None."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if isinstance(value, bool) or not math.isfinite(number) or abs(number) >= TIME_LIMIT_US:
        return None
    return None if nonnegative and number < 0 else number
