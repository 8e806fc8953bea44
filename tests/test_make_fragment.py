"""The Make fragment (`nsbridge make-targets`, nsbridge/make/nsbridge.mk) included from a
project's Makefile: it keeps the includer's default goal wherever the include sits, every
path reaches nsbridge as one argument however many spaces or quotes it holds (checked on
`make -n` output and through a fake nsbridge that records its argv), and `nsbridge-help`
lists every variable with its default.

Real GNU make in tmp_path, no profiler; skipped where make is not installed. perf-gate's exit
codes against a real `nsbridge diff` are in test_diff.py."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

FRAGMENT = ROOT / "nsbridge" / "make" / "nsbridge.mk"
MARKER = "includer-default-goal-ran"

pytestmark = [pytest.mark.slow,    # each test runs make
              pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")]


def project(tmp_path: Path, *, include_first: bool) -> Path:
    """A project whose Makefile has its own default target `all`, including the fragment
    before or after it."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(FRAGMENT, folder / "nsbridge.mk")
    own = f"all:\n\t@echo {MARKER}\n"
    text = f"include nsbridge.mk\n{own}" if include_first else f"{own}include nsbridge.mk\n"
    (folder / "Makefile").write_text(text)
    return folder


def make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=folder,
                          capture_output=True, text=True, timeout=60)


def dry_run_argv(folder: Path, program: str, *args: str) -> list[str]:
    """The argv of the one command `make -n` would run with NSBRIDGE=program, as the shell
    would split it."""
    result = make(folder, "-n", f"NSBRIDGE={program}", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if line.strip()]
    runs = [argv for argv in commands if argv[0] == program]
    assert len(runs) == 1, result.stdout
    return runs[0][1:]


@pytest.mark.parametrize("include_first", [True, False], ids=["include-first", "include-last"])
def test_plain_make_runs_the_includers_default_goal(tmp_path: Path,
                                                    include_first: bool) -> None:
    folder = project(tmp_path, include_first=include_first)
    result = make(folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == MARKER
    assert make(folder, "-n").stdout.strip() == f"echo {MARKER}"


def test_an_explicit_default_goal_before_the_include_is_kept(tmp_path: Path) -> None:
    folder = project(tmp_path, include_first=True)
    text = (folder / "Makefile").read_text()
    (folder / "Makefile").write_text(".DEFAULT_GOAL := other\n" + text
                                     + "other:\n\t@echo other-goal\n")
    assert make(folder).stdout.strip() == "other-goal"


def test_triage_paths_with_spaces_and_quotes_stay_one_argument(tmp_path: Path) -> None:
    folder = project(tmp_path, include_first=True)
    argv = dry_run_argv(folder, "/opt/my tools/nsbridge", "profile-triage",
                        "SCRIPT=my dir/train.py", "OUT=runs/a b", "PROFILE=it's.yaml",
                        "ARGS=--epochs 1 --name 'x y'")
    assert argv == ["triage", "--profile", "it's.yaml", "--out", "runs/a b",
                    "my dir/train.py", "--", "--epochs", "1", "--name", "x y"]
    quoted = dry_run_argv(folder, "nsbridge", "profile-triage", "SCRIPT=it's here/t.py")
    assert quoted == ["triage", "--profile", "default", "it's here/t.py", "--"]


def test_timeline_and_deep_quote_run_and_script_and_each_op(tmp_path: Path) -> None:
    folder = project(tmp_path, include_first=False)
    timeline = dry_run_argv(folder, "nsbridge", "profile-timeline", "RUN=runs/it's a run")
    # on a run, its own profile unless PROFILE names one (issue 50)
    assert timeline == ["timeline", "--run", "runs/it's a run"]
    named = dry_run_argv(folder, "nsbridge", "profile-timeline", "RUN=r", "PROFILE=it's.yaml")
    assert named == ["timeline", "--profile", "it's.yaml", "--run", "r"]
    deep = dry_run_argv(folder, "nsbridge", "profile-deep", "OP=aten::mm aten::add_",
                        "SCRIPT=a b/t.py", "ARGS=--epochs 1")
    assert deep == ["deep", "--kernel", "aten::mm", "--kernel", "aten::add_", "a b/t.py", "--",
                    "--epochs", "1"]
    top = dry_run_argv(folder, "nsbridge", "profile-deep", "RUN=r u n")
    assert top == ["deep", "--top", "5", "--run", "r u n"]


def test_perf_gate_and_perf_diff_quote_base_and_new(tmp_path: Path) -> None:
    folder = project(tmp_path, include_first=True)
    judge = ["--fail-above", "5", "--min-step-share", "2", "--inconclusive", "exit",
             "--allow", "args,threads", "--format", "text"]
    argv = dry_run_argv(folder, "nsbridge", "perf-diff", "BASE=runs/main branch",
                        "NEW=runs/pr's run", "THRESHOLD=5", "ALLOW=args,threads")
    assert argv == ["diff", "runs/main branch", "runs/pr's run", *judge]
    argv = dry_run_argv(folder, "nsbridge", "perf-gate", "BASE=runs/main branch",
                        "NEW=runs/pr's run", "THRESHOLD=5", "ALLOW=args,threads")
    grow = ["--max-processes", "10", "--budget", "600"]
    assert argv == ["gate", "--processes", "3", *grow, "--steps", "25", *judge,
                    "runs/main branch", "runs/pr's run"]
    checkouts = dry_run_argv(folder, "nsbridge", "perf-gate", "BASE=../main", "NEW=.",
                             "SCRIPT=my bench.py", "ARGS=--steps 40", "PROCESSES=7",
                             "MAX_PROCESSES=12", "GATE_BUDGET=300")
    assert checkouts == ["gate", "--processes", "7", "--max-processes", "12", "--budget",
                         "300", "--steps", "25", "--fail-above", "10",
                         "--min-step-share",
                         "2", "--inconclusive", "exit", "--format", "text", "../main", ".",
                         "my bench.py", "--", "--steps", "40"]
    usage = make(folder, "perf-gate", "BASE=runs/main branch")
    assert usage.returncode != 0 and "set BASE=... NEW=..." in usage.stdout
    usage = make(folder, "perf-diff", "BASE=runs/main branch")
    assert usage.returncode != 0 and "set BASE=run-dir NEW=run-dir" in usage.stdout


def test_nsbridge_help_lists_every_variable_and_target(tmp_path: Path) -> None:
    folder = project(tmp_path, include_first=True)
    (folder / "Makefile").write_text((folder / "Makefile").read_text()
                                     + "help:\n\t@echo includer-help\n")
    result = make(folder, "nsbridge-help")
    assert result.returncode == 0, result.stderr
    text = FRAGMENT.read_text()
    defaults = dict(re.findall(r"^([A-Z_]+)\s*\?=[ \t]*(.*)$", text, re.M))
    assert {"NSBRIDGE", "SCRIPT", "ARGS", "OUT", "RUN", "OP", "BASE", "NEW"} <= set(defaults)
    for name, default in defaults.items():
        shown = "<NSBRIDGE, quoted>" if name == "NSBRIDGE_CMD" else default
        assert re.search(rf"^  {name}={re.escape(shown)}(\s|$)", result.stdout, re.M), name
    targets = re.findall(r"^([a-z-]+):\s*$", text, re.M)
    assert "nsbridge-help" in targets and "help" not in targets
    for target in targets:
        assert re.search(rf"^  {target}\s", result.stdout, re.M), target
    assert make(folder, "help").stdout.strip() == "includer-help"


def test_a_fake_nsbridge_receives_exactly_the_intended_argv(tmp_path: Path) -> None:
    folder = project(tmp_path, include_first=True)
    tools = tmp_path / "my tools"
    tools.mkdir()
    fake = tools / "fake nsbridge"
    record = tmp_path / "argv.json"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    (folder / "a b").mkdir()
    result = make(folder, "profile-triage", f"NSBRIDGE={fake}", "SCRIPT=a b/t.py",
                  "ARGS=--epochs 1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(record.read_text()) == ["triage", "--profile", "default", "a b/t.py",
                                              "--", "--epochs", "1"]
    gate = make(folder, "perf-gate", f"NSBRIDGE={fake}", "BASE=runs/it's base",
                "NEW=runs/new one", "INCONCLUSIVE=fail")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    sent = json.loads(record.read_text())
    assert sent[:3] == ["gate", "--processes", "3"] and sent[-2:] == ["runs/it's base",
                                                                      "runs/new one"]
    # NSBRIDGE_CMD is shell syntax: an interpreter and its arguments
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(fake))}"
    via = make(folder, "profile-deep", f"NSBRIDGE_CMD={command}", "OP=aten::mm")
    assert via.returncode == 0, via.stdout + via.stderr
    assert json.loads(record.read_text()) == ["deep", "--kernel", "aten::mm"]


def test_a_failing_nsbridge_fails_make(tmp_path: Path) -> None:
    """perf-gate's verdict reaches make: nsbridge diff's exit 4 is a failed recipe."""
    folder = project(tmp_path, include_first=True)
    fake = tmp_path / "gate"
    fake.write_text("#!/bin/sh\nexit 4\n")
    fake.chmod(0o755)
    result = make(folder, "perf-gate", f"NSBRIDGE={fake}", "BASE=a", "NEW=b")
    assert result.returncode == 2 and "Error 4" in result.stderr, result.stderr
