"""Kernels torch.profiler hides: CUDA-graph replays and torch.compile (Triton) kernels are
counted with their device time, by op and by generated source, on real traces (checked
against a plain reading of the raw JSON) and on small synthetic ones."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from nsbridge import load, schema as S
from nsbridge.api import analyze
from nsbridge.model.analysis import analyze_events
from nsbridge.profiles import load_profile

from builders import events, kernel, launch, op
from conftest import SHARED_REAL, TORCH_DATA

THRESHOLDS = load_profile("default").analysis
GRAPH_TRACE = SHARED_REAL / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"
TRITON_TRACE = TORCH_DATA / "triton_example_a100_2024-10.json.gz"


def _raw(path: Path) -> list[dict]:
    return json.loads(gzip.open(path).read())["traceEvents"]


def _graph_step(n: int, t0: float, *, inside_op: bool = True) -> list[dict]:
    """A 100 µs step whose CUDA graph replay (one cudaGraphLaunch) runs two kernels, and
    one ordinary launch."""
    corr = 10 * n
    rows = [op(f"ProfilerStep#{n}", t0, 100, cat=S.USER_ANNOTATION)]
    if inside_op:
        rows.append(op("CUDAGraph::replay", t0 + 1, 20))
    rows += [launch(t0 + 2, corr, name="cudaGraphLaunch"),
             kernel("graph_gemm", t0 + 5, 10, corr), kernel("graph_relu", t0 + 16, 3, corr),
             op("aten::add", t0 + 30, 10), launch(t0 + 31, corr + 1),
             kernel("add_kernel", t0 + 33, 2, corr + 1)]
    return rows


def test_graph_replay_kernels_are_marked_and_counted_under_the_replaying_op() -> None:
    result = analyze_events(events(*_graph_step(1, 0), *_graph_step(2, 100)),
                            thresholds=THRESHOLDS)
    graph = result.device["cuda_graph"]
    assert (graph["launches"], graph["kernels"], graph["device_us"]) == (2, 4, 26.0)
    assert graph["by_op"] == [{"op": "CUDAGraph::replay", "kernels": 4, "device_us": 26.0}]
    replay = result.ops.set_index("name").loc["CUDAGraph::replay", "kernels"]
    assert {k["name"]: k.get("via") for k in replay} == {"graph_gemm": "cuda_graph",
                                                          "graph_relu": "cuda_graph"}
    add = result.ops.set_index("name").loc["aten::add", "kernels"]
    assert "via" not in add[0]
    work = {w["name"]: w["via"] for w in result.device["work"]}
    assert work == {"graph_gemm": "cuda_graph", "graph_relu": "cuda_graph", "add_kernel": None}
    assert "triton" not in result.device


def test_a_graph_replayed_between_ops_is_listed_with_no_op_not_dropped() -> None:
    result = analyze_events(events(*_graph_step(1, 0, inside_op=False),
                                   *_graph_step(2, 100, inside_op=False)),
                            thresholds=THRESHOLDS)
    graph = result.device["cuda_graph"]
    assert graph["by_op"] == [{"op": None, "kernels": 4, "device_us": 26.0}]
    assert result.device["attribution"]["outside_ops"] == 4


def test_triton_source_file_comes_from_the_launching_op(tmp_path: Path) -> None:
    raw = _raw(TRITON_TRACE)
    launcher = next(e for e in raw if (e.get("args") or {}).get("kernel_file"))
    device_kernel = next(e for e in raw if e.get("cat") == "kernel")
    result = analyze([TRITON_TRACE], out=tmp_path / "run")
    triton = result.report["device"]["triton"]
    assert (triton["kernels"], triton["with_source"]) == (1, 1)
    entry = triton["by_kernel"][0]
    assert entry == {"kernel": device_kernel["name"], "source": launcher["args"]["kernel_file"],
                     "op": launcher["name"], "calls": 1, "device_us": device_kernel["dur"]}
    op_kernel = next(k for o in result.report["ops"] for k in o["kernels"])
    assert op_kernel["source"] == launcher["args"]["kernel_file"]
    frame = load(tmp_path / "run").kernels
    assert frame.loc[0, "source"] == launcher["args"]["kernel_file"]
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "torch.compile (Triton) kernels: 1 launch" in markdown
    assert launcher["args"]["kernel_file"] in markdown


@pytest.mark.skipif(not GRAPH_TRACE.is_file(), reason="../shared fixtures not present")
def test_graph_kernels_of_a_real_trace_equal_a_plain_count(tmp_path: Path) -> None:
    """HTA's rank-0 trace (torch.compile with CUDA graphs, A100): every kernel whose
    correlation is a cudaGraphLaunch's, summed from the raw JSON, equals the report's.
    All 70 replays lie in the measured steps, so the whole file is the window here."""
    raw = _raw(GRAPH_TRACE)
    graph_corr = {e["args"]["correlation"] for e in raw if e.get("name") == "cudaGraphLaunch"}
    graph_kernels = [e for e in raw if e.get("cat") == "kernel"
                     and e["args"].get("correlation") in graph_corr]
    result = analyze([GRAPH_TRACE], out=tmp_path / "run")
    graph = result.report["device"]["cuda_graph"]
    assert graph["launches"] == len(graph_corr) == 70
    assert graph["kernels"] == len(graph_kernels)
    assert graph["device_us"] == pytest.approx(sum(e["dur"] for e in graph_kernels))
    assert sum(g["kernels"] for g in graph["by_op"]) == graph["kernels"]
    listed = sum(k["calls"] for o in result.report["ops"] for k in o["kernels"]
                 if k.get("via") == "cuda_graph")
    assert listed == graph["kernels"]    # each attributed to the op that replayed it
    triton = result.report["device"]["triton"]
    raw_triton = [e for e in raw if e.get("cat") == "kernel" and e["name"].startswith("triton")]
    assert triton["kernels"] == len(raw_triton) and triton["with_source"] == 0
    out = (tmp_path / "run" / "report.md").read_text()
    assert f"CUDA graphs: {graph['kernels']} kernels" in out
