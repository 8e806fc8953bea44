"""The `nsbridge` command through click's CliRunner: every command's --help, usage errors
(exit 2, click's message), `analyze` of a small recorded trace, an nsbridge error (exit 1,
one paragraph, no traceback), `diff` of two runs of the same trace, `make-targets`.

In-process and fast: files someone else recorded, never a profiled script (the triage
command's runs are in test_triage_cli.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import click
import pytest
from click.testing import CliRunner, Result

from nsbridge import __version__
from nsbridge.cli import main
from nsbridge.collect import noise

from conftest import ROOT, TORCH_DATA

TRACE = TORCH_DATA / "h200" / "input_bound_h200.json.gz"
COMMANDS = sorted(main.commands)


@pytest.fixture(autouse=True)
def _keep_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI turns SIGTERM into an exception; not in the test process."""
    monkeypatch.setattr("nsbridge.errors.stop_on_sigterm", lambda: None)


def invoke(*args: object) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], prog_name="nsbridge")


def no_traceback(result: Result) -> None:
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output


# -- --help ---------------------------------------------------------------------------------
def test_the_commands() -> None:
    assert COMMANDS == ["agent-skill", "analyze", "deep", "diff", "doctor", "gate",
                        "make-targets", "mcp", "show", "timeline", "triage"]
    result = invoke("--help")
    assert result.exit_code == 0 and result.output.startswith("Usage: nsbridge [OPTIONS] COMMAND")
    for name in COMMANDS:
        assert re.search(rf"^  {re.escape(name)}\s+\S", result.output, re.M), name
    assert "--version" in result.output and "--quiet" in result.output


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.output == f"nsbridge, version {__version__}\n"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_lists_every_option(name: str) -> None:
    command = main.commands[name]
    for flag in ("--help", "-h"):
        result = invoke(name, flag)
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"Usage: nsbridge {name} "), result.output
        no_traceback(result)
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    for option in options:
        for spelling in (*option.opts, *option.secondary_opts):
            assert re.search(rf"(^|[\s,/]){re.escape(spelling)}(?=[\s,=\[]|$)", result.output,
                             re.M), \
                f"{name} --help does not list {spelling}"
        assert option.help, f"{name} {option.opts[0]} has no help text"
    for argument in (p for p in command.params if isinstance(p, click.Argument)):
        assert argument.human_readable_name in result.output.splitlines()[0]


@pytest.mark.parametrize("name", ["triage", "timeline", "deep"])
def test_timeout_reads_seconds(name: str) -> None:
    assert re.search(r"^  --timeout SECONDS\s+Stop ", invoke(name, "--help").output, re.M)


def test_verbose_is_documented() -> None:
    text = " ".join(invoke("--help").output.split())
    assert "-v, --verbose Also pass on the profiler's own noise" in text
    assert "profiler-noise.log in the run directory" in text


@pytest.mark.parametrize("flags, shown", [([], False), (["-v"], True), (["--verbose"], True),
                                          (["-q", "-v"], True)])
def test_verbose_turns_the_noise_filter_off(flags: list[str], shown: bool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(noise, "_shown", False)
    assert invoke(*flags, "make-targets").exit_code == 0
    assert noise.shown() is shown


@pytest.mark.parametrize("name, epilog", [
    ("triage", "nsbridge triage examples/train_cnn.py -- --epochs 1"),
    ("deep", "nsbridge deep --kernel aten::addmm"),
    ("timeline", "nsbridge timeline --run"),
    ("analyze", "nsbridge analyze trace.json.gz"),
    ("diff", "nsbridge diff runs/main runs/pr"),
])
def test_help_shows_examples(name: str, epilog: str) -> None:
    result = invoke(name, "--help")
    assert "Examples:" in result.output and epilog in result.output


def test_diff_help_documents_its_exit_codes() -> None:
    text = " ".join(invoke("diff", "--help").output.split())
    for code in ("Exit codes: 0 no regression", "1 a regression", "4 inconclusive",
                 "2 bad input", "3 a bug in nsbridge"):
        assert code in text, code
    assert "its own code 4 (exit), 0 (pass) or 1 (fail)" in text   # --inconclusive
    assert "nsbridge diff runs/main runs/pr --fail-above 10 --format json > diff.json" in text
    assert "--format [text|md|json] text for a terminal, md for a PR comment, json" in text


# -- usage errors: exit 2, click's message, nothing run -------------------------------------
@pytest.mark.parametrize("args, message", [
    (["nosuch"], "No such command 'nosuch'."),
    (["triage"], "give a script to profile (or -m MODULE)"),
    (["timeline"], "give a script to profile (or -m MODULE)"),
    (["analyze"], "Missing argument 'PATHS...'."),
    (["diff", "a"], "Missing argument 'NEW'."),
    (["triage", "--ranks", "a,b", "x.py"],
     "Invalid value for --ranks: 'a,b' is not a comma-separated list of rank numbers"),
    (["triage", "--runs", "0", "x.py"],
     "Invalid value for '--runs': runs must be a whole number from 1 to 50; got 0"),
    (["triage", "--window", "epochs", "x.py"], "Invalid value for '--window'"),
    (["analyze", "--top", "many", "x.json"],
     "Invalid value for '--top': top must be a whole number from 1 to 1000; got 'many'"),
    (["diff", "--format", "xml", "a", "b"], "Invalid value for '--format': 'xml' is not one of"),
    (["diff", "--inconclusive", "maybe", "a", "b"], "Invalid value for '--inconclusive'"),
    (["diff", "--min-step-share", "101", "a", "b"], "Invalid value for '--min-step-share'"),
    (["deep", "--ranks", "x", "--top", "1"], "Invalid value for --ranks"),
    (["doctor", "extra"], "Got unexpected extra argument (extra)"),
    # a mistyped option before the script is nsbridge's usage error, never the script
    (["triage", "--thread", "1", "train.py"],
     "No such option '--thread'. Did you mean '--threads'?"),
    (["triage", "--profile", "gate", "--outt", "x", "train.py"], "No such option '--outt'."),
    (["timeline", "--tread", "train.py"], "No such option '--tread'."),
    (["deep", "--kernal", "aten::mm"], "No such option '--kernal'."),
    (["gate", "--procs", "3", "a", "b"], "No such option '--procs'."),
    (["gate", "a", "b", "--procs", "3"], "No such option '--procs'."),
    (["gate", "a", "b", "--processes", "0"], "Invalid value for '--processes'"),
])
def test_usage_errors_exit_2_with_clicks_message(args: list[str], message: str,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(*args)
    assert list(tmp_path.iterdir()) == [], "a usage error ran something"
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("Usage: nsbridge "), result.stderr
    assert f"Error: {message}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_options_before_the_script_are_nsbridges_and_after_it_the_scripts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """nsbridge's options may come anywhere before the script (a gate's between BASE, NEW
    and SCRIPT too); from the script on, every argument is the script's, as typed."""
    seen: dict[str, object] = {}

    def fake_gate(base: str, new: str, script: object, args: list[str], **kw: object) -> None:
        seen.update(base=base, new=new, script=script, args=args, processes=kw["processes"],
                    threads=kw["threads"])
        raise SystemExit(0)

    monkeypatch.setattr("nsbridge.api.gate", fake_gate)
    invoke("gate", "a", "--threads", "1", "b", "--processes", "4", "t.py", "--processes", "9",
           "--lr=3")
    assert seen == {"base": "a", "new": "b", "script": "t.py", "args": ["--processes", "9",
                                                                       "--lr=3"],
                    "processes": 4, "threads": 1}


# -- analyze, its errors, diff --------------------------------------------------------------
@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Result]]:
    """`nsbridge analyze TRACE --out DIR`, twice."""
    where = tmp_path_factory.mktemp("cli")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("nsbridge.errors.stop_on_sigterm", lambda: None)
        first = invoke("analyze", TRACE, "--out", where / "a")
        second = invoke("-q", "analyze", TRACE, "--out", where / "b")
    assert second.exit_code == 0, second.output
    yield where / "a", where / "b", first


def test_analyze_prints_the_verdict_and_the_run_directory(two_runs: tuple) -> None:
    run, _, result = two_runs
    assert result.exit_code == 0, result.output
    no_traceback(result)
    lines = result.stdout.splitlines()
    assert lines[0] == f"nsbridge analyze: {TRACE}  [status: ok]"
    assert "Verdict: INPUT-BOUND (confidence: high)" in lines
    assert lines[-1].startswith(f"Run directory: {run}  (report.md, report.html")
    assert (run / "report.json").is_file() and (run / "manifest.json").is_file()
    report = json.loads((run / "report.json").read_text())
    assert report["command"] == "analyze" and report["status"] == "ok"


@pytest.mark.slow      # two traces: analyze starts worker processes
def test_analyze_of_one_file_starts_reading_it_ahead(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One trace: its read starts before the analysis modules load; several: not."""
    from nsbridge.parse import _stream

    started: list[str] = []
    monkeypatch.setattr(_stream, "read_ahead", started.append)
    assert invoke("-q", "analyze", TRACE, "--out", tmp_path / "one").exit_code == 0
    assert started == [str(TRACE)]
    assert invoke("-q", "analyze", TRACE, TRACE, "--out", tmp_path / "two").exit_code == 0
    assert started == [str(TRACE)]


def test_analyze_of_a_missing_file_is_one_paragraph(tmp_path: Path) -> None:
    missing = tmp_path / "nosuch.json.gz"
    result = invoke("analyze", missing, "--out", tmp_path / "run")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"nsbridge: error: {missing} does not exist."), result.stderr
    assert result.stderr.count("\n") == 1, "one paragraph, one line"
    assert "Traceback" not in result.stderr


def test_diff_of_a_missing_run_is_bad_input(two_runs: tuple, tmp_path: Path) -> None:
    run, _, _ = two_runs
    result = invoke("diff", run, tmp_path / "nosuch")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("nsbridge: error: ") and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_diff_of_two_runs_of_one_trace_passes(two_runs: tuple) -> None:
    a, b, _ = two_runs
    result = invoke("diff", a, b)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"nsbridge diff: {a} -> {b}\n")
    assert "Outcome: PASS (exit 0)" in result.stdout
    assert "Verdict: input-bound -> input-bound" in result.stdout
    as_json = invoke("diff", a, b, "--format", "json")
    assert as_json.exit_code == 0
    body = json.loads(as_json.stdout)
    assert (body["outcome"], body["exit_code"]) == ("pass", 0)


def test_make_targets_prints_make_rules() -> None:
    result = invoke("make-targets")
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout == (ROOT / "nsbridge" / "make" / "nsbridge.mk").read_text()
    rules = re.findall(r"^([a-z-]+):\s*$", result.stdout, re.M)
    assert rules == ["profile-triage", "profile-timeline", "profile-deep", "perf-gate",
                     "perf-diff", "nsbridge-help"]
    assert (".PHONY: profile-triage profile-timeline profile-deep perf-gate perf-diff "
            "nsbridge-help" in result.stdout)
    assert "$(NSBRIDGE_CMD) diff $(call nsbridge_q,$(BASE)) $(call nsbridge_q,$(NEW))" in (
        result.stdout)
    assert "$(NSBRIDGE_CMD) gate --processes $(call nsbridge_q,$(PROCESSES))" in result.stdout


QUICK_EXIT = """
import atexit, sys, threading, time
from pathlib import Path
out = Path(sys.argv[1])
atexit.register(lambda: ((out / "atexit").write_text("ran"), print(" then at exit", end="")))
if sys.argv[2] == "thread":     # a thread still running: Python joins it before exiting
    threading.Thread(target=lambda: (time.sleep(0.3), (out / "thread").write_text("ran"))).start()
print("printed before the exit", end="")
sys.argv = ["nsbridge", *sys.argv[3:]]
from nsbridge.cli import command
command()
"""


@pytest.mark.slow
@pytest.mark.parametrize(("args", "code"), [(["--version"], 0), (["no-such-command"], 2),
                                            (["analyze", "/no/such/trace.json"], 1)])
@pytest.mark.parametrize("thread", ["", "thread"])
def test_the_console_command_exits_as_python_would(tmp_path: Path, args: list[str], code: int,
                                                   thread: str) -> None:
    """The console command ends without tearing the interpreter down, yet keeps what a
    normal exit does: the exit code, exit handlers, unflushed output, and a running thread
    waited for."""
    import os
    import subprocess
    import sys

    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", QUICK_EXIT, str(tmp_path), thread, *args],
                          capture_output=True, text=True, timeout=120, env=buffered)
    assert done.returncode == code, done.stderr
    assert done.stdout.startswith("printed before the exit")
    assert done.stdout.endswith(" then at exit")
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").exists() == bool(thread)


ONE_BLAS_THREAD = """
import os, subprocess, sys
if sys.argv[1] == "console":
    os.environ["OPENBLAS_NUM_THREADS"] = "3"
    from nsbridge.cli import main
    try:
        main(["-q", "analyze", "--help"])   # the group's callback runs first
    except SystemExit:
        pass
    assert "numpy" in sys.modules
else:
    import numpy
child = subprocess.run([sys.executable, "-c",
                        "import os; print(os.environ.get('OPENBLAS_NUM_THREADS'))"],
                       capture_output=True, text=True).stdout.strip()
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"), child)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads counted in /proc")
def test_the_console_command_imports_numpy_with_one_blas_thread() -> None:
    """OpenBLAS's threads, started at numpy's import and spinning for a while, would take
    CPU from the reader threads: every command imports numpy with one, then puts the
    environment back, so a script it profiles (a child) gets the user's setting."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    plain = subprocess.run([sys.executable, "-c", ONE_BLAS_THREAD, "plain"], env=env,
                           capture_output=True, text=True, timeout=60)
    if plain.stdout.split()[0] == "1":
        pytest.skip("numpy starts no BLAS thread here (one CPU, or no OpenBLAS)")
    console = subprocess.run([sys.executable, "-c", ONE_BLAS_THREAD, "console"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert console.stdout.splitlines()[-1].split() == ["1", "3", "3"], console.stderr
