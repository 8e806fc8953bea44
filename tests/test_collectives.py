"""The per-kind collective table: each call counted once (host ranges, never their
gpu_user_annotation copies), every kind torch names recognised, time from the device."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from nsbridge import schema as S
from nsbridge.model.device.attribution import attribute_gpu_events
from nsbridge.model.host.ops import op_table
from nsbridge.model.ranks.collectives import collective_kind, collectives
from nsbridge.model.host.nesting import build_host_tree
from nsbridge.parse.torch_trace import read_trace

from builders import events, kernel, launch, op
from conftest import SHARED_REAL

NCCL_DATA = SHARED_REAL / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
RANK0 = SHARED_REAL / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"


def _need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout")
    return path


def _raw(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _raw_window(raw: list[dict]) -> tuple[float, float]:
    steps = [e for e in raw if e["name"].startswith("ProfilerStep#")]
    return min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)


def _table(path: Path, lo: float, hi: float, n_steps: int) -> dict[str, dict]:
    ev = read_trace(path).events
    tree = build_host_tree(ev)
    rows = collectives(ev, tree, attribute_gpu_events(ev, tree), lo, hi, n_steps)
    assert len({r["kind"] for r in rows}) == len(rows)
    return {r["kind"]: r for r in rows}


# -- real traces ---------------------------------------------------------------------------

def test_nccl_ranges_copied_on_the_gpu_timeline_count_once_and_time_from_the_device() -> None:
    """nccl_data: every nccl:all_reduce is written twice (host user_annotation, device
    gpu_user_annotation); 15 calls, timed by the device copies, not 30."""
    raw = _raw(_need(NCCL_DATA))
    lo, hi = _raw_window(raw)
    table = _table(NCCL_DATA, lo, hi, n_steps=3)
    assert set(table) == {"all_reduce", "broadcast"}
    for name, kind in (("nccl:all_reduce", "all_reduce"), ("nccl:broadcast", "broadcast")):
        host = [e for e in raw if e["cat"] == "user_annotation" and e["name"] == name
                and lo <= e["ts"] < hi]
        ids = {e["args"]["External id"] for e in host}
        device = [e for e in raw if e["cat"] == "gpu_user_annotation" and e["name"] == name
                  and e["args"]["External id"] in ids]
        row = table[kind]
        assert row["count"] == len(host)
        assert row["time_us"] == pytest.approx(sum(e["dur"] for e in device), abs=1e-3)
        assert row["host_time_us"] == pytest.approx(sum(e["dur"] for e in host), abs=1e-3)
        assert row["time_source"] == "device annotation"
        assert row["time_sources"] == {"device annotation": len(host)}
        assert row["source"] == "backend ranges"
        assert row["per_step"] == round(len(host) / 3, 2)
    assert table["all_reduce"]["count"] == 15 and table["broadcast"]["count"] == 6
    assert table["all_reduce"]["time_us"] == pytest.approx(46784.659, abs=1e-3)
    assert table["all_reduce"]["host_time_us"] == pytest.approx(1348.074, abs=1e-3)
    assert table["broadcast"]["time_us"] == pytest.approx(123.334, abs=1e-3)


def test_analysis_reports_the_deduplicated_table() -> None:
    """The analysis passes its host tree and GPU frame through (analysis.py's call)."""
    from nsbridge.model.analysis import analyze_events
    from nsbridge.profiles import Analysis

    result = analyze_events(read_trace(_need(NCCL_DATA)).events, thresholds=Analysis())
    by_kind = {r["kind"]: r for r in result.collectives}
    assert by_kind["all_reduce"]["count"] == 15 and by_kind["broadcast"]["count"] == 6
    assert by_kind["all_reduce"]["time_source"] == "device annotation"
    assert by_kind["all_reduce"]["time_us"] == pytest.approx(46784.659, abs=1e-3)


def _kernels_launched_inside(raw: list[dict], ranges: list[dict]) -> float:
    """Stdlib: the GPU time of kernels whose launch call runs inside one of the ranges on
    the range's thread (this trace links kernels by launch, not by External id)."""
    corr = set()
    launches = [e for e in raw if e["cat"] == "cuda_runtime" and "correlation" in e["args"]]
    for r in ranges:
        corr |= {e["args"]["correlation"] for e in launches
                 if e["pid"] == r["pid"] and e["tid"] == r["tid"]
                 and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]}
    return float(sum(e["dur"] for e in raw
                     if e["cat"] == "kernel" and e["args"].get("correlation") in corr))


def test_base_variants_are_recognised_and_timed_by_their_kernels() -> None:
    """rank0: nccl:_all_gather_base (10 calls) is an all_gather; NCCL's host ranges take
    583 us for 10 all_reduces whose kernels run ~126 ms: the table says the kernels."""
    raw = _raw(_need(RANK0))
    lo, hi = _raw_window(raw)
    table = _table(RANK0, lo, hi, n_steps=5)
    assert set(table) == {"all_gather", "all_reduce", "all_to_all", "reduce_scatter"}
    for name, kind in (("nccl:_all_gather_base", "all_gather"), ("nccl:all_reduce", "all_reduce"),
                       ("nccl:_reduce_scatter_base", "reduce_scatter")):
        host = [e for e in raw if e["cat"] == "user_annotation" and e["name"] == name
                and lo <= e["ts"] < hi]
        row = table[kind]
        assert row["count"] == len(host) == 10
        assert row["host_time_us"] == pytest.approx(sum(e["dur"] for e in host))
        assert row["time_us"] == pytest.approx(_kernels_launched_inside(raw, host))
        assert row["time_source"] == "device kernels"
        assert row["time_sources"] == {"device kernels": 10}
    assert table["all_gather"]["time_us"] == pytest.approx(4776.0)
    assert table["all_reduce"]["time_us"] == pytest.approx(126555.0)
    assert table["all_reduce"]["host_time_us"] == pytest.approx(583.0)
    # ten of the 55 all_to_alls launch no kernel in this trace: their host time stands in
    a2a = table["all_to_all"]
    host = [e for e in raw if e["cat"] == "user_annotation" and e["name"] == "nccl:all_to_all"
            and lo <= e["ts"] < hi]
    assert a2a["count"] == len(host) == 55
    assert a2a["time_sources"] == {"device kernels": 45, "host ranges": 10}
    launched = [h for h in host if _kernels_launched_inside(raw, [h]) > 0]
    silent = [h for h in host if _kernels_launched_inside(raw, [h]) == 0]
    assert len(launched) == 45
    assert a2a["time_us"] == pytest.approx(_kernels_launched_inside(raw, launched)
                                           + sum(e["dur"] for e in silent))


# -- kinds ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, kind", [
    ("nccl:all_reduce", "all_reduce"), ("nccl:all_reduce_coalesced", "all_reduce"),
    ("c10d::allreduce_", "all_reduce"), ("c10d::allreduce_coalesced_", "all_reduce"),
    ("gloo:sparse_all_reduce", "all_reduce"), ("mpi:all_reduce", "all_reduce"),
    ("nccl:_all_gather_base", "all_gather"), ("c10d::_allgather_base_", "all_gather"),
    ("nccl:all_gather", "all_gather"), ("c10d::allgather_", "all_gather"),
    ("nccl:all_gather_into_tensor_coalesced", "all_gather"),
    ("c10d::allgather_into_tensor_coalesced_", "all_gather"),
    ("c10d::allgather_coalesced_", "all_gather"),
    ("nccl:_reduce_scatter_base", "reduce_scatter"), ("c10d::_reduce_scatter_base_", "reduce_scatter"),
    ("nccl:reduce_scatter_tensor_coalesced", "reduce_scatter"),
    ("c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter"),
    ("nccl:reduce_scatter", "reduce_scatter"), ("xccl:reduce_scatter_tensor", "reduce_scatter"),
    ("nccl:all_to_all", "all_to_all"), ("c10d::alltoall_base_", "all_to_all"),
    ("c10d::alltoall_", "all_to_all"), ("gloo:all_to_all", "all_to_all"),
    ("nccl:send 0->1", "send"), ("c10d::send", "send"), ("gloo:send", "send"),
    ("nccl:recv 1<-0", "recv"), ("c10d::recv_", "recv"), ("c10d::recv_any_source_", "recv"),
    ("gloo:recvAnySource", "recv"),
    ("c10d::barrier", "barrier"), ("c10d::monitored_barrier_", "barrier"),
    ("gloo:barrier", "barrier"),
    ("nccl:broadcast", "broadcast"), ("nccl:_broadcast_oop", "broadcast"),
    ("c10d::broadcast_", "broadcast"),
    ("nccl:reduce", "reduce"), ("nccl:_reduce_oop", "reduce"), ("c10d::reduce_", "reduce"),
    ("nccl:gather", "gather"), ("c10d::gather_", "gather"),
    ("gloo:scatter", "scatter"), ("c10d::scatter_", "scatter"),
    ("nccl:foo_bar", "foo_bar"), ("ucc:some_new_op", "some_new_op"),
])
def test_every_name_torch_emits_has_its_kind(name: str, kind: str) -> None:
    found = collective_kind(name)
    assert found is not None and found[0] == kind
    assert found[1] == ("c10d ops" if name.startswith("c10d::") else "backend ranges")


@pytest.mark.parametrize("name", ["aten::add", "record_param_comms", "c10d::check_for_nan",
                                  "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
                                  "ProfilerStep#3", "_c10d_functional::wait_tensor"])
def test_other_names_are_not_collectives(name: str) -> None:
    assert collective_kind(name) is None


# -- synthetic frames ----------------------------------------------------------------------

def _nccl_call(outer: str, range_name: str, ts: float, ext: float, **kw) -> list[dict]:
    """c10d op > record_param_comms > backend range, on the main thread."""
    return [op(outer, ts, 60.0, **{S.EXT_ID: ext}),
            op("record_param_comms", ts + 2, 50.0, **{S.EXT_ID: ext + 1}),
            op(range_name, ts + 5, 20.0, cat=S.USER_ANNOTATION, **{S.EXT_ID: ext + 2}, **kw)]


def _device_copy(name: str, ts: float, dur: float, ext: float) -> dict:
    return {S.CAT: "gpu_user_annotation", S.NAME: name, S.TS: ts, S.DUR: dur, S.PID: "0",
            S.TID: "7", S.EXT_ID: ext, S.DEVICE: 0.0}


def _gpu_frame():
    rows = [op("ProfilerStep#1", 0.0, 2000.0, cat=S.USER_ANNOTATION)]
    # two all_reduces with device copies (and kernels): the copies' time, copies not counted
    for i, (ts, copy_us, kernel_us) in enumerate(((10.0, 350.0, 300.0), (100.0, 410.0, 400.0))):
        ext = 10.0 * (i + 1)
        rows += _nccl_call("c10d::allreduce_", "nccl:all_reduce", ts, ext,
                           **{S.INPUT_DIMS: "[[1024]]", S.INPUT_TYPES: '["float"]'})
        rows += [launch(ts + 10, 1000 + i, ext + 1),
                 kernel("ncclKernel_AllReduce", 500 + 500 * i, kernel_us, 1000 + i, ext + 1),
                 _device_copy("nccl:all_reduce", 499 + 500 * i, copy_us, ext + 2)]
    # a barrier NCCL runs as an all_reduce: one all_reduce call, no barrier row
    rows += [op("c10d::barrier", 200.0, 40.0, **{S.EXT_ID: 30.0}),
             op("nccl:all_reduce", 205.0, 10.0, cat=S.USER_ANNOTATION, **{S.EXT_ID: 32.0}),
             _device_copy("nccl:all_reduce", 1500.0, 5.0, 32.0)]
    # broadcast 1: the kernel carries record_param_comms' External id (the range's parent);
    # an aten::copy_ inside the call launches a copy kernel that is not communication
    rows += _nccl_call("c10d::broadcast_", "nccl:broadcast", 300.0, 40.0)
    rows += [op("aten::copy_", 330.0, 5.0, **{S.EXT_ID: 45.0}),
             launch(310.0, 2000, 41.0), kernel("ncclKernel_Broadcast", 1600.0, 50.0, 2000, 41.0),
             launch(331.0, 2001, 45.0), kernel("copy_kernel", 1650.0, 1000.0, 2001, 45.0)]
    # broadcast 2: the kernel carries the range's own External id
    rows += _nccl_call("c10d::broadcast_", "nccl:broadcast", 400.0, 50.0)
    rows += [launch(410.0, 2002, 52.0), kernel("ncclKernel_Broadcast", 1700.0, 70.0, 2002, 52.0)]
    # a backend op nsbridge does not know: kept under its own name, host time
    rows += [op("nccl:foo_bar", 500.0, 33.0, cat=S.USER_ANNOTATION, **{S.EXT_ID: 60.0})]
    # a kind with c10d ops only: counted from them, timed by their kernels
    rows += [op("c10d::alltoall_base_", 600.0, 30.0, **{S.EXT_ID: 70.0}),
             launch(605.0, 3000, 70.0), kernel("ncclKernel_SendRecv", 1800.0, 90.0, 3000, 70.0)]
    # compute, and a collective after the window
    rows += [op("aten::mm", 700.0, 20.0, **{S.EXT_ID: 80.0}),
             launch(705.0, 4000, 80.0), kernel("gemm", 1900.0, 25.0, 4000, 80.0)]
    rows += _nccl_call("c10d::allreduce_", "nccl:all_reduce", 2500.0, 90.0)
    rows += [_device_copy("nccl:all_reduce", 2600.0, 999.0, 92.0)]
    return events(*rows)


def test_gpu_frame_counts_calls_once_and_takes_device_time() -> None:
    ev = _gpu_frame()
    tree = build_host_tree(ev)
    gpu = attribute_gpu_events(ev, tree)
    table = {r["kind"]: r for r in collectives(ev, tree, gpu, 0.0, 2000.0, 2)}
    assert set(table) == {"all_reduce", "broadcast", "foo_bar", "all_to_all"}

    reduce = table["all_reduce"]
    assert reduce["count"] == 3                       # two plus the barrier's, not 6 nor 4
    assert reduce["time_us"] == pytest.approx(350.0 + 410.0 + 5.0)
    assert reduce["host_time_us"] == pytest.approx(20.0 + 20.0 + 10.0)
    assert reduce["time_source"] == "device annotation"
    assert reduce["bytes"] == 2 * 1024 * 4 and reduce["source"] == "backend ranges"
    assert reduce["per_step"] == 1.5
    assert reduce["time_per_step_us"] == pytest.approx(765.0 / 2)

    bcast = table["broadcast"]
    assert bcast["count"] == 2
    assert bcast["time_us"] == pytest.approx(50.0 + 70.0)   # not the copy kernel's 1000
    assert bcast["time_source"] == "device kernels" and bcast["bytes"] is None

    unknown = table["foo_bar"]
    assert (unknown["count"], unknown["time_us"], unknown["time_source"]) == (1, 33.0, "host ranges")
    assert unknown["source"] == "backend ranges"

    a2a = table["all_to_all"]
    assert (a2a["count"], a2a["source"], a2a["time_source"]) == (1, "c10d ops", "device kernels")
    assert a2a["time_us"] == pytest.approx(90.0) and a2a["host_time_us"] == pytest.approx(30.0)


def test_without_device_copies_the_kernels_time_the_call() -> None:
    ev = _gpu_frame()
    ev = ev[ev[S.CAT] != "gpu_user_annotation"].reset_index(drop=True)
    tree = build_host_tree(ev)
    table = {r["kind"]: r for r in collectives(ev, tree, attribute_gpu_events(ev, tree),
                                                0.0, 2000.0, 2)}
    reduce = table["all_reduce"]
    # the barrier's all_reduce launched nothing here: its host time stands in
    assert reduce["time_sources"] == {"device kernels": 2, "host ranges": 1}
    assert reduce["time_source"] == "device kernels"
    assert reduce["time_us"] == pytest.approx(300.0 + 400.0 + 10.0)


def _gloo_frame():
    """gloo on CPUs: c10d ops on the main thread, gloo's ranges on its worker thread
    (not nested in them), except send, whose range runs inside c10d::send."""
    main, worker = {S.TID: "1"}, {S.TID: "9"}
    ann = {"cat": S.USER_ANNOTATION}
    return events(
        op("ProfilerStep#1", 0.0, 5000.0, cat=S.USER_ANNOTATION, **main),
        op("c10d::allreduce_", 10.0, 30.0, **main),
        op("gloo:all_reduce", 15.0, 500.0, **ann, **worker,
           **{S.INPUT_DIMS: "[[256]]", S.INPUT_TYPES: '["float"]'}),
        op("c10d::allreduce_", 600.0, 30.0, **main),
        op("gloo:all_reduce", 605.0, 700.0, **ann, **worker,
           **{S.INPUT_DIMS: "[[256]]", S.INPUT_TYPES: '["float"]'}),
        op("c10d::_allgather_base_", 1400.0, 40.0, **main),
        op("gloo:all_gather", 1405.0, 250.0, **ann, **worker),
        op("c10d::send", 2000.0, 60.0, **main),
        op("gloo:send", 2005.0, 40.0, **ann, **main),
        op("c10d::barrier", 2100.0, 20.0, **main),
        op("gloo:barrier", 2101.0, 80.0, **ann, **worker),
        op("aten::add", 3000.0, 5.0, **main),
    )


@pytest.mark.parametrize("no_gpu", ["frame", "none"])
def test_gloo_on_cpus_counts_the_calls_and_takes_their_worker_ranges_time(no_gpu: str) -> None:
    """The calls are the c10d ops the script made; gloo's ranges on its worker thread are
    the time each took (its work and its wait for the other ranks); a range inside its c10d
    op (send) is the call itself."""
    ev = _gloo_frame()
    tree = build_host_tree(ev)
    gpu = attribute_gpu_events(ev, tree) if no_gpu == "frame" else None
    assert gpu is None or gpu.empty
    rows = collectives(ev, tree, gpu, 0.0, 5000.0, 1)
    table = {r["kind"]: r for r in rows}
    assert set(table) == {"all_reduce", "all_gather", "send", "barrier"}
    assert all(r["time_source"] == "host ranges" for r in rows)
    assert {k: r["source"] for k, r in table.items()} == {
        "all_reduce": "c10d ops", "all_gather": "c10d ops", "barrier": "c10d ops",
        "send": "backend ranges"}
    assert all(r["time_us"] == r["host_time_us"] for r in rows)
    assert (table["all_reduce"]["count"], table["all_reduce"]["time_us"]) == (2, 1200.0)
    assert table["all_reduce"]["bytes"] == 2 * 256 * 4
    assert (table["all_gather"]["count"], table["all_gather"]["time_us"]) == (1, 250.0)
    assert (table["send"]["count"], table["send"]["time_us"]) == (1, 40.0)
    assert (table["barrier"]["count"], table["barrier"]["time_us"]) == (1, 80.0)


def test_a_collective_gloo_carries_out_as_another_is_counted_as_called() -> None:
    """FSDP2 on gloo (seen on 2 ranks): each c10d::_reduce_scatter_base_ runs on gloo's
    worker threads as a gloo:all_reduce of the whole tensor, so 5 reduce-scatters a step
    read as 5 reduce-scatters and 5 all-reduces. Each call is counted once, as the script
    made it, timed by the worker range that carried it out (matched in order, across two
    worker threads); the worker ranges are no ops of the op table (their time is the
    collective's wait: torch's key_averages leaves them out)."""
    main, w1, w2 = {S.TID: "1"}, {S.TID: "8"}, {S.TID: "9"}
    ann = {"cat": S.USER_ANNOTATION}
    shard = {S.INPUT_DIMS: "[[64]]", S.INPUT_TYPES: '["float"]'}
    ev = events(
        op("ProfilerStep#1", 0.0, 5000.0, cat=S.USER_ANNOTATION, **main),
        op("c10d::_allgather_base_", 10.0, 20.0, **main),
        op("gloo:all_gather", 12.0, 300.0, **ann, **w1, **shard),
        op("aten::empty", 20.0, 2.0, **w1),             # what gloo runs inside its range
        op("c10d::_reduce_scatter_base_", 400.0, 20.0, **main),
        op("gloo:all_reduce", 405.0, 700.0, **ann, **w2,
           **{S.INPUT_DIMS: "[[128]]", S.INPUT_TYPES: '["float"]'}),
        op("c10d::_reduce_scatter_base_", 500.0, 20.0, **main),
        op("gloo:all_reduce", 510.0, 90.0, **ann, **w1,
           **{S.INPUT_DIMS: "[[128]]", S.INPUT_TYPES: '["float"]'}),
        op("aten::mm", 1500.0, 50.0, **main),
    )
    tree = build_host_tree(ev)
    table = {r["kind"]: r for r in collectives(ev, tree, None, 0.0, 5000.0, 1)}
    assert set(table) == {"all_gather", "reduce_scatter"}
    scatter = table["reduce_scatter"]
    assert (scatter["count"], scatter["time_us"], scatter["source"]) == (2, 790.0, "c10d ops")
    assert scatter["bytes"] == 2 * 128 * 4            # what gloo moved: the whole tensor
    assert (table["all_gather"]["count"], table["all_gather"]["time_us"]) == (1, 300.0)
    names = set(op_table(ev, tree, attribute_gpu_events(ev, tree), False,
                         pd.DataFrame({"start": [0.0], "end": [5000.0]}))["name"])
    assert not any(n.startswith("gloo:") for n in names)
    assert {"aten::mm", "aten::empty", "c10d::_reduce_scatter_base_"} <= names


def test_the_window_counts_calls_by_their_host_start() -> None:
    ev = _gloo_frame()
    tree = build_host_tree(ev)
    table = {r["kind"]: r for r in collectives(ev, tree, None, 0.0, 600.0, 1)}
    assert set(table) == {"all_reduce"} and table["all_reduce"]["count"] == 1
    assert collectives(ev, tree, None, 4000.0, 5000.0, 1) == []


def test_a_trace_without_collectives_has_an_empty_table() -> None:
    ev = events(op("ProfilerStep#1", 0.0, 100.0, cat=S.USER_ANNOTATION), op("aten::mm", 1.0, 5.0))
    tree = build_host_tree(ev)
    assert collectives(ev, tree, attribute_gpu_events(ev, tree), 0.0, 100.0, 1) == []
