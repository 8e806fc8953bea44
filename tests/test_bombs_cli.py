"""No bomb gets through (issue 48): a YAML alias bomb and values of any size give a short
ProfileError within seconds; thresholds that are NaN, infinite or negative are refused by
the library (never a 20x slowdown passed); ops.csv opens safely in a spreadsheet; an output
folder torch cannot write under is refused before the script runs; a SIGKILLed nsbridge
leaves no process of the script behind."""

from __future__ import annotations

import io
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result

import nsbridge
import nsbridge.api as api
from nsbridge.cli import main
from nsbridge.errors import DiffInputError, ProfileError
from nsbridge.profiles import MAX_BYTES, builtin_profiles, load_profile
from nsbridge.report.document.escape import csv_cell
from nsbridge.report.render.ops_csv import ops_csv

from conftest import ROOT
from test_diff import BASE, STEPS, TWO, _report, _write


@pytest.fixture(autouse=True)
def _keep_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI turns SIGTERM into an exception; not in the test process."""
    monkeypatch.setattr("nsbridge.errors.stop_on_sigterm", lambda: None)


def _invoke(*args: object) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], prog_name="nsbridge")


def _marker_script(folder: Path) -> Path:
    """A script that leaves a file behind if it ever runs."""
    script = folder / "x.py"
    script.write_text(f"open({str(folder / 'ran')!r}, 'w').write('ran')\n")
    return script


def _bomb(levels: int = 9, under: str = "") -> str:
    """A billion-laughs profile: 9 lists of 9 aliases of the list before (9**9 values)."""
    lines = ["version: 1", "analysis:"] if under else []
    pad = "  " if under else ""
    lines.append(f'{pad}k0: &a0 ["x","x","x","x","x","x","x","x","x"]')
    for n in range(1, levels):
        key = under if (under and n == levels - 1) else f"k{n}"
        lines.append(f"{pad}{key}: &a{n} [" + ",".join([f"*a{n - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("under", ["", "top_ops"])
def test_a_yaml_alias_bomb_is_refused_at_once_in_a_short_message(tmp_path: Path,
                                                                  under: str) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb(under=under))
    assert len(bomb.read_bytes()) < 600
    started = time.monotonic()
    result = _invoke("triage", "--profile", bomb, _marker_script(tmp_path))
    assert time.monotonic() - started < 2
    assert result.exit_code == 1, result.output
    assert len(result.output) < 1024 and "aliases (*a0) are not read" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("text", [
    "version: 1\nanalysis:\n  top_ops: [" + ",".join(["123456789"] * 50_000) + "]\n",
    "version: 1\ndescription: [" + ",".join(['"' + "y" * 500 + '"'] * 500) + "]\n",
    "version: 1\nanalysis:\n  " + "k" * 100_000 + ": 1\n",
    "version: [" + "[" * 50 + "1" + "]" * 50 + "]\n",
    "version: 1\nanalysis:\n  top_ops: " + "9" * 5000 + "\n",
    "version: 1\nanalysis:\n  top_ops: \"" + "z" * 200_000 + "\"\n",
])
def test_every_message_quoting_a_profile_value_is_short(tmp_path: Path, text: str) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as caught:
        load_profile(str(path))
    assert len(str(caught.value)) < 600 + len(str(path)), str(caught.value)[:2000]


def test_a_profile_larger_than_a_page_of_settings_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("version: 1\n" + "# padding\n" * (MAX_BYTES // 10 + 1))
    with pytest.raises(ProfileError, match="larger than 1024 KiB"):
        load_profile(str(path))


def test_anchors_without_aliases_and_the_built_in_profiles_still_load(tmp_path: Path) -> None:
    path = tmp_path / "anchored.yaml"
    path.write_text("version: 1\nanalysis: &an\n  top_ops: 7\n")
    assert load_profile(str(path)).analysis.top_ops == 7
    for name in builtin_profiles():
        load_profile(name)


# -- thresholds -------------------------------------------------------------------------------
SLOW_20X = {**BASE, "aten::mm": [t * 20 for t in BASE["aten::mm"]]}   # +1.9 ms a step
BAD = [float("nan"), float("inf"), -float("inf"), -1.0, True, "10"]


def test_a_nan_threshold_never_passes_a_20x_slowdown(tmp_path: Path) -> None:
    base = _write(tmp_path, "base", _report(BASE, STEPS, runs=TWO))
    slow = _write(tmp_path, "slow", _report(SLOW_20X, [s + 1.9 for s in STEPS], runs=TWO))
    assert nsbridge.diff(base, slow)["outcome"] == "regression"     # the slowdown is seen
    for bad in BAD:
        with pytest.raises(DiffInputError, match="fail_above must be a finite number from 0 to 10000"):
            nsbridge.diff(base, slow, fail_above=bad)
    for bad in [*BAD, 1.5]:
        with pytest.raises(DiffInputError, match=r"min_step_share \(as a percentage\) must be a finite number"):
            nsbridge.diff(base, slow, min_step_share=bad)


@pytest.mark.parametrize("command", [api.gate, api.rejudge])
def test_gate_and_rejudge_refuse_a_nan_threshold_before_reading_anything(
        tmp_path: Path, command: object) -> None:
    args = (tmp_path / "a", tmp_path / "b") if command is api.gate else (tmp_path,)
    with pytest.raises(DiffInputError, match="would judge every change wrongly"):
        command(*args, fail_above=math.nan)     # type: ignore[operator]
    with pytest.raises(DiffInputError, match="min_step_share"):
        command(*args, min_step_share=math.inf)     # type: ignore[operator]
    assert list(tmp_path.iterdir()) == []


# -- ops.csv ----------------------------------------------------------------------------------
def test_ops_csv_neutralises_formulas_and_keeps_one_row_per_op_and_numbers() -> None:
    names = ['=HYPERLINK("http://x")', "a\rb", "c\nd", "+cmd", "@SUM(A1)", "-2+3", "\tx",
             "aten::mm"]
    report = {"ops": [{"name": name, "calls": i + 1, "cpu_self_us": 10.0 * (i + 1),
                       "mem_net_mib": -1.5 * (i + 1)} for i, name in enumerate(names)]}
    text = ops_csv(report)
    assert "\r" not in text.replace("\r\n", "")   # every CR ends a row (RFC 4180)
    assert len(text.split("\r\n")) == len(names) + 2      # header, rows, the final CRLF
    frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])
    assert list(frame["name"]) == ["'=HYPERLINK(\"http://x\")", "a\\rb", "c\\nd", "'+cmd",
                                   "'@SUM(A1)", "'-2+3", "\\tx", "aten::mm"]
    assert list(frame["name"]) == [csv_cell(n) for n in names]
    assert list(frame["mem_net_mib"]) == [-1.5 * (i + 1) for i in range(len(names))]
    assert frame["mem_net_mib"].dtype == float and frame["calls"].dtype == int
    assert csv_cell(-3) == -3 and csv_cell(None) is None


# -- output folders ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a\\b", "a\nb", "a\tb", "a\x1bb"])
@pytest.mark.parametrize("command", ["triage", "timeline"])
def test_an_out_folder_torch_cannot_write_under_is_refused_before_the_script_runs(
        tmp_path: Path, name: str, command: str) -> None:
    script = _marker_script(tmp_path)
    result = _invoke(command, "--out", tmp_path / "runs" / name, script)
    assert result.exit_code == 1, result.output
    assert "cannot write a trace under, so nothing was run" in result.output
    assert not (tmp_path / "ran").exists() and not (tmp_path / "runs").exists()


def test_a_gate_folder_torch_cannot_write_under_is_refused_before_any_process(
        tmp_path: Path) -> None:
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        _marker_script(tmp_path / side)
    result = _invoke("gate", "--out", tmp_path / "g\\1", tmp_path / "a", tmp_path / "b",
                     "x.py")
    assert result.exit_code == 1 and "holds a backslash" in result.output, result.output
    assert not any((tmp_path / side / "ran").exists() for side in ("a", "b"))


# -- a killed nsbridge --------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"


SLEEPER = "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(120)\n"
# a process that runs a tool as nsbridge does (nsys, ncu, torchrun: not the bootstrap)
TOOL_RUNNER = ("import sys; from pathlib import Path; from nsbridge.collect._process import "
               "run_passthrough; run_passthrough(sys.argv[1:], cwd=Path.cwd(), env={}, "
               "timeout=None)")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("how", ["triage", "tool"])
def test_a_sigkilled_nsbridge_leaves_no_process_of_the_script(tmp_path: Path, how: str) -> None:
    pid_file = tmp_path / "pid"
    script = tmp_path / "sleepy.py"
    script.write_text(SLEEPER)
    argv = ([sys.executable, "-m", "nsbridge", "triage", "--out", str(tmp_path / "run"),
             str(script), "--", str(pid_file)] if how == "triage" else
            [sys.executable, "-c", TOOL_RUNNER, sys.executable, str(script), str(pid_file)])
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        child = int(pid_file.read_text())
        assert _alive(child)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the profiled script outlived a SIGKILLed nsbridge"
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid_file.exists() and pid_file.read_text() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
