"""nsbridge vs torch's own tooling on a large CUDA allocator snapshot.

Builds a synthetic snapshot in torch's documented format (tests/snapshot_builder.py: a
training loop of --layers layers whose every entry carries its own stack, as torch writes
them), pickles it, then runs, as separate processes, interleaved, ``--runs`` times each:

  nsbridge    ``nsbridge -q analyze SNAPSHOT.pickle --out DIR``: read (plain data only),
              replay the history, name what holds the peak, write every report file
  memory_viz  torch.cuda._memory_viz.trace_plot on the unpickled snapshot (what torch's own
              `python -m torch.cuda._memory_viz trace_plot` does before writing its page)
  unpickle    pickle.load of the file and nothing else: the floor for any tool that holds
              the snapshot as Python objects

and records the median wall time and peak RSS (os.wait4's ru_maxrss) of each into
bench/results/snapshot_scale.json, with the bounds of issue 53 (30 s, 2 GiB).

    python bench/snapshot_scale.py --entries 1000000 [--runs 3]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import tempfile
from pathlib import Path

from _measure import byte_compile, measure, write_result

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from snapshot_builder import Plan  # noqa: E402

ENTRIES_PER_LAYER_STEP = 6      # an activation, a temporary and their frees (two entries each)
MEMORY_VIZ = ("import pickle, sys; from torch.cuda import _memory_viz; "
              "page = _memory_viz.trace_plot(pickle.load(open(sys.argv[1], 'rb'))); "
              "print(len(page))")
UNPICKLE = "import pickle, sys; print(len(pickle.load(open(sys.argv[1], 'rb'))['segments']))"


def build(entries: int, layers: int, path: Path) -> int:
    """Write a snapshot of about ``entries`` history entries; returns the exact count."""
    steps = max(entries // (layers * ENTRIES_PER_LAYER_STEP), 1)
    data = Plan(steps=steps, layers=layers).build()
    path.write_bytes(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
    return len(data["device_traces"][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "snapshot_scale.json")
    args = parser.parse_args()
    byte_compile()
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "snapshot.pickle"
        entries = build(args.entries, args.layers, snapshot)
        size_mib = snapshot.stat().st_size / 2**20
        print(f"{entries} entries, {size_mib:.0f} MiB pickle", flush=True)
        tools = {
            "nsbridge": lambda i: [sys.executable, "-m", "nsbridge", "-q", "analyze",
                                   str(snapshot), "--out", str(Path(tmp) / f"run-{i}")],
            "memory_viz": lambda i: [sys.executable, "-c", MEMORY_VIZ, str(snapshot)],
            "unpickle": lambda i: [sys.executable, "-c", UNPICKLE, str(snapshot)],
        }
        samples: dict[str, list] = {name: [] for name in tools}
        for i in range(args.runs):           # interleaved: a slow moment hits every tool
            for name, argv in tools.items():
                samples[name].append(measure(argv(i)))
                print(f"run {i + 1} {name}: {samples[name][-1].wall_s:.1f} s, "
                      f"{samples[name][-1].peak_mib:.0f} MiB", flush=True)
    rows = {name: {"wall_s": round(statistics.median(s.wall_s for s in runs), 2),
                   "wall_s_range": [round(min(s.wall_s for s in runs), 2),
                                    round(max(s.wall_s for s in runs), 2)],
                   "peak_mib": round(statistics.median(s.peak_mib for s in runs), 1)}
            for name, runs in samples.items()}
    ours = rows["nsbridge"]
    write_result(args.out, "snapshot_scale", entries=entries, pickle_mib=round(size_mib, 1),
                 runs=args.runs, tools=rows,
                 bounds={"wall_s": 30, "peak_mib": 2048,
                         "met": ours["wall_s"] < 30 and ours["peak_mib"] < 2048},
                 vs_memory_viz={"wall": round(rows["memory_viz"]["wall_s"] / ours["wall_s"], 2),
                                "peak": round(rows["memory_viz"]["peak_mib"] / ours["peak_mib"],
                                              2)})
    for name, row in rows.items():
        print(f"{name:11s} {row['wall_s']:7.2f} s  {row['peak_mib']:7.0f} MiB")


if __name__ == "__main__":
    main()
