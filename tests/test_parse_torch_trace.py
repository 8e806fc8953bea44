"""The torch trace parser on real traces of every generation, and on broken files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from nsbridge import schema as S
from nsbridge.errors import EmptyTraceError, TraceFormatError, TraceNotFoundError
from nsbridge.parse.torch_trace import read_trace

from conftest import TORCH_DATA


def _raw(path: Path) -> dict:
    return json.loads(gzip.open(path).read())


@pytest.mark.parametrize("name", sorted(p.name for p in TORCH_DATA.glob("*.json.gz")))
def test_every_complete_event_becomes_a_row(name: str) -> None:
    path = TORCH_DATA / name
    raw = [e for e in _raw(path)["traceEvents"] if e.get("ph") in ("X", "i")
           and str(e.get("cat", "")).lower() not in ("trace", "overhead")]
    trace = read_trace(path)
    assert len(trace.events) == len(raw)
    assert list(trace.events.columns) == S.EVENT_COLUMNS
    kernels = [e for e in raw if str(e.get("cat", "")).lower() == "kernel"]
    assert (trace.events[S.CAT] == S.KERNEL).sum() == len(kernels)
    assert trace.events.loc[trace.events[S.CAT] == S.KERNEL, S.DUR].sum() == pytest.approx(
        sum(e["dur"] for e in kernels))


def test_text_columns_are_categoricals_of_the_values_read() -> None:
    """Each text column is a Categorical (a few thousand names over a million rows): its
    values are the trace's, its categories sorted and all used, an absent value missing."""
    path = TORCH_DATA / "h100_bert-small_2025-07.json.gz"
    raw = [e for e in _raw(path)["traceEvents"] if e.get("ph") in ("X", "i")
           and str(e.get("cat", "")).lower() not in ("trace", "overhead")]
    events = read_trace(path).events
    for col in (S.CAT, S.NAME, S.PH, S.PID, S.TID, S.INPUT_DIMS, S.INPUT_TYPES,
                S.KERNEL_FILE, S.LAUNCH):
        values = events[col]
        assert isinstance(values.dtype, pd.CategoricalDtype), col
        categories = list(values.cat.categories)
        assert categories == sorted(categories) == sorted(set(values.dropna())), col
    assert events[S.NAME].tolist() == [e["name"] for e in raw]
    assert events[S.PID].tolist() == [str(e["pid"]) for e in raw]
    no_shapes = [i for i, e in enumerate(raw) if "Input Dims" not in e.get("args", {})]
    assert no_shapes and events[S.INPUT_DIMS].iloc[no_shapes].isna().all()


def test_a_dropped_event_leaves_no_unused_category(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 1, "dur": 3},
        {"ph": "X", "cat": "cpu_op", "name": "only_here", "pid": 9, "tid": 9, "dur": 3}]}))
    trace = read_trace(path)
    assert list(trace.events[S.NAME].cat.categories) == ["aten::mm"]
    assert list(trace.events[S.PID].cat.categories) == ["1"]
    assert sum(trace.skipped.values()) == 1


def test_libkineto_2022_variant_is_normalised() -> None:
    trace = read_trace(TORCH_DATA / "inference_rank_1_2022-10_libkineto.json.gz")
    cats = set(trace.events[S.CAT].astype(str))
    assert {"kernel", "cuda_runtime"} <= cats and "Kernel" not in cats
    runtime = trace.events[trace.events[S.CAT] == S.CUDA_RUNTIME]
    assert runtime[S.EXT_ID].notna().all()  # lower-case "external id" was read


def test_metadata_and_relative_timestamps() -> None:
    trace = read_trace(TORCH_DATA / "h100_bert-small_2025-07.json.gz")
    assert trace.base_time_ns == 1751410836000000000
    assert trace.device_properties[0]["name"].startswith("NVIDIA H100")
    assert trace.has_device
    memory = trace.events[trace.events[S.CAT] == S.MEMORY]
    assert len(memory) == 236 and (memory[S.BYTES].abs() > 0).all()
    assert trace.events[S.INPUT_DIMS].notna().any()


def test_plain_json_and_gzip_give_the_same_frame(tmp_path: Path) -> None:
    src = TORCH_DATA / "triton_example_a100_2024-10.json.gz"
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(src).read())
    pd.testing.assert_frame_equal(read_trace(src).events, read_trace(plain).events)


def test_rank_from_distributed_info() -> None:
    trace = read_trace(TORCH_DATA / "critical_path_simple_add_a100_2023-09.json.gz")
    assert trace.rank == 0


def test_truncated_gzip(tmp_path: Path) -> None:
    data = (TORCH_DATA / "h100_bert-small_2025-07.json.gz").read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated or corrupt"):
        read_trace(bad)


def test_truncated_json(tmp_path: Path) -> None:
    text = gzip.open(TORCH_DATA / "triton_example_a100_2024-10.json.gz").read()
    bad = tmp_path / "cut.json"
    bad.write_bytes(text[: len(text) - 40])
    with pytest.raises(TraceFormatError, match="truncated"):
        read_trace(bad)


def test_corrupt_json_says_where(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [ {"ph": "X",, } ], "x": 1}')
    with pytest.raises(TraceFormatError, match="is corrupt"):
        read_trace(bad)


def test_json_that_is_not_a_trace(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"lr": 0.1}')
    with pytest.raises(TraceFormatError, match="not a torch.profiler trace"):
        read_trace(bad)


def test_binary_file(tmp_path: Path) -> None:
    bad = tmp_path / "model.pt"
    bad.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(TraceFormatError, match="not a text or gzip file"):
        read_trace(bad)


def test_trace_without_events(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "M", "name": "process_name"}]}')
    with pytest.raises(EmptyTraceError, match="no events"):
        read_trace(empty)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceNotFoundError, match="does not exist"):
        read_trace(tmp_path / "nope.json")
