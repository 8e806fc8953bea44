"""What holds the peak (model.device.memory_holders): blocks paired by address, named by
kind, op, module and line, checked on synthetic events with known answers and on real
traces against an independent pairing of their memory events in plain Python."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nsbridge
from builders import events, op
from nsbridge import schema as S
from nsbridge.model.device.memory_holders import memory_holders
from nsbridge.model.host.nesting import build_host_tree
from nsbridge.report.views.memory_view import memory_charts

DATA = Path(__file__).parent / "data" / "torch"
CPU_TRACE = DATA / "cpu_memory" / "train_cnn_cpu_memory.json.gz"
GPU_TRACE = DATA / "h200" / "train_cnn_h200.json.gz"
MIB = 2 ** 20


def _alloc(ts: float, addr: int, mib: float) -> dict:
    return {S.CAT: S.MEMORY, S.NAME: "[memory]", S.PH: "i", S.TS: ts, S.DUR: 0.0,
            S.BYTES: mib * MIB, S.ADDR: float(addr), S.DEVICE: -1.0}


def _py(name: str, ts: float, dur: float) -> dict:
    return op(name, ts, dur, cat=S.PYTHON_FUNCTION)


def _one_step() -> tuple[pd.DataFrame, pd.DataFrame]:
    """One step: a forward conv saves 4 MiB (freed in backward), the backward makes a
    1 MiB gradient (kept) and a 2 MiB temporary, the optimizer 0.5 MiB of state (kept)."""
    frame = events(
        op("ProfilerStep#1", 0, 100_000),
        _py("train.py(60): main", 0, 100_000),                       # running at the start
        _py("train.py(31): forward", 2_000, 8_000),
        _py("nn.Module: Conv2d_0", 2_500, 7_000),
        op("aten::conv2d", 3_000, 5_000), op("aten::empty", 3_100, 10),
        _alloc(3_105, 1, 4.0),
        op("autograd::engine::evaluate_function: ConvolutionBackward0", 50_000, 10_000),
        _alloc(51_000, 2, 1.0), _alloc(52_000, 3, 2.0), _alloc(52_500, 3, -2.0),
        _alloc(55_000, 1, -4.0),
        op("Optimizer.step#SGD.step", 70_000, 5_000), _alloc(71_000, 4, 0.5),
    )
    windows = pd.DataFrame({"step": [1], "start": [0.0], "end": [100_000.0]})
    return frame, windows


def _holders(frame: pd.DataFrame, windows: pd.DataFrame) -> dict:
    mem = frame[frame[S.CAT] == S.MEMORY].sort_values(S.TS).reset_index(drop=True)
    level = np.cumsum(mem[S.BYTES].to_numpy())
    result = memory_holders(mem, int(np.argmax(level)), frame, build_host_tree(frame), windows,
                            None)
    assert result is not None
    return result


def test_each_block_at_the_peak_is_named_by_kind_op_module_and_line() -> None:
    frame, windows = _one_step()
    h = _holders(frame, windows)
    assert h["named_mib"] == 7.0 and h["blocks"] == 3      # 4 + 1 + 2 live at 52,000 µs
    rows = {r["kind"]: r for r in h["rows"]}
    assert set(rows) == {"activations", "gradients", "temporaries"}
    act = rows["activations"]
    assert (act["mib"], act["op"], act["module"], act["line"]) == (
        4.0, "aten::conv2d", "Conv2d_0", "train.py:31 forward")
    assert rows["gradients"]["op"] == "ConvolutionBackward0"
    assert rows["gradients"]["line"] == "train.py main"    # a frame running at the start
    assert rows["temporaries"]["mib"] == 2.0
    assert {k["kind"]: k["mib"] for k in h["kinds"]} == {
        "activations": 4.0, "gradients": 1.0, "temporaries": 2.0}
    end = h["per_step_end"][0]
    assert (end["gradients"], end["optimizer state"], end["activations"]) == (1.0, 0.5, 0.0)


def test_without_addresses_nothing_is_claimed() -> None:
    frame, windows = _one_step()
    frame[S.ADDR] = np.nan
    mem = frame[frame[S.CAT] == S.MEMORY].sort_values(S.TS).reset_index(drop=True)
    assert memory_holders(mem, 0, frame, build_host_tree(frame), windows, None) is None


def _independent_live_at_peak(path: Path, window: dict, gpu: bool) -> tuple[float, float]:
    """Live MiB at the allocator's peak inside the window, pairing allocations and frees
    by address with a dict (json alone), and the peak level itself."""
    raw = json.loads(gzip.open(path).read())["traceEvents"]
    mem = sorted((e for e in raw if e.get("name") == "[memory]"
                  and (e["args"].get("Device Id", -1) >= 0) == gpu
                  and window["start_us"] <= e["ts"] < window["end_us"]), key=lambda e: e["ts"])
    live: dict[int, float] = {}
    level, peak_level, peak_live = 0.0, -1e300, 0.0
    for e in mem:
        nbytes = e["args"]["Bytes"]
        if nbytes > 0:
            live[e["args"]["Addr"]] = nbytes
        else:
            live.pop(e["args"]["Addr"], None)
        level = e["args"]["Total Allocated"] if gpu else level + nbytes
        if level > peak_level:
            peak_level, peak_live = level, sum(live.values())
    return peak_live / MIB, peak_level / MIB


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("cpu") / "run"
    return nsbridge.analyze(CPU_TRACE, out=out).report


def test_a_real_cpu_trace_holders_equal_an_independent_pairing(cpu_report: dict) -> None:
    memory = cpu_report["memory"]
    h = memory["holders"]
    live, peak = _independent_live_at_peak(CPU_TRACE, cpu_report["window"], gpu=False)
    assert h["named_mib"] == pytest.approx(live, abs=1e-3)
    assert memory["peak_mib"] == pytest.approx(peak, abs=1e-3)
    assert sum(k["mib"] for k in h["kinds"]) == pytest.approx(live, abs=0.01)
    assert h["with_stacks"] and h["before_mib"] is None      # host: levels since the start
    # the first conv's output, saved for its backward (32x32x32x32 floats = 4 MiB)
    assert {"kind": "activations", "module": "Conv2d_0", "op": "aten::conv2d",
            "line": "train_cnn.py:31 forward", "mib": 4.0, "blocks": 1} in h["rows"]
    assert [k["kind"] for k in h["kinds"]][:2] == ["activations", "gradients"]


def test_the_cpu_report_shows_what_holds_the_peak(cpu_report: dict, tmp_path: Path) -> None:
    run = nsbridge.analyze(CPU_TRACE, out=tmp_path / "run")
    text = (tmp_path / "run" / "report.md").read_text()
    assert "What holds the peak: 26.5 MiB in 23 blocks made in the window" in text
    assert "| 4.0 | activations | `Conv2d_0` | `aten::conv2d` | `train_cnn.py:31 forward` | 1 |" \
        in text
    assert run.report["memory"]["holders"] == cpu_report["memory"]["holders"]
    html = (tmp_path / "run" / "report.html").read_text()
    assert "chart-pass-memory_kinds" in html


def test_the_chart_draws_the_kinds_at_the_peak_and_each_step_end(cpu_report: dict) -> None:
    (chart,) = memory_charts(cpu_report)
    holders = cpu_report["memory"]["holders"]
    assert chart["labels"] == ["peak", "end of measured step 1", "end of measured step 2"]
    for kind, values in chart["series"].items():
        at_peak = next((k["mib"] for k in holders["kinds"] if k["kind"] == kind), 0.0)
        assert values == [at_peak, *(end[kind] for end in holders["per_step_end"])]
    assert chart["series"]["gradients"][1] > 0 and chart["series"]["activations"][1] == 0


def test_a_real_gpu_trace_splits_the_peak_into_named_and_earlier_bytes(tmp_path: Path) -> None:
    report = nsbridge.analyze(GPU_TRACE, out=tmp_path / "run").report
    memory, h = report["memory"], report["memory"]["holders"]
    live, peak = _independent_live_at_peak(GPU_TRACE, report["window"], gpu=True)
    assert memory["peak_mib"] == pytest.approx(peak, abs=1e-3)   # torch's own total
    assert h["named_mib"] == pytest.approx(live, abs=1e-3)
    assert h["named_mib"] + h["before_mib"] == pytest.approx(peak, abs=2e-3)
    assert h["named_pct"] == pytest.approx(100 * live / peak, abs=0.1)
    assert not h["with_stacks"] and all(r["module"] is None for r in h["rows"])
    kinds = {k["kind"] for k in h["kinds"]}
    assert {"activations", "temporaries", "inputs"} <= kinds    # the batch moved by .to()
