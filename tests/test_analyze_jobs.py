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

    from nsbridge.job import executors

    one = analyze(RANKS, out=tmp_path / "one", jobs=1).report
    monkeypatch.setattr(executors, "_worker_context",
                        lambda: multiprocessing.get_context(start))
    two = analyze(RANKS, out=tmp_path / "two", jobs=2).report
    assert _comparable(one) == _comparable(two)
    assert [r["rank"] for r in two["distributed"]["ranks"]] == [0, 1]


WORKER_START = """
import threading, time
from nsbridge._blas import import_numpy_on_one_thread
import_numpy_on_one_thread()        # as the command does: no OpenBLAS thread
from nsbridge.job.executors import _worker_context
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


def _ranked_copies(folder: Path, count: int) -> list[Path]:
    """``count`` traces, rank i a copy of the real two-rank job's rank i % 2 saying rank i."""
    folder.mkdir()
    docs = [json.loads(gzip.open(path).read()) for path in RANKS]
    out = []
    for rank in range(count):
        doc = docs[rank % 2]
        doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": rank,
                                  "world_size": count}
        out.append(folder / f"rank-{rank}.json.gz")
        with gzip.open(out[-1], "wt") as fh:
            json.dump(doc, fh)
    return out


def test_a_dask_cluster_of_worker_processes_gives_the_report_of_local_processes(
        tmp_path: Path) -> None:
    """The same map on a real local Dask cluster (a scheduler and two worker processes,
    talking over TCP) and on local processes: the same report, number for number."""
    distributed = pytest.importorskip("distributed")
    traces = _ranked_copies(tmp_path / "traces", 8)
    local = analyze(traces, out=tmp_path / "local", jobs=2).report
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        on_dask = analyze(traces, out=tmp_path / "dask",
                          cluster=cluster.scheduler_address).report
    assert _comparable(on_dask) == _comparable(local)
    assert [r["rank"] for r in on_dask["distributed"]["ranks"]] == list(range(8))
    calls = {op["name"]: op["calls"] for op in on_dask["ops"]}
    alone = {op["name"]: op["calls"] for op in analyze(RANKS[:1], out=tmp_path / "one").report["ops"]}
    top = next(iter(alone))
    assert calls[top] >= 4 * alone[top]     # 8 ranks summed, half of them this rank's copy


def test_an_unreachable_cluster_is_a_clear_error_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    import socket

    from nsbridge.errors import ClusterError
    from nsbridge.job import executors

    monkeypatch.setattr(executors, "CONNECT_S", 2.0)
    with socket.socket() as probe:       # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ClusterError, match="no Dask scheduler answered"):
        analyze(RANKS, out=tmp_path / "run", cluster=f"tcp://127.0.0.1:{port}")
    assert not (tmp_path / "run").exists()
