"""Step breakdown, verdict and recommendations on synthetic frames."""

from __future__ import annotations

import pytest

from nsbridge import schema as S
from nsbridge.model.analysis import analyze_events
from nsbridge.model.host.nesting import build_host_tree
from nsbridge.model.host.steps import step_breakdown, step_windows
from nsbridge.profiles import load_profile

from builders import events, kernel, launch, op

THRESHOLDS = load_profile("default").analysis


def _training_step(n: int, t0: float, data: float, gpu_busy: bool = True) -> list[dict]:
    """One step of 100 µs: data, forward (linear->addmm + launch), backward, optimizer."""
    corr = 1000 + n
    rows = [
        op(f"ProfilerStep#{n}", t0, 100, cat=S.USER_ANNOTATION),
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, data,
           cat=S.USER_ANNOTATION),
        op("aten::linear", t0 + data + 1, 20),
        op("aten::addmm", t0 + data + 2, 15),
        launch(t0 + data + 3, corr),
        op("autograd::engine::evaluate_function: AddmmBackward0", t0 + data + 30, 20),
        op("Optimizer.step#SGD.step", t0 + data + 55, 10, cat=S.USER_ANNOTATION),
    ]
    if gpu_busy:
        rows.append(kernel("gemm_kernel", t0 + data + 5, 90 - data, corr))
    return rows


def test_breakdown_sums_to_the_step() -> None:
    frame = events(*_training_step(1, 0, 10), *_training_step(2, 100, 10))
    tree = build_host_tree(frame)
    windows = step_windows(frame, tree)
    assert list(windows["step"]) == [1, 2]
    bd = step_breakdown(frame, tree, windows)
    row = bd.iloc[0]
    assert row["wall_ms"] == pytest.approx(0.1)
    assert row["data_ms"] == pytest.approx(0.010)
    assert row["forward_ms"] == pytest.approx(0.020)
    assert row["backward_ms"] == pytest.approx(0.020)
    assert row["optimizer_ms"] == pytest.approx(0.010)
    parts = row[["data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms"]].sum()
    assert parts == pytest.approx(row["wall_ms"])


def test_input_bound_when_data_dominates() -> None:
    frame = events(*_training_step(1, 0, 60), *_training_step(2, 100, 60))
    result = analyze_events(frame, thresholds=THRESHOLDS)
    assert result.verdict["label"] == "input-bound"
    assert "data loading takes 60%" in result.verdict["evidence"][0]
    assert result.recommendations[0]["id"] == "dataloader-workers"


def test_gpu_bound_when_the_device_is_busy() -> None:
    frame = events(*_training_step(1, 0, 5), *_training_step(2, 100, 5))
    result = analyze_events(frame, thresholds=THRESHOLDS)
    assert result.has_device and result.device["busy_pct"] > 80
    assert result.verdict["label"] == "gpu-bound"
    addmm = result.ops.set_index("name").loc["aten::addmm"]
    assert addmm["device_self_us"] == pytest.approx(2 * 85)
    linear = result.ops.set_index("name").loc["aten::linear"]
    assert linear["device_self_us"] == 0 and linear["device_total_us"] == pytest.approx(170)


def test_cpu_bound_when_the_device_idles() -> None:
    rows = _training_step(1, 0, 5) + _training_step(2, 100, 5)
    frame = events(*[r for r in rows if r[S.CAT] != S.KERNEL],
                   kernel("tiny", 10, 3, 1001), kernel("tiny", 110, 3, 1002))
    result = analyze_events(frame, thresholds=THRESHOLDS)
    assert result.verdict["label"] == "cpu-bound"
    assert "busy only" in result.verdict["evidence"][0]
    gap = result.device["idle_gaps"][0]
    assert gap["dur_us"] > 50 and gap["host_op"] is not None


def test_no_device_fields_are_null_not_zero() -> None:
    frame = events(*[r for r in _training_step(1, 0, 5) if r[S.CAT] == S.CPU_OP
                     or r[S.CAT] == S.USER_ANNOTATION])
    result = analyze_events(frame, thresholds=THRESHOLDS)
    assert not result.has_device
    assert result.ops["device_self_us"].isna().all()
    assert result.verdict["label"] == "cpu-bound" and result.verdict["cannot_conclude"]


def test_whole_recording_when_there_are_no_steps() -> None:
    frame = events(op("aten::mm", 0, 50), op("aten::relu", 60, 10))
    result = analyze_events(frame, thresholds=THRESHOLDS)
    assert list(result.steps["step"]) == [-1]
    assert any("no training steps" in c for c in result.verdict["cannot_conclude"])
