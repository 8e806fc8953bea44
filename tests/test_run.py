"""Run: passes' outputs merged by op name in memory, statuses, and one save at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsbridge.passes.torch_pass import analyze_traces
from nsbridge.pipeline import save
from nsbridge.profiles import load_profile
from nsbridge.run import PassOutput, Run, merge_ops, rank


H200 = Path(__file__).parent / "data" / "torch" / "h200" / "input_bound_h200.json.gz"


def _run(tmp_path: Path) -> Run:
    return Run.create(out=tmp_path / "run", label="t", command="analyze", target="x",
                      args=[], profile=load_profile(), cwd=tmp_path)


def test_merge_ops_is_the_union_of_the_ops_every_pass_saw() -> None:
    rows = [{"name": "aten::mm", "calls": 3}, {"name": "aten::add", "calls": 1}]
    merged = merge_ops(rows, "nsys", {"aten::mm": {"kernels": 3}, "nccl:all_reduce": {"kernels": 1}})
    by_name = {r["name"]: r for r in merged}
    assert [r["name"] for r in merged] == ["aten::mm", "aten::add", "nccl:all_reduce"]
    assert by_name["aten::mm"] == {"name": "aten::mm", "calls": 3, "nsys": {"kernels": 3}}
    assert by_name["aten::add"]["nsys"] is None             # nsys did not see it
    only_nsys = by_name["nccl:all_reduce"]
    assert only_nsys["calls"] is None and only_nsys["shapes"] == []   # torch did not see it
    assert only_nsys["nsys"] == {"kernels": 1} and only_nsys["ncu"] is None


def test_rank_keeps_the_stronger_of_one_id_and_puts_the_verdicts_first() -> None:
    recs = [{"id": "a", "impact": 1.0}, {"id": "b", "impact": 5.0},
            {"id": "a", "impact": 3.0, "addresses_verdict": True}]
    assert [(r["id"], r["impact"]) for r in rank(recs)] == [("a", 3.0), ("b", 5.0)]


def test_add_merges_in_memory_and_writes_nothing(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert sorted(p.name for p in run.dir.iterdir()) == ["manifest.json"]
    assert json.loads((run.dir / "manifest.json").read_text())["status"] == "running"
    run.add(PassOutput(name="one", manifest={"wall_s": 1.0}, op_key="nsys",
                       op_columns={"aten::mm": {"kernels": 2}}, notes=["first"],
                       files={"a": "a.txt"}, section=("timeline", {"ops": []})))
    run.add(PassOutput(name="two", manifest={}, notes=["second"], files={"b": "b.txt"}))
    assert sorted(p.name for p in run.dir.iterdir()) == ["manifest.json"]
    assert run.report["notes"] == ["first", "second"]
    assert run.report["files"] == {"a": "a.txt", "b": "b.txt"}
    assert run.report["timeline"] == {"ops": []} and run.report["status"] == "ok"
    assert [p["name"] for p in run.manifest["passes"]] == ["one", "two"]


def test_the_first_failure_is_the_runs_and_stays(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.add(PassOutput(name="torch.profiler", manifest={}))
    run.add(PassOutput(name="nsys", manifest={}, status="timeout", exit_code=124,
                       error={"type": "Timeout", "message": "stopped"}))
    run.add(PassOutput(name="ncu", manifest={}, status="failed", exit_code=1,
                       error={"type": "X", "message": "later"}))
    assert run.report["status"] == "timeout" and run.report["error"]["type"] == "Timeout"
    run.fail("other", RuntimeError("also later"))
    assert run.report["status"] == "timeout"
    assert run.manifest["passes"][-1]["error"]["message"] == "also later"


@pytest.mark.parametrize("status, verdict_kept", [("ok", True), ("failed", False)])
def test_save_writes_every_file_once_and_keeps_only_a_conclusive_verdict(
        tmp_path: Path, status: str, verdict_kept: bool) -> None:
    """A later status (a pass failing after the verdict was built) takes the verdict away."""
    output = analyze_traces([H200], load_profile(), str(H200))
    assert output.core["verdict"] and output.core["recommendations"]
    output.status, output.exit_code = status, 0 if status == "ok" else 1
    run = _run(tmp_path)
    run.add(output)
    save(run)
    names = sorted(p.name for p in run.dir.iterdir())
    assert names == ["manifest.json", "merged.json.gz", "ops.csv", "report.html", "report.json",
                     "report.md"]
    report = json.loads((run.dir / "report.json").read_text())
    assert (report["verdict"] is not None) == verdict_kept
    assert bool(report["recommendations"]) == verdict_kept


def test_a_run_no_pass_finished_is_saved_as_failed(tmp_path: Path) -> None:
    run = _run(tmp_path)
    save(run)
    assert json.loads((run.dir / "report.json").read_text())["status"] == "failed"
    assert json.loads((run.dir / "manifest.json").read_text())["status"] == "failed"


def test_json_size_reads_a_gzip_trailer_and_distrusts_one_that_wrapped(tmp_path: Path) -> None:
    """A gzipped trace's JSON is its trailer's inflated size; a trailer smaller than the
    compressed file can only have wrapped past 4 GiB (so it counts as more than that), and a
    plain file is its size."""
    import gzip

    from nsbridge.run import json_size

    text = b'{"traceEvents": []}' * 1000
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(text))
    assert json_size(packed) == len(text)
    wrapped = tmp_path / "w.json.gz"
    wrapped.write_bytes(gzip.compress(text)[:-4] + (7).to_bytes(4, "little"))
    assert json_size(wrapped) >= 1 << 32
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    assert json_size(plain) == len(text)
