"""What `nsbridge analyze` accepts: traces as .json or .json.gz, a folder of ranks' traces,
an earlier run's folder, nsys exports alone, every real trace in ../shared; and what it
refuses (a missing path, an empty folder, JSON that is not a trace)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from nsbridge.api import analyze
from nsbridge.errors import TraceFormatError, TraceNotFoundError

from conftest import DATA, SHARED_REAL, TORCH_DATA

H200 = TORCH_DATA / "h200" / "train_cnn_h200.json.gz"


def test_plain_json_trace_gets_a_merged_trace(tmp_path: Path) -> None:
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(H200).read())
    result = analyze([plain], out=tmp_path / "r")
    assert (tmp_path / "r" / "merged.json.gz").is_file() and result.report["status"] == "ok"


def test_the_merge_limit_counts_a_gzipped_traces_json_not_its_size_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """merged.json.gz loads the whole trace: a gzipped trace is measured by the JSON it
    inflates to (its gzip trailer), so a 1M-event trace of 20 MB on disk is not decoded
    whole into Python objects (7 s and 1.3 GB)."""
    import nsbridge.run as run_module

    inflated = len(gzip.open(H200).read())
    assert run_module.json_size(H200) == inflated > H200.stat().st_size
    monkeypatch.setattr(run_module, "MERGE_LIMIT", (inflated + H200.stat().st_size) // 2)
    result = analyze([H200], out=tmp_path / "r")
    assert not (tmp_path / "r" / "merged.json.gz").exists()
    assert any(f"is {inflated >> 20} MiB of JSON" in n for n in result.report["notes"])
    monkeypatch.setattr(run_module, "MERGE_LIMIT", inflated)
    analyze([H200], out=tmp_path / "r2")
    assert (tmp_path / "r2" / "merged.json.gz").is_file()


def test_a_run_folder_is_one_trace_not_two(tmp_path: Path) -> None:
    folder = tmp_path / "earlier-run"
    folder.mkdir()
    shutil.copy(H200, folder / "trace.json.gz")
    shutil.copy(H200, folder / "merged.json.gz")        # what a run folder also holds
    report = analyze([folder], out=tmp_path / "r").report
    assert "ranks" not in report and "distributed" not in report


@pytest.mark.slow      # analyze reads the ranks on worker processes
def test_multi_rank_folder(tmp_path: Path) -> None:
    result = analyze([TORCH_DATA / "two_ranks"], out=tmp_path / "run")
    assert "ranks" not in result.report   # one key for ranks: distributed.ranks
    ranks = result.report["distributed"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["verdict"] and r["file"] and r["ops"] for r in ranks)
    assert (result.run_dir / "report.md").read_text().count("## Ranks") == 1
    single = [analyze([p], out=tmp_path / p.name).report
              for p in sorted((TORCH_DATA / "two_ranks").glob("*.json.gz"))]
    calls = lambda rep, n: sum(o["calls"] for o in rep["ops"] if o["name"] == n)  # noqa: E731
    assert calls(result.report, "aten::mm") == calls(single[0], "aten::mm") + calls(single[1], "aten::mm")


def test_analyze_rejects_what_is_not_a_trace(tmp_path: Path) -> None:
    with pytest.raises(TraceNotFoundError):
        analyze([tmp_path / "missing.json.gz"], out=tmp_path / "a")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceNotFoundError, match="holds no"):
        analyze([tmp_path / "empty"], out=tmp_path / "b")
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(TraceFormatError):
        analyze([bad], out=tmp_path / "c")
    assert not (tmp_path / "c").exists()


SHARED_TRACES = sorted(SHARED_REAL.rglob("*.json.gz")) if SHARED_REAL.is_dir() else []


@pytest.mark.slow      # every real trace of ../shared, ~10 s: the full suite's
@pytest.mark.skipif(not SHARED_TRACES, reason="../shared/fixtures/real is not beside the repo")
@pytest.mark.parametrize("path", SHARED_TRACES, ids=lambda p: p.name)
def test_every_shared_real_trace_analyses(path: Path, tmp_path: Path) -> None:
    report = analyze([path], out=tmp_path / "run").report
    assert report["status"] == "ok" and report["verdict"]["label"]
    assert report["device"] is not None and report["device"]["kernels"] >= 0
    assert report["ops"] or path.name.startswith("inference_rank_1")


def test_nsys_export_alone_fills_the_op_rows(tmp_path: Path) -> None:
    report = analyze([DATA / "nsys" / "h100_2gpu_1s.sqlite"], out=tmp_path / "run").report
    rows = {op["name"]: op for op in report["ops"]}
    assert len(rows) == len(report["timeline"]["ops"])           # the union of what passes saw
    copy = rows["aten::copy_"]
    assert copy["calls"] is None and copy["device_self_us"] is None   # torch.profiler saw nothing
    assert (copy["nsys"]["kernels"], copy["nsys"]["copies"]) == (136, 432)
