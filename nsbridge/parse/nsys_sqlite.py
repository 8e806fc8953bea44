"""nsys SQLite export -> documented frames (nsys 2022.4 to 2026 schemas).

Tables are created lazily by nsys (no rows, no table), and column sets differ between
releases, so every query is built from the columns the file has. All times are integer
nanoseconds as nsys writes them; ``pid``/``tid`` are decoded from ``globalTid``
(``pid = (gtid >> 24) & 0xFFFFFF``, ``tid = gtid & 0xFFFFFF``).

Frames (columns):

- ranges: start, end, dur, name (text or its registered string), domain ('' = default),
  style ('push_pop' | 'start_end'), global_tid, pid, tid
- kernels: start, end, dur, device, stream, correlation, global_pid, name (demangled),
  short_name, graph_node (the CUDA graph node a replay ran it as, -1 for none; nsys fills
  it when graphs are traced node by node)
- graph_nodes: start, global_tid, graph_node, original_node (-1 for none): nsys's "Graph
  Node Creation" events. A node made while a stream was captured is created inside the op
  that launched its kernel; instantiating the graph makes new nodes naming that original
- runtime: start, end, dur, global_tid, correlation, name (without the `_v7000` suffix),
  api ('runtime' | 'driver')
- memcpy / memset: start, end, dur, device, stream, correlation, global_pid, bytes, kind
- gpu_syncs: start, end, dur, device, global_pid, kind (CUPTI synchronization records)
- osrt: start, end, dur, global_tid, name (OS runtime calls)
- threads: global_tid, name
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from .. import schema as S
from ..guard.confine import readable
from ..errors import NsysExportError, TraceNotFoundError

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
GRAPH_NODES = "CUDA_GRAPH_NODE_EVENTS"
GRAPH_NODE_COLUMNS = ["start", "global_tid", "graph_node", "original_node"]
PUSH_POP, START_END, DOMAIN_CREATE = 59, 60, 75
_CHUNK = 250_000     # rows per group_concat query (several per thread on a large table)
_MAX_THREADS = 4
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}


@dataclass
class NsysExport:
    """Frames from one nsys SQLite export (see the module docstring)."""

    path: Path
    product_version: Optional[str]
    schema_version: Optional[str]
    tables: set[str]
    ranges: pd.DataFrame
    kernels: pd.DataFrame
    runtime: pd.DataFrame
    memcpy: pd.DataFrame
    memset: pd.DataFrame
    gpu_syncs: pd.DataFrame
    osrt: pd.DataFrame
    threads: pd.DataFrame
    graph_nodes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=GRAPH_NODE_COLUMNS))
    notes: list[str] = field(default_factory=list)


def read_nsys_sqlite(path: str | Path) -> NsysExport:
    """Read an nsys SQLite export.

    Raises:
        TraceNotFoundError: the file does not exist.
        NsysExportError: not SQLite, or none of the tables nsbridge reads (NVTX, kernels,
            runtime calls) is there; the message names the missing tables and the nsys
            version that wrote the file.
    """
    path = readable(path)
    if not path.is_file():
        raise TraceNotFoundError(f"nsys export {path} does not exist.")
    try:
        conn = _connect(path)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:   # a damaged schema: bytes
        raise NsysExportError(f"{path} is not an SQLite database ({exc}); export the report "
                              "with `nsys export --type sqlite REPORT.nsys-rep`.") from exc
    try:
        version, schema = _versions(conn, tables)
        needed = {NVTX, KERNEL, RUNTIME}
        if not needed & tables or "StringIds" not in tables:
            missing = sorted((needed | {"StringIds"}) - tables)
            raise NsysExportError(
                f"{path} is SQLite but not a usable nsys export: it lacks {', '.join(missing)} "
                f"(written by nsys {version or 'of unknown version'}, schema "
                f"{schema or 'unknown'}). Capture with `-t cuda,nvtx` and export with "
                "`nsys export --type sqlite`.")
        strings, duplicated = _string_ids(conn)
        longest = _capture_ns(conn, tables)
        export = NsysExport(
            path=path, product_version=version, schema_version=schema, tables=tables,
            ranges=_ranges(conn, tables, strings), kernels=_kernels(conn, tables, strings),
            runtime=_runtime(conn, tables, strings),
            memcpy=_copies(conn, tables, MEMCPY, "copyKind"),
            memset=_copies(conn, tables, MEMSET, None),
            gpu_syncs=_gpu_syncs(conn, tables), osrt=_osrt(conn, tables, strings),
            threads=_threads(conn, tables, strings), graph_nodes=_graph_nodes(conn, tables))
    except (sqlite3.DatabaseError, pd.errors.DatabaseError, UnicodeDecodeError) as exc:
        raise NsysExportError(f"{path} could not be read as an nsys export: {exc}. Export "
                              "it again with `nsys export --type sqlite`, or use the "
                              ".nsys-rep.") from None
    except MissingColumn as bad:
        raise NsysExportError(f"{path} is not an nsys export nsbridge reads: table {bad.table} "
                              f"has no column {bad.column} (written by nsys "
                              f"{version or 'of unknown version'}). Export it again with "
                              "`nsys export --type sqlite`, or use the .nsys-rep.") from None
    except NotIntegers as bad:
        where = _first_not_integer(conn, bad.table, bad.first_rowid)
        raise NsysExportError(f"{path} is damaged: in table {bad.table}, {where}, where nsys "
                              "writes integers. Export it again with `nsys export --type "
                              "sqlite`, or use the .nsys-rep.") from None
    finally:
        conn.close()
    if duplicated:
        export.notes.append(f"{path.name}: StringIds has {duplicated} repeated id(s); the "
                            "first value of each is used")
    _drop_impossible(export, longest)
    for table, frame in ((NVTX, export.ranges), (KERNEL, export.kernels)):
        if frame.empty:
            export.notes.append(f"{table} has no rows in {path.name}")
    return export


def _string_ids(conn: sqlite3.Connection) -> tuple[pd.Series, int]:
    """StringIds as id -> text (the first of a repeated id), and how many ids repeated."""
    _require(conn, "StringIds", "id", "value")
    table = pd.read_sql("SELECT id, value FROM StringIds", conn)
    ids = pd.to_numeric(table["id"], errors="coerce")
    keep = ids.notna() & ~ids.duplicated()
    text = [_text(v) for v in table["value"][keep]]   # a blob in a damaged file: its text
    strings = pd.Series(text, index=ids[keep].astype("int64").to_numpy(), dtype=object)
    return strings, int(ids.duplicated().sum())


# the longest a row may last when the export does not say how long the capture ran (in ns:
# 2**53 ns is 104 days, and every duration below it is exact in a float)
_LONGEST_NS = float(2 ** 53)


def _capture_ns(conn: sqlite3.Connection, tables: set[str]) -> float:
    """How long the capture ran (ANALYSIS_DETAILS), the bound on any row's duration; the
    generic _LONGEST_NS when the export does not say or says something unusable."""
    if "ANALYSIS_DETAILS" not in tables or "duration" not in _columns(conn, "ANALYSIS_DETAILS"):
        return _LONGEST_NS
    row = conn.execute("SELECT max(duration) FROM ANALYSIS_DETAILS").fetchone()
    value = row[0] if row else None
    return float(value) if isinstance(value, int) and 0 < value < _LONGEST_NS else _LONGEST_NS


def _drop_impossible(export: NsysExport, longest: float) -> None:
    """Rows with impossible times (a damaged export) are left out, with a note: ending
    before they start, or lasting longer than the capture ran (``longest`` ns). Kept, one
    would make every sum and busy share wrong (a wrapped int64 duration: "GPU busy
    -6574773277101 %"). Compared on start and end, not on ``dur``, which can wrap."""
    for name in ("ranges", "kernels", "runtime", "memcpy", "memset", "gpu_syncs", "osrt"):
        frame = getattr(export, name)
        if frame.empty or "start" not in frame or "end" not in frame:
            continue
        start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
        impossible = (end < start) | (end.astype(np.float64) - start.astype(np.float64)
                                      > longest)
        if impossible.any():
            setattr(export, name, frame[~impossible].reset_index(drop=True))
            export.notes.append(f"{export.path.name}: {int(impossible.sum())} {name} row(s) "
                                "end before they start or last longer than the capture ran "
                                "(a damaged export) and were left out")


def _connect(path: Path, check_same_thread: bool = True) -> sqlite3.Connection:
    """A read-only connection whose text is decoded leniently: a damaged string shows
    U+FFFD where its bytes are not UTF-8 instead of failing the read."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                           check_same_thread=check_same_thread)
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _versions(conn: sqlite3.Connection, tables: set[str]) -> tuple[Optional[str], Optional[str]]:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables:
            meta = dict(conn.execute(f"SELECT name, value FROM {table}").fetchall())
            return meta.get("EXPORT_PRODUCT_VERSION"), meta.get("EXPORT_SCHEMA_VERSION")
    return None, None


def _split_tid(frame: pd.DataFrame, col: str = "global_tid") -> pd.DataFrame:
    gtid = frame[col].fillna(0).astype("int64").to_numpy()
    frame["pid"] = ((gtid >> 24) & 0xFFFFFF).astype(np.int32)
    frame["tid"] = (gtid & 0xFFFFFF).astype(np.int32)
    return frame


def _ranges(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    """NVTX ranges as arrays; name/domain/style are categoricals, so ten million ranges cost
    a few hundred MB, not a Python object per row. Numbers come through SQLite's
    group_concat in rowid slices and numpy's text parser (about 3x faster than fetching
    row tuples); inline ``text`` values, rare in Python/PyTorch captures that register
    their strings, are fetched separately by rowid."""
    cols = ["start", "end", "dur", "name", "domain", "style", "global_tid", "pid", "tid"]
    if NVTX not in tables:
        return pd.DataFrame(columns=cols)
    _require(conn, NVTX, "start", "end", "eventType")
    have = _columns(conn, NVTX)
    text_id = "coalesce(textId, -1)" if "textId" in have else "-1"
    domain_id = "coalesce(domainId, 0)" if "domainId" in have else "0"
    texts: dict[int, str] = {}   # rowid -> inline text of a range
    domain_names: dict[int, str] = {}
    if "text" in have:   # one scan for both: a domain's name is its create event's text
        for rowid, text, etype, domain in conn.execute(
                f"SELECT rowid, text, eventType, {domain_id} FROM {NVTX} WHERE text IS NOT NULL "
                f"AND eventType IN ({PUSH_POP}, {START_END}, {DOMAIN_CREATE})"):
            if etype == DOMAIN_CREATE:
                if type(domain) is int:     # an id of another type names no domain
                    domain_names[domain] = _text(text)
            else:
                texts[rowid] = _text(text)
    exprs = ["start", '"end"', "eventType", text_id, domain_id, "coalesce(globalTid, 0)"]
    parts = _int_slices(conn, NVTX, (["rowid"] if texts else []) + exprs,
                        f"eventType IN ({PUSH_POP}, {START_END}) AND \"end\" IS NOT NULL")
    if not parts:
        return pd.DataFrame(columns=cols)
    columns = [np.concatenate(c) for c in zip(*parts)]
    del parts
    rowid = columns.pop(0) if texts else np.zeros(0, dtype=np.int64)
    start, end, etype, text_ids, domains, gtid = columns
    names, codes = _name_codes(rowid, text_ids, texts, strings)
    domain_codes, domain_ids = pd.factorize(domains)
    domain_table = sorted({domain_names.get(int(d), "") for d in domain_ids} | {""})
    recode = np.array([domain_table.index(domain_names.get(int(d), "")) for d in domain_ids],
                      dtype=np.int32)
    frame = pd.DataFrame({
        "start": start, "end": end, "dur": end - start,
        "name": pd.Categorical.from_codes(codes, categories=names),
        "domain": pd.Categorical.from_codes(recode[domain_codes], categories=domain_table),
        "style": pd.Categorical.from_codes(np.where(etype == PUSH_POP, 0, 1).astype(np.int8),
                                           categories=["push_pop", "start_end"]),
        "global_tid": gtid}, copy=False)
    return _split_tid(frame)[cols]


def _name_codes(rowid: np.ndarray, text_ids: np.ndarray, texts: dict[int, str],
                strings: pd.Series) -> tuple[list[str], np.ndarray]:
    """(distinct names, code per range): inline text when present, else the registered one.
    ``rowid`` (ascending) is read only when some range has inline text."""
    local, uniq = pd.factorize(text_ids)
    names: dict[str, int] = {}
    ids = np.array([names.setdefault(str(strings.get(int(u), "")) if u >= 0 else "", len(names))
                    for u in uniq], dtype=np.int32)
    codes = ids[local] if len(uniq) else np.zeros(0, dtype=np.int32)
    if texts:
        keys = np.fromiter(texts.keys(), dtype=np.int64, count=len(texts))
        at = np.searchsorted(rowid, keys)
        for key, i, text in zip(keys, at, texts.values()):
            if i < len(rowid) and rowid[i] == key:
                codes[i] = names.setdefault(str(text), len(names))
    return list(names), codes


def _int_slices(conn: sqlite3.Connection, table: str, exprs: list[str],
                where: str) -> list[list[np.ndarray]]:
    """Integer expressions of the rows matching ``where``, as arrays per rowid slice in
    rowid order. Each slice is one query whose group_concat text numpy parses (about 3x
    faster than fetching row tuples); slices run on several threads, each with its own
    read-only connection, since SQLite releases the GIL while it steps through rows."""
    lo, hi = conn.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
    firsts = list(range(lo or 0, (hi or -1) + 1, _CHUNK))
    sql = (f"SELECT count(*), {', '.join(f'group_concat({e})' for e in exprs)} FROM {table} "
           f"WHERE rowid >= ? AND rowid < ? AND ({where})")
    database = next((row[2] for row in conn.execute("PRAGMA database_list")
                     if row[1] == "main"), "")
    threads = min(len(firsts), os.cpu_count() or 1, _MAX_THREADS) if database else 1
    opened: list[sqlite3.Connection] = []
    local = threading.local()

    def connection() -> sqlite3.Connection:
        """The caller's connection, or this thread's own read-only one."""
        if threads == 1:
            return conn
        own: Optional[sqlite3.Connection] = getattr(local, "conn", None)
        if own is None:
            own = local.conn = _connect(Path(database), check_same_thread=False)
            opened.append(own)
        return own

    def one_slice(first: int) -> Optional[list[np.ndarray]]:
        count, *row = connection().execute(sql, (first, first + _CHUNK)).fetchone()
        if not count:
            return None
        try:
            with warnings.catch_warnings():   # numpy warns (or raises) where it stops
                warnings.simplefilter("ignore")
                arrays = [np.fromstring(v, dtype=np.int64, sep=",") for v in row]
        except (ValueError, TypeError):
            raise NotIntegers(table, first) from None
        if any(len(a) != count for a in arrays):
            raise NotIntegers(table, first)
        return arrays

    try:
        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                found = list(pool.map(one_slice, firsts))
        else:
            found = [one_slice(first) for first in firsts]
    finally:
        for each in opened:
            each.close()
    return [part for part in found if part is not None]


class MissingColumn(Exception):
    """A table nsbridge reads lacks a column nsys always writes there."""

    def __init__(self, table: str, column: str) -> None:
        super().__init__(table, column)
        self.table, self.column = table, column


def _require(conn: sqlite3.Connection, table: str, *columns: str) -> None:
    """MissingColumn unless ``table`` has ``columns`` (a missing "end" would otherwise be
    read as the text 'end': SQLite takes an unknown double-quoted name for a string)."""
    have = _columns(conn, table)
    for column in columns:
        if column not in have:
            raise MissingColumn(table, column)


class NotIntegers(Exception):
    """A value in an integer column of an nsys table is not an integer."""

    def __init__(self, table: str, first_rowid: int) -> None:
        super().__init__(table, first_rowid)
        self.table, self.first_rowid = table, first_rowid


_INT_COLUMNS = ("start", "end", "globalTid", "globalPid", "deviceId", "streamId",
                "correlationId", "eventType", "textId", "domainId", "nameId", "demangledName",
                "shortName", "bytes", "copyKind", "eventClass", "syncType")


def _first_not_integer(conn: sqlite3.Connection, table: str, first: int) -> str:
    """Where a NotIntegers value is: 'column start of row 12 is 'abc' (text)'."""
    for column in [c for c in _INT_COLUMNS if c in _columns(conn, table)]:
        row = conn.execute(f'SELECT rowid, "{column}", typeof("{column}") FROM {table} WHERE '
                           f"rowid >= ? AND typeof(\"{column}\") NOT IN ('integer', 'null') "
                           "ORDER BY rowid LIMIT 1", (first,)).fetchone()
        if row:
            return f"column {column} of row {row[0]} is {row[1]!r} ({row[2]})"
    return f"a value in rows from {first} on is not an integer"


def _integers(frame: pd.DataFrame, table: str, columns: list[str]) -> pd.DataFrame:
    """``frame`` (read with pandas) with ``columns`` as numbers; NotIntegers where one holds
    text or a fraction."""
    for col in columns:
        values = pd.to_numeric(frame[col], errors="coerce")
        wrong = (values.isna() & frame[col].notna()) | (values.notna() & (values % 1 != 0))
        if wrong.any():
            raise NotIntegers(table, 0)
        frame[col] = values
    return frame


def _int_columns(conn: sqlite3.Connection, table: str, exprs: dict[str, str],
                 where: str = "1") -> pd.DataFrame:
    """Integer columns of a table (NULL -> -1) read through group_concat in rowid slices."""
    _require(conn, table, *(e.strip('"') for e in exprs.values()
                            if re.fullmatch(r'"?\w+"?', e) and not e.isdigit() and e != "NULL"))
    parts = _int_slices(conn, table, [f"coalesce({expr}, -1)" for expr in exprs.values()],
                        where)
    if not parts:
        return pd.DataFrame({name: np.zeros(0, dtype=np.int64) for name in exprs})
    return pd.DataFrame({name: np.concatenate(col) for name, col in zip(exprs, zip(*parts))})


def _kernels(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    cols = ["start", "end", "dur", "device", "stream", "correlation", "global_pid", "name",
            "short_name", "graph_node"]
    if KERNEL not in tables:
        return pd.DataFrame(columns=cols)
    node = "graphNodeId" if "graphNodeId" in _columns(conn, KERNEL) else "NULL"
    frame = _int_columns(conn, KERNEL, {
        "start": "start", "end": '"end"', "device": "deviceId", "stream": "streamId",
        "correlation": "correlationId", "global_pid": "globalPid", "name_id": "demangledName",
        "short_id": "shortName", "graph_node": node})
    frame["name"] = _strings_of(frame.pop("name_id"), strings)
    frame["short_name"] = _strings_of(frame.pop("short_id"), strings)
    frame["dur"] = frame["end"] - frame["start"]
    return frame[cols]


def _runtime(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    cols = ["start", "end", "dur", "global_tid", "correlation", "name", "api", "pid", "tid"]
    if RUNTIME not in tables:
        return pd.DataFrame(columns=cols)
    event_class = "eventClass" if "eventClass" in _columns(conn, RUNTIME) else "0"
    frame = _int_columns(conn, RUNTIME, {
        "start": "start", "end": '"end"', "global_tid": "globalTid",
        "correlation": "correlationId", "name_id": "nameId", "event_class": event_class})
    frame["name"] = _strings_of(frame.pop("name_id"), strings.str.replace(
        r"_v\d+$", "", regex=True))
    frame["api"] = np.where(frame.pop("event_class") == 1, "driver", "runtime")
    frame["dur"] = frame["end"] - frame["start"]
    return _split_tid(frame)[cols]


def _copies(conn: sqlite3.Connection, tables: set[str], table: str,
            kind_col: Optional[str]) -> pd.DataFrame:
    cols = ["start", "end", "dur", "device", "stream", "correlation", "global_pid", "bytes", "kind"]
    if table not in tables:
        return pd.DataFrame(columns=cols)
    kind = kind_col if kind_col and kind_col in _columns(conn, table) else "NULL"
    frame = _int_columns(conn, table, {
        "start": "start", "end": '"end"', "device": "deviceId", "stream": "streamId",
        "correlation": "correlationId", "global_pid": "globalPid", "bytes": "bytes",
        "kind": kind})
    if kind_col:
        frame["kind"] = frame["kind"].map(_COPY_KINDS).fillna("other")
    else:
        frame["kind"] = "memset"
    frame["bytes"] = frame["bytes"].where(frame["bytes"].between(0, S.SIZE_LIMIT_BYTES))
    frame["dur"] = frame["end"] - frame["start"]
    return frame[cols]


def _text(value: object) -> str:
    """A TEXT cell as text: a BLOB decoded (bad bytes replaced), another type written out."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _strings_of(ids: pd.Series, strings: pd.Series) -> np.ndarray:
    """StringIds values for an id column, looked up once per distinct id."""
    uniq, inverse = np.unique(ids.to_numpy(), return_inverse=True)
    values = np.array([strings.get(int(u)) for u in uniq], dtype=object)
    return values[inverse] if len(uniq) else np.zeros(0, dtype=object)


def _gpu_syncs(conn: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    cols = ["start", "end", "dur", "device", "global_pid", "kind"]
    if SYNC not in tables:
        return pd.DataFrame(columns=cols)
    _require(conn, SYNC, "start", "end", "deviceId", "globalPid", "syncType")
    frame = pd.read_sql(f"SELECT start, \"end\", deviceId AS device, globalPid AS global_pid, "
                        f"syncType AS kind FROM {SYNC}", conn)
    frame = _integers(frame, SYNC, ["start", "end", "device", "global_pid"])
    frame["dur"] = frame["end"] - frame["start"]
    return frame[cols]


def _osrt(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    cols = ["start", "end", "dur", "global_tid", "name"]
    if OSRT not in tables:
        return pd.DataFrame(columns=cols)
    _require(conn, OSRT, "start", "end", "globalTid", "nameId")
    frame = pd.read_sql(f"SELECT start, \"end\", globalTid AS global_tid, nameId FROM {OSRT}",
                        conn)
    frame = _integers(frame, OSRT, ["start", "end", "global_tid", "nameId"])
    frame["name"] = frame.pop("nameId").map(strings)
    frame["dur"] = frame["end"] - frame["start"]
    return frame[cols]


def _graph_nodes(conn: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    if GRAPH_NODES not in tables or not {"graphNodeId", "globalTid"} <= _columns(conn,
                                                                              GRAPH_NODES):
        return pd.DataFrame(columns=GRAPH_NODE_COLUMNS)
    original = ("originalGraphNodeId" if "originalGraphNodeId" in _columns(conn, GRAPH_NODES)
                else "NULL")
    return _int_columns(conn, GRAPH_NODES, {"start": "start", "global_tid": "globalTid",
                                            "graph_node": "graphNodeId",
                                            "original_node": original})


def _threads(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    if "ThreadNames" not in tables:
        return pd.DataFrame(columns=["global_tid", "name"])
    _require(conn, "ThreadNames", "globalTid", "nameId")
    frame = pd.read_sql("SELECT globalTid AS global_tid, nameId FROM ThreadNames", conn)
    frame = _integers(frame, "ThreadNames", ["global_tid", "nameId"])
    frame["name"] = frame.pop("nameId").map(strings)
    return frame
