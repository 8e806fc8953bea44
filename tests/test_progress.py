"""Progress lines: on stderr only, with elapsed time, silenced by -q."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nsbridge import progress

from conftest import run_nsbridge

SCRIPT = "import torch\nfor _ in range(3):\n    torch.ones(2).sum()\nprint('script ran')\n"


def test_steps_report_on_stderr_with_elapsed_time(capsys: pytest.CaptureFixture) -> None:
    progress.enable(True)
    try:
        with progress.step("profiling x", script_output=True):
            time.sleep(1.05)
        with progress.step("quick"):
            pass
    finally:
        progress.enable(False)
    out, err = capsys.readouterr()
    assert out == ""
    assert "nsbridge: profiling x ..." in err and "nsbridge: profiling x: done in 1." in err
    assert "quick" not in err                      # under a second: nothing to say
    with progress.step("silent", script_output=True):
        pass
    assert capsys.readouterr() == ("", "")         # library default: off


@pytest.mark.slow
def test_cli_prints_progress_unless_quiet(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    loud = run_nsbridge("triage", "--out", str(tmp_path / "a"), str(script), cwd=tmp_path)
    quiet = run_nsbridge("-q", "triage", "--out", str(tmp_path / "b"), str(script), cwd=tmp_path)
    assert loud.returncode == quiet.returncode == 0
    assert f"nsbridge: running {script} under torch.profiler ..." in loud.stderr
    assert "nsbridge: running" not in loud.stdout
    assert "nsbridge: running" not in quiet.stderr and "script ran" in quiet.stdout
    assert "nsbridge: running" not in (tmp_path / "a" / "report.md").read_text()
