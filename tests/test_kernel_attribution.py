"""Kernels, copies and memsets reach the op that launched them: on real GPU traces (new and
old correlation linking, a driver-API Triton launch, ROCm), checked against an independent
computation from the raw JSON. What `analyze` accepts as input is in test_analyze_inputs.py."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from nsbridge.api import analyze

from conftest import TORCH_DATA

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def independent_kernels_per_op(path: Path) -> tuple[dict, dict]:
    """(op, kernel, category) -> total µs by a naive, loop-based reading of the raw JSON,
    and the count of GPU events with no op: {"no_launch": n, "outside_ops": n}.

    New traces: the GPU event's External id names the op. Otherwise (and as fallback):
    correlation -> launch call -> latest-starting host op on that thread containing it.
    """
    raw = json.loads(gzip.open(path).read())["traceEvents"]
    aliases = {"runtime": "cuda_runtime", "driver": "cuda_driver"}

    def cat(e: dict) -> str:
        c = str(e.get("cat", "")).lower()
        return aliases.get(c, c)

    host = [e for e in raw if e.get("ph") == "X" and cat(e) in ("cpu_op", "user_annotation")]
    gpu = [e for e in raw if e.get("ph") == "X" and cat(e) in GPU_CATS]
    launches = {}
    for e in raw:
        if e.get("ph") == "X" and cat(e) in ("cuda_runtime", "cuda_driver"):
            launches.setdefault((e.get("args") or {}).get("correlation"), e)
    ext_to_op = {}
    for e in host:
        ext_to_op.setdefault((e.get("args") or {}).get("External id"), e)
    ext_differs = [(e["args"].get("External id") != e["args"].get("correlation"))
                   for e in gpu if "External id" in e.get("args", {})]
    new = bool(ext_differs) and sum(ext_differs) / len(ext_differs) > 0.5
    totals: dict = defaultdict(float)
    unattributed = {"no_launch": 0, "outside_ops": 0}
    for k in gpu:
        args = k.get("args") or {}
        owner = ext_to_op.get(args.get("External id")) if new else None
        if owner is None:
            call = launches.get(args.get("correlation"))
            if call is not None:
                inside = [h for h in host if h["pid"] == call["pid"] and h["tid"] == call["tid"]
                          and h["ts"] <= call["ts"] <= h["ts"] + h["dur"]]
                if inside:
                    owner = max(inside, key=lambda h: (h["ts"], -h["dur"]))
        if owner is None or owner["name"].startswith("ProfilerStep#"):
            no_launch = launches.get(args.get("correlation")) is None and owner is None
            unattributed["no_launch" if no_launch else "outside_ops"] += 1
            continue
        totals[(owner["name"], k["name"], cat(k))] += k["dur"]
    return dict(totals), unattributed


def reported_kernels_per_op(report: dict) -> dict:
    kernels = {(op["name"], k["name"], "kernel"): k["device_us"]
               for op in report["ops"] for k in op["kernels"]}
    copies = {(op["name"], c["name"], {"memcpy": "gpu_memcpy", "memset": "gpu_memset"}[c["kind"]]):
              c["device_us"] for op in report["ops"] for c in op["copies"]}
    return {**kernels, **copies}


@pytest.mark.parametrize("name", [
    "h100_bert-small_2025-07.json.gz",            # new linking, fractional ts
    "critical_path_simple_add_a100_2023-09.json.gz",  # old linking, integer ts
    "triton_example_a100_2024-10.json.gz",         # driver-API launch
    "mi250_rocm6.2_2024-12.json.gz",               # ROCm
])
def test_kernels_per_op_match_an_independent_computation(name: str, tmp_path: Path) -> None:
    result = analyze([TORCH_DATA / name], out=tmp_path / "run")
    expected, unattributed = independent_kernels_per_op(TORCH_DATA / name)
    got = reported_kernels_per_op(result.report)
    assert got.keys() == expected.keys()   # every kernel listed as a kernel, every copy as a copy
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-3), key
    device = result.report["device"]
    assert device["attribution"].get("launched_before_window", 0) == unattributed["no_launch"]
    assert device["attribution"].get("outside_ops", 0) == unattributed["outside_ops"]
    n_gpu = sum(device["attribution"].values())
    assert n_gpu == sum(k["calls"] for op in result.report["ops"]
                        for k in [*op["kernels"], *op["copies"]]) + sum(unattributed.values())


def test_gpu_trace_report_has_kernels_per_op_and_busy(tmp_path: Path) -> None:
    result = analyze([TORCH_DATA / "h100_bert-small_2025-07.json.gz"], out=tmp_path / "run")
    report = result.report
    assert report["ranked_by"] == "device_self_us"
    top = report["ops"][0]
    assert top["name"] == "aten::addmm" and top["kernels"] and top["device_self_us"] > 0
    assert 0 < report["device"]["busy_pct"] < 100
    assert report["device"]["linking"] == "new"
    assert report["verdict"]["label"] in {"gpu-bound", "cpu-bound", "sync-bound", "input-bound"}
    # the item() in HF's mask utils: a sync point with its Python line from the trace's stacks
    item = [p for p in report["sync_points"] if p["kind"] == "item"]
    assert item and item[0]["file"].endswith("modeling_attn_mask_utils.py")
    assert report["ops"][0]["mem_mib"] is not None
    # the frames behind the report
    assert result.ops.iloc[0]["name"] == "aten::addmm"
    for name in ("report.json", "report.md", "report.html", "ops.csv", "manifest.json"):
        assert (result.run_dir / name).is_file()


def test_old_linking_trace_is_detected(tmp_path: Path) -> None:
    result = analyze([TORCH_DATA / "critical_path_simple_add_a100_2023-09.json.gz"],
                     out=tmp_path / "run")
    assert result.report["device"]["linking"] == "old"
    names = [op["name"] for op in result.report["ops"][:5]]
    assert "aten::cudnn_convolution" in names and "aten::addmm" in names


def test_triton_kernel_is_attributed_through_the_driver_launch(tmp_path: Path) -> None:
    result = analyze([TORCH_DATA / "triton_example_a100_2024-10.json.gz"], out=tmp_path / "run")
    kernels = [k for op in result.report["ops"] for k in op["kernels"]]
    attribution = result.report["device"]["attribution"]
    assert len(kernels) == 1 and set(attribution) == {"external_id"}
