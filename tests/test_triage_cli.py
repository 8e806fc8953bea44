"""How `nsbridge triage` runs a script, and what it does with bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_nsbridge, sigint_as_a_terminal_sets_it

pytestmark = pytest.mark.slow

# A loop of nsbridge.step() calls; {body} runs inside step number {at}.
LOOP = """
import sys, time, torch, nsbridge
x = torch.randn(64, 64)
for i in range({steps}):
    y = (x @ x).relu().sum()
    if i == {at}:
{body}
    nsbridge.step()
print("finished")
"""


def write_script(tmp_path: Path, body: str = "pass", steps: int = 6, at: int = 3,
                 name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(LOOP.format(steps=steps, at=at, body=textwrap.indent(body, " " * 8)))
    return path


def fast_profile(tmp_path: Path) -> str:
    path = tmp_path / "fast.yaml"
    path.write_text("version: 1\nschedule:\n  skip_first: 1\n  wait: 1\n  warmup: 0\n"
                    "  active: 2\ncapture:\n  profile_memory: false\n")
    return str(path)


def report_of(run: Path) -> dict:
    return json.loads((run / "report.json").read_text())


def test_script_runs_as_python_would(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "scripts" / "probe.py"
    script.parent.mkdir()
    (script.parent / "helper.py").write_text("VALUE = 42\n")
    script.write_text(textwrap.dedent("""
        import json, os, sys
        import helper  # found through sys.path[0], the script's folder
        json.dump({"name": __name__, "argv": sys.argv, "path0": sys.path[0],
                   "cwd": os.getcwd(), "value": helper.VALUE}, open("probe.json", "w"))
        print("hello from the script")
        print("to stderr", file=sys.stderr)
    """))
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), str(script), "--", "-x", "1",
                        cwd=work)
    assert proc.returncode == 0, proc.stderr
    probe = json.loads((work / "probe.json").read_text())
    assert probe["name"] == "__main__" and probe["argv"] == [str(script), "-x", "1"]
    assert probe["path0"] == str(script.parent) and probe["cwd"] == str(work)
    assert probe["value"] == 42
    assert "hello from the script" in proc.stdout and "to stderr" in proc.stderr
    report = report_of(tmp_path / "run")
    assert report["steps"]["detected_by"].startswith("none")
    assert any("no training step was detected" in n for n in report["notes"])


def test_module_with_nsbridge_step(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(LOOP.format(steps=8, at=99, body=" " * 8 + "pass")
                                  + "\nimport json\njson.dump(sys.argv[1:], open('argv.json','w'))\n")
    proc = run_nsbridge("triage", "--profile", fast_profile(tmp_path), "--out",
                        str(tmp_path / "run"), "-m", "mypkg.train", "--", "--lr", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "argv.json").read_text()) == ["--lr", "3"]
    report = report_of(tmp_path / "run")
    assert report["steps"]["detected_by"] == "nsbridge.step" and report["steps"]["count"] == 2
    assert any(op["name"] == "aten::mm" for op in report["ops"])


def test_missing_script_writes_nothing(tmp_path: Path) -> None:
    proc = run_nsbridge("triage", "nope.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert "nope.py does not exist" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "nsbridge-runs").exists()


def test_syntax_error_fails_before_profiling(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\ndef f(:\n    pass\n")
    started = time.perf_counter()
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), str(bad), cwd=tmp_path)
    assert time.perf_counter() - started < 10     # nsbridge's own start, no profiler (~1 s)
    assert proc.returncode == 1
    assert "syntax error at" in proc.stderr and "bad.py:2" in proc.stderr
    assert "nsbridge.step()" not in proc.stderr + proc.stdout
    assert not (tmp_path / "run").exists(), "a run directory was made for a script that cannot run"


def test_script_that_raises_keeps_partial_trace_and_failed_report(tmp_path: Path) -> None:
    script = write_script(tmp_path, "raise ValueError('bad batch')", steps=8, at=3)
    proc = run_nsbridge("triage", "--profile", fast_profile(tmp_path), "--out",
                        str(tmp_path / "run"), str(script), cwd=tmp_path)
    assert proc.returncode == 1
    assert "ValueError: bad batch" in proc.stderr          # the script's own traceback
    assert "The script failed at" in proc.stderr and "job.py:" in proc.stderr
    report = report_of(tmp_path / "run")
    assert report["status"] == "failed" and report["error"]["type"] == "ValueError"
    assert (tmp_path / "run" / "trace.json.gz").is_file()
    assert any(op["name"] == "aten::mm" for op in report["ops"])  # the partial trace analysed


def test_a_syntax_error_raised_while_running_is_named_where_it_was_raised(
        tmp_path: Path) -> None:
    """Text the script parses (an argument through ast.literal_eval, as minGPT's config
    does) or a module it imports: the error names that line, not 'the script has a syntax
    error' at <unknown>."""
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    for run, body, where in (("literal", "import ast; ast.literal_eval(sys.argv[1])", "job.py:"),
                             ("import", "import broken", "broken.py:1")):
        script = write_script(tmp_path, body, steps=6, at=3)
        proc = run_nsbridge("triage", "--profile", fast_profile(tmp_path), "--out",
                            str(tmp_path / run), str(script), "/tmp/out", cwd=tmp_path)
        assert proc.returncode == 1
        said = proc.stderr.split("nsbridge: error: ")[-1]
        assert said.startswith(f"The script failed at {tmp_path}/{where}"), said
        assert "with SyntaxError: invalid syntax" in said and "<unknown>" not in said.split(
            " with ")[0]
        error = report_of(tmp_path / run)["error"]
        assert error["type"] == "SyntaxError" and error["file"].endswith(where.split(":")[0])


def test_sys_exit_status_is_passed_on(tmp_path: Path) -> None:
    script = tmp_path / "exit3.py"
    script.write_text("import sys\nsys.exit(3)\n")
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run"), str(script), cwd=tmp_path)
    assert proc.returncode == 3
    assert "sys.exit(3)" in proc.stderr
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["passes"][0]["exit_code"] == 3 and manifest["status"] == "failed"


def test_nsbridge_options_after_the_script_are_named_when_it_refuses_them(
        tmp_path: Path) -> None:
    script = tmp_path / "cli_script.py"
    script.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    proc = run_nsbridge("triage", str(script), "--out", str(tmp_path / "run"), "--nsys",
                        cwd=tmp_path)
    assert proc.returncode == 2 and "unrecognized arguments: --out" in proc.stderr
    assert "nsbridge: hint: --out, --nsys came after the script, so the script got them" \
        in proc.stderr
    assert "nsbridge triage --out ... SCRIPT [ARGS]" in proc.stderr
    fine = tmp_path / "exit2.py"            # exit 2 of its own, no nsbridge option given
    fine.write_text("import sys\nsys.exit(2)\n")
    proc = run_nsbridge("triage", "--out", str(tmp_path / "run2"), str(fine), "--mine",
                        cwd=tmp_path)
    assert proc.returncode == 2 and "hint" not in proc.stderr


def test_timeout_stops_the_script_and_keeps_what_it_recorded(tmp_path: Path) -> None:
    script = write_script(tmp_path, "time.sleep(600)", steps=8, at=3)
    proc = run_nsbridge("triage", "--profile", fast_profile(tmp_path), "--timeout", "12",
                        "--out", str(tmp_path / "run"), str(script), cwd=tmp_path, timeout=500)
    assert proc.returncode == 124          # stopped by --timeout, not by its 600 s sleep
    assert "--timeout" in proc.stderr
    report = report_of(tmp_path / "run")
    assert report["status"] == "timeout"
    assert (tmp_path / "run" / "trace.json.gz").is_file()


def test_ctrl_c_keeps_what_was_recorded(tmp_path: Path) -> None:
    script = write_script(tmp_path, "print('READY', flush=True)\ntime.sleep(600)", steps=8, at=3)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "nsbridge", "triage", "--profile",
                             fast_profile(tmp_path), "--out", str(tmp_path / "run"), str(script)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_a_terminal_sets_it)
    line = ""
    while "READY" not in line:     # a busy machine can take minutes to get here
        line = proc.stdout.readline()
        assert line or proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)  # as a terminal would, to nsbridge
    out, err = proc.communicate(timeout=500)
    assert proc.returncode == 130
    assert "Interrupted" in err
    assert report_of(tmp_path / "run")["status"] == "interrupted"
    assert (tmp_path / "run" / "trace.json.gz").is_file()


def test_existing_out_is_never_overwritten(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    out = tmp_path / "old"
    out.mkdir()
    (out / "report.json").write_text("{}")
    proc = run_nsbridge("triage", "--out", str(out), str(script), cwd=tmp_path)
    assert proc.returncode == 1 and "already exists" in proc.stderr
    assert (out / "report.json").read_text() == "{}"


def test_unwritable_out(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_nsbridge("triage", "--out", str(blocker / "run"), str(script), cwd=tmp_path)
    assert proc.returncode == 1 and "Cannot create or write the run directory" in proc.stderr


def test_default_run_directories_never_collide(tmp_path: Path) -> None:
    script = write_script(tmp_path, steps=2)
    for _ in range(2):
        assert run_nsbridge("triage", "--profile", "quick", str(script),
                            cwd=tmp_path).returncode == 0
    runs = sorted((tmp_path / "nsbridge-runs").iterdir())
    assert len(runs) == 2 and all(r.name.endswith(("-job", "-job-2")) for r in runs)


@pytest.mark.parametrize("content, message", [
    (b'{"traceEvents": [', "truncated"),
    (b'{"lr": 0.1}', "not a torch.profiler trace"),
    (b'{"traceEvents": []}', "no events"),
    (b"\x00\x01\x02garbage", "not a text or gzip file"),
])
def test_analyze_bad_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    proc = run_nsbridge("analyze", str(path), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("nsbridge: error:") and message in proc.stderr
    assert proc.stderr.strip().count("\n") == 0  # one paragraph, no traceback
