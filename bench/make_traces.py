"""Build large torch.profiler traces from a real one by replicating its steps.

Each copy of the base trace's events is shifted in time by the trace's span, gets fresh
``correlation`` / ``External id`` / flow ``id`` values (offset per copy, so every kernel
still links to its own launch and op) and renumbered ``ProfilerStep#N`` names. Written as
plain JSON, event by event, so building a 3M-event file needs little memory.

    python bench/make_traces.py --events 1000000 --out bench/data/trace_1m.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

# a real V100 training trace (68k events, 5 steps); the bundled H100 test trace otherwise
SHARED_BASE = (Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real" / "hta"
               / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
BUNDLED_BASE = (Path(__file__).resolve().parents[1] / "tests" / "data" / "torch"
                / "h100_bert-small_2025-07.json.gz")
DEFAULT_BASE = SHARED_BASE if SHARED_BASE.is_file() else BUNDLED_BASE
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_KEYS = ("External id", "correlation", "external id")


def build(base: Path, events: int, out: Path) -> int:
    """Write a trace with about ``events`` events; return the exact count written."""
    doc = json.loads(gzip.open(base).read() if base.suffix == ".gz" else base.read_bytes())
    source = doc.pop("traceEvents")
    timed = [e for e in source if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start
    id_stride = 1 + max(int(e.get("args", {}).get(k, 0) or 0) for e in source for k in _ID_KEYS
                        if isinstance(e.get("args", {}).get(k, 0), (int, float)))
    id_stride = max(id_stride, 1 + max((int(e["id"]) for e in source
                                        if isinstance(e.get("id"), int)), default=0))
    steps = sorted({int(m.group(1)) for e in source
                    if (m := _STEP.match(str(e.get("name", ""))))})
    step_stride = (steps[-1] - steps[0] + 1) if steps else 0
    meta = [e for e in source if e.get("ph") == "M"]
    body = [e for e in source if e.get("ph") != "M"]
    written = 0
    with out.open("w") as fh:
        head = json.dumps(doc)[:-1]  # the other keys, without the closing brace
        fh.write(head + (", " if len(doc) else "") + '"traceEvents": [\n')
        first = True
        for e in meta:
            fh.write(("" if first else ",\n") + json.dumps(e))
            first = False
            written += 1
        copy = 0
        while written < events:
            for e in body:
                fh.write(",\n" + json.dumps(_shift(e, copy, span, id_stride, step_stride)))
                written += 1
                if written >= events:
                    break
            copy += 1
        fh.write("\n]}\n")
    return written


def _shift(event: dict, copy: int, span: float, id_stride: int, step_stride: int) -> dict:
    if copy == 0:
        return event
    e = dict(event)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + copy * span
    if isinstance(e.get("id"), int):
        e["id"] = e["id"] + copy * id_stride
    args = e.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in _ID_KEYS:
            if isinstance(args.get(key), int) and args[key] > 0:
                args[key] = args[key] + copy * id_stride
        e["args"] = args
    match = _STEP.match(str(e.get("name", "")))
    if match:
        e["name"] = f"ProfilerStep#{int(match.group(1)) + copy * step_stride}"
    return e


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", type=Path, default=DEFAULT_BASE)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    n = build(args.base, args.events, args.out)
    print(f"{args.out}: {n} events, {args.out.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
