"""What nsbridge's two C extensions buy on a large trace: the C nesting sweep
(nsbridge/model/_nest.c) against its numpy path, and the C scanner (nsbridge/parse/_scan.c)
against the msgspec reader, in one run.

Each mode runs the user's command, ``nsbridge -q analyze TRACE --out DIR``, as a separate
process, the modes interleaved, ``--runs`` times each:

  c          both extensions (a wheel, or an install with a C compiler)
  numpy-nest the C scanner; _nest made unimportable, so numpy nests the ops
  msgspec    _nest; _scan made unimportable, so msgspec reads every batch
  no-c       neither, as an install without a C compiler has it

An extension is made unimportable by a meta-path finder that raises ImportError for it,
which is what nsbridge sees where it was never compiled. Inside each process the nesting
step is timed where the analysis calls it: ``build_tree`` (sorting the ops and finding
each op's parent and depth; ``_parents`` and ``_depths`` are the parts _nest.c replaces)
and ``HostTree.enclosing_codes`` (the innermost op around each launch, allocation and
sync). The median wall time, peak RSS and step times of each mode are written to
bench/results/nest_scale.json with the machine they ran on.

    python bench/nest_scale.py [--events 1000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _measure import byte_compile, measure, write_result
from trace_scale import ensure_trace   # the same traces as trace_scale.py

HERE = Path(__file__).resolve().parent

MODES = {"c": (), "numpy-nest": ("nsbridge.model._nest",),
         "msgspec": ("nsbridge.parse._scan",),
         "no-c": ("nsbridge.model._nest", "nsbridge.parse._scan")}

# The child: hide the named extensions, time the nesting step where the analysis calls it,
# run the nsbridge command as `python -m nsbridge` does, write the timers at exit.
CHILD = r"""
import atexit, importlib.abc, importlib.machinery, json, sys, time
timers_path, hidden, argv = sys.argv[1], set(sys.argv[2].split(",")) - {""}, sys.argv[3:]
NESTING = "nsbridge.model.host.nesting"
timers = {}

def timed(name, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timers[name] = timers.get(name, 0.0) + time.perf_counter() - start
    return wrapper

class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in hidden:
            raise ImportError(f"{name} hidden by bench/nest_scale.py")
        if name != NESTING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            for fn in ("build_tree", "_parents", "_depths"):
                setattr(module, fn, timed(fn, getattr(module, fn)))
            tree = module.HostTree
            tree.enclosing_codes = timed("enclosing_codes", tree.enclosing_codes)
            timers["native_nesting"] = module.native_nesting()
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Hook())

@atexit.register
def dump():
    from nsbridge.parse._stream import native_scanner
    timers["native_scanner"] = native_scanner()
    with open(timers_path, "w") as out:
        json.dump(timers, out)

sys.argv = ["nsbridge", *argv]
from nsbridge.cli import command
command()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "nest_scale.json")
    args = parser.parse_args()
    byte_compile()
    trace = ensure_trace(args.events)
    samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            for mode, hidden in MODES.items():
                timers = Path(scratch) / f"{mode}-{run}.json"
                out = Path(scratch) / f"{mode}-{run}"
                sample = measure([sys.executable, "-c", CHILD, str(timers), ",".join(hidden),
                                  "-q", "analyze", str(trace), "--out", str(out)])
                steps = json.loads(timers.read_text())
                assert steps["native_nesting"] == ("nsbridge.model._nest" not in hidden), steps
                assert steps["native_scanner"] == ("nsbridge.parse._scan" not in hidden), steps
                samples[mode].append({"wall_s": sample.wall_s, "peak_rss_mib": sample.peak_mib,
                                      **{k: v for k, v in steps.items()
                                         if not k.startswith("native_")}})
    rows: list[dict[str, Any]] = []
    keys = ["wall_s", "peak_rss_mib", "build_tree", "_parents", "_depths", "enclosing_codes"]
    for mode, runs in samples.items():
        row: dict[str, Any] = {"mode": mode, "hidden": list(MODES[mode])}
        for key in keys:
            row[key] = round(statistics.median(r.get(key, 0.0) for r in runs),
                             1 if key == "peak_rss_mib" else 4)
        row["nesting_s"] = round(statistics.median(r.get("build_tree", 0.0)
                                                   + r.get("enclosing_codes", 0.0)
                                                   for r in runs), 4)
        row["runs_wall_s"] = [round(r["wall_s"], 3) for r in runs]
        rows.append(row)
        print(f"{mode:<11} wall {row['wall_s']:6.3f} s  rss {row['peak_rss_mib']:6.0f} MiB  "
              f"nesting {row['nesting_s']:6.3f} s (build_tree {row['build_tree']:.3f}: "
              f"_parents {row['_parents']:.3f} _depths {row['_depths']:.3f}; "
              f"enclosing {row['enclosing_codes']:.3f})")
    by = {r["mode"]: r for r in rows}
    c, numpy_nest, no_c = by["c"], by["numpy-nest"], by["no-c"]
    summary = {
        "events": args.events,
        "nesting_speedup_c_vs_numpy": round(numpy_nest["nesting_s"] / c["nesting_s"], 2),
        "nesting_saved_s": round(numpy_nest["nesting_s"] - c["nesting_s"], 3),
        "nesting_saved_share_of_c_wall": round((numpy_nest["nesting_s"] - c["nesting_s"])
                                               / c["wall_s"], 3),
        "wall_numpy_nest_vs_c": round(numpy_nest["wall_s"] / c["wall_s"], 3),
        "wall_msgspec_vs_c": round(by["msgspec"]["wall_s"] / c["wall_s"], 3),
        "wall_no_c_vs_c": round(no_c["wall_s"] / c["wall_s"], 3),
    }
    print(json.dumps(summary, indent=1))
    write_result(args.out, "nest_scale", events=args.events, runs=args.runs,
                 file_mb=round(trace.stat().st_size / 1e6, 1), results=rows, summary=summary)


if __name__ == "__main__":
    main()
