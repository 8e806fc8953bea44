"""Sync points, sync cost and the verdict rules around them, on synthetic traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsbridge import schema as S
from nsbridge.model.analysis import analyze_events
from nsbridge.model.device.attribution import LAUNCHED_BEFORE_WINDOW
from nsbridge.model.host.syncs import gpu_idle_after
from nsbridge.profiles import load_profile

from builders import events, kernel, launch, op

THRESHOLDS = load_profile("default").analysis
SITE = "nsbridge::sync_site item cuda train.py:42"


def _step(n: int, t0: float, *, kernel_us: float = 10, sync: bool = True,
          site: bool = False) -> list[dict]:
    """A 100 µs step: addmm launches one kernel at +5; then item(): a 2 µs D2H copy at +33
    and a cudaStreamSynchronize from +34 to +54."""
    rows = [op(f"ProfilerStep#{n}", t0, 100, cat=S.USER_ANNOTATION),
            op("aten::linear", t0 + 1, 20), op("aten::addmm", t0 + 2, 15), launch(t0 + 3, 10 * n),
            kernel("gemm", t0 + 5, kernel_us, 10 * n)]
    if sync:
        if site:
            rows.append(op(SITE, t0 + 29, 27, cat=S.USER_ANNOTATION))
        rows += [op("aten::item", t0 + 30, 25), op("aten::_local_scalar_dense", t0 + 31, 24),
                 launch(t0 + 32, 10 * n + 1, name="cudaMemcpyAsync"),
                 kernel("Memcpy DtoH (Device -> Pinned)", t0 + 33, 2, 10 * n + 1, cat=S.MEMCPY),
                 launch(t0 + 34, 10 * n + 2, name="cudaStreamSynchronize", dur=20)]
    return rows


def test_gpu_idle_after_each_sync_until_the_next_activity() -> None:
    calls = pd.DataFrame({"start": [34.0, 134.0], "end": [54.0, 154.0]})
    gpu = pd.DataFrame({"ts": [5.0, 33.0, 105.0, 133.0], "dur": [10.0, 2.0, 10.0, 2.0]})
    # the GPU ran dry at 35 (the copy's end); the next kernel starts at 105; the last
    # sync's idle runs to the window's end
    assert list(gpu_idle_after(calls, gpu, hi=200.0)) == [70.0, 65.0]
    busy = pd.DataFrame({"ts": [0.0], "dur": [300.0]})   # still busy when the sync returns
    assert list(gpu_idle_after(calls, busy, hi=300.0)) == [0.0, 0.0]
    twice = pd.DataFrame({"start": [34.0, 60.0], "end": [54.0, 61.0]})   # nothing between
    idle = gpu_idle_after(twice, gpu.iloc[:2], hi=100.0)
    assert list(idle) == [25.0, 40.0] and idle.sum() == 100.0 - 35.0   # no time counted twice


def test_one_sync_per_step_that_starves_the_gpu_is_sync_bound() -> None:
    result = analyze_events(events(*_step(1, 0), *_step(2, 100)), thresholds=THRESHOLDS)
    numbers = result.verdict["numbers"]
    assert result.verdict["label"] == "sync-bound"
    assert numbers["sync_calls_per_step"] == 1            # under the 8-per-step threshold
    assert numbers["sync_gpu_idle_ms_per_step"] == pytest.approx((70 + 65) / 2 / 1e3, abs=1e-3)
    assert numbers["sync_blocked_ms_per_step"] == pytest.approx(0.020)
    evidence = " ".join(result.verdict["evidence"])
    assert "idle after syncs 0.07 ms per step (68%" in evidence and "blocked" in evidence
    point = result.sync_points[0]
    assert (point["kind"], point["op"], point["count"]) == ("item", "aten::_local_scalar_dense", 2)
    assert point["gpu_idle_ms"] == pytest.approx(0.135) and point["host_ms"] == pytest.approx(0.04)
    assert result.recommendations[0]["id"] == "remove-syncs"


def test_gpu_bound_wins_whatever_the_syncs() -> None:
    rows = _step(1, 0, kernel_us=97, sync=False) + _step(2, 100, kernel_us=97, sync=False)
    rows.append(launch(190, 99, name="cudaDeviceSynchronize", dur=8))   # one, end of the loop
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert result.device["busy_pct"] >= 95
    assert result.verdict["label"] == "gpu-bound"
    assert any(e.startswith("secondary: 1 sync point") for e in result.verdict["evidence"])
    ids = [r["id"] for r in result.recommendations]
    assert ids[0] == "amp-tf32" and "remove-syncs" not in ids   # 0.5 per step: listed only
    assert result.sync_points[0]["per_step"] == 0.5


def test_syncs_in_a_gpu_bound_loop_rank_below_the_bound() -> None:
    rows = _step(1, 0, kernel_us=97) + _step(2, 100, kernel_us=97)
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert result.verdict["label"] == "gpu-bound"
    ids = [r["id"] for r in result.recommendations]
    assert "remove-syncs" in ids and ids.index("amp-tf32") < ids.index("remove-syncs")
    assert not next(r for r in result.recommendations
                    if r["id"] == "remove-syncs")["addresses_verdict"]


def test_nsbridge_own_sync_is_never_the_scripts() -> None:
    rows = _step(1, 0, sync=False) + _step(2, 100, sync=False)
    rows += [op(S.OWN_SYNC_RANGE, 180, 15, cat=S.USER_ANNOTATION),
             launch(181, 99, name="cudaDeviceSynchronize", dur=13)]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert result.sync_points == []
    assert result.verdict["numbers"]["sync_calls_per_step"] == 0
    assert result.verdict["numbers"]["sync_blocked_ms_per_step"] == 0
    assert not result.ops["name"].str.startswith("nsbridge::").any()


def test_sync_site_range_gives_the_exact_line() -> None:
    rows = _step(1, 0, site=True) + _step(2, 100, site=True)
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    point = result.sync_points[0]
    assert (point["kind"], point["file"], point["line"], point["count"]) == (
        "item", "train.py", 42, 2)
    assert point["op"] == "aten::_local_scalar_dense"
    assert SITE not in set(result.ops["name"])


def test_in_process_records_add_whole_run_counts_and_syncs_outside_the_window() -> None:
    rows = _step(1, 0, site=True) + _step(2, 100, site=True)
    records = [{"kind": "item", "op": "aten::_local_scalar_dense", "device": "cuda",
                "file": "train.py", "line": 42, "count": 20, "cost_ms": 1.0, "steps": 10},
               {"kind": "item", "op": "aten::_local_scalar_dense", "device": "cuda",
                "file": "train.py", "line": 50, "count": 1, "cost_ms": 0.5, "steps": 1},
               {"kind": "item", "op": "aten::_local_scalar_dense", "device": "cuda",
                "file": "train.py", "line": 60, "count": 6, "cost_ms": 0.5, "steps": 6,
                "first_step": 2, "last_step": 9, "max_in_one_step": 1},
               {"kind": "item", "op": "aten::_local_scalar_dense", "device": "cpu",
                "file": "train.py", "line": 51, "count": 40, "cost_ms": 0.1, "steps": 10}]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS, process_syncs=records,
                            process_steps=10)
    by_line = {p["line"]: p for p in result.sync_points}
    assert by_line[42]["run_count"] == 20 and by_line[42]["counted_over"] == "measured steps"
    # once in one step of ten: outside the training steps, no per-step rate
    assert by_line[50]["counted_over"] == "outside the steps" and by_line[50]["per_step"] is None
    assert by_line[50]["placement_why"] == "periodic: in 1 of 10 steps"
    # in six of ten steps: in the steps, over the whole run
    assert by_line[60]["counted_over"] == "whole run" and by_line[60]["per_step"] == 0.6
    assert 51 not in by_line                     # a CPU tensor's item() never waits
    assert [r["id"] for r in result.recommendations].count("remove-syncs") == 1
    assert "train.py:42" in next(r for r in result.recommendations
                                 if r["id"] == "remove-syncs")["why"]


def test_cpu_trace_item_ops_are_not_sync_points() -> None:
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION), op("aten::mm", 1, 20)]
    for i in range(20):
        rows += [op("aten::item", 30 + 3 * i, 2), op("aten::_local_scalar_dense", 30.5 + 3 * i, 1)]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert not result.has_device and result.sync_points == []
    assert result.verdict["label"] == "cpu-bound"


def test_cpu_run_counts_the_scripts_calls_not_librarys() -> None:
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION), op("aten::mm", 1, 20)]
    records = [{"kind": "item", "op": "aten::_local_scalar_dense", "device": "cpu",
                "file": "/venv/lib/site-packages/transformers/mask.py", "line": 9,
                "library": True, "count": 410, "cost_ms": 1.0, "steps": 10},
               {"kind": "item", "op": "aten::_local_scalar_dense", "device": "cpu",
                "file": "train.py", "line": 7, "library": False, "count": 20, "cost_ms": 0.2,
                "steps": 10}]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS, process_syncs=records,
                            process_steps=10)
    assert [p["file"] for p in result.sync_points] == ["train.py"]
    assert result.verdict["label"] == "cpu-bound"            # 2 per step: under the threshold
    result = analyze_events(events(*rows), thresholds=THRESHOLDS, process_syncs=[
        {**records[1], "count": 100}], process_steps=10)
    assert result.verdict["label"] == "sync-bound"
    assert result.verdict["cannot_conclude"] and result.verdict["numbers"][
        "sync_gpu_idle_share"] is None


def test_gpu_work_launched_before_the_window_is_counted_apart() -> None:
    rows = _step(1, 0, sync=False) + _step(2, 100, sync=False)
    rows += [kernel("queued_earlier", 0, 4, 777), kernel("Memset (Device)", 50, 1, 778,
                                                         cat=S.MEMSET)]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS)
    assert result.device["attribution"][LAUNCHED_BEFORE_WINDOW] == 2
    early = result.device[LAUNCHED_BEFORE_WINDOW]
    assert (early["kernels"], early["memsets"], early["kernel_us"]) == (1, 1, 4.0)
    assert result.ops["device_self_us"].sum() == pytest.approx(20)   # not in any op
    assert result.device["per_device"][0]["busy_us"] == pytest.approx(20 + 4 + 1)


def test_copies_are_not_kernels() -> None:
    result = analyze_events(events(*_step(1, 0), *_step(2, 100)), thresholds=THRESHOLDS)
    item = result.ops.set_index("name").loc["aten::_local_scalar_dense"]
    assert item["kernels"] == [] and item["copies"][0]["kind"] == "memcpy"
    assert item["copies"][0]["calls"] == 2 and item["device_self_us"] == pytest.approx(4)
    assert result.device["kernels"] == 2


def test_net_memory_is_torchs_and_gross_memory_is_the_ops_own() -> None:
    mem = lambda ts, nbytes: {S.CAT: S.MEMORY, S.NAME: "[memory]", S.PH: "i", S.TS: ts,  # noqa: E731
                              S.DUR: 0, S.BYTES: nbytes, S.DEVICE: -1}
    rows = [op("aten::linear", 0, 50), op("aten::addmm", 10, 20),
            mem(12, 4 * 2**20), mem(15, 2 * 2**20), mem(25, -2 * 2**20), mem(40, 1 * 2**20)]
    ops = analyze_events(events(*rows), thresholds=THRESHOLDS).ops.set_index("name")
    assert ops.loc["aten::addmm", "mem_mib"] == 6 and ops.loc["aten::addmm", "mem_net_mib"] == 4
    assert ops.loc["aten::linear", "mem_mib"] == 1 and ops.loc["aten::linear", "mem_net_mib"] == 5
    assert np.isnan(analyze_events(events(op("aten::mm", 0, 5)), thresholds=THRESHOLDS)
                    .ops.loc[0, "mem_net_mib"])


def test_calls_with_and_without_a_site_range_in_one_trace() -> None:
    """A line from nsbridge's range for one call, none for the other (found on an H100 with
    pandas 3: the mixed line column once failed to take the missing lines)."""
    result = analyze_events(events(*_step(1, 0, site=True), *_step(2, 100)),
                            thresholds=THRESHOLDS)
    lines = sorted((p["line"] is None, p["line"]) for p in result.sync_points)
    assert lines == [(False, 42), (True, None)]


def test_a_sync_every_other_step_is_half_a_sync_per_step_not_zero() -> None:
    """The GPU busy in the steps without a sync, starved after the sync in the others."""
    steps = [_step(n, 100 * (n - 1), sync=n % 2 == 0, kernel_us=10 if n % 2 == 0 else 60)
             for n in (1, 2, 3, 4)]
    result = analyze_events(events(*(row for step in steps for row in step)),
                            thresholds=THRESHOLDS)
    assert result.verdict["label"] == "sync-bound"
    assert result.verdict["numbers"]["sync_calls_per_step"] == 0.5
    assert result.verdict["evidence"][0].startswith("0.5 host-device syncs per step")


def test_a_cpu_run_ranks_sync_points_by_calls_per_step_not_host_time() -> None:
    """12 .tolist() calls of a large tensor cost the CPU more than 384 .item() calls; on a
    GPU each call drains the queue once, so the .item() calls come first."""
    rows = [op("ProfilerStep#1", 0, 100, cat=S.USER_ANNOTATION), op("aten::mm", 1, 20)]
    records = [{"kind": "tolist", "op": "aten::_local_scalar_dense", "device": "cpu",
                "file": "gen.py", "line": 30, "library": False, "count": 12, "cost_ms": 90.0,
                "steps": 12},
               {"kind": "item", "op": "aten::_local_scalar_dense", "device": "cpu",
                "file": "gen.py", "line": 41, "library": False, "count": 384, "cost_ms": 2.0,
                "steps": 12}]
    result = analyze_events(events(*rows), thresholds=THRESHOLDS, process_syncs=records,
                            process_steps=12)
    assert [(p["kind"], p["per_step"]) for p in result.sync_points] == [("item", 32.0),
                                                                        ("tolist", 1.0)]
    assert "the costliest is item at gen.py:41" in " ".join(result.verdict["evidence"]) \
        or "costliest: item at gen.py:41" in " ".join(result.verdict["evidence"])


def _cpu_trace(tmp_path, body) -> "pd.DataFrame":
    """A real torch.profiler CPU trace of three steps of ``body``, read as nsbridge reads it."""
    import torch
    from torch.profiler import profile, record_function

    from nsbridge.parse.torch_trace import read_trace

    path = tmp_path / "trace.json"
    with profile() as prof:
        for n in range(3):
            with record_function(f"ProfilerStep#{n}"):
                body(torch)
    prof.export_chrome_trace(str(path))
    return read_trace(path, workers=1).events


def test_ops_whose_output_size_is_the_data_are_the_syncs_a_gpu_would_add(tmp_path) -> None:
    def body(torch):
        x = torch.arange(-8.0, 8.0)
        mask = x > 0
        picked = x[mask]                      # boolean-mask indexing: nonzero
        x[mask] = picked * 2                  # a tensor through a mask: nonzero
        x[mask] = 0.0                         # a scalar through a mask: masked_fill, no sync
        torch.unique(picked)
        torch.repeat_interleave(x, torch.full((16,), 2))   # by a tensor: reads its sum
        torch.repeat_interleave(x, 2)                      # by an int: no sync
        torch.nonzero_static(x, size=4)                    # a fixed size: no sync

    result = analyze_events(_cpu_trace(tmp_path, body), thresholds=THRESHOLDS)
    implicit = {(p["call"], p["op"]): p["per_step"] for p in result.sync_points}
    assert implicit == {("aten::nonzero", "aten::index"): 1.0,
                        ("aten::nonzero", "aten::index_put_"): 1.0,
                        ("aten::_unique2", "aten::_unique2"): 1.0,
                        ("aten::repeat_interleave", "aten::repeat_interleave"): 1.0}
    assert {p["kind"] for p in result.sync_points} == {"implicit"}
    assert all(p["file"] is None and p["placement"] == "steps" for p in result.sync_points)
    assert result.verdict["numbers"]["sync_calls_per_step"] == 4.0
