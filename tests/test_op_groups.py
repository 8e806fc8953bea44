"""Ops grouped by input shape and by calling function, a rank's step split into parts, and
kernels' launch configurations: each checked against a plain loop over the raw JSON."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from nsbridge.api import analyze
from nsbridge.model.ranks.cross_rank import step_breakdown
from nsbridge.report.views.op_groups_view import shape_text

from conftest import TORCH_DATA

BERT = TORCH_DATA / "h100_bert-small_2025-07.json.gz"      # shapes and Python stacks
H200_CNN = TORCH_DATA / "h200" / "train_cnn_h200.json.gz"
FRAME = re.compile(r"^(.+)\((\d+)\): (.*)$")


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict]]:
    result = analyze([BERT], out=tmp_path_factory.mktemp("bert") / "run")
    return result.report, json.loads(gzip.open(BERT).read())["traceEvents"]


def _ops_in_window(report: dict, events: list[dict]) -> list[dict]:
    window = report["window"]
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"
            and window["start_us"] <= e["ts"] < window["end_us"]]


def test_by_shape_counts_equal_a_plain_count(bert: tuple) -> None:
    report, events = bert
    calls = Counter((e["name"], json.dumps(e["args"]["Input Dims"], separators=(",", ":")))
                    for e in _ops_in_window(report, events) if "Input Dims" in e["args"])
    rows = report["op_groups"]["by_shape"]
    assert rows and len(rows) <= 200
    for row in rows:
        assert row["calls"] == calls[row["name"], row["shape"]], row
    ranked = [r["device_self_us"] for r in rows]
    assert ranked == sorted(ranked, reverse=True)      # costliest first, as the op table


def _own(path: str) -> bool:
    return not ("site-packages" in path or "torch/" in path or path.startswith("<"))


def test_by_source_equals_the_innermost_own_frame_found_by_a_loop(bert: tuple) -> None:
    """For each op call: the python_function ranges on its thread that contain its start,
    the script's own ones (not torch, site-packages or built-ins), the latest-starting."""
    report, events = bert
    frames = [e for e in events if e.get("cat") == "python_function" and e.get("ph") == "X"]
    expected: Counter = Counter()
    for op in _ops_in_window(report, events):
        around = [f for f in frames if f["tid"] == op["tid"] and f["pid"] == op["pid"]
                  and f["ts"] <= op["ts"] <= f["ts"] + f["dur"]
                  and FRAME.match(f["name"]) and _own(FRAME.match(f["name"])[1])]
        if around:
            inner = max(around, key=lambda f: (f["ts"], -f["dur"]))
            path, line, func = FRAME.match(inner["name"]).groups()
            expected[op["name"], f"{func} ({path}:{line})"] += 1
    rows = report["op_groups"]["by_source"]
    assert rows and report["op_groups"]["notes"] == []
    for row in rows:
        assert row["calls"] == expected[row["name"], row["source"]], row
    assert not any("torch/" in r["source"] or "site-packages" in r["source"] for r in rows)


def test_without_stacks_the_note_says_how_to_get_them(tmp_path: Path) -> None:
    report = analyze([H200_CNN], out=tmp_path / "run").report
    groups = report["op_groups"]
    assert groups["by_source"] == [] and any("with_stack" in n for n in groups["notes"])
    assert groups["by_shape"]


def test_shape_text_drops_the_scalars_empty_lists() -> None:
    assert shape_text("[[8,3,32,32],[16,3,3,3],[],[],[]]") == "[[8,3,32,32],[16,3,3,3]]"
    assert shape_text("[[],[]]") == "[]" and shape_text("not json") == "not json"


def test_kernel_launch_configuration_is_the_traces_own(tmp_path: Path) -> None:
    report = analyze([H200_CNN], out=tmp_path / "run").report
    raw = [e for e in json.loads(gzip.open(H200_CNN).read())["traceEvents"]
           if e.get("cat") == "kernel"]
    for work in [w for w in report["device"]["work"] if w["kind"] == "kernel"][:5]:
        seen = [e["args"] for e in raw if e["name"] == work["name"]]
        configs = {f"grid {json.dumps(a['grid'], separators=(',', ':'))} block "
                   f"{json.dumps(a['block'], separators=(',', ':'))} regs "
                   f"{a['registers per thread']} smem {a['shared memory']}" for a in seen}
        assert work["launch"] in configs, work["name"]
        assert work["launch_configs"] <= len(configs)


@pytest.mark.parametrize("step, work, busy, overlap", [
    (100.0, 70.0, 60.0, 50.0), (100.0, 100.0, 100.0, None), (50.0, 40.0, None, None)])
def test_a_ranks_step_parts_add_up_to_its_step(step: float, work: float, busy: float,
                                              overlap: float) -> None:
    parts = step_breakdown(step, work, busy, overlap)
    assert parts is not None
    assert sum(v for v in parts.values() if v is not None) == pytest.approx(step)
    if busy is None:
        assert parts["idle"] is None and parts["overlap"] is None
        assert parts["compute"] == pytest.approx(work)     # the rank table's work ms/step
    else:
        assert parts["idle"] == pytest.approx(step * (1 - busy / 100))
        assert parts["compute"] + parts["idle"] == pytest.approx(work)
    assert step_breakdown(None, work, busy, overlap) is None
