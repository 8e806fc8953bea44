"""How long a damaged trace takes to fail, next to the clean read of the same file.

Builds a ~100 MB trace from a real GPU trace (bench/make_traces.py), then times, as separate
processes, interleaved, ``--runs`` times each (median wall time and peak RSS):

  clean      `nsbridge.parse.torch_trace.read_trace` of the intact file
  corrupt@P  the same file with one event's opening brace replaced by '#' at P % of it
  NUL tail   the file's first 10 MB followed by 300 MiB of NUL bytes
  json.load  the stdlib's failure on the 50 % corruption, the peer any reader is measured by

Every damaged case must fail with nsbridge's one-paragraph TraceFormatError naming the byte
(the child exits 0 only then). Results go to bench/results/corrupt_trace.json with the ratio
to the clean read (the target: under 2x anywhere in the file).

    python bench/corrupt_trace.py [--events 600000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _measure import measure

HERE = Path(__file__).resolve().parent
READ = """
import sys
from nsbridge.errors import TraceFormatError
from nsbridge.parse.torch_trace import read_trace
try:
    read_trace(sys.argv[1])
    print("read")
except TraceFormatError as exc:
    print(str(exc)[:160])
"""
STDLIB = """
import json, sys
try:
    json.load(open(sys.argv[1], "rb"))
    print("read")
except ValueError as exc:
    print(str(exc)[:160])
"""
WHERE = (0.1, 0.5, 0.9, 0.999)


def _damage(clean: bytes, where: float) -> bytes:
    data = bytearray(clean)
    end = data.rindex(b"]")
    at = data.rindex(b'{"', 0, int(end * where))
    data[at] = ord("#")
    return bytes(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=600_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="nsbridge-corrupt-"))
    clean = folder / "clean.json"
    subprocess.run([sys.executable, str(HERE / "make_traces.py"), "--events", str(args.events),
                    "--out", str(clean)], check=True)
    data = clean.read_bytes()
    cases = {"clean": clean}
    for where in WHERE:
        cases[f"corrupt@{where:.1%}"] = folder / f"corrupt-{where}.json"
        cases[f"corrupt@{where:.1%}"].write_bytes(_damage(data, where))
    cases["NUL tail"] = folder / "nul.json"
    with cases["NUL tail"].open("wb") as fh:
        fh.write(data[:10_000_000])
        for _ in range(300):
            fh.write(b"\0" * (1 << 20))
    argv = {name: [sys.executable, "-c", READ, str(path)] for name, path in cases.items()}
    argv["json.load corrupt@50%"] = [sys.executable, "-c", STDLIB,
                                     str(cases["corrupt@50.0%"])]
    times: dict[str, list[float]] = {name: [] for name in argv}
    rss: dict[str, list[float]] = {name: [] for name in argv}
    said: dict[str, str] = {}
    for _ in range(args.runs):
        for name, command in argv.items():
            wall, peak, out, _ = measure(command)
            times[name].append(wall)
            rss[name].append(peak)
            said[name] = out
    base = statistics.median(times["clean"])
    rows = [{"case": name, "wall_s": round(statistics.median(times[name]), 3),
             "vs_clean": round(statistics.median(times[name]) / base, 2),
             "peak_rss_mib": round(statistics.median(rss[name]), 1), "said": said[name]}
            for name in argv]
    result = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "python": platform.python_version()},
              "file_mb": round(len(data) / 1e6, 1), "events": args.events, "runs": args.runs,
              "rows": rows}
    out = HERE / "results" / "corrupt_trace.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for row in rows:
        print(f"{row['case']:<24} {row['wall_s']:>7.2f} s  {row['vs_clean']:>5.2f}x  "
              f"{row['peak_rss_mib']:>7.1f} MiB  {row['said'][:70]}")
    print(f"-> {out}")
    for path in cases.values():
        path.unlink()
    folder.rmdir()


if __name__ == "__main__":
    main()
