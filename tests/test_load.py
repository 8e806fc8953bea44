"""`nsbridge.load(run_dir)`: a run read back as DataFrames, its repr and notebook view, and
the column reference in report/frames.py checked against the frames of real runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import pytest

import nsbridge
from nsbridge.errors import RunDirError
from nsbridge.model.ranks.cross_rank import tool_rank_row
from nsbridge.passes.ncu_pass import DeepOnRanks
from nsbridge.passes.nsys_pass import TimelineOnRanks
from nsbridge.profiles import load_profile
from nsbridge.report import frames
from nsbridge.report.frame_reference import Column, frame_reference
from nsbridge.report.frames import summary_html
from nsbridge.result import FRAMES, RunResult

from conftest import DATA, EXAMPLES, ROOT, TORCH_DATA

GPU_TRACE = TORCH_DATA / "h100_bert-small_2025-07.json.gz"
CNN_TRACE = TORCH_DATA / "h200" / "train_cnn_h200.json.gz"
CNN_NCU = DATA / "ncu" / "train_cnn_nvtx_sections.raw.csv"
NSYS_GPU = DATA / "nsys" / "nsbridge_sync_bound_h100_nsys2025.3.sqlite"
NSYS_CPU = DATA / "nsys" / "nsbridge_cnn_cpu_nsys2022.4.sqlite"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """A real CPU-only triage of the CNN example (shapes and memory recorded), read back."""
    out = tmp_path_factory.mktemp("cpu") / "run"
    nsbridge.triage(str(EXAMPLES / "train_cnn.py"), ["--steps", "8", "--batch-size", "4"],
                    out=out, cwd=ROOT)
    return nsbridge.load(out)


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """An H100 trace analysed (one step, kernels, syncs, idle gaps), read back."""
    out = tmp_path_factory.mktemp("gpu") / "run"
    nsbridge.analyze([GPU_TRACE], out=out)
    return nsbridge.load(out)


@pytest.fixture(scope="module")
def all_passes(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """An H200 trace, an H100 nsys export and an ncu capture in one run: every frame, and
    ops only nsys or ncu saw (no torch.profiler calls)."""
    out = tmp_path_factory.mktemp("all") / "run"
    nsbridge.analyze([CNN_TRACE, NSYS_GPU, CNN_NCU], out=out)
    return nsbridge.load(out)


@pytest.fixture(scope="module")
def nsys_cpu(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """An nsys export alone, of a CPU-only run: no torch frames, no GPU fields."""
    out = tmp_path_factory.mktemp("nsys") / "run"
    nsbridge.analyze([NSYS_CPU], out=out)
    return nsbridge.load(out)


def test_load_gives_every_table_as_a_frame(tmp_path: Path) -> None:
    made = nsbridge.analyze([CNN_TRACE, CNN_NCU], out=tmp_path / "r")
    run = nsbridge.load(tmp_path / "r")
    assert run.report == made.report and run.manifest["command"] == "analyze"
    ops = run.ops.set_index("name")
    assert ops.loc["aten::addmm", "device_self_us"] == pytest.approx(113.342)
    assert ops.loc["aten::addmm", "ncu_launches"] == 4 and "ncu_tensor_pct" in ops
    kernels = run.kernels
    assert set(kernels["kind"]) >= {"kernel", "memset"}
    assert kernels.loc[kernels["op"] == "aten::addmm", "calls"].sum() == 18   # 12 kernels, 6 memsets
    assert len(run.steps) == 3 and len(run.ncu) == 39 and len(run.gaps) > 0
    assert run.timeline_ops is None and run.exit_code == 0
    html = run._repr_html_()
    assert "cpu-bound" in html and "aten::convolution_backward" in html


# repr ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gpu_run", "all_passes", "nsys_cpu"])
def test_repr_is_a_few_lines_naming_the_run(name: str, request: pytest.FixtureRequest) -> None:
    run: RunResult = request.getfixturevalue(name)
    text = repr(run)
    assert len(text) < 1000 and len(text.splitlines()) <= 4, text
    assert f": {run.status}," in text and str(run.run_dir) in text
    verdict = run.report["verdict"]
    assert (f"verdict {verdict['label']}" if verdict else "no verdict") in text
    assert f"ops {len(run.ops)}," in text and f"steps {len(run.steps)}," in text
    assert f"kernels {len(run.kernels)}," in text
    for frame in FRAMES:   # each frame attribute: its rows, or None where the pass did not run
        assert re.search(rf"\b{frame} \d+" if getattr(run, frame) is not None
                         else rf"None: .*\b{frame}\b", text), (frame, text)


def test_repr_stays_short_for_any_report() -> None:
    report = {"command": "analyze", "target": "\x1b[2J" + "t.json, " * 2000, "status": "failed",
              "error": {"type": "ScriptError", "message": "boom " * 1000},
              "verdict": None, "ops": [{"name": f"op{i}", "calls": 1} for i in range(5000)]}
    run = RunResult(run_dir=Path("runs") / ("x" * 500), report=report,
                    ops=frames.ops(report), steps=frames.steps(report), exit_code=1)
    text = repr(run)
    assert len(text) < 1000 and "\x1b" not in text and "\\x1b" in text
    assert ": failed, exit code 1, no verdict" in text and "ops 5000," in text


# dtypes -------------------------------------------------------------------------------------

def test_counts_are_integers(gpu_run: RunResult, all_passes: RunResult) -> None:
    assert gpu_run.ops["calls"].dtype == "int64"
    assert gpu_run.kernels["calls"].dtype == "int64"
    assert gpu_run.sync_points["count"].dtype == "int64"
    assert gpu_run.steps["step"].dtype == "int64" and gpu_run.gaps["device"].dtype == "int64"
    assert all_passes.timeline_ops["ranges"].dtype == "int64"
    assert all_passes.ncu["launch"].dtype == "int64"
    # an op only nsys or ncu saw has no torch.profiler count: nullable, never float
    calls = all_passes.ops["calls"]
    assert calls.dtype == "Int64" and calls.isna().any() and calls.sum() > 0
    assert all_passes.kernels["bytes"].dtype == "Int64"      # <NA> for kernels, set for copies
    assert all_passes.ops["nsys_ranges"].dtype == "Int64"
    assert all_passes.ops["ncu_launches"].dtype == "Int64"


@pytest.mark.slow
def test_a_cpu_run_has_float_nan_device_times_and_shapes_as_lists(cpu_run: RunResult) -> None:
    ops = cpu_run.ops
    assert ops["calls"].dtype == "int64"
    for col in ("device_self_us", "device_total_us", "spread_pct"):
        assert ops[col].dtype == "float64", col
    assert ops["device_self_us"].isna().all() and ops["cpu_self_us"].notna().all()
    conv = ops.set_index("name").loc["aten::convolution_backward"]
    shape = conv["shapes"][0]        # torch's '[[4,64,16,16],[4,32,16,16],...]' as lists
    assert isinstance(shape, list) and all(isinstance(dims, list) for dims in shape)
    assert shape[0] == [4, 64, 16, 16] or shape[0] == [4, 32, 32, 32]
    assert conv["shape_work"][0]["shape"] in conv["shapes"]
    # report.json keeps torch's text
    assert isinstance(cpu_run.report["ops"][0]["shapes"][0], str)
    assert cpu_run.sync_points["gpu_idle_ms"].dtype == "float64"
    assert cpu_run.sync_points["gpu_idle_ms"].isna().all()


@pytest.mark.slow
def test_a_triages_step_clock_is_in_its_steps_frame(cpu_run: RunResult) -> None:
    """Each step's CPU time and run-queue wait, as report.json has them; no speed probe
    outside the gate profile."""
    per_step = cpu_run.report["steps"]["per_step"]
    steps = cpu_run.steps
    assert list(steps["cpu_ms"]) == [s["cpu_ms"] for s in per_step]
    assert (steps["cpu_ms"] > 0).all() and steps["cpu_ms"].dtype == "float64"
    assert list(steps["wait_ms"].fillna(-1)) == [
        -1 if s["wait_ms"] is None else s["wait_ms"] for s in per_step]
    assert steps["probe_ms"].isna().all()


def test_shapes_are_lists_of_dims_lists(gpu_run: RunResult) -> None:
    addmm = gpu_run.ops.set_index("name").loc["aten::addmm"]
    assert addmm["shapes"][0] == [[512], [141, 512], [512, 512], [], []]
    assert gpu_run.report["ops"][0]["shapes"][0] == "[[512],[141,512],[512,512],[],[]]"
    # a text that is not JSON is kept as text rather than failing the load
    odd = frames.ops({"ops": [{"name": "x", "shapes": ["[[1,2]", "[[3]]"]}]})
    assert odd.loc[0, "shapes"] == ["[[1,2]", [[3]]]


# empty frames -------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_cpu_run_has_empty_frames_with_their_columns(cpu_run: RunResult) -> None:
    docs = documented()
    for name in ("gaps", "kernels"):
        frame = getattr(cpu_run, name)
        assert frame.empty and list(frame.columns) == fixed(docs[name]), name
        check_dtypes(name, frame, docs[name])


def test_every_frame_has_its_columns_when_empty() -> None:
    docs = documented()
    bare: dict[str, Any] = {"timeline": {"ops": [], "idle_gaps": []}, "ncu": {"kernels": []}}
    for report in ({}, bare):
        for name in ("ops", "kernels", "steps", "sync_points", "gaps"):
            frame = getattr(frames, name)(report)
            assert frame.empty and set(fixed(docs[name])) <= set(frame.columns), name
            check_dtypes(name, frame, docs[name])
    for name, frame in (("timeline_ops", frames.timeline_ops(bare)),
                        ("timeline_gaps", frames.timeline_gaps(bare)),
                        ("ncu", frames.ncu_kernels(bare))):
        assert frame is not None and frame.empty
        assert list(frame.columns) == fixed(docs[name]), name
        check_dtypes(name, frame, docs[name])


# the column reference -----------------------------------------------------------------------

def documented() -> dict[str, list[Column]]:
    """report/frames.py's docstring tables (the one column reference, rendered into
    docs/reference/frames.md): frame attribute -> its documented columns."""
    return {frame.name: frame.columns for frame in frame_reference()}


def fixed(docs: list[Column]) -> list[str]:
    """The columns every frame of that kind has, in order."""
    return [d.column for d in docs if d.when is None and "<" not in d.column]


def find(column: str, docs: list[Column]) -> Optional[Column]:
    exact = [d for d in docs if d.column == column]
    if exact:
        return exact[0]
    return next((d for d in docs if "<" in d.column and re.fullmatch(
        ".+".join(map(re.escape, re.split(r"<\w+>", d.column))), column)), None)


def check_dtypes(name: str, frame: pd.DataFrame, docs: list[Column]) -> None:
    text = pd.Series(["x"]).dtype          # pandas' string dtype (str, or object before 3)
    for column in frame.columns:
        doc = find(column, docs)
        assert doc is not None, f"{name}.{column} is not in report/frames.py's table"
        missing = bool(frame[column].isna().any())
        want = {"float64": "float64", "int64": "int64", "object": "object",
                "Int64": "Int64" if missing else "int64",
                "bool": "boolean" if missing else "bool", "str": str(text)}[doc.dtype]
        assert str(frame[column].dtype) == want, (name, column, frame[column].dtype, doc)


def ranks_report(run: RunResult) -> dict[str, Any]:
    """The ranks rows of a timeline and an ncu pass on two ranks, built as the real fan-out
    builds them (model.ranks.cross_rank.tool_rank_row) from one real run's sections: rank 0 ran,
    rank 1 never answered."""
    report = run.report
    op_columns = {op["name"]: op["ncu"] for op in report["ops"] if op.get("ncu")}
    rows: dict[str, list[dict[str, Any]]] = {"timeline": [], "ncu": []}
    for kind, share in (("timeline", TimelineOnRanks()),
                        ("ncu", DeepOnRanks(load_profile("deep").deep))):
        out = {"status": "ok", "error": None, "manifest": {"wall_s": 12.5},
               "section": (kind, report[kind]), "op_columns": op_columns, "files": {}}
        for rank, answer in ((0, out), (1, None)):
            rows[kind].append(tool_rank_row(share.tool, rank, answer,
                                            numbers=share.rank_numbers, reason="median",
                                            host="node-a", folder=f"rank-{rank:02d}",
                                            missing="it never wrote one"))
    return {"timeline": {"ranks": rows["timeline"]}, "ncu": {"ranks": rows["ncu"]}}


def real_frames(runs: list[RunResult]) -> list[tuple[str, pd.DataFrame]]:
    found = [(name, getattr(run, name)) for run in runs for name in FRAMES]
    ranks = ranks_report(runs[-1])
    found += [("timeline_ranks", frames.pass_ranks(ranks, "timeline")),
              ("ncu_ranks", frames.pass_ranks(ranks, "ncu"))]
    job = runs[-1].run_dir.parent / "two-ranks"          # a real two-rank job's traces
    if not job.exists():
        nsbridge.analyze([TORCH_DATA / "two_ranks"], out=job)
    found.append(("ranks", nsbridge.load(job).ranks))
    pooled = {"steps": {"per_step": [{**s, "run": 1 + i % 2} for i, s in enumerate(
        runs[-1].report["steps"]["per_step"])]}}        # as model.comparing.pooled numbers the runs
    found.append(("steps", frames.steps(pooled)))
    return [(name, frame) for name, frame in found if frame is not None]


@pytest.mark.slow
def test_the_column_reference_lists_every_column_of_the_frames(
        cpu_run: RunResult, gpu_run: RunResult, nsys_cpu: RunResult,
        all_passes: RunResult) -> None:
    """The docstring table of report/frames.py and the real frames agree: every column a
    frame has is documented with its dtype, every documented column shows up, and the
    ones listed without a condition are in every frame of that kind."""
    docs = documented()
    assert set(docs) == set(FRAMES)
    seen: dict[str, set[str]] = {name: set() for name in docs}
    for name, frame in real_frames([cpu_run, gpu_run, nsys_cpu, all_passes]):
        check_dtypes(name, frame, docs[name])
        assert list(frame.columns[:len(fixed(docs[name]))]) == fixed(docs[name]), name
        seen[name] |= {d.column for c in frame.columns for d in [find(c, docs[name])] if d}
    for name, table in docs.items():
        never = [d.column for d in table if d.column not in seen[name]]
        assert not never, f"documented but in no real frame: {name}.{never}"
        assert all(d.dtype in ("float64", "int64", "Int64", "str", "bool", "object")
                   for d in table), name


def test_notebook_view_escapes_names() -> None:
    report = {"command": "analyze", "target": "t<1>", "status": "ok",
              "verdict": {"label": "gpu-bound", "evidence": ["a & b"]},
              "ops": [{"name": "<script>alert(1)</script>", "calls": 1, "cpu_self_us": 1.0,
                       "device_self_us": None, "self_pct": 100.0}]}
    page = summary_html(report, "runs/x")
    assert "<script>" not in page and "&lt;script&gt;" in page and "a &amp; b" in page


def test_load_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="not an nsbridge run directory"):
        nsbridge.load(tmp_path)


def test_grouped_ops_and_memory_frames_hold_the_reports_rows(gpu_run: RunResult) -> None:
    """The H100 trace has shapes, Python stacks and GPU memory events: r.op_shapes,
    r.op_sources and r.memory give report.json's rows, typed."""
    groups, memory = gpu_run.report["op_groups"], gpu_run.report["memory"]
    shapes = gpu_run.op_shapes
    assert len(shapes) == len(groups["by_shape"]) > 0
    assert isinstance(shapes["shape"].iloc[0], list) and shapes["calls"].dtype == "int64"
    assert list(shapes["calls"]) == [r["calls"] for r in groups["by_shape"]]
    sources = gpu_run.op_sources
    assert list(sources["source"]) == [r["source"] for r in groups["by_source"]]
    curve = gpu_run.memory
    assert list(curve["allocated_mib"]) == memory["points"]["allocated_mib"]
    assert curve["reserved_mib"].notna().all() and memory["device"].startswith("cuda")
    assert curve["allocated_mib"].max() == pytest.approx(memory["peak_mib"])


def test_a_commands_result_has_the_frames_load_gives(tmp_path: Path) -> None:
    result = nsbridge.analyze([CNN_TRACE], out=tmp_path / "run")
    again = nsbridge.load(result.run_dir)
    assert isinstance(result.ops["shapes"].iloc[0], list)
    for name in ("ops", "steps", "kernels", "op_shapes", "memory"):
        pd.testing.assert_frame_equal(getattr(result, name), getattr(again, name))


def test_load_returns_what_the_command_returned(tmp_path: Path) -> None:
    """A loaded run is the command's own result: the timeline frame it returned, and the
    exit code of its last pass (the one the command exited with), not its first."""
    import json

    returned = nsbridge.analyze([CNN_TRACE, NSYS_GPU], out=tmp_path / "run")
    loaded = nsbridge.load(tmp_path / "run")
    assert returned.timeline is not None and len(returned.timeline)
    pd.testing.assert_frame_equal(loaded.timeline, returned.timeline)
    manifest_path = tmp_path / "run" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["passes"] = [{**manifest["passes"][0], "exit_code": 0},
                          {**manifest["passes"][-1], "exit_code": 3}]
    manifest_path.write_text(json.dumps(manifest))
    assert nsbridge.load(tmp_path / "run").exit_code == 3
