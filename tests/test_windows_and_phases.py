"""One measured window, steps as the loop has them, phases that add up, syncs in their
place: synthetic loops of the shapes real scripts have, and real traces from tests/data."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsbridge import schema as S
from nsbridge.model.analysis import analyze_events
from nsbridge.model.host.nesting import build_host_tree
from nsbridge.model.host.steps import PHASES, drop_partial_steps, step_breakdown, step_windows
from nsbridge.model.host.syncs import placement
from nsbridge.parse.torch_trace import read_trace
from nsbridge.profiles import load_profile

from builders import events, kernel, launch, op
from conftest import TORCH_DATA

THRESHOLDS = load_profile("default").analysis
BWD = "autograd::engine::evaluate_function: AddmmBackward0"


def _phases(rows: list[dict]) -> dict[str, float]:
    frame = events(*rows)
    tree = build_host_tree(frame)
    steps = step_breakdown(frame, tree, step_windows(frame, tree))
    assert len(steps) == 1
    row = steps.iloc[0]
    assert sum(row[p] for p in PHASES) == pytest.approx(row["wall_ms"])   # they add up
    return {p[:-3]: round(row[p] * 1e3, 3) for p in PHASES}


def test_gan_forwards_after_the_first_backward_are_forward() -> None:
    """D forward, D backward, D step, G forward, G backward, G step (two optimizers)."""
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION),
            op("aten::conv2d", 0, 10), op(BWD, 10, 10),
            op("Optimizer.step#Adam.step", 20, 5, cat=S.USER_ANNOTATION),
            op("aten::conv_transpose2d", 30, 20), op(BWD, 50, 20),
            op("Optimizer.step#Adam.step", 70, 5, cat=S.USER_ANNOTATION)]
    assert _phases(rows) == {"data": 0, "forward": 30, "backward": 30, "optimizer": 10,
                             "other": 30}


def test_lbfgs_closures_inside_the_optimizer_step_add_up() -> None:
    """One LBFGS step running two closures (forward + backward each), then its update."""
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION),
            op("Optimizer.step#LBFGS.step", 0, 90, cat=S.USER_ANNOTATION),
            op("Optimizer.zero_grad#LBFGS.zero_grad", 1, 1, cat=S.USER_ANNOTATION),
            op("aten::linear", 2, 9), op(BWD, 12, 10),        # closure 1
            op("aten::linear", 30, 10), op(BWD, 41, 10),      # closure 2
            op("aten::dot", 60, 20)]                          # LBFGS's own update
    got = _phases(rows)
    # not 0 + 20 + 20 + 90 = 130 % of the step: every instant counted once, and the
    # closure's zero_grad is the optimizer's; the optimizer range up to the first backward
    # (0..12, less zero_grad) is the first closure's forward, its Python included
    assert got == {"data": 0, "forward": 21, "backward": 20, "optimizer": 49, "other": 10}


def test_a_training_step_inside_the_optimizers_step_is_forward_python_included() -> None:
    """Lightning's automatic optimization: optimizer.step(closure) runs training_step (ops
    with Python between them), backward, then the update. The Python of training_step was
    the optimizer's: 'optimizer 52 %, forward 6 %' where the update was about 27 %."""
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION),
            op("Optimizer.step#Adam.step", 0, 100, cat=S.USER_ANNOTATION),
            op("aten::linear", 5, 5), op("aten::relu", 30, 5),    # training_step, Python
            op("aten::mse_loss", 50, 5),                          # before and between ops
            op("Optimizer.zero_grad#Adam.zero_grad", 56, 2, cat=S.USER_ANNOTATION),
            op(BWD, 60, 20),                                       # backward
            op("aten::_foreach_add_", 85, 10)]                     # the update
    got = _phases(rows)
    assert got == {"data": 0, "forward": 58, "backward": 20, "optimizer": 22, "other": 0}


def test_an_inference_step_without_backward_is_forward_python_between_ops_included() -> None:
    """The 10 µs between linear and relu is the model's Python (module calls, hooks): a
    stopwatch around model(x) counts it, so forward does (a Hugging Face GPT-2 forward was
    12 % short without it); after the last op is the loop's, not the model's."""
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION),
            op("aten::linear", 0, 30), op("aten::relu", 40, 10)]
    assert _phases(rows) == {"data": 0, "forward": 50, "backward": 0, "optimizer": 0,
                             "other": 50}


def test_python_between_forward_ops_stops_at_data_optimizer_and_backward() -> None:
    """Two forwards around a DataLoader fetch and an optimizer step: the gaps around them
    are between phases, not inside a forward."""
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION),
            op("aten::linear", 0, 10), op("aten::relu", 15, 5),             # gap 10..15: fwd
            op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 30, 10,
               cat=S.USER_ANNOTATION),
            op("aten::linear", 50, 10),                                      # 20..50: not
            op("Optimizer.zero_grad#SGD.zero_grad", 65, 5, cat=S.USER_ANNOTATION),
            op("aten::relu", 75, 5), op(BWD, 85, 10)]                        # 60..75: not
    assert _phases(rows) == {"data": 10, "forward": 35, "backward": 10, "optimizer": 5,
                             "other": 40}


def test_ops_after_the_last_backward_are_not_forward() -> None:
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION),
            op("aten::linear", 0, 20), op(BWD, 20, 20),
            op("aten::norm", 45, 10),                          # clip_grad_norm_
            op("Optimizer.step#SGD.step", 60, 10, cat=S.USER_ANNOTATION)]
    assert _phases(rows) == {"data": 0, "forward": 20, "backward": 20, "optimizer": 10,
                             "other": 50}


def test_the_wait_for_gradient_sync_inside_loss_backward_is_backward() -> None:
    """DDP on gloo (2 ranks): loss.backward() waited 4.2 ms for the gradients' all-reduce
    after its last autograd op, in no op, and the report read backward 27 ms, other 30 ms
    where a stopwatch said backward 55 ms, other 0. nsbridge's range around the call
    (nsbridge::backward, _bootstrap.steps) makes that wait backward; DDP's copies of the
    reduced buckets back into the gradients run inside it too."""
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION),
            op("aten::linear", 0, 20),
            op(S.BACKWARD_RANGE, 22, 60, cat=S.USER_ANNOTATION),
            op(BWD, 23, 15), op("c10d::allreduce_", 39, 2),          # the bucket's all-reduce
            op("torch.distributed.ddp.reducer::copy_bucket_to_grad", 75, 5,
               cat=S.USER_ANNOTATION),
            op("Optimizer.step#SGD.step", 85, 10, cat=S.USER_ANNOTATION)]
    assert _phases(rows) == {"data": 0, "forward": 20, "backward": 60, "optimizer": 10,
                             "other": 10}
    # a trace captured elsewhere (no nsbridge::backward): DDP's copies of the reduced
    # buckets close the backward pass, the wait before them is backward too
    without = [r for r in rows if r[S.NAME] != S.BACKWARD_RANGE]
    assert _phases(without) == {"data": 0, "forward": 20, "backward": 57, "optimizer": 10,
                                "other": 13}
    # FSDP2's root callback, which waits for the reduce-scatters, likewise
    fsdp = [r for r in without if "ddp.reducer" not in r[S.NAME]] + [
        op("FSDP::root_post_backward_callback", 40, 40, cat=S.USER_ANNOTATION)]
    assert _phases(fsdp)["backward"] == 57 - 15 + 15
    # a sync range before the optimizer only: ranges after the optimizer are not backward
    late = [r for r in without if "ddp.reducer" not in r[S.NAME]] + [
        op("torch.distributed.ddp.reducer::copy_bucket_to_grad", 96, 2,
           cat=S.USER_ANNOTATION)]
    assert _phases(late)["backward"] == 15


def test_a_last_step_cut_by_the_recording_is_dropped() -> None:
    rows = []
    for i, t0 in enumerate((0, 100, 200), 1):
        rows += [op(f"ProfilerStep#{i}", t0, 100, cat=S.USER_ANNOTATION),
                 op("aten::mm", t0 + 1, 60), op("aten::relu", t0 + 62, 10),
                 op("aten::add", t0 + 75, 20)]
    rows += [op("ProfilerStep#4", 300, 4, cat=S.USER_ANNOTATION), op("aten::mm", 301, 2)]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert list(result.steps["step"]) == [1, 2, 3]
    assert "last step (4) is partial" in result.window["notes"][0]
    assert result.ops.set_index("name").loc["aten::mm", "calls"] == 3   # its ops left out too


def test_a_short_but_complete_last_step_is_kept() -> None:
    """Fast steps jitter: a last step half as long with as many ops is a step."""
    rows = []
    for i, (t0, length) in enumerate(((0, 200), (200, 220), (420, 80)), 1):
        rows += [op(f"ProfilerStep#{i}", t0, length, cat=S.USER_ANNOTATION),
                 op("aten::mm", t0 + 1, length / 2), op("aten::relu", t0 + 2 + length / 2, 5)]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert list(result.steps["step"]) == [1, 2, 3] and result.window["notes"] == []


def test_a_lone_step_with_python_after_its_ops_is_kept_whole() -> None:
    """A 59 ms step whose last 50 ms are Python (logging, a checkpoint) is a step."""
    frame = events(op("ProfilerStep#1", 0, 59_000, cat=S.USER_ANNOTATION),
                   op("aten::mm", 1, 9_000))
    windows, notes = drop_partial_steps(step_windows(frame, build_host_tree(frame)), frame)
    assert float(windows["end"].iloc[0]) == 59_000 and notes == []


def test_steps_nsbridge_closed_itself_are_never_dropped() -> None:
    rows = []
    for i, t0 in enumerate((0, 100, 200), 1):
        rows += [op(f"ProfilerStep#{i}", t0, 100, cat=S.USER_ANNOTATION),
                 op("aten::mm", t0 + 1, 60), op("aten::relu", t0 + 62, 10)]
    rows += [op("ProfilerStep#4", 300, 4, cat=S.USER_ANNOTATION), op("aten::mm", 301, 2)]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS, complete_steps=True)
    assert list(result.steps["step"]) == [1, 2, 3, 4] and result.window["notes"] == []


def test_a_step_the_budget_cut_is_left_out_or_named_partial() -> None:
    rows = []
    for i, t0 in enumerate((0, 100, 200), 1):
        rows += [op(f"ProfilerStep#{i}", t0, 100, cat=S.USER_ANNOTATION),
                 op("aten::mm", t0 + 1, 60)]
    cut = analyze_events(events(*rows), thresholds=THRESHOLDS, complete_steps=True,
                         last_step_cut=True)
    assert list(cut.steps["step"]) == [1, 2] and "cut by the recording budget" in \
        cut.window["notes"][0]
    lone = analyze_events(events(*rows[:2]), thresholds=THRESHOLDS, complete_steps=True,
                          last_step_cut=True)
    assert list(lone.steps["step"]) == [1] and "is partial" in lone.window["notes"][0]


def test_a_lone_step_is_clipped_to_its_activity() -> None:
    frame = events(op("ProfilerStep#7", 0, 10_000, cat=S.USER_ANNOTATION),
                   op("aten::mm", 1, 50), launch(60, 5, name="cudaDeviceSynchronize", dur=40))
    windows, notes = drop_partial_steps(step_windows(frame, build_host_tree(frame)), frame)
    assert float(windows["end"].iloc[0]) == 100.0 and "clipped to its activity" in notes[0]


def test_triton_trace_has_no_multi_second_step_and_is_not_sync_bound() -> None:
    """A real A100 trace whose only step range lasts 13.3 s while its events end 1.8 ms in."""
    trace = read_trace(TORCH_DATA / "triton_example_a100_2024-10.json.gz")
    result = analyze_events(trace.events, thresholds=THRESHOLDS)
    assert result.steps["wall_ms"].max() < 10
    assert result.verdict["label"] != "sync-bound"
    # the one sync's GPU idle is a fraction of a GPU that is idle 99.9 % of the step
    assert result.device["busy_pct"] < 1


def _gpu_steps(n: int, *, mm_us: float, kernel_us: float, syncs: int, sync_at: float,
               sync: str, sync_us: float) -> list[dict]:
    """n steps of 100 µs: one mm launching one kernel, then ``syncs`` blocking calls."""
    rows = []
    for i in range(n):
        t0 = 100 * i
        rows += [op(f"ProfilerStep#{i + 1}", t0, 100, cat=S.USER_ANNOTATION),
                 op("aten::mm", t0 + 1, mm_us), launch(t0 + 2, 100 * i),
                 kernel("gemm", t0 + 5, kernel_us, 100 * i)]
        rows += [launch(t0 + sync_at + j, 100 * i + 1 + j, name=sync, dur=sync_us)
                 for j in range(syncs)]
    return rows


def test_whole_trace_window_reports_rates_not_per_step() -> None:
    """--window trace: one window, syncs judged by the idle they cause, not their count."""
    rows = _gpu_steps(4, mm_us=60, kernel_us=80, syncs=10, sync_at=70,
                      sync="cudaStreamSynchronize", sync_us=0.5)
    stepped = analyze_events(events(*rows), thresholds=THRESHOLDS)
    whole = analyze_events(events(*rows), thresholds=THRESHOLDS, window="trace")
    assert stepped.window["kind"] == "steps" and whole.window["kind"] == "trace"
    assert whole.window["per"] == "second" and whole.window["seconds"] == pytest.approx(400e-6)
    point = whole.sync_points[0]
    assert point["per_step"] is None and point["per_s"] == pytest.approx(40 / 400e-6)
    assert whole.verdict["numbers"]["sync_calls_per_step"] is None
    assert any("per-step figures" in c for c in whole.verdict["cannot_conclude"])
    with pytest.raises(ValueError):
        analyze_events(events(*rows), thresholds=THRESHOLDS, window="epoch")


def test_many_counted_syncs_on_a_gpu_that_they_do_not_starve_are_not_sync_bound() -> None:
    """The GPU is busy 60 % and idle after syncs 1 %: the count alone decides nothing."""
    rows = _gpu_steps(3, mm_us=90, kernel_us=60, syncs=12, sync_at=10,
                      sync="cudaEventSynchronize", sync_us=0.2)
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert result.verdict["numbers"]["sync_calls_per_step"] == 12
    assert result.verdict["label"] == "cpu-bound"


def test_kernels_launched_in_the_window_count_to_their_end() -> None:
    rows = []
    for i in range(3):
        t0 = 100 * i
        rows += [op(f"ProfilerStep#{i + 1}", t0, 100, cat=S.USER_ANNOTATION),
                 op("aten::mm", t0 + 80, 10), launch(t0 + 82, i)]
    rows += [kernel("gemm", 100 * i + 85, 40, i) for i in range(3)]    # the last ends at 325
    rows += [op("aten::mm", 400, 10), launch(401, 9), kernel("gemm", 402, 5, 9)]  # after
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert result.device["window_us"] == [0.0, 325.0]
    assert result.device["kernels"] == 3                     # the one after is left out
    assert result.ops.set_index("name").loc["aten::mm", "calls"] == 3
    work = result.device["work"]
    assert [(w["name"], w["op"], w["attribution"], w["calls"]) for w in work] == [
        ("gemm", "aten::mm", "launch_containment", 3)]


@pytest.mark.parametrize("record, expected", [
    ({"count": 311, "steps": 311, "first_step": 0, "last_step": 310}, "steps"),
    ({"count": 1324, "steps": 3, "first_step": 104, "last_step": 311, "max_in_one_step": 441},
     "outside"),
    ({"count": 50, "steps": 1, "first_step": 312, "last_step": 312}, "outside"),
    ({"count": 32, "steps": 32, "first_step": 0, "last_step": 310}, "outside"),
])
def test_placement_of_a_call_site(record: dict, expected: str) -> None:
    where, why = placement(record, 312)
    assert where == expected, why
    if record.get("first_step") == 312:
        assert why == "after the last training step"
    if record.get("max_in_one_step"):
        assert why == "periodic: in 3 of 312 steps, up to 441 calls in one step"


def test_precision_advice_needs_wide_matmuls() -> None:
    """64-wide matmuls on a CPU: no bf16 advice however much of the time they take."""
    def run(width: int) -> list[str]:
        dims = f"[[{width}, {width}], [{width}, {width}]]"
        rows = []
        for i in range(3):
            t0 = 100 * i
            rows += [op(f"ProfilerStep#{i + 1}", t0, 100, cat=S.USER_ANNOTATION),
                     op("aten::mm", t0 + 1, 80, **{S.INPUT_DIMS: dims}),
                     op("aten::relu", t0 + 85, 5)]
        result = analyze_events(events(*rows), thresholds=THRESHOLDS)
        return [r["id"] for r in result.recommendations]
    assert "amp-tf32" not in run(64)
    assert "amp-tf32" in run(512)


def test_convolutions_are_judged_by_their_share_not_their_kernel_size() -> None:
    dims = "[[8, 32, 56, 56], [64, 32, 3, 3]]"
    rows = []
    for i in range(3):
        t0 = 100 * i
        rows += [op(f"ProfilerStep#{i + 1}", t0, 100, cat=S.USER_ANNOTATION),
                 op("aten::mkldnn_convolution", t0 + 1, 80, **{S.INPUT_DIMS: dims}),
                 op("aten::relu", t0 + 85, 5)]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert "amp-tf32" in [r["id"] for r in result.recommendations]


def test_independent_window_of_a_real_trace(torch_data: Path) -> None:
    """ops[] covers the measured steps only: recomputed from the frame by start time."""
    trace = read_trace(torch_data / "h100_bert-small_2025-07.json.gz")
    result = analyze_events(trace.events, thresholds=THRESHOLDS)
    ev = trace.events
    lo, hi = result.window["start_us"], result.window["end_us"]
    host = ev[ev[S.CAT].isin(S.HOST_OP_CATS) & (ev[S.PH] == "X")
              & ~ev[S.NAME].astype(str).str.startswith((S.PROFILER_STEP_PREFIX, "nsbridge::"))]
    inside = host[(host[S.TS] >= lo) & (host[S.TS] < hi)]
    assert int(result.ops["calls"].sum()) == len(inside)


@pytest.mark.parametrize("ops_per_step, label", [(30, "sync-bound"), (12000, "cpu-bound")])
def test_cpu_only_syncs_decide_only_with_little_work_between(ops_per_step: int,
                                                             label: str) -> None:
    """20 .item() per step (one per LBFGS closure): sync-bound only when few ops run
    between them; with thousands, a GPU would stay busy through them."""
    rows = []
    for i in range(3):
        t0 = 10_000 * i
        rows.append(op(f"ProfilerStep#{i + 1}", t0, 10_000, cat=S.USER_ANNOTATION))
        rows += [op("aten::add", t0 + 1 + j * (9000 / ops_per_step), 1)
                 for j in range(ops_per_step)]
    records = [{"kind": "item", "op": "aten::_local_scalar_dense", "device": "cpu",
                "file": "train.py", "line": 65, "count": 60, "cost_ms": 1.0, "steps": 3,
                "first_step": 0, "last_step": 2, "max_in_one_step": 20}]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS, process_syncs=records,
                            process_steps=3)
    assert result.verdict["numbers"]["sync_calls_per_step"] == 20
    assert result.verdict["numbers"]["host_ops_per_sync"] == pytest.approx(ops_per_step / 20)
    assert result.verdict["label"] == label


def test_a_step_range_with_a_name_that_is_not_a_number_is_read() -> None:
    """``ProfilerStep#warmup`` (a real trace's range) once failed int('warmup')."""
    rows = []
    for i, name in enumerate(("warmup", "7", "8")):
        rows += [op(f"ProfilerStep#{name}", 100 * i, 100, cat=S.USER_ANNOTATION),
                 op("aten::mm", 100 * i + 1, 60)]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert list(result.steps["step"]) == [9, 7, 8]


def test_a_sync_only_outside_the_steps_is_said_so_not_zero_per_step() -> None:
    rows = []
    for i in range(3):
        rows += [op(f"ProfilerStep#{i + 1}", 100 * i, 100, cat=S.USER_ANNOTATION),
                 op("aten::mm", 100 * i + 1, 60)]
    records = [{"kind": "item", "op": "aten::_local_scalar_dense", "device": "cpu",
                "file": "train.py", "line": 64, "count": 1, "cost_ms": 0.01, "steps": 1,
                "first_step": 10, "last_step": 10, "max_in_one_step": 1}]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS, process_syncs=records,
                            process_steps=10)
    line = next(e for e in result.verdict["evidence"] if "train.py:64" in e)
    assert line.startswith("no sync point in the training steps; 1 outside them")
    assert "0 per step" not in line
