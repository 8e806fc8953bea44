"""nsys SQLite export -> documented frames (nsys 2022.4 to 2026 schemas).

Tables are created lazily by nsys (no rows, no table), and column sets differ between
releases, so every query is built from the columns the file has. All times are integer
nanoseconds as nsys writes them; ``pid``/``tid`` are decoded from ``globalTid``
(``pid = (gtid >> 24) & 0xFFFFFF``, ``tid = gtid & 0xFFFFFF``).

Frames (columns):

- ranges: start, end, dur, name (text or its registered string), domain ('' = default),
  style ('push_pop' | 'start_end'), global_tid, pid, tid
- kernels: start, end, dur, device, stream, correlation, global_pid, name (demangled),
  short_name
- runtime: start, end, dur, global_tid, correlation, name (without the `_v7000` suffix),
  api ('runtime' | 'driver')
- memcpy / memset: start, end, dur, device, stream, correlation, global_pid, bytes, kind
- gpu_syncs: start, end, dur, device, global_pid, kind (CUPTI synchronization records)
- osrt: start, end, dur, global_tid, name (OS runtime calls)
- threads: global_tid, name
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd

from ..errors import NsysExportError, TraceNotFoundError

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
PUSH_POP, START_END, DOMAIN_CREATE = 59, 60, 75
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
    notes: list[str] = field(default_factory=list)


def read_nsys_sqlite(path: str | Path) -> NsysExport:
    """Read an nsys SQLite export.

    Raises:
        TraceNotFoundError: the file does not exist.
        NsysExportError: not SQLite, or none of the tables nsbridge reads (NVTX, kernels,
            runtime calls) is there; the message names the missing tables and the nsys
            version that wrote the file.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceNotFoundError(f"nsys export {path} does not exist.")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
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
        strings = pd.read_sql("SELECT id, value FROM StringIds", conn).set_index("id")["value"]
        export = NsysExport(
            path=path, product_version=version, schema_version=schema, tables=tables,
            ranges=_ranges(conn, tables, strings), kernels=_kernels(conn, tables, strings),
            runtime=_runtime(conn, tables, strings),
            memcpy=_copies(conn, tables, MEMCPY, "copyKind"),
            memset=_copies(conn, tables, MEMSET, None),
            gpu_syncs=_gpu_syncs(conn, tables), osrt=_osrt(conn, tables, strings),
            threads=_threads(conn, tables, strings))
    except sqlite3.DatabaseError as exc:
        raise NsysExportError(f"{path} could not be read as an nsys export: {exc}.") from exc
    finally:
        conn.close()
    for table, frame in ((NVTX, export.ranges), (KERNEL, export.kernels)):
        if frame.empty:
            export.notes.append(f"{table} has no rows in {path.name}")
    return export


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _versions(conn: sqlite3.Connection, tables: set[str]) -> tuple[Optional[str], Optional[str]]:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables:
            meta = dict(conn.execute(f"SELECT name, value FROM {table}").fetchall())
            return meta.get("EXPORT_PRODUCT_VERSION"), meta.get("EXPORT_SCHEMA_VERSION")
    return None, None


def _split_tid(frame: pd.DataFrame, col: str = "global_tid") -> pd.DataFrame:
    gtid = frame[col].fillna(0).astype("int64")
    frame["pid"] = (gtid // (1 << 24)) & 0xFFFFFF
    frame["tid"] = gtid & 0xFFFFFF
    return frame


def _ranges(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    cols = ["start", "end", "dur", "name", "domain", "style", "global_tid", "pid", "tid"]
    if NVTX not in tables:
        return pd.DataFrame(columns=cols)
    have = _columns(conn, NVTX)
    text = "text" if "text" in have else "NULL"
    text_id = "textId" if "textId" in have else "NULL"
    domain_id = "domainId" if "domainId" in have else "0"
    frame = pd.read_sql(
        f"SELECT start, \"end\", eventType, {text} AS text, {text_id} AS text_id, "
        f"{domain_id} AS domain_id, globalTid AS global_tid FROM {NVTX} "
        f"WHERE eventType IN ({PUSH_POP}, {START_END}, {DOMAIN_CREATE})", conn)
    domains = frame[frame["eventType"] == DOMAIN_CREATE]
    domain_names = dict(zip(domains["domain_id"], domains["text"].fillna("")))
    frame = frame[frame["eventType"] != DOMAIN_CREATE].copy()
    frame["name"] = frame["text"].fillna(frame["text_id"].map(strings)).fillna("")
    frame["domain"] = frame["domain_id"].fillna(0).map(domain_names).astype(object).fillna("")
    frame["style"] = frame["eventType"].map({PUSH_POP: "push_pop", START_END: "start_end"})
    frame = frame[frame["end"].notna()]
    frame["dur"] = frame["end"] - frame["start"]
    return _split_tid(frame)[cols].reset_index(drop=True)


def _kernels(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    cols = ["start", "end", "dur", "device", "stream", "correlation", "global_pid", "name",
            "short_name"]
    if KERNEL not in tables:
        return pd.DataFrame(columns=cols)
    frame = pd.read_sql(f"SELECT start, \"end\", deviceId AS device, streamId AS stream, "
                        f"correlationId AS correlation, globalPid AS global_pid, demangledName, "
                        f"shortName FROM {KERNEL}", conn)
    frame["name"] = frame.pop("demangledName").map(strings)
    frame["short_name"] = frame.pop("shortName").map(strings)
    frame["dur"] = frame["end"] - frame["start"]
    return frame[cols]


def _runtime(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    cols = ["start", "end", "dur", "global_tid", "correlation", "name", "api", "pid", "tid"]
    if RUNTIME not in tables:
        return pd.DataFrame(columns=cols)
    event_class = "eventClass" if "eventClass" in _columns(conn, RUNTIME) else "0"
    frame = pd.read_sql(f"SELECT start, \"end\", globalTid AS global_tid, correlationId AS "
                        f"correlation, nameId, {event_class} AS event_class FROM {RUNTIME}", conn)
    frame["name"] = frame.pop("nameId").map(strings).fillna("").str.replace(
        r"_v\d+$", "", regex=True)
    frame["api"] = frame.pop("event_class").map({1: "driver"}).fillna("runtime")
    frame["dur"] = frame["end"] - frame["start"]
    return _split_tid(frame)[cols]


def _copies(conn: sqlite3.Connection, tables: set[str], table: str,
            kind_col: Optional[str]) -> pd.DataFrame:
    cols = ["start", "end", "dur", "device", "stream", "correlation", "global_pid", "bytes", "kind"]
    if table not in tables:
        return pd.DataFrame(columns=cols)
    kind = kind_col if kind_col and kind_col in _columns(conn, table) else "NULL"
    frame = pd.read_sql(f"SELECT start, \"end\", deviceId AS device, streamId AS stream, "
                        f"correlationId AS correlation, globalPid AS global_pid, bytes, "
                        f"{kind} AS kind FROM {table}", conn)
    if kind_col:
        frame["kind"] = frame["kind"].map(_COPY_KINDS).fillna("other")
    else:
        frame["kind"] = "memset"
    frame["dur"] = frame["end"] - frame["start"]
    return frame[cols]


def _gpu_syncs(conn: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    cols = ["start", "end", "dur", "device", "global_pid", "kind"]
    if SYNC not in tables:
        return pd.DataFrame(columns=cols)
    frame = pd.read_sql(f"SELECT start, \"end\", deviceId AS device, globalPid AS global_pid, "
                        f"syncType AS kind FROM {SYNC}", conn)
    frame["dur"] = frame["end"] - frame["start"]
    return frame[cols]


def _osrt(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    cols = ["start", "end", "dur", "global_tid", "name"]
    if OSRT not in tables:
        return pd.DataFrame(columns=cols)
    frame = pd.read_sql(f"SELECT start, \"end\", globalTid AS global_tid, nameId FROM {OSRT}",
                        conn)
    frame["name"] = frame.pop("nameId").map(strings)
    frame["dur"] = frame["end"] - frame["start"]
    return frame[cols]


def _threads(conn: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    if "ThreadNames" not in tables:
        return pd.DataFrame(columns=["global_tid", "name"])
    frame = pd.read_sql("SELECT globalTid AS global_tid, nameId FROM ThreadNames", conn)
    frame["name"] = frame.pop("nameId").map(strings)
    return frame
