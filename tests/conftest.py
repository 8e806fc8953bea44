"""Shared fixtures: test data paths, a CLI runner, and a real `nsbridge` subprocess runner;
and the rule that a test starting a process is marked `slow` (left out of make test-fast)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing.process
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from nsbridge.contract.check import STRICT_REPORTS

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
TORCH_DATA = DATA / "torch"
EXAMPLES = ROOT / "examples"
SHARED_REAL = ROOT.parent / "shared" / "fixtures" / "real"

# every report.json a test makes nsbridge write in this process is checked against
# contract.report, undeclared keys refused: a field added to a report but not to its types
# fails the suite (the nsbridge processes slow tests start are not held to it)
os.environ[STRICT_REPORTS] = str(os.getpid())


# What starts a child process: subprocess (run, call, check_output, os.popen, asyncio's),
# os's fork and spawn calls (os.spawn*, pty.fork, os.system) and multiprocessing (any context).
PROCESS_STARTERS = ((subprocess.Popen, "_execute_child"), (os, "fork"), (os, "forkpty"),
                    (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system"),
                    (multiprocessing.process.BaseProcess, "start"))


class UnmarkedProcess(RuntimeError):
    """A test not marked slow (nor gpu) started a child process."""


def unmarked_process(nodeid: str, how: str) -> UnmarkedProcess:
    return UnmarkedProcess(
        f"{nodeid} starts a child process ({how}, in the test or one of its fixtures) but is "
        "not marked slow: mark it @pytest.mark.slow (make test-fast leaves those out), or "
        "keep it in this process")


@contextlib.contextmanager
def processes_refused(nodeid: str) -> Iterator[list[str]]:
    """While open, every PROCESS_STARTERS call raises UnmarkedProcess instead of starting a
    process; yields the list of those calls ("os.fork"), which outlives a caught error."""
    started: list[str] = []

    def refuse(owner: Any, name: str) -> Any:
        how = f"{getattr(owner, '__qualname__', owner.__name__)}.{name}"

        def refused(*args: Any, **kwargs: Any) -> Any:
            started.append(how)
            raise unmarked_process(nodeid, how)
        return refused

    saved = [(owner, name, getattr(owner, name))
             for owner, name in PROCESS_STARTERS if hasattr(owner, name)]
    try:
        for owner, name, _ in saved:
            setattr(owner, name, refuse(owner, name))
        yield started
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _processes_checked(item: pytest.Item) -> Any:
    """One test phase (setup, call, teardown) run with processes refused, unless the test is
    marked slow or gpu; it fails even where the code under test caught the refusal."""
    if item.get_closest_marker("slow") or item.get_closest_marker("gpu"):
        return (yield)
    with processes_refused(item.nodeid) as started:
        try:
            result = yield
        except UnmarkedProcess:
            raise
        except BaseException as exc:
            if started:
                raise unmarked_process(item.nodeid, started[0]) from exc
            raise
        if started:
            raise unmarked_process(item.nodeid, started[0])
        return result


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fills the process-wide caches whose first use starts a process (platform.platform()
    runs `uname -p`; nsbridge records it in each run), so that no test is blamed for being
    the first."""
    platform.platform()


@pytest.fixture(autouse=True)
def _sigterm_restored() -> Iterator[None]:
    """SIGTERM's handler as it was before each test: the CLI run in this process
    (CliRunner) turns SIGTERM into nsbridge's Stopped, which would otherwise outlive the
    test and keep pytest running when a CI job's time is up."""
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    return (yield from _processes_checked(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    return (yield from _processes_checked(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    return (yield from _processes_checked(item))


@pytest.fixture
def torch_data() -> Path:
    return TORCH_DATA


def sigint_as_a_terminal_sets_it() -> None:
    """SIGINT to its default in a started process (Python then installs its handler): a
    suite run by a shell that ignores it for background jobs (`cmd &` without job control)
    would otherwise pass the ignored disposition on, as nohup intends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_nsbridge(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `nsbridge` command as a user would (python -m nsbridge ...)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "nsbridge", *args], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=timeout)


def fake_ncu_env(folder: Path) -> dict[str, str]:
    """Environment with tests/fake_ncu.py first on PATH as `ncu` and `nvidia-smi`, its call
    log in ``folder``, and the real H200 raw-page CSV its reports are read back from."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name in ("ncu", "nvidia-smi"):
        exe = bin_dir / name
        exe.write_text(f"#!{sys.executable}\n" + (ROOT / "tests" / "fake_ncu.py").read_text())
        exe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "NSBRIDGE_NCU"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", FAKE_NCU_LOG=str(folder / "calls"),
               FAKE_NCU_CSV=str(DATA / "ncu" / "train_cnn_nvtx_sections.raw.csv"),
               PYTHONUNBUFFERED="1")
    return env


HOG = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


@pytest.fixture
def cpu_hogs():
    """Busy-loop processes, one per core plus one, for the test's duration: the machine made
    contended on purpose. Bounded twice: each ends itself after 10 minutes, and the fixture
    kills them by PID when the test ends. Yields their PIDs."""
    count = (os.cpu_count() or 2) + 1
    procs = [subprocess.Popen([sys.executable, "-c", HOG.format(seconds=600)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def first_fix(report: dict) -> str:
    """The first recommendation's id, passing over "measure on a quieter machine", which a
    busy machine (CI) rightly puts first."""
    return next(r["id"] for r in report["recommendations"] if r["id"] != "contended-machine")


def requires_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def flat(text: str) -> str:
    """The terminal's text with its wrapping undone (it wraps sentences at 120 columns)."""
    return " ".join(text.split())


def analyzed_or_refused(path: Path, out: Path, what: str) -> Optional[dict]:
    """report.json of ``nsbridge.analyze([path])`` into ``out``, or None when nsbridge
    refused the file with its own error; anything else fails, naming ``what`` (a fuzzer's
    case)."""
    import nsbridge
    from nsbridge.errors import NsbridgeError

    try:
        nsbridge.analyze([path], out=out)
    except NsbridgeError:
        return None
    except Exception as exc:   # noqa: BLE001 - the point: nothing but nsbridge's errors
        raise AssertionError(f"{what}: {exc!r}") from exc
    report = json.loads((out / "report.json").read_text())
    assert report["status"] in ("ok", "failed"), what
    return report
