"""Faults: every file of a run is whole or absent; a full disk is a clear exit 1 and a run
marked failed; load, analyze and --run refuse run directories that are incomplete, still
running or cut off while running."""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

import nsbridge
from nsbridge.errors import RunDirError
from nsbridge.rundir import atomic_path, write_atomic

NSBRIDGE = [sys.executable, "-m", "nsbridge"]
TRACE = Path(__file__).parent / "data" / "torch" / "h200" / "input_bound_h200.json.gz"
TINY = """\
import torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(12):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_atomic_write_leaves_nothing_when_the_disk_is_full(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("the earlier, whole file")
    with pytest.raises(RunDirError, match=r"Cannot write .*report\.html: No space left on "
                                          r"device\. The disk \(or your quota\) is full"):
        with atomic_path(target) as tmp:
            tmp.write_text("half of a new fi")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert target.read_text() == "the earlier, whole file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_atomic_writes_keep_the_users_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "a.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o640


def test_a_failed_report_write_marks_the_run_failed(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from nsbridge import rundir

    real = rundir.atomic_path

    @contextmanager
    def full_disk_for_html(path: Path) -> Iterator[Path]:
        with real(path) as tmp:
            yield tmp
            if Path(path).name == "report.html":
                tmp.write_text("half a pa")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rundir, "atomic_path", full_disk_for_html)
    with pytest.raises(RunDirError, match="report.html: No space left"):
        nsbridge.analyze([TRACE], out=tmp_path / "run")
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "failed" and report["error"]["type"] == "WriteError"
    assert "report.html" in report["error"]["message"]
    assert not list((tmp_path / "run").glob(".*tmp"))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert [(p["name"], p["status"]) for p in manifest["passes"]] == [
        ("analyze", "ok"), ("save", "failed")]
    assert manifest["status"] == "failed" and manifest["error"] == report["error"]


def test_a_report_json_left_ok_by_a_full_disk_loads_as_failed(tmp_path: Path) -> None:
    """A disk that fills after report.json was written, too full to rewrite it: the
    manifest (written first, small) says failed, and load believes it over report.json."""
    run = tmp_path / "run"
    nsbridge.analyze([TRACE], out=run)
    manifest = json.loads((run / "manifest.json").read_text())
    error = {"type": "WriteError", "message": "Cannot write report.html: No space left"}
    manifest.update(status="failed", error=error)
    (run / "manifest.json").write_text(json.dumps(manifest))
    loaded = nsbridge.load(run)
    assert loaded.status == "failed" and loaded.report["error"] == error


def _run_dir(tmp_path: Path, status: str, pid: int) -> Path:
    run = tmp_path / "run"
    nsbridge.analyze([TRACE], out=run)
    for name in ("manifest.json", "report.json"):
        record = json.loads((run / name).read_text())
        record["status"] = status
        record["pid"] = pid
        (run / name).write_text(json.dumps(record))
    return run


def test_load_refuses_a_run_still_being_written(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, "running", os.getpid())
    with pytest.raises(RunDirError, match=f"still being written \\(nsbridge process "
                                          f"{os.getpid()} is running\\)"):
        nsbridge.load(run)


@pytest.mark.slow
def test_load_and_analyze_refuse_a_run_cut_off_while_running(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run = _run_dir(tmp_path, "running", gone.pid)
    for read in (lambda: nsbridge.load(run), lambda: nsbridge.analyze([run])):
        with pytest.raises(RunDirError, match="was cut off while running: the nsbridge "
                                              "process that wrote it is gone"):
            read()


def test_load_refuses_an_incomplete_run(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, "ok", 1)
    text = (run / "report.json").read_text()
    (run / "report.json").write_text(text[: len(text) // 2])
    with pytest.raises(RunDirError, match="incomplete run directory: its report.json is "
                                          "missing, cut off or not a report"):
        nsbridge.load(run)
    (run / "report.json").unlink()
    with pytest.raises(RunDirError, match="incomplete run directory"):
        nsbridge.load(run)


def test_a_failed_run_still_loads(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, "failed", 1)
    assert nsbridge.load(run).status == "failed"


def _tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True)
    return done.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("size", ["8k", "150k", "330k"])
def test_triage_onto_a_full_disk(tmp_path: Path, size: str) -> None:
    """A real full disk (a small tmpfs as --out's parent) at three points: the profiled
    process's record, the reports, the merged trace."""
    disk = tmp_path / "disk"
    if not _tmpfs(disk, size):
        pytest.skip("mounting a tmpfs needs root and a kernel that allows it here")
    try:
        script = tmp_path / "tiny.py"
        script.write_text(TINY)
        done = subprocess.run([*NSBRIDGE, "-q", "triage", "--out", str(disk / "run"),
                               str(script)], capture_output=True, text=True, timeout=300)
        run = disk / "run"
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert f"Cannot write {run}/" in done.stderr and "No space left on device" in done.stderr
        left = sorted(p.name for p in run.iterdir())
        assert not [name for name in left if name.endswith((".tmp", ".partial"))], left
        _each_file_is_whole(run)
        if "report.json" in left:
            report = json.loads((run / "report.json").read_text())
            assert report["status"] == "failed", report["status"]
            assert nsbridge.load(run).status == "failed"
        else:    # not even the report fits: the run says it never finished
            with pytest.raises(RunDirError, match="cut off while running"):
                nsbridge.load(run)
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def _each_file_is_whole(run: Path) -> None:
    for path in run.iterdir():
        if path.name.endswith(".json"):
            json.loads(path.read_text())
        elif path.name.endswith(".gz"):
            json.loads(gzip.open(path).read())
        elif path.name.endswith(".html"):
            assert path.read_text().rstrip().endswith("</html>")


def test_analyze_refuses_a_used_out_folder_before_reading_anything(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """An --out holding an earlier run is refused at once, not after the trace is read
    (minutes for a large one), and the earlier run is left as it was."""
    import nsbridge.passes.torch_pass as torch_pass

    out = tmp_path / "earlier"
    out.mkdir()
    (out / "report.json").write_text("{}")

    def unread(*args, **kwargs):
        raise AssertionError("the trace was read before --out was checked")

    monkeypatch.setattr(torch_pass, "read_trace", unread)
    with pytest.raises(RunDirError, match="already exists and is not an empty directory"):
        nsbridge.analyze([TRACE], out=out)
    assert [p.name for p in out.iterdir()] == ["report.json"]
    assert (out / "report.json").read_text() == "{}"
