"""nsbridge vs HolisticTraceAnalysis vs bare decodes on large torch traces.

For each size (events), builds a trace from a real GPU trace (bench/make_traces.py), then
runs, as separate processes, interleaved, ``--runs`` times each:

  nsbridge   the whole ``nsbridge -q analyze TRACE --out DIR`` process: read, analyse and
             write report.json/.md/.html (what a user waits for)
  hta        HolisticTraceAnalysis 0.5.0 in its own venv (bench/.venv-hta, created here):
             TraceAnalysis(trace_dir=...) + get_gpu_kernel_breakdown + get_temporal_breakdown
  read       nsbridge's reader alone (``read_trace``: the C scanner on every core, the
             EVENTS frame built), no analysis and no report: what reading costs nsbridge
  cat        the bytes of the file read into memory and nothing else: the floor no reader
             goes below
  json.load  the standard library decoding the file, nothing else
  decode     msgspec decoding the file into Python objects on one core, nothing else: the
             floor for any tool that turns every event into a Python object (nsbridge's
             scanner does not)

and records the median wall time and median peak RSS (os.wait4's ru_maxrss) of each into
bench/results/trace_scale.json with the machine it ran on, printing the ratios.

    python bench/trace_scale.py --sizes 100000 1000000 3000000 [--runs 3] [--skip-hta]
    python bench/trace_scale.py --sizes 1000000 --profile   # where nsbridge's time goes
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _measure import byte_compile, measure, print_profile, write_result

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
HTA_VENV = HERE / ".venv-hta"
HTA_VERSION = "0.5.0"

DECODE = """
import sys
import msgspec
with open(sys.argv[1], "rb") as fh:
    doc = msgspec.json.decode(fh.read())
print(len(doc["traceEvents"]))
"""
HTA = """
import sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
kernels = analyzer.get_gpu_kernel_breakdown(visualize=False)
temporal = analyzer.get_temporal_breakdown(visualize=False)
print(len(kernels[0]), temporal.shape)
"""
READ = """
import sys
from nsbridge.parse.torch_trace import read_trace
print(len(read_trace(sys.argv[1]).events))
"""
CAT = """
import sys
with open(sys.argv[1], "rb") as fh:
    print(len(fh.read()))
"""
JSON_LOAD = """
import json, sys
with open(sys.argv[1]) as fh:
    doc = json.load(fh)
print(len(doc["traceEvents"]))
"""


def ensure_hta() -> str:
    python = HTA_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q",
                        f"HolisticTraceAnalysis=={HTA_VERSION}"], check=True)
    return str(python)


def ensure_trace(events: int) -> Path:
    path = DATA / f"trace_{events}.json"
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "make_traces.py"), "--events", str(events),
                        "--out", str(path)], check=True)
    return path


def nsbridge_analyze(trace: Path, out: Path) -> list[str]:
    """The user's command: analyse one trace and write the three reports to ``out``."""
    return [sys.executable, "-m", "nsbridge", "-q", "analyze", str(trace), "--out", str(out)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 3_000_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "trace_scale.json")
    parser.add_argument("--profile", action="store_true",
                        help="profile one nsbridge analyze of the first size and print where "
                             "the time goes (no results are written)")
    args = parser.parse_args()
    byte_compile()
    if args.profile:
        with tempfile.TemporaryDirectory() as scratch:
            print_profile(nsbridge_analyze(ensure_trace(args.sizes[0]), Path(scratch) / "out"))
        return
    hta_python = None if args.skip_hta else ensure_hta()
    rows = []
    for size in args.sizes:
        trace = ensure_trace(size)
        with tempfile.TemporaryDirectory() as rank_dir:  # HTA reads a folder of rank files
            os.symlink(trace, Path(rank_dir) / "rank-0.json")
            tools = {"read": [sys.executable, "-c", READ, str(trace)],
                     "cat": [sys.executable, "-c", CAT, str(trace)],
                     "decode": [sys.executable, "-c", DECODE, str(trace)],
                     "json.load": [sys.executable, "-c", JSON_LOAD, str(trace)]}
            if hta_python:
                tools["hta"] = [hta_python, "-c", HTA, rank_dir]
            samples: dict[str, list[tuple[float, float, str]]] = {t: [] for t in [
                "nsbridge", *tools]}
            for run in range(args.runs):
                out = Path(rank_dir) / f"nsbridge-{run}"
                samples["nsbridge"].append(measure(nsbridge_analyze(trace, out)))
                for tool, argv in tools.items():
                    samples[tool].append(measure(argv))
        for tool, runs in samples.items():
            row = {"events": size, "file_mb": round(trace.stat().st_size / 1e6, 1), "tool": tool,
                   "wall_s": round(statistics.median(r[0] for r in runs), 3),
                   "peak_rss_mib": round(statistics.median(r[1] for r in runs), 1),
                   "runs_wall_s": [round(r[0], 3) for r in runs], "output": runs[0][2]}
            rows.append(row)
            print(f"{size:>9} {tool:<10} {row['wall_s']:8.2f} s {row['peak_rss_mib']:8.0f} MiB")
    ratios = []
    for size in args.sizes:
        by = {r["tool"]: r for r in rows if r["events"] == size}
        ours = by["nsbridge"]
        entry = {"events": size,
                 "wall_vs_cat": round(ours["wall_s"] / by["cat"]["wall_s"], 3),
                 "wall_vs_json_load": round(ours["wall_s"] / by["json.load"]["wall_s"], 3),
                 "wall_vs_decode": round(ours["wall_s"] / by["decode"]["wall_s"], 3)}
        if "hta" in by:
            entry["wall_vs_hta"] = round(ours["wall_s"] / by["hta"]["wall_s"], 3)
            entry["rss_vs_hta"] = round(ours["peak_rss_mib"] / by["hta"]["peak_rss_mib"], 3)
        ratios.append(entry)
        print("ratios", entry)
    write_result(args.out, "trace_scale", runs=args.runs,
                 hta_version=None if args.skip_hta else HTA_VERSION, results=rows,
                 ratios=ratios)


if __name__ == "__main__":
    main()
