"""nsbridge's window figures against an independent recomputation from the raw JSON.

The oracle below uses only the standard library (gzip, json) and the definitions written
in README "What each number means": the window runs from the first ProfilerStep's start to
the last one's end (a last step shorter than half the median of the others, with fewer
than half their median number of events, is left out: the recording ended inside it); GPU
work belongs to it when its launch call (same ``correlation``)
starts inside it, or, with no launch call in the trace, when the work itself starts
inside it; busy is the union of that work over [window start, end of the last such work],
per device, averaged over devices; NCCL overlap is the part of the NCCL kernels' union
that other kernels also cover.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from nsbridge.model.analysis import analyze_events
from nsbridge.parse.torch_trace import read_trace
from nsbridge.profiles import load_profile

from conftest import TORCH_DATA

THRESHOLDS = load_profile("default").analysis
TRACES = ["h100_bert-small_2025-07.json.gz", "mi250_rocm6.2_2024-12.json.gz",
          "nccl_ddp_a100_hta.json.gz", "h200/train_cnn_h200.json.gz",
          "h200/sync_bound_h200.json.gz"]
GPU = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
LAUNCH = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


def oracle(path: Path) -> dict:
    data = json.loads(gzip.open(path).read())
    events = data["traceEvents"] if isinstance(data, dict) else data
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e]
    steps = sorted((e for e in complete if str(e.get("name", "")).startswith("ProfilerStep#")
                    and e.get("cat") in ("user_annotation", "cpu_op")), key=lambda e: e["ts"])
    def inside(step: dict) -> int:
        lo, hi = float(step["ts"]), float(step["ts"]) + float(step["dur"])
        return sum(1 for e in events if "ts" in e and lo <= float(e["ts"]) < hi
                   and not str(e.get("name", "")).startswith("ProfilerStep#"))

    others = [float(e["dur"]) for e in steps[:-1]]
    if others and float(steps[-1]["dur"]) < 0.5 * statistics.median(others) and \
            inside(steps[-1]) < 0.5 * statistics.median([inside(e) for e in steps[:-1]]):
        steps = steps[:-1]   # the recording ended inside the last step
    lo = min(float(e["ts"]) for e in steps)
    hi = max(float(e["ts"]) + float(e["dur"]) for e in steps)
    launches = {e["args"]["correlation"]: float(e["ts"]) for e in complete
                if e.get("cat") in LAUNCH and "correlation" in e.get("args", {})}
    work = []
    for e in complete:
        if e.get("cat") not in GPU:
            continue
        at = launches.get(e.get("args", {}).get("correlation"), float(e["ts"]))
        if lo <= at < hi:
            work.append(e)
    end = max([hi] + [float(e["ts"]) + float(e["dur"]) for e in work])
    by_device: dict = defaultdict(list)
    for e in work:
        s = float(e["ts"])
        by_device[e.get("args", {}).get("device", e.get("pid"))].append(
            (max(s, lo), min(s + float(e["dur"]), end)))
    busy = [100 * _length(_union(v)) / (end - lo) for v in by_device.values()]
    per_kernel: dict = defaultdict(float)
    for e in work:
        if e.get("cat") in ("kernel", "Kernel"):
            per_kernel[e["name"]] += float(e["dur"])
    kernels = [(float(e["ts"]), float(e["ts"]) + float(e["dur"]), "nccl" in e["name"].lower())
               for e in work if e.get("cat") in ("kernel", "Kernel")]
    comm = _union([(s, e) for s, e, c in kernels if c])
    rest = _union([(s, e) for s, e, c in kernels if not c])
    overlap = sum(max(0.0, min(e, re) - max(s, rs)) for s, e in comm for rs, re in rest)
    return {"busy_pct": sum(busy) / len(busy), "per_kernel": dict(per_kernel),
            "comm_us": _length(comm), "overlap_us": overlap, "window": (lo, hi)}


@pytest.mark.parametrize("name", TRACES)
def test_busy_and_kernel_totals_equal_the_recomputation(name: str) -> None:
    path = TORCH_DATA / name
    expected = oracle(path)
    result = analyze_events(read_trace(path).events, thresholds=THRESHOLDS)
    assert (result.window["start_us"], result.window["end_us"]) == pytest.approx(
        expected["window"], abs=1e-3)
    assert result.device["busy_pct"] == pytest.approx(expected["busy_pct"], abs=0.01)
    ours: dict = defaultdict(float)
    for w in result.device["work"]:
        if w["kind"] == "kernel":
            ours[w["name"]] += w["device_us"]
    assert set(ours) == set(expected["per_kernel"])
    for kernel_name, us in expected["per_kernel"].items():
        assert ours[kernel_name] == pytest.approx(us, rel=1e-6, abs=0.01), kernel_name


def test_nccl_overlap_equals_the_recomputation() -> None:
    path = TORCH_DATA / "nccl_ddp_a100_hta.json.gz"
    expected = oracle(path)
    comm = analyze_events(read_trace(path).events, thresholds=THRESHOLDS).device["comm"]
    assert expected["comm_us"] > 0
    assert comm["comm_us"] == pytest.approx(expected["comm_us"], abs=0.01)
    assert comm["overlap_us"] == pytest.approx(expected["overlap_us"], abs=0.01)
