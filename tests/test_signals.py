"""Whatever ends nsbridge ends the profiled script too: none left running behind it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import sigint_as_a_terminal_sets_it

pytestmark = pytest.mark.slow

SCRIPT = """
import os, sys, time, torch
open(sys.argv[1], "w").write(str(os.getpid()))
while True:
    torch.ones(4).sum()
    time.sleep(0.05)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    return not (state.is_file() and state.read_text().split()[2] == "Z")


def _start(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    script, pid_file = tmp_path / "forever.py", tmp_path / "pid"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, "-m", "nsbridge", "-q", "triage", "--out",
                             str(tmp_path / "run"), str(script), str(pid_file)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_a_terminal_sets_it)
    deadline = time.monotonic() + 600      # a guard for a stuck start, not a speed check
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    return proc, int(pid_file.read_text())


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _alive(pid)


def test_sigterm_ends_the_script_and_keeps_the_run(tmp_path: Path) -> None:
    proc, child = _start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert _gone(child, 120), "the profiled script outlived nsbridge"
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] in ("interrupted", "terminated", "failed")


def test_sigkill_of_nsbridge_still_ends_the_script(tmp_path: Path) -> None:
    proc, child = _start(tmp_path)
    proc.kill()
    proc.communicate(timeout=300)
    assert _gone(child, 120), "the profiled script outlived a killed nsbridge"


RANKS_SCRIPT = """
import os, sys, time, torch, nsbridge
folder, rank = sys.argv[1], os.environ["RANK"]
first = not os.path.exists(os.path.join(folder, "first-" + rank))
open(os.path.join(folder, ("first-" if first else "again-") + rank), "w").write(str(os.getpid()))
for _ in range(6):
    torch.ones(4).sum()
    nsbridge.step()
while not first:               # the second run (the nsys pass) never ends
    time.sleep(0.05)
"""


def test_sigterm_during_the_ranks_nsys_pass_ends_every_rank_and_tool(tmp_path: Path) -> None:
    from nsbridge.collect.nsys import find_nsys
    from nsbridge.errors import ToolNotFoundError

    try:
        find_nsys()
    except ToolNotFoundError:
        pytest.skip("nsys is not installed")
    script, pids = tmp_path / "ranks.py", tmp_path / "pids"
    script.write_text(RANKS_SCRIPT)
    pids.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "nsbridge", "-q", "triage", "--nsys",
                             "--nproc-per-node", "2", "--out", str(tmp_path / "run"),
                             str(script), str(pids)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    again = [pids / "again-0", pids / "again-1"]
    deadline = time.monotonic() + 900
    while not all(p.is_file() and p.read_text() for p in again):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode != 0
    for path in again:
        assert _gone(int(path.read_text()), 120), f"{path.name}'s script outlived nsbridge"
    nsys_left = subprocess.run(["pgrep", "-f", f"nsys profile.*{tmp_path}"],
                               capture_output=True, text=True).stdout.split()
    assert not nsys_left, "an nsys outlived nsbridge"


@pytest.mark.parametrize("body, code, words", [
    ("os.kill(os.getpid(), signal.SIGKILL)", 128 + 9,
     "killed by SIGKILL (signal 9): the kernel's OOM killer"),
    ("os._exit(5)", 5, "ended with status 5 before writing its record"),
])
def test_a_script_that_dies_without_a_traceback_is_told_so(tmp_path: Path, body: str,
                                                             code: int, words: str) -> None:
    script = tmp_path / "dies.py"
    script.write_text(f"import os, signal, torch\ntorch.ones(4).sum()\n{body}\n")
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "triage", "--out",
                           str(tmp_path / "run"), str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == code
    assert words in proc.stderr and "traceback is above" not in proc.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "failed" and words.split(":")[0] in report["error"]["message"]


SPAWNS = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
open(sys.argv[1] + ".tmp", "w").write(str(child.pid))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
import torch
while True:
    torch.ones(4).sum()
    time.sleep(0.05)
"""


def _triage_until_written(tmp_path: Path, script: Path, pid_file: Path,
                          *extra: str) -> subprocess.Popen:
    """`nsbridge triage script pid_file` started, once the script has written pid_file."""
    proc = subprocess.Popen([sys.executable, "-m", "nsbridge", "-q", "triage", *extra, "--out",
                             str(tmp_path / "run"), str(script), str(pid_file)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_a_terminal_sets_it)
    deadline = time.monotonic() + 300      # a guard for a stuck start, not a speed check
    while not pid_file.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.is_file(), proc.communicate(timeout=120)
    return proc


@pytest.mark.parametrize("how", ["timeout", "sigterm"])
def test_stopping_the_script_ends_the_processes_it_started(tmp_path: Path, how: str) -> None:
    script, pid_file = tmp_path / "spawns.py", tmp_path / "pid"
    script.write_text(SPAWNS)
    # long enough for the script to start on a loaded machine (torch's import, the
    # profiler's start): the timeout counts from the bootstrap's start
    extra = ["--timeout", "20"] if how == "timeout" else []
    proc = _triage_until_written(tmp_path, script, pid_file, *extra)
    sleeper = int(pid_file.read_text())
    assert _alive(sleeper)
    if how == "sigterm":
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    time.sleep(0.5)
    assert proc.returncode == (124 if how == "timeout" else 143)
    assert not _alive(sleeper), "the script's own subprocess was left running"


STUBBORN = """
import os, subprocess, sys, time
child = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 300 & wait"])  # ignores SIGTERM
open(sys.argv[1] + ".tmp", "w").write(f"{os.getpid()} {child.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
import torch
while True:
    torch.ones(4).sum()
    time.sleep(0.05)
"""


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            kids = [int(k) for k in task.read_text().split()]
            found += kids
            todo += kids
    return found


@pytest.mark.parametrize("how", ["SIGKILL to the script", "SIGTERM to the script",
                                 "SIGINT to the script", "SIGKILL to nsbridge"])
def test_however_the_run_ends_nothing_the_script_started_is_left(tmp_path: Path,
                                                                 how: str) -> None:
    """The script's whole tree ends with it, even a grandchild that ignores SIGTERM and a
    script killed before nsbridge could stop it (its orphans come to nsbridge, a child
    subreaper), and when nsbridge itself is killed (the script ends its own tree)."""
    script, pid_file = tmp_path / "stubborn.py", tmp_path / "pids"
    script.write_text(STUBBORN)
    proc = _triage_until_written(tmp_path, script, pid_file)
    script_pid, shell = map(int, pid_file.read_text().split())
    deadline = time.monotonic() + 60
    while not _tree(shell) and time.monotonic() < deadline:
        time.sleep(0.05)
    family = [script_pid, shell, *_tree(shell)]
    assert len(family) == 3 and all(map(_alive, family))
    signum = getattr(signal, how.split()[0])
    if how.endswith("nsbridge"):
        proc.send_signal(signum)
    else:
        os.kill(script_pid, signum)
    try:
        # the design: SIGTERM, then SIGKILL 1 s later; the bound is loose for busy machines
        assert all(_gone(pid, 30) for pid in family), f"left running after {how}"
        proc.communicate(timeout=120)
    finally:
        for pid in family:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    if not how.endswith("nsbridge"):
        assert proc.returncode == {"SIGKILL": 137, "SIGTERM": 143, "SIGINT": 130}[
            how.split()[0]]


TEARDOWN = """
import atexit, sys, time, torch
atexit.register(time.sleep, 60)        # the script is done; its exit outlasts --timeout
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(12):
    opt.zero_grad()
    model(torch.ones(4, 8)).sum().backward()
    opt.step()
print("finished", flush=True)
"""


def test_a_script_that_finished_before_the_timeout_is_ok(tmp_path: Path) -> None:
    """Status comes from what happened: the script ran to its end and its record was
    written, so a --timeout that stops only the process's teardown leaves it `ok`, exit 0."""
    script = tmp_path / "teardown.py"
    script.write_text(TEARDOWN)
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "triage", "--profile",
                           "quick", "--timeout", "45", "--out", str(tmp_path / "run"),
                           str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    child = json.loads((tmp_path / "run" / "child.json").read_text())
    assert child["status"] == "ok" and "finished" in proc.stdout
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert proc.returncode == 0, proc.stderr
    assert report["status"] == "ok" and "[status: ok]" in proc.stdout
    assert "Partial run" not in proc.stdout and "Traceback" not in proc.stderr


SELF_TERM = """
import os, signal, torch
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    opt.zero_grad()
    model(torch.ones(4, 8)).sum().backward()
    opt.step()
    if step == 30:
        os.kill(os.getpid(), signal.SIGTERM)   # a scheduler ending the script's process
"""


def test_sigterm_to_the_profiled_process_is_143(tmp_path: Path) -> None:
    script = tmp_path / "self_term.py"
    script.write_text(SELF_TERM)
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "triage", "--profile",
                           "quick", "--out", str(tmp_path / "run"), str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 143, proc.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "terminated" and "Traceback" not in proc.stderr


def test_a_timeout_while_the_profiled_process_starts_prints_no_traceback(
        tmp_path: Path) -> None:
    """--timeout during torch's import or the profiler's start: one line, exit 124, no
    traceback of nsbridge's bootstrap, torch or sympy."""
    script = tmp_path / "ok.py"
    script.write_text("import torch\nprint(torch.ones(2).sum())\n")
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "triage", "--timeout",
                           "0.3", "--out", str(tmp_path / "run"), str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 124, proc.stderr
    assert "Traceback" not in proc.stderr and "_Terminated" not in proc.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "timeout"


def test_the_sweep_leaves_the_callers_other_children_alone(tmp_path: Path) -> None:
    """Regression: nsbridge used as a library ended its host's own children (a
    multiprocessing forkserver) when a supervised child ended too fast for its start time
    to be read; only what was started after the supervised child can be its orphan."""
    from nsbridge.collect._process import run_passthrough

    mine = subprocess.Popen(["sleep", "60"])
    try:
        for code in ("pass", "import os; os._exit(3)"):
            outcome = run_passthrough([sys.executable, "-c", code], cwd=tmp_path,
                                      env=dict(os.environ), timeout=60)
            assert outcome.returncode in (0, 3)
        assert mine.poll() is None, "the host's own child was ended"
    finally:
        mine.kill()
        mine.wait()
