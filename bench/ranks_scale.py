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

The merge of a job's rank summaries (``--merge 64,512,4096``): for each size, a job folder
of that many ``rank-NNNN/summary.json``, each the summary nsbridge writes of a real rank's
trace (tests/data/torch/gloo/ddp_rank1.json.gz, a 2-rank gloo DDP job: 56 ops, 6 KiB), its
steps jittered by 2 % so ranks differ; then ``nsbridge analyze JOB`` as a separate process,
``--runs`` times: wall time, peak RSS, and the report's size (report.md lines and widest
line, report.json bytes). Time and memory per rank say whether the merge grows linearly.

The parent's memory for a folder of real traces (``--copies-of TRACE --ranks 1024``): that
many copies of TRACE, each saying its rank, analysed with ``--jobs 1`` so the one process
measured reads every trace and keeps what the merge keeps.

The coordination through the job's store (``--store 64,512,4096``): a real TCPStore
served here, one client connection per simulated rank (up to 256 connections, ranks
sharing them round-robin past that), the protocol of one pass as job.store runs it (rank 0
says its word, every other rank hears it, marks it read and marks its share done, rank 0
gathers the marks), each store call counted by rank; the wall time of rank 0's gather.

    python bench/ranks_scale.py --merge 64,512,4096 [--runs 3]
    python bench/ranks_scale.py --store 64,512,4096
    python bench/ranks_scale.py --copies-of tests/data/torch/two_ranks/sampled_rank-0.json.gz \
        --ranks 1024 --runs 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
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
REAL_RANK = HERE.parent / "tests" / "data" / "torch" / "gloo" / "ddp_rank1.json.gz"


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
    return write_ranks(json.loads(base.read_text()), folder, ranks, digits=3)


def ensure_copies(trace: Path, ranks: int) -> Path:
    """A folder of ``ranks`` gzipped copies of the real ``trace``, copy i saying rank i."""
    folder = DATA / f"copies_{trace.name.split('.')[0]}_{ranks}"
    if len(list(folder.glob("rank-*.json.gz"))) == ranks:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    return write_ranks(json.loads(gzip.open(trace).read()), folder, ranks, digits=4)


def write_ranks(doc: dict, folder: Path, ranks: int, digits: int) -> Path:
    """``ranks`` gzipped copies of the trace ``doc`` in ``folder``, copy i saying rank i."""
    for rank in range(ranks):
        doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": rank,
                                  "world_size": ranks}
        with gzip.open(folder / f"rank-{rank:0{digits}d}.json.gz", "wt", compresslevel=1) as fh:
            json.dump(doc, fh)
    return folder


def ensure_job(ranks: int) -> Path:
    """A job folder of ``ranks`` rank summaries of a real rank's trace (module docstring),
    written as nsbridge writes them, each folder with the trace (a hard link)."""
    sys.path.insert(0, str(HERE.parent))
    from nsbridge.job.identity import rank_dir_name
    from nsbridge.job.summary import summarize
    from nsbridge.model.analysis import analyze_events
    from nsbridge.parse.torch_trace import read_trace
    from nsbridge.profiles import load_profile
    from nsbridge.rundir import write_json

    folder = DATA / f"job_{ranks}"
    if len(list(folder.glob("rank-*/summary.json"))) == ranks:
        return folder
    analysis = analyze_events(read_trace(REAL_RANK).events,
                              thresholds=load_profile("default").analysis)
    jitter = random.Random(ranks)
    for rank in range(ranks):
        summary = summarize(analysis, rank=rank, host=f"node{rank // 8:04d}",
                            world_size=ranks, trace=REAL_RANK.name)
        summary["step_ms"] = [round(ms * (1 + jitter.gauss(0, 0.02)), 3)
                              for ms in summary["step_ms"]]
        rank_dir = folder / rank_dir_name(rank)
        rank_dir.mkdir(parents=True, exist_ok=True)
        write_json(rank_dir / "summary.json", summary)
        os.link(REAL_RANK, rank_dir / REAL_RANK.name)    # the lead rank's is read whole
    return folder


def merge_rows(sizes: list[int], runs: int, nsbridge: str) -> list[dict[str, object]]:
    """``nsbridge analyze JOB`` of each job size, ``runs`` times interleaved: medians."""
    jobs = {size: ensure_job(size) for size in sizes}
    samples: dict[int, list[Sample]] = {size: [] for size in sizes}
    shapes: dict[int, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(runs):
            for size, job in jobs.items():
                out = Path(scratch) / f"merge-{size}-{run}"
                samples[size].append(measure([nsbridge, "-q", "analyze", "--out", str(out),
                                              str(job)]))
                md = (out / "report.md").read_text(encoding="utf-8").splitlines()
                shapes[size] = {"report_md_lines": len(md),
                                "report_md_widest": max(map(len, md)),
                                "report_json_bytes": (out / "report.json").stat().st_size}
    rows = []
    for size in sizes:
        wall = median(r.wall_s for r in samples[size])
        peak = median((r.peak_mib for r in samples[size]), 1)
        rows.append({"ranks": size, "wall_s": wall, "peak_rss_mib": peak,
                     "ms_per_rank": round(1e3 * wall / size, 3),
                     "runs_wall_s": [round(r.wall_s, 3) for r in samples[size]], **shapes[size]})
        print(f"merge of {size:5d} ranks: {wall:6.2f} s {peak:6.0f} MiB; report.md "
              f"{shapes[size]['report_md_lines']} lines, widest {shapes[size]['report_md_widest']}")
    return rows


class CountingStore:
    """A torch store whose calls are counted (every call is one message to the server)."""

    def __init__(self, store: object) -> None:
        self.store, self.calls = store, 0

    def __getattr__(self, name: str) -> object:
        method = getattr(self.store, name)

        def counted(*args: object, **kwargs: object) -> object:
            self.calls += 1
            return method(*args, **kwargs)
        return counted


def store_rows(sizes: list[int]) -> list[dict[str, object]]:
    """One pass's coordination over a real TCPStore for each job size (module docstring)."""
    sys.path.insert(0, str(HERE.parent))
    from datetime import timedelta

    from torch.distributed import PrefixStore, TCPStore

    from nsbridge.job.store import JobStore
    from nsbridge.schema.records import Mark, Word

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=60))
    clients = [TCPStore("127.0.0.1", server.port, is_master=False,
                        timeout=timedelta(seconds=60)) for _ in range(256)]
    rows = []
    for size in sizes:
        prefix = f"bench-{size}/"
        ranks = [JobStore(CountingStore(PrefixStore(prefix, clients[r % len(clients)])), r, size,
                          "bench") for r in range(size)]
        start = time.perf_counter()
        ranks[0].say("timeline/word", {"pass": "timeline", "go": False, "spec": None, "why": "-"})
        for follower in ranks[1:]:
            assert follower.hear("timeline/word", Word, 10.0) is not None
            follower.mark("timeline/read", {})
            follower.mark("timeline/done", {"pass_id": "p", "exit_code": 0})
        marks_s = time.perf_counter() - start
        start = time.perf_counter()
        marks = ranks[0].gather("timeline/done", range(1, size), Mark, 60.0)
        gather_s = time.perf_counter() - start
        assert all(m is not None for m in marks.values())
        per_rank = [r.store.calls for r in ranks[1:]]
        rows.append({"ranks": size, "messages_per_rank": max(per_rank),
                     "messages_rank0": ranks[0].store.calls,
                     "messages_total": sum(r.store.calls for r in ranks),
                     "followers_s": round(marks_s, 3), "rank0_gather_s": round(gather_s, 3)})
        print(f"store, {size:5d} ranks: {max(per_rank)} messages per rank, rank 0 "
              f"{ranks[0].store.calls}; rank 0's gather {gather_s:.3f} s")
    return rows


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
    parser.add_argument("--merge", default=None, metavar="N,N,...",
                        help="job sizes whose rank summaries are merged (module docstring)")
    parser.add_argument("--store", default=None, metavar="N,N,...",
                        help="job sizes whose coordination through a TCPStore is counted")
    parser.add_argument("--copies-of", type=Path, default=None, metavar="TRACE",
                        help="--ranks copies of this real trace, analysed with --jobs 1")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    byte_compile()
    nsbridge = shutil.which("nsbridge", path=str(Path(sys.executable).parent)) or "nsbridge"
    if args.merge:
        rows = merge_rows([int(n) for n in args.merge.split(",")], args.runs, nsbridge)
        write_result(args.out or HERE / "results" / "ranks_merge.json", "ranks_merge",
                     source=str(REAL_RANK.relative_to(HERE.parent)), runs=args.runs,
                     results=rows)
        return
    if args.store:
        rows = store_rows([int(n) for n in args.store.split(",")])
        write_result(args.out or HERE / "results" / "ranks_store.json", "ranks_store",
                     results=rows)
        return
    if args.copies_of:
        folder = ensure_copies(args.copies_of, args.ranks)
        with tempfile.TemporaryDirectory() as scratch:
            runs = [measure([nsbridge, "-q", "analyze", "--jobs", "1", "--out",
                             str(Path(scratch) / f"run-{i}"), str(folder)])
                    for i in range(args.runs)]
        row = {"ranks": args.ranks, "trace": str(args.copies_of), "jobs": 1,
               "wall_s": median(r.wall_s for r in runs),
               "peak_rss_mib": median((r.peak_mib for r in runs), 1)}
        print(f"analyze --jobs 1 of {args.ranks} copies: {row['wall_s']:.1f} s, "
              f"{row['peak_rss_mib']:.0f} MiB at its peak")
        write_result(args.out or HERE / "results" / "ranks_parent_memory.json",
                     "ranks_parent_memory", runs=args.runs, results=[row])
        return
    folder = ensure_ranks(args.ranks, args.events)
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
    write_result(args.out or HERE / "results" / "ranks_scale.json", "ranks_scale", ranks=args.ranks, events_per_rank=args.events,
                 runs=args.runs, results=rows, time_vs_one_job=ratio,
                 separate_processes_at_once=limit, one_job_cpu_over_cores=floor)


if __name__ == "__main__":
    main()
