"""nsys SQLite exports are untrusted input: real exports mutated at random (seeded) give a
joined timeline or nsbridge's own NsysExportError, never another exception, and never a
negative duration or busy share. The fast tier runs a few hundred cases; the slow tier
(`-m slow`) hundreds more and a few end to end through `nsbridge analyze`; `make fuzz`
thousands (tests/sweeps.py)."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Callable

import pytest

import nsbridge
from nsbridge.errors import NsbridgeError, NsysExportError
from nsbridge.model.device.timeline import join
from nsbridge.parse.nsys_sqlite import read_nsys_sqlite

from conftest import DATA
from sweeps import fast_share, seeded, slow_share

SOURCES = [DATA / "nsys" / "nsbridge_cnn_cpu_nsys2022.4.sqlite",
           DATA / "nsys" / "nsbridge_sync_bound_h100_nsys2025.3.sqlite"]
TABLES = ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
          "CUPTI_ACTIVITY_KIND_MEMCPY", "StringIds", "ThreadNames", "OSRT_API"]
ODD_VALUES = ["abc", 1.5, None, -1, 2 ** 62, "", "12", b"\x00\xff", 0]

Mutation = Callable[[sqlite3.Connection, random.Random], str]


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            if t in TABLES]


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _random_row(conn: sqlite3.Connection, table: str, rng: random.Random) -> int | None:
    lo, hi = conn.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
    return None if lo is None else rng.randint(lo, hi)


def odd_cell(conn: sqlite3.Connection, rng: random.Random) -> str:
    table = rng.choice(_tables(conn))
    column, row = rng.choice(_columns(conn, table)), _random_row(conn, table, rng)
    value = rng.choice(ODD_VALUES)
    conn.execute(f'UPDATE {table} SET "{column}" = ? WHERE rowid = ?', (value, row))
    return f"{table}.{column}[{row}] = {value!r}"


def backwards(conn: sqlite3.Connection, rng: random.Random) -> str:
    table = rng.choice([t for t in _tables(conn) if "end" in _columns(conn, t)])
    conn.execute(f'UPDATE {table} SET start = "end" + 1000 WHERE rowid % ? = 0',
                 (rng.randint(1, 7),))
    return f"{table}: rows end before they start"


def dropped_column(conn: sqlite3.Connection, rng: random.Random) -> str:
    table = rng.choice(_tables(conn))
    column = rng.choice(_columns(conn, table))
    try:
        conn.execute(f'ALTER TABLE {table} DROP COLUMN "{column}"')
    except sqlite3.OperationalError:        # a key column: rename it instead
        conn.execute(f'ALTER TABLE {table} RENAME COLUMN "{column}" TO "{column}_x"')
    return f"{table}.{column} gone"


def dropped_table(conn: sqlite3.Connection, rng: random.Random) -> str:
    table = rng.choice(_tables(conn))
    conn.execute(f"DROP TABLE {table}")
    return f"{table} gone"


def repeated_string(conn: sqlite3.Connection, rng: random.Random) -> str:
    columns = _columns(conn, "StringIds")
    if "id" in columns:   # the table has a primary key: rebuild it without one
        conn.execute("CREATE TABLE s2 AS SELECT * FROM StringIds")
        conn.execute("INSERT INTO s2 SELECT id, value || 'x' FROM StringIds WHERE id % 3 = 0")
        conn.execute("DROP TABLE StringIds")
        conn.execute("ALTER TABLE s2 RENAME TO StringIds")
    return "StringIds ids repeated"


MUTATIONS: list[Mutation] = [odd_cell, odd_cell, odd_cell, backwards, dropped_column,
                             dropped_table, repeated_string]


def _mutated(tmp: Path, case: int) -> tuple[Path, str]:
    rng = random.Random(case)
    path = tmp / f"case{case}.sqlite"
    shutil.copy(SOURCES[case % len(SOURCES)], path)
    what = []
    conn = sqlite3.connect(path)
    try:
        for _ in range(rng.randint(1, 3)):
            try:
                what.append(rng.choice(MUTATIONS)(conn, rng))
            except sqlite3.DatabaseError as exc:   # a constraint of the table kept it
                what.append(f"refused by SQLite: {exc}")
            except IndexError:                      # nothing left of that kind to mutate
                what.append("nothing to mutate")
        conn.commit()
    finally:
        conn.close()
    if rng.random() < 0.1:               # a damaged copy: bytes flipped in the file
        data = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(100, len(data))] ^= 0xFF
        path.write_bytes(bytes(data))
        what.append("bytes flipped")
    return path, "; ".join(what)


def _check(path: Path, what: str) -> None:
    try:
        export = read_nsys_sqlite(path)
        timeline = join(export)
    except NsysExportError as exc:
        assert "Traceback" not in str(exc) and str(path) in str(exc), (what, exc)
        return
    for name in ("ranges", "kernels", "runtime", "memcpy", "memset"):
        frame = getattr(export, name)
        assert frame.empty or (frame["dur"] >= 0).all(), (what, name)
    busy = timeline.summary.get("gpu_busy_pct")
    assert busy is None or 0 <= busy <= 100.0 + 1e-9, (what, busy)
    numbers = timeline.ops.select_dtypes("number")
    assert (numbers.fillna(0) >= 0).all().all(), (what, numbers.min())


@pytest.mark.parametrize("block", range(4))
def test_mutated_nsys_exports_give_a_timeline_or_a_clear_error(tmp_path: Path,
                                                               block: int) -> None:
    for case in range(block * 50, block * 50 + 50):
        path, what = _mutated(tmp_path, case)
        _check(path, f"case {case}: {what}")
        path.unlink()


@pytest.mark.slow
def test_thousands_of_mutated_nsys_exports(tmp_path: Path) -> None:
    for case in seeded(1000, 2000):
        path, what = _mutated(tmp_path, case)
        _check(path, f"case {case}: {what}")
        path.unlink()


@pytest.mark.slow
def test_mutated_exports_end_to_end_through_analyze(tmp_path: Path) -> None:
    for case in range(5000, 5030):
        path, what = _mutated(tmp_path, case)
        try:
            nsbridge.analyze([path], out=tmp_path / f"run{case}")
        except NsbridgeError:
            pass
        else:
            timeline = json.loads((tmp_path / f"run{case}" / "report.json").read_text())[
                "timeline"] or {}
            assert (timeline.get("gpu_busy_pct") or 0) >= 0, what
            assert all(v >= 0 for op in timeline.get("ops") or [] for v in op.values()
                       if isinstance(v, (int, float))), what


SWEEP_STRIDE = 23   # the fast tier's share of the sweep
# each SQLite storage class, and the integers and reals at their ends
SWEEP_VALUES: list[object] = [*ODD_VALUES, 2 ** 63 - 1, -(2 ** 63), 1e308, 0.5, b""]


def _sweep() -> list[tuple[Path, str, str, object, bool]]:
    """Each SWEEP_VALUES value in each column of each table read, in one row or in all:
    (source, table, column, value, every row)."""
    cases = []
    for source in SOURCES:
        conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        try:
            columns = [(table, column) for table in _tables(conn)
                       for column in _columns(conn, table)]
        finally:
            conn.close()
        cases += [(source, table, column, value, every) for (table, column) in columns
                  for value in SWEEP_VALUES for every in (False, True)]
    return cases


def _swept(tmp: Path, case: tuple[Path, str, str, object, bool]) -> tuple[Path, str]:
    source, table, column, value, every = case
    path = tmp / "case.sqlite"
    shutil.copy(source, path)
    conn = sqlite3.connect(path)
    try:
        where = "" if every else f" WHERE rowid = (SELECT min(rowid) FROM {table})"
        conn.execute(f'UPDATE {table} SET "{column}" = ?{where}', (value,))
        conn.commit()
    except sqlite3.DatabaseError as exc:   # a constraint of the table keeps the value out
        return path, f"refused by SQLite: {exc}"
    finally:
        conn.close()
    rows = "every row" if every else "one row"
    return path, f"{source.name}: {table}.{column} = {value!r} in {rows}"


def test_every_column_with_a_wrong_type(tmp_path: Path) -> None:
    """Every SWEEP_STRIDE-th case of the sweep."""
    cases = _sweep()
    assert len(cases) >= 3000 and {c[1] for c in cases} >= {"NVTX_EVENTS", "StringIds"}
    for case in fast_share(cases, SWEEP_STRIDE):
        _check(*_swept(tmp_path, case))


def _column_and_value(case: tuple[Path, str, str, object, bool]) -> tuple[str, str, str]:
    _, table, column, value, _ = case
    return table, column, repr(value)


@pytest.mark.slow
def test_every_column_with_every_wrong_type(tmp_path: Path) -> None:
    """One export and placement of each column and value the fast tier left (tests/sweeps.py)."""
    for case in slow_share(_sweep(), SWEEP_STRIDE, _column_and_value):
        _check(*_swept(tmp_path, case))
