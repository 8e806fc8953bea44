"""`analyze --jobs N`: several traces read and analysed on N worker processes give the
same report as one process, and a bad file fails the same way."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from nsbridge.api import analyze
from nsbridge.errors import TraceFormatError

from conftest import ROOT, TORCH_DATA, run_nsbridge

RANKS = sorted((TORCH_DATA / "two_ranks").glob("*.json.gz"))
pytestmark = pytest.mark.slow    # each test starts worker processes (or the CLI)


def _comparable(report: dict) -> dict:
    """The report without what names its own run directory."""
    return {k: v for k, v in report.items() if k not in ("files",)}


@pytest.mark.parametrize("start", ["fork", "forkserver"])
def test_two_workers_give_the_report_of_one(tmp_path: Path, start: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    from nsbridge.passes import torch_pass

    one = analyze(RANKS, out=tmp_path / "one", jobs=1).report
    monkeypatch.setattr(torch_pass, "_worker_context",
                        lambda: multiprocessing.get_context(start))
    two = analyze(RANKS, out=tmp_path / "two", jobs=2).report
    assert _comparable(one) == _comparable(two)
    assert [r["rank"] for r in two["distributed"]["ranks"]] == [0, 1]


WORKER_START = """
import threading, time
from nsbridge._blas import import_numpy_on_one_thread
import_numpy_on_one_thread()        # as the command does: no OpenBLAS thread
from nsbridge.passes.torch_pass import _worker_context
alone = _worker_context().get_start_method()
threading.Thread(target=time.sleep, args=(1,), daemon=True).start()
print(alone, _worker_context().get_start_method())
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads counted in /proc")
def test_workers_are_forked_only_from_a_process_of_one_thread() -> None:
    """Forked workers start with the modules imported; with a second thread running (a
    Python one here; OpenBLAS's count too) the fork server starts them (a fork could
    deadlock on a lock that thread held)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WORKER_START], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.split() == ["fork", "forkserver"], done.stderr


def test_a_broken_trace_among_several_fails_from_a_worker(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for path in RANKS:
        shutil.copy(path, folder / path.name)
    data = gzip.open(RANKS[0]).read()
    (folder / "rank-9.json").write_bytes(data[: len(data) // 2])      # cut mid-file
    with pytest.raises(TraceFormatError, match="ends early"):
        analyze([folder], out=tmp_path / "run", jobs=2)
    assert not (tmp_path / "run").exists()          # nothing written for a bad input


def test_json_that_is_not_a_trace_is_skipped_by_a_worker_too(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for path in RANKS:
        shutil.copy(path, folder / path.name)
    (folder / "config.json").write_text(json.dumps({"lr": 0.1}))
    report = analyze([folder], out=tmp_path / "run", jobs=2).report
    assert any("skipped" in n and "config.json" in n for n in report["notes"])
    assert len(report["distributed"]["ranks"]) == 2


def test_the_cli_takes_jobs(tmp_path: Path) -> None:
    proc = run_nsbridge("-q", "analyze", "--jobs", "2", "--out", str(tmp_path / "run"),
                        *map(str, RANKS), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Ranks" in proc.stdout
    bad = run_nsbridge("analyze", "--jobs", "0", *map(str, RANKS), cwd=ROOT)
    assert bad.returncode == 2 and "--jobs" in bad.stderr
