"""Faults around the profiled process: a missing -m module, the script's own traceback, the
current folder shadowing nsbridge's imports, and step records under a tight loop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nsbridge._bootstrap.steps import EXACT_STEPS, SAMPLED_STEPS, StepLog
from nsbridge.errors import ScriptError
from nsbridge.script_check import check_script, module_file

from conftest import run_nsbridge

NESTED_FAILURE = """\
import torch


def inner(x):
    return x.view(-1, 7)


def outer():
    return inner(torch.ones(4))


outer()
"""

TIGHT_LOOP = """\
import sys
import nsbridge

for _ in range(int(sys.argv[1])):
    nsbridge.step()
"""


# -- -m MODULE ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("command", ["triage", "timeline"])
def test_missing_module_fails_before_the_run(tmp_path: Path, command: str) -> None:
    proc = run_nsbridge("-q", command, "--out", str(tmp_path / "run"), "-m",
                        "no_such_mod_15.train", "--", "--epochs", "1", cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "No module named 'no_such_mod_15'" in proc.stderr
    assert proc.stderr.count("nsbridge: error:") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists(), "the run started before the module was checked"


def test_module_is_found_from_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "mypkg" / "sub").mkdir(parents=True)
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train.py").write_text("x = 1\n")
    (tmp_path / "mypkg" / "sub" / "__main__.py").write_text("x = 2\n")   # namespace subpackage
    (tmp_path / "single.py").write_text("")
    assert module_file("mypkg.train", tmp_path) == tmp_path / "mypkg" / "train.py"
    assert module_file("mypkg.sub", tmp_path) == tmp_path / "mypkg" / "sub" / "__main__.py"
    assert module_file("single", tmp_path) == tmp_path / "single.py"
    assert module_file("json.tool", tmp_path).name == "tool.py"   # the interpreter's own path
    with pytest.raises(ScriptError, match="No module named 'nopkg'"):
        module_file("nopkg.train", tmp_path)
    with pytest.raises(ScriptError, match="No module named 'mypkg.missing'.*package mypkg has"):
        module_file("mypkg.missing", tmp_path)
    with pytest.raises(ScriptError, match="without a __main__"):
        module_file("mypkg", tmp_path)
    with pytest.raises(ScriptError, match="relative module name"):
        module_file(".train", tmp_path)


def test_module_check_runs_no_package_code(tmp_path: Path) -> None:
    (tmp_path / "boom15").mkdir()
    (tmp_path / "boom15" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (tmp_path / "boom15" / "train.py").write_text("raise RuntimeError('imported')\n")
    check_script("boom15.train", True, tmp_path)   # found and compiled, never imported
    with pytest.raises(ScriptError, match="No module named 'boom15.nope'"):
        check_script("boom15.nope", True, tmp_path)
    assert "boom15" not in sys.modules and "boom15.train" not in sys.modules
    assert str(tmp_path) not in sys.path, "sys.path was not put back"


def test_code_that_does_not_compile_fails_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "bad.py").write_text("x = 1\nif x\n    pass\n")
    with pytest.raises(ScriptError, match=r"syntax error at .*bad.py:2: .*'if x'"):
        check_script("pkg.bad", True, tmp_path)
    (tmp_path / "nul.py").write_bytes(b"x = 1\0\n")
    with pytest.raises(ScriptError, match="not Python source"):
        check_script("nul.py", False, tmp_path)


# -- the script's traceback ----------------------------------------------------------------
@pytest.mark.slow
def test_traceback_starts_at_the_script(tmp_path: Path) -> None:
    script = tmp_path / "nested.py"
    script.write_text(NESTED_FAILURE)
    proc = run_nsbridge("-q", "triage", "--profile", "quick", "--out", str(tmp_path / "run"),
                        str(script), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    frames = [line for line in lines if line.startswith('  File "')]
    assert frames and frames[0].startswith(f'  File "{script}", line 12'), proc.stderr
    assert [f.split(", in ")[-1] for f in frames] == ["<module>", "outer", "inner"]
    assert "runpy" not in proc.stderr and "_bootstrap" not in proc.stderr
    assert "RuntimeError: shape '[-1, 7]' is invalid" in proc.stderr


@pytest.mark.slow
def test_current_folder_does_not_shadow_nsbridge_imports(tmp_path: Path) -> None:
    """A timeit.py in the current folder (torch imports timeit) breaks only `python -m`
    runs there, never `python folder/script.py`, nor the same script under nsbridge."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (here / "timeit.py").write_text("raise SystemExit('the current folder shadowed timeit')\n")
    (elsewhere / "ok.py").write_text("import torch\nprint('sum', torch.ones(2).sum().item())\n")
    proc = run_nsbridge("-q", "triage", "--profile", "quick", "--out", str(tmp_path / "run"),
                        str(elsewhere / "ok.py"), cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert "sum 2.0" in proc.stdout


# -- step records ----------------------------------------------------------------------------
def test_step_log_is_bounded_and_counts_every_step() -> None:
    log = StepLog()
    for i in range(200_000):
        log.append({"index": i, "wall_ms": 0.01, "cpu_ms": 0.01, "wait_ms": 0.0, "nivcsw": 0,
                    "phase": "unprofiled"})
    records = log.records()
    assert len(log) == 200_000
    assert len(records) == EXACT_STEPS + SAMPLED_STEPS
    assert [r["index"] for r in records[:EXACT_STEPS]] == list(range(EXACT_STEPS))
    later = [r["index"] for r in records[EXACT_STEPS:]]
    assert later == sorted(later) and len(set(later)) == SAMPLED_STEPS
    assert later[0] < 60_000 and later[-1] > 150_000          # spread over the later steps
    assert log.sampling() == {"exact": EXACT_STEPS, "later": 200_000 - EXACT_STEPS,
                              "sampled": SAMPLED_STEPS}
    assert len(json.dumps(records, indent=2)) < 1_000_000


def test_step_log_of_a_normal_run_keeps_every_record() -> None:
    log = StepLog()
    steps = [{"index": i, "wall_ms": float(i), "phase": "active"} for i in range(EXACT_STEPS)]
    for step in steps:
        log.append(step)
    assert log.records() == steps and log.sampling() is None and len(log) == EXACT_STEPS


def test_nvtx_step_names_are_not_cached() -> None:
    pytest.importorskip("nvtx")
    from nsbridge._bootstrap.nvtx_ranges import NvtxInstrumentation

    ranges = NvtxInstrumentation()
    for _ in range(1000):
        ranges.boundary()
    assert ranges.emitted["step"] == 1000
    assert not ranges._attrs, "one cached NVTX name per step grows without bound"


@pytest.mark.slow
def test_tight_loop_record_is_bounded(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(TIGHT_LOOP)
    run = tmp_path / "run"
    proc = run_nsbridge("-q", "triage", "--out", str(run), str(script), "200000", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (run / "child.json").stat().st_size < 1_200_000
    child = json.loads((run / "child.json").read_text())
    assert child["steps_seen"] == 200_000 and child["step_count"] == 200_000
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["passes"][0]["steps_seen"] == 200_000
    report = json.loads((run / "report.json").read_text())
    assert report["steps"]["count"] == 3                  # the default profile's active steps
    assert any("ran 200,000 steps" in note for note in report["notes"])
