"""nsbridge's nsys join at scale: a synthetic export with 1M kernels and 10M NVTX ranges.

The export follows the real SQLite schema (NVTX_EVENTS with registered strings in
StringIds, CUPTI_ACTIVITY_KIND_RUNTIME/KERNEL, META_DATA_EXPORT), shaped like nsbridge's
own capture: per kernel one module range holding ``aten::linear`` > ``aten::addmm`` (which
contains the cudaLaunchKernel call) and seven more leaf op ranges. The join (read +
classify + kernel -> launch -> innermost op) runs in a child process, interleaved with a
second child that only reads the export (``read_nsys_sqlite``: the SQLite floor the join
builds on); medians of wall time and peak RSS go to bench/results/nsys_scale.json.

    python bench/nsys_scale.py [--kernels 1000000] [--runs 3]
    python bench/nsys_scale.py --profile     # where the join's time goes (nothing written)
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path

from _measure import byte_compile, measure, print_profile, write_result

import numpy as np

HERE = Path(__file__).resolve().parent
RANGES_PER_KERNEL = 10
JOIN = """
import sys
from nsbridge.parse.nsys_sqlite import read_nsys_sqlite
from nsbridge.model.device.timeline import join
timeline = join(read_nsys_sqlite(sys.argv[1]))
s = timeline.summary
print(s["ranges"], s["kernels"], s["attribution"])
"""
READ = """
import sys
from nsbridge.parse.nsys_sqlite import read_nsys_sqlite
export = read_nsys_sqlite(sys.argv[1])
print(len(export.ranges), len(export.kernels), len(export.runtime))
"""
TARGETS = {"wall_s": 15, "peak_rss_mib": 2048}   # issue 19 at 1M kernels, 10M ranges
STRINGS = ["model.fc", "aten::linear", "aten::addmm", "aten::view", "aten::add",
           "aten::relu", "aten::mul", "aten::sum", "aten::t", "aten::copy_",
           "cudaLaunchKernel_v7000", "gemm_kernel", "void gemm_kernel<float>(float*)"]


def build(path: Path, kernels: int) -> None:
    """Write the synthetic export (about 1 GB for 1M kernels)."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    conn.executescript("""
        PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT
            NULL, rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
            endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
            eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER
            NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
            shortName INTEGER NOT NULL, mangledName INTEGER);
    """)
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", enumerate(STRINGS, start=1))
    conn.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                     [("EXPORT_PRODUCT_VERSION", "synthetic"), ("EXPORT_SCHEMA_VERSION", "3.0.0")])
    gtid = (100 << 24) | 100
    gpid = 100 << 24
    conn.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                 "VALUES (0, 75, 'nsbridge', ?, 1)", (gtid,))
    # offsets within a 1000 ns unit: (start, end, string id)
    layout = [(0, 900, 1), (10, 400, 2), (20, 300, 3)] + [
        (410 + k * 60, 450 + k * 60, 4 + k) for k in range(7)]
    chunk = 100_000
    for first in range(0, kernels, chunk):
        units = np.arange(first, min(first + chunk, kernels), dtype=np.int64)
        t = units * 1000
        rows = []
        for start, end, sid in layout:
            rows.extend(zip((t + start).tolist(), (t + end).tolist(), [sid] * len(t)))
        conn.executemany("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, globalTid, "
                         f"textId, domainId) VALUES (?, ?, 59, {gtid}, ?, 1)", rows)
        corr = (units + 1).tolist()
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 11, 0, "
                         "NULL)", zip((t + 50).tolist(), (t + 60).tolist(), [gtid] * len(t), corr))
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, 13, "
                         "12, NULL)", zip((t + 100).tolist(), (t + 700).tolist(), corr,
                                          [gpid] * len(t)))
    conn.commit()
    conn.close()
    tmp.rename(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "nsys_scale.json")
    parser.add_argument("--profile", action="store_true",
                        help="profile one join and print where the time goes")
    args = parser.parse_args()
    byte_compile()
    path = HERE / "data" / f"nsys_{args.kernels}kernels_{args.kernels * RANGES_PER_KERNEL}ranges.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        started = time.perf_counter()
        build(path, args.kernels)
        print(f"built {path} in {time.perf_counter() - started:.0f} s")
    tools = {"join": [sys.executable, "-c", JOIN, str(path)],
             "read only": [sys.executable, "-c", READ, str(path)]}
    if args.profile:
        print_profile(tools["join"])
        return
    samples: dict[str, list[tuple[float, float, str]]] = {tool: [] for tool in tools}
    for _ in range(args.runs):
        for tool, argv in tools.items():
            samples[tool].append(measure(argv))
    rows = []
    for tool, runs in samples.items():
        rows.append({"tool": tool, "wall_s": round(statistics.median(r[0] for r in runs), 3),
                     "peak_rss_mib": round(statistics.median(r[1] for r in runs), 1),
                     "runs_wall_s": [round(r[0], 3) for r in runs], "output": runs[0][2]})
        print(f"{tool:<10} {rows[-1]['wall_s']:8.2f} s {rows[-1]['peak_rss_mib']:8.0f} MiB")
    write_result(args.out, "nsys_scale", runs=args.runs, kernels=args.kernels,
                 nvtx_ranges=args.kernels * RANGES_PER_KERNEL,
                 file_mb=round(path.stat().st_size / 1e6, 1), targets=TARGETS, results=rows)


if __name__ == "__main__":
    main()
