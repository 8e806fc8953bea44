"""`nsbridge analyze` of a folder of many rank traces: one worker vs several (--jobs).

Builds ``--ranks`` gzipped traces of about ``--events`` events each (bench/make_traces.py,
then one copy per rank with its own ``distributedInfo.rank``), then runs, as separate
processes, interleaved, ``--runs`` times each:

  nsbridge analyze --jobs 1 FOLDER     every rank read and analysed in turn
  nsbridge analyze --jobs J FOLDER     J worker processes, one rank at a time each

and records the median wall time and peak RSS (os.wait4's ru_maxrss: the largest single
process, here the parent; each worker holds one rank at a time) into
bench/results/ranks_scale.json with the machine it ran on, printing the speed-up.

The machine's own limit, measured in the same run: the folder split in ``--jobs`` parts
(symbolic links), one ``nsbridge analyze --jobs 1`` per part, all started at once and no
work shared: what ``--jobs J`` could reach if coordinating its workers cost nothing. Its
time over ``--jobs 1``'s says how far the cores scale on this work (on a 2-vCPU VM two
processes run at well under twice the speed of one); --jobs J's time over it says what
nsbridge's pool costs on top.

And each configuration's CPU seconds (user + system, workers included) with the cores they
kept busy on average: ``--jobs 1`` is not one core's work (a gzipped trace is inflated on a
helper thread while the previous block is scanned), so its CPU seconds over J cores is the
floor no split of the same work on J cores can go under.

    python bench/ranks_scale.py --ranks 64 --events 100000 --jobs 2 [--runs 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable

from _measure import Sample, byte_compile, measure, write_result

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def ensure_ranks(ranks: int, events: int) -> Path:
    """A folder of ``ranks`` gzipped traces, rank i's metadata saying rank i."""
    folder = DATA / f"ranks_{ranks}x{events}"
    if len(list(folder.glob("rank-*.json.gz"))) == ranks:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    base = DATA / f"trace_{events}.json"
    if not base.exists():
        subprocess.run([sys.executable, str(HERE / "make_traces.py"), "--events", str(events),
                        "--out", str(base)], check=True)
    doc = json.loads(base.read_text())
    for rank in range(ranks):
        doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": rank,
                                  "world_size": ranks}
        with gzip.open(folder / f"rank-{rank:03d}.json.gz", "wt", compresslevel=1) as fh:
            json.dump(doc, fh)
    return folder


def split_folder(folder: Path, parts: int, scratch: Path) -> list[Path]:
    """The folder's traces in ``parts`` folders of symbolic links, in turn."""
    traces = sorted(folder.glob("rank-*.json.gz"))
    out = []
    for part in range(parts):
        sub = scratch / f"part-{part}"
        sub.mkdir()
        for trace in traces[part::parts]:
            (sub / trace.name).symlink_to(trace)
        out.append(sub)
    return out


def measure_together(commands: list[list[str]]) -> tuple[float, float]:
    """(wall seconds from starting every command at once until the last one ends, their
    CPU seconds together)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for argv in commands]
    for proc, argv in zip(procs, commands):
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[:3]} failed ({proc.returncode}):\n"
                               f"{err.decode()[-2000:]}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def median(values: Iterable[float], digits: int = 3) -> float:
    return round(statistics.median(values), digits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ranks_scale.json")
    args = parser.parse_args()
    byte_compile()
    folder = ensure_ranks(args.ranks, args.events)
    nsbridge = shutil.which("nsbridge", path=str(Path(sys.executable).parent)) or "nsbridge"
    samples: dict[int, list[Sample]] = {1: [], args.jobs: []}
    apart: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as scratch:
        parts = split_folder(folder, args.jobs, Path(scratch))
        for run in range(args.runs):
            for jobs in samples:
                out = Path(scratch) / f"run-{run}-jobs-{jobs}"
                samples[jobs].append(measure([nsbridge, "-q", "analyze", "--jobs", str(jobs),
                                              "--out", str(out), str(folder)]))
            apart.append(measure_together([
                [nsbridge, "-q", "analyze", "--jobs", "1", "--out",
                 str(Path(scratch) / f"run-{run}-part-{i}"), str(part)]
                for i, part in enumerate(parts)]))
    rows = [{"jobs": jobs, "wall_s": median(r.wall_s for r in runs),
             "cpu_s": median(r.cpu_s for r in runs),
             "cores_busy": median((r.cpu_s / r.wall_s for r in runs), 2),
             "peak_rss_mib": median((r.peak_mib for r in runs), 1),
             "runs_wall_s": [round(r.wall_s, 3) for r in runs]} for jobs, runs in samples.items()]
    for row in rows:
        print(f"--jobs {row['jobs']:<3} {row['wall_s']:8.2f} s {row['peak_rss_mib']:8.0f} MiB "
              f"{row['cpu_s']:8.2f} CPU s ({row['cores_busy']:.2f} cores busy)")
    ratio = round(rows[1]["wall_s"] / rows[0]["wall_s"], 3)
    limit = {"parts": args.jobs, "wall_s": median(t for t, _ in apart),
             "cpu_s": median(c for _, c in apart),
             "runs_wall_s": [round(t, 3) for t, _ in apart]}
    limit["time_vs_one_job"] = round(limit["wall_s"] / rows[0]["wall_s"], 3)
    floor = {"wall_s": round(rows[0]["cpu_s"] / args.jobs, 3),
             "time_vs_one_job": round(rows[0]["cpu_s"] / args.jobs / rows[0]["wall_s"], 3)}
    print(f"--jobs {args.jobs} takes {ratio:.2f}x the time of --jobs 1; {args.jobs} "
          f"separate processes on {args.jobs} parts of the folder, at once: "
          f"{limit['wall_s']:.2f} s, {limit['time_vs_one_job']:.2f}x; --jobs 1's CPU time "
          f"over {args.jobs} cores: {floor['wall_s']:.2f} s, {floor['time_vs_one_job']:.2f}x")
    write_result(args.out, "ranks_scale", ranks=args.ranks, events_per_rank=args.events,
                 runs=args.runs, results=rows, time_vs_one_job=ratio,
                 separate_processes_at_once=limit, one_job_cpu_over_cores=floor)


if __name__ == "__main__":
    main()
