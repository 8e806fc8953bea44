"""One pipeline of passes: a Run taken through its passes, its files written once.

`triage --nsys --deep 1` opens no earlier run, writes each report file once and builds
merged.json.gz once; a fourth pass is its own class plus one entry in a list (the toy pass
below); a pass that fails while running marks the run failed, one that cannot be planned
leaves a note and the run as it was."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import nsbridge
from nsbridge.contract.check import STRICT_REPORTS
from nsbridge import rundir
from nsbridge.errors import DeepError, ToolFailedError, ToolNotFoundError
from nsbridge.passes.torch_pass import analyze_traces
from nsbridge.pipeline import Given, run_passes
from nsbridge.profiles import load_profile
from nsbridge.report.render import files as report_files
from nsbridge.commands import deep as deep_command, measure
from nsbridge.report.document import pass_view as views
from nsbridge.report.views import catalog
from nsbridge.report.document.document import Section, Table
from nsbridge.report.render.terminal import terminal_summary
from nsbridge.run import PassOutput, Run

from conftest import ROOT, TORCH_DATA, fake_ncu_env

H200 = TORCH_DATA / "h200" / "train_cnn_h200.json.gz"
SCRIPT = "import torch\nx = torch.randn(8, 8)\nfor _ in range(3):\n    (x @ x).sum()\n"


@dataclass(frozen=True)
class RecordedTorchPass:
    """Stands in for the torch.profiler pass on this GPU-less machine: the output of a real
    H200 triage's trace (ops with kernels, so the deep pass has something to plan)."""

    script: Any
    profile: Any
    timeout: Any = None
    environ: Any = None
    runs: int = 1
    window: str = "steps"
    threads: Any = None
    name: str = "torch.profiler"

    def plan(self, run: Run) -> None:
        return None

    def run(self, run: Run, plan: None) -> PassOutput:
        output = analyze_traces([H200], self.profile, str(H200))
        output.name = "torch.profiler"
        output.manifest["wall_s"] = 5.0
        return output


def _count_writes(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Every file a run writes goes through rundir.atomic_path: count them by name."""
    written: Counter = Counter()
    real = rundir.atomic_path

    def counted(path: Path):  # type: ignore[no-untyped-def]
        written[Path(path).name] += 1
        return real(path)

    monkeypatch.setattr(rundir, "atomic_path", counted)
    return written


@pytest.mark.slow      # the run asks git for its commit
@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys (the timeline pass runs)")
def test_triage_with_nsys_and_deep_writes_each_file_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    written = _count_writes(monkeypatch)
    opened, merged = [], []
    real_open, real_merge = Run.open, report_files.merged_trace_json
    monkeypatch.setattr(Run, "open", classmethod(lambda cls, p: opened.append(p) or
                                                 real_open.__func__(cls, p)))
    monkeypatch.setattr(report_files, "merged_trace_json",
                        lambda *a: merged.append(1) or real_merge(*a))
    monkeypatch.setattr(measure, "TorchProfilerPass", RecordedTorchPass)
    result = nsbridge.triage(str(script), out=tmp_path / "run", nsys=True, deep_top=1,
                             environ=fake_ncu_env(tmp_path), cwd=tmp_path)
    names = [p["name"] for p in result.manifest["passes"]]
    assert names == ["torch.profiler", "nsys", "ncu"], result.manifest["passes"]
    assert opened == []
    for name in ("report.json", "report.md", "report.html", "ops.csv", "merged.json.gz"):
        assert written[name] == 1, (name, written)
    assert written["manifest.json"] == 2      # "running" at the start, then the whole run
    assert merged == [1]
    ncu_rows = [op for op in result.report["ops"] if op.get("ncu")]
    assert ncu_rows and result.report["timeline"] is not None


@dataclass(frozen=True)
class ToyPass:
    """A fourth pass: its own class, one entry in the list of passes."""

    name: str = "toy"

    def plan(self, run: Run) -> list[str]:
        return run.op_names[:2]

    def run(self, run: Run, plan: list[str]) -> PassOutput:
        return PassOutput(name=self.name, manifest={"ops_seen": len(plan)},
                          section=("toy", {"checked": len(plan), "findings": [
                              {"op": op, "why": f"toy-finding-{i}"} for i, op in enumerate(plan)]}),
                          op_key="toy",
                          op_columns={op: {"score": 0.25 * (i + 1)} for i, op in enumerate(plan)},
                          notes=["the toy pass looked at two ops"])


def _toy_run(tmp_path: Path) -> tuple[dict[str, Any], list[str]]:
    output = analyze_traces([H200], load_profile(), str(H200))
    run = Run.create(out=tmp_path / "run", label="toy", command="analyze", target="x",
                     args=[], profile=load_profile(), cwd=tmp_path)
    # a pass defined here has no types in nsbridge/contract/report.py (a built-in one must):
    # its report is written without the suite's strict check
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(STRICT_REPORTS)
        run_passes(run, [Given(output), ToyPass()])
    return nsbridge.load(tmp_path / "run").report, [op["name"] for op in output.core["ops"][:2]]


def test_a_new_pass_is_a_class_and_one_list_entry(tmp_path: Path) -> None:
    report, first_two = _toy_run(tmp_path)
    assert report["toy"]["checked"] == 2
    assert [f["op"] for f in report["toy"]["findings"]] == first_two
    assert [op["name"] for op in report["ops"] if op.get("toy")] == first_two
    assert report["status"] == "ok" and "the toy pass looked at two ops" in report["notes"]
    ops = nsbridge.load(tmp_path / "run").ops.set_index("name")
    assert ops.loc[first_two[1], "toy_score"] == 0.5


def test_every_renderer_shows_a_new_pass_without_an_edit(tmp_path: Path) -> None:
    """No view registered: the section (scalars, then its records as a table) and the
    per-op column show in the terminal, report.md and report.html as they are."""
    report, first_two = _toy_run(tmp_path)
    md = (tmp_path / "run" / "report.md").read_text()
    page = (tmp_path / "run" / "report.html").read_text()
    text = terminal_summary(report, None)
    for shown in (md, page, text):
        assert "toy score" in shown and "toy-finding-1" in shown and "checked: 2" in shown
    assert "## toy" in md and "<section id='toy'>" in page and "\ntoy:" in text
    row = next(line for line in md.splitlines() if line.startswith(f"| `{first_two[1]}`"))
    assert row.rstrip(" |").endswith("0.5")
    # load(), ops.csv and the merged trace: its per-op numbers on its ops' own slices
    ops = nsbridge.load(tmp_path / "run").ops.set_index("name")
    assert ops.loc[first_two[1], "toy_score"] == 0.5
    assert "toy_score" in (tmp_path / "run" / "ops.csv").read_text().splitlines()[0]
    merged = json.loads(gzip.open(tmp_path / "run" / "merged.json.gz").read())
    scored = {e["name"]: e["args"]["nsbridge.toy"]["score"] for e in merged["traceEvents"]
              if e.get("cat") == "cpu_op" and "nsbridge.toy" in e.get("args", {})}
    assert scored == {first_two[0]: 0.25, first_two[1]: 0.5}


def test_a_registered_view_titles_a_new_pass(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """One more entry in the catalog's VIEWS: the pass's own title and formats."""

    def toy_section(report: dict[str, Any], limit: Any) -> Section:
        rows = [[f["op"], f["why"]] for f in report["toy"]["findings"]]
        return Section("toy", "Toy checks", [Table(["op", "why"], rows)])
    def toy_charts(report: dict[str, Any]) -> list[dict[str, Any]]:
        rows = [op for op in report["ops"] if op.get("toy")]
        return [{"id": "toy", "kind": "bar", "title": "Toy score per op", "unit": "score",
                 "labels": [op["name"] for op in rows],
                 "series": {"score": [op["toy"]["score"] for op in rows]}}]
    toy = views.PassView("toy", toy_section, op_key="toy", source="Toy",
                         op_columns=(views.OpColumn("toy %", "score", "pct"),),
                         frame_dtypes=(("score", "float64"), ("note", "str")), charts=toy_charts)
    monkeypatch.setattr(catalog, "VIEWS", (*catalog.VIEWS, toy))
    report, first_two = _toy_run(tmp_path)
    md = (tmp_path / "run" / "report.md").read_text()
    assert "## Toy checks" in md and "checked: 2" not in md and "| toy % |" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| `{first_two[1]}`"))
    assert row.rstrip(" |").endswith("0.5")
    page = (tmp_path / "run" / "report.html").read_text()
    assert "<th colspan='1'>Toy</th>" in page
    assert "Toy score per op" in page and "id='chart-pass-toy'" in page     # its chart
    ops = nsbridge.load(tmp_path / "run").ops     # its declared columns, there even unfilled
    assert ops["toy_score"].dtype == "float64" and ops["toy_note"].isna().all()


@dataclass(frozen=True)
class FailingPass:
    error: Exception
    at_plan: bool
    name: str = "broken"

    def plan(self, run: Run) -> None:
        if self.at_plan:
            raise self.error

    def run(self, run: Run, plan: None) -> PassOutput:
        raise self.error


@pytest.mark.parametrize("at_plan", [True, False])
def test_a_failing_pass_is_recorded_and_the_run_saved(tmp_path: Path, at_plan: bool) -> None:
    output = analyze_traces([H200], load_profile(), str(H200))
    run = Run.create(out=tmp_path / "run", label="f", command="analyze", target="x",
                     args=[], profile=load_profile(), cwd=tmp_path)
    error = DeepError("no op to plan") if at_plan else ToolFailedError("ncu crashed")
    with pytest.raises(type(error)):
        run_passes(run, [Given(output), FailingPass(error, at_plan)])
    report = nsbridge.load(tmp_path / "run").report
    if at_plan:     # could not be planned: nothing ran, the run is as it was
        assert report["status"] == "ok"
        assert "the broken pass did not run: no op to plan" in report["notes"]
    else:           # failed while running: the run failed there
        assert report["status"] == "failed"
        assert report["error"] == {"type": "ToolFailedError", "message": "ncu crashed",
                                   "pass": "broken"}
    assert (tmp_path / "run" / "report.html").is_file()


@pytest.mark.slow
def test_a_single_process_triage_never_enters_the_distributed_code(tmp_path: Path) -> None:
    """distributed/ drives passes on a job's ranks; a one-process triage imports none of it
    (job/, what a process knows of its rank, it may)."""
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    code = ("import sys, nsbridge\n"
            f"result = nsbridge.triage({str(script)!r}, out={str(tmp_path / 'run')!r})\n"
            "assert result.exit_code == 0, result.report\n"
            "print(sorted(m for m in sys.modules if m.startswith('nsbridge.distributed')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow      # the run asks git for its commit
def test_a_pass_whose_tool_is_missing_fails_before_the_script_runs(tmp_path: Path) -> None:
    """Each pass checks its tools and devices first (pipeline.preflight): triage --nsys
    without nsys used to profile the script, then fail; now nothing runs and no run
    directory is left behind."""
    script = tmp_path / "job.py"
    script.write_text("import pathlib\npathlib.Path('ran').write_text('yes')\n")
    environ = {**os.environ, "NSBRIDGE_NSYS": str(tmp_path / "no-nsys")}
    with pytest.raises(ToolNotFoundError, match="NSBRIDGE_NSYS=.* is not a file"):
        nsbridge.triage(str(script), nsys=True, out=tmp_path / "run", cwd=tmp_path,
                        environ=environ)
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run").exists()


def test_a_pass_that_cannot_start_on_an_earlier_run_leaves_a_note(tmp_path: Path) -> None:
    """Into an existing run, the same check is the pipeline's: a note, the run kept."""
    output = analyze_traces([H200], load_profile(), str(H200))
    run = Run.create(out=tmp_path / "run", label="x", command="analyze", target="x",
                     args=[], profile=load_profile(), cwd=tmp_path)
    run_passes(run, [Given(output)])
    ops = nsbridge.load(tmp_path / "run").report["ops"]
    environ = {**os.environ, "NSBRIDGE_NSYS": str(tmp_path / "no-nsys")}
    with pytest.raises(ToolNotFoundError):
        nsbridge.timeline("train_cnn.py", run=tmp_path / "run", cwd=ROOT / "examples",
                          environ=environ)
    report = nsbridge.load(tmp_path / "run").report
    assert report["ops"] == ops
    assert report["notes"][-1].startswith("the nsys pass did not run: NSBRIDGE_NSYS=")


@pytest.mark.slow      # the deep pass lists GPUs (nvidia-smi)
def test_deep_with_a_script_profiles_the_named_op_after_triaging_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: `deep --kernel OP script.py` checked OP against the new, empty run
    before the triage had found any op, and always failed."""
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    monkeypatch.setattr(deep_command, "TorchProfilerPass", RecordedTorchPass)
    op = next(o["name"] for o in analyze_traces([H200], load_profile(), str(H200)).core["ops"]
              if o.get("device_self_us"))
    result = nsbridge.deep(str(script), kernels=[op], out=tmp_path / "run", cwd=tmp_path,
                           environ=fake_ncu_env(tmp_path))
    assert [p["name"] for p in result.manifest["passes"]] == ["torch.profiler", "ncu"]
    assert (tmp_path / "run" / "deep.ncu-rep").is_file()
