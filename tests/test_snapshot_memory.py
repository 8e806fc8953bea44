"""CUDA allocator snapshots (parse.memory_snapshot, model.device.snapshot_memory): the
history's peak and what holds it, the out-of-memory and fragmentation, on synthetic
snapshots in torch's documented format whose every byte is known, checked against torch's
own _memory_viz.segsum; on a snapshot torch itself makes from a CPU profile, whose
categories are torch's; and a pickle that is not plain data is refused unrun."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.cuda import _memory_viz

import nsbridge
from nsbridge.errors import TraceFormatError
from nsbridge.model.device.snapshot_memory import snapshot_memory
from nsbridge.parse.memory_snapshot import read_snapshot, snapshot_of
from snapshot_builder import Plan

from conftest import ROOT


def _kinds(held: dict) -> dict[str, float]:
    return {k["kind"]: k["mib"] for k in held["kinds"]}


def test_the_peak_is_named_byte_for_byte_by_kind_module_and_line() -> None:
    result = snapshot_memory(snapshot_of(Plan().build()))
    assert result is not None
    # 4 layers x 2 MiB parameters before the history; in step 2's backward start: 4 x 8 MiB
    # activations, a 4 MiB temporary, 4 x 2 MiB gradients and 4 x 4 MiB optimizer state
    assert result["peak_mib"] == 8 + 32 + 4 + 8 + 16
    assert result["start_mib"] == 8 and result["end_mib"] == 8 + 8 + 16
    peak = result["peak"]
    assert _kinds(peak) == {"before the history": 8.0, "activations": 32.0, "temporaries": 4.0,
                            "gradients": 8.0, "optimizer state": 16.0}
    assert peak["live_mib"] == result["peak_mib"] and peak["named_pct"] == pytest.approx(
        100 * 60 / 68, abs=0.1)
    act = next(r for r in peak["rows"] if r["kind"] == "activations")
    assert (act["module"], act["op"], act["line"]) == ("model.py:20", "linear",
                                                       "model.py:20 forward")
    grads = next(r for r in peak["rows"] if r["kind"] == "gradients")
    assert grads["line"] == "train.py:42 main"


def test_fragmentation_equals_torchs_own_segment_summary() -> None:
    data = Plan(oom_mib=20, free_pieces=40).build()
    frag = snapshot_memory(snapshot_of(data))["fragmentation"]
    text = _memory_viz.segsum(data)

    def mib(key: str) -> float:
        number, unit = re.search(rf"^{key}: ([\d.]+)(\w+)", text, re.M).groups()
        return float(number) * {"MiB": 1, "GiB": 1024, "KiB": 1 / 1024}[unit]

    assert frag["reserved_mib"] == mib("total_reserved")
    assert frag["allocated_mib"] == mib("total_allocated")
    assert frag["cached_free_mib"] == mib("total_free")
    assert frag["segments"] == int(re.search(r"^segments: (\d+)", text, re.M).group(1))
    assert (frag["largest_free_mib"], frag["free_blocks"], frag["ooms"]) == (1.0, 40, 1)


def test_an_out_of_memory_names_the_request_its_line_and_what_fits() -> None:
    frag = snapshot_memory(snapshot_of(Plan(oom_mib=20, free_pieces=40).build()))["oom"]
    assert (frag["request_mib"], frag["line"], frag["device_free_mib"]) == (
        20.0, "model.py:20 forward", 3.0)
    assert frag["advice"][0].startswith("fragmentation: 40 MiB were reserved but free")
    assert "expandable_segments:True" in frag["advice"][0]
    deep = snapshot_memory(snapshot_of(Plan(oom_mib=200, layers=12, activation_mib=32,
                                            oom_layer=10).build()))["oom"]
    assert _kinds(deep["held"])["activations"] == 11 * 32     # the forward in flight
    assert deep["advice"] == ["activations hold 352 MiB: activation checkpointing on "
                              "model.py:20 (torch.utils.checkpoint) or a smaller batch"]


def test_a_snapshot_torch_makes_from_a_cpu_profile_keeps_torchs_categories(
        tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    with torch.profiler.profile(profile_memory=True, record_shapes=True,
                                with_stack=True) as prof:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    data = _memory_viz._profile_to_snapshot(prof)
    path = tmp_path / "profile.pickle"
    path.write_bytes(pickle.dumps(data))
    result = snapshot_memory(read_snapshot(path))
    assert result["device"] == "cpu" and result["from_profile"]
    assert result["fragmentation"] is None and result["reserved_peak_mib"] is None
    # independently: replay torch's entries with a dict, sum each category live at the peak
    live: dict[int, dict] = {}
    level = best = 0
    by_category: dict[str, int] = {}
    for e in data["device_traces"][-1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            level += e["size"]
        elif e["action"] == "free_completed":   # a block from before the profile too
            live.pop(e["addr"], None)
            level -= e["size"]
        if level > best:
            best = level
            by_category = {}
            for block in live.values():
                by_category[block["category"]] = by_category.get(block["category"], 0) \
                    + block["size"]
    names = {"parameter": "parameters", "gradient": "gradients", "activation": "activations",
             "optimizer_state": "optimizer state", "temporary": "temporaries",
             "input": "inputs", "autograd_detail": "autograd detail", "unknown": "unknown"}
    kinds = _kinds(result["peak"])
    for category, nbytes in by_category.items():
        assert kinds[names[category]] == pytest.approx(nbytes / 2**20, abs=1e-3)
    acts = [r for r in result["peak"]["rows"] if r["kind"] == "activations" and r["module"]]
    assert acts and acts[0]["module"] in ("ReLU_0", "Linear_0", "Linear_1")   # nn.Module ranges
    assert acts[0]["line"].startswith("test_snapshot_memory.py:")


def test_a_pickle_that_is_not_plain_data_is_refused_unrun(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):   # what a hostile snapshot would do when loaded
            return (exec, (f"open({str(marker)!r}, 'w').close()",))

    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [Payload()]}))
    with pytest.raises(TraceFormatError, match="plain data only"):
        read_snapshot(path)
    assert not marker.exists()
    (tmp_path / "odd.pickle").write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(TraceFormatError, match="no 'segments' list"):
        read_snapshot(tmp_path / "odd.pickle")


def test_analyze_a_snapshot_writes_the_oom_report_in_every_view(tmp_path: Path) -> None:
    path = tmp_path / "oom.pickle"
    path.write_bytes(pickle.dumps(Plan(oom_mib=20, free_pieces=40).build()))
    run = nsbridge.analyze(path, out=tmp_path / "run")
    snap = run.report["memory_snapshot"]
    md = (tmp_path / "run" / "report.md").read_text()
    html = (tmp_path / "run" / "report.html").read_text()
    assert "Out of memory: the allocation of 20.0 MiB at model.py:20 forward failed" in md
    assert "Out of memory: the allocation of 20.0 MiB at model.py:20 forward failed" in html
    assert "expandable\\_segments:True" in md       # escaped for Markdown
    assert json.loads((tmp_path / "run" / "report.json").read_text())["memory_snapshot"] == snap


@pytest.mark.slow
def test_a_file_that_is_not_a_snapshot_is_an_error_that_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"not a pickle")
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "analyze", "--out",
                           str(tmp_path / "bad-run"), str(bad)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1 and "is not an allocator snapshot" in proc.stderr
    assert not (tmp_path / "bad-run").exists()
