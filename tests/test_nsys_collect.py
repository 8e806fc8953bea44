"""The nsys pass's orchestration, with a fake `nsys` at the process boundary."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nsbridge.collect.nsys import (PROGRESS, capture, find_importer, find_nsys, nvtx_fix,
                                   profile_argv)
from nsbridge.passes.nsys_pass import nvtx_check
from nsbridge.errors import ToolFailedError, ToolNotFoundError

from conftest import DATA, ROOT, run_nsbridge

pytestmark = pytest.mark.slow

SCRIPT = """
import torch, nsbridge
m = torch.nn.Linear(8, 8)
for _ in range(3):
    m(torch.randn(4, 8)).sum().backward()
    nsbridge.step()
print("script ran")
"""


@pytest.fixture
def fake_nsys(tmp_path: Path) -> dict:
    """A fake Nsight Systems install: target-linux-x64/nsys and host-linux-x64/QdstrmImporter."""
    root = tmp_path / "nsys-root"
    (root / "target-linux-x64").mkdir(parents=True)
    (root / "host-linux-x64").mkdir()
    nsys = root / "target-linux-x64" / "nsys"
    nsys.write_text(f"#!{sys.executable}\n" + (ROOT / "tests" / "fake_nsys.py").read_text())
    importer = root / "host-linux-x64" / "QdstrmImporter"
    importer.write_text(f"#!{sys.executable}\nimport sys\np = sys.argv[2]\n"
                        "open(p[:-len('.qdstrm')] + '.nsys-rep', 'w').write('imported')\n")
    for exe in (nsys, importer):
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "nsys-calls.jsonl"
    env = {"NSBRIDGE_NSYS": str(nsys), "FAKE_NSYS_LOG": str(log),
           "FAKE_NSYS_SQLITE": str(DATA / "nsys" / "nsbridge_cnn_cpu_nsys2022.4.sqlite")}
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    return {"env": env, "log": log, "script": script}


def _run(fake: dict, tmp_path: Path, mode: str, *extra: str):
    os.environ.update(fake["env"], FAKE_NSYS_MODE=mode)
    try:
        return run_nsbridge("timeline", "--out", str(tmp_path / "run"), *extra,
                            str(fake["script"]), cwd=tmp_path)
    finally:
        for key in [*fake["env"], "FAKE_NSYS_MODE"]:
            os.environ.pop(key, None)


def test_the_profile_picks_what_nsys_traces(fake_nsys: dict, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("version: 1\ntimeline:\n  trace: [nvtx, osrt]\n")
    proc = _run(fake_nsys, tmp_path, "qdstrm", "--profile", str(tmp_path / "p.yaml"))
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in fake_nsys["log"].read_text().splitlines()]
    profile = next(c for c in calls if c[0] == "profile")
    assert profile[1:3] == ["--trace", "nvtx,osrt"]       # the default adds cuda,cudnn,cublas


def test_argv_and_leftover_qdstrm_is_imported(fake_nsys: dict, tmp_path: Path) -> None:
    proc = _run(fake_nsys, tmp_path, "qdstrm")
    assert proc.returncode == 0, proc.stderr
    assert "script ran" in proc.stdout            # the script's own output passes through
    assert "100%]" not in proc.stdout             # nsys progress bars do not
    calls = [json.loads(line) for line in fake_nsys["log"].read_text().splitlines()]
    profile = next(c for c in calls if c[0] == "profile")
    # graph replays traced node by node: each kernel of a replay is a kernel row
    assert profile[:15] == ["profile", "--trace", "cuda,nvtx,osrt,cudnn,cublas",
                            "--cuda-graph-trace", "node", "--sample",
                            "none", "--cpuctxsw", "none", "--output",
                            str((tmp_path / "run" / "timeline").resolve()), "--force-overwrite",
                            "false", "--export", "none"]
    assert profile[-4:-1] == [sys.executable, "-m", "nsbridge._bootstrap.entry"]
    assert ["export", "--type", "sqlite"] == next(c for c in calls if c[0] == "export")[:3]
    run = tmp_path / "run"
    assert (run / "timeline.nsys-rep").read_text() == "imported"   # made by QdstrmImporter
    assert not (run / "timeline.qdstrm").exists()                  # imported, then removed
    report = json.loads((run / "report.json").read_text())
    assert report["timeline"]["op_ranges"] > 0 and report["status"] == "ok"
    nsys_pass = json.loads((run / "manifest.json").read_text())["passes"][-1]
    assert nsys_pass["name"] == "nsys" and nsys_pass["nsys_version"] == "2099.1.1"


def test_nsys_failure_quotes_nsys_and_keeps_the_run(fake_nsys: dict, tmp_path: Path) -> None:
    proc = _run(fake_nsys, tmp_path, "fail")
    assert proc.returncode == 1
    assert "nsys said: ERROR: Failed to create profiling session: fake" in proc.stderr
    assert "timeline.nsys.log" in proc.stderr
    assert (tmp_path / "run" / "manifest.json").is_file()
    assert (tmp_path / "run" / "timeline.nsys.log").is_file()


@pytest.mark.parametrize("race, said", [("start-race", "Local Endpoint is not available"),
                                        ("agent-lost", "Connection to the Agent lost"),
                                        ("reset", "Connection reset by peer")])
def test_nsys_that_fails_before_starting_the_program_is_started_again(
        fake_nsys: dict, tmp_path: Path, race: str, said: str) -> None:
    proc = _run(fake_nsys, tmp_path, race)
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in fake_nsys["log"].read_text().splitlines()]
    assert [c[0] for c in calls].count("profile") == 2
    assert proc.stdout.count("script ran") == 1               # the script ran once
    log = (tmp_path / "run" / "timeline.nsys.log").read_text()
    assert said in log and "started it again" in log


def test_no_recorded_ranges_gives_a_warning_with_the_cause(fake_nsys: dict,
                                                           tmp_path: Path) -> None:
    fake_nsys["env"]["FAKE_NSYS_SQLITE"] = str(DATA / "nsys" / "power_iteration__baseline.sqlite")
    proc = _run(fake_nsys, tmp_path, "ok")
    assert proc.returncode == 0, proc.stderr
    nvtx = json.loads((tmp_path / "run" / "report.json").read_text())["timeline"]["nvtx"]
    assert nvtx["recorded"] == 0 and nvtx["emitted"] > 0
    assert nvtx_fix() in nvtx["warning"]
    assert ("nvtx<0.2.11" if sys.version_info < (3, 13) else "newer than 2023.4") in proc.stdout


def _exe(path: Path, body: str = "exit 0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_importer_in_a_sibling_folder_of_ncus_bundled_nsys(tmp_path: Path) -> None:
    host = tmp_path / "nsight-compute" / "2025.3.1" / "host"
    nsys = _exe(host / "target-linux-x64" / "nsys")
    importer = _exe(host / "linux-desktop-glibc_2_11_3-x64" / "QdstrmImporter")
    found, searched = find_importer(str(nsys))
    assert found == str(importer) and str(host / "target-linux-x64") in searched


def test_importer_along_debians_symlink_chain(tmp_path: Path) -> None:
    """/usr/bin/nsys -> ../lib/nsight-systems/bin/nsys -> ../target-linux-x64/nsys, whose
    real folder has no host-linux-x64 beside it: the importer is found at the middle hop."""
    lib = tmp_path / "usr" / "lib"
    real = _exe(lib / "x86_64-linux-gnu" / "nsight-systems" / "target-linux-x64" / "nsys")
    importer = _exe(lib / "nsight-systems" / "host-linux-x64" / "QdstrmImporter")
    (lib / "nsight-systems" / "bin").mkdir(parents=True)
    (lib / "nsight-systems" / "target-linux-x64").symlink_to(real.parent)
    (lib / "nsight-systems" / "bin" / "nsys").symlink_to("../target-linux-x64/nsys")
    (tmp_path / "usr" / "bin").mkdir()
    (tmp_path / "usr" / "bin" / "nsys").symlink_to("../lib/nsight-systems/bin/nsys")
    assert find_importer(str(tmp_path / "usr" / "bin" / "nsys"))[0] == str(importer)
    assert find_importer(str(real))[0] is None        # the real folder alone has none


def test_nsys_found_in_install_folders_newest_first(tmp_path: Path) -> None:
    for version in ("2024.5.1", "2025.3.2", "2025.10.1"):
        _exe(tmp_path / "nsight-systems" / version / "bin" / "nsys")
    bundled = _exe(tmp_path / "nsight-compute" / "2099.1.1" / "host" / "target-linux-x64" / "nsys")
    patterns = (str(tmp_path / "nsight-systems" / "*" / "bin" / "nsys"),
                str(tmp_path / "nsight-compute" / "*" / "host" / "target-linux-x64" / "nsys"))
    found = find_nsys({"PATH": str(tmp_path / "empty")}, patterns)
    assert found.path.endswith("2025.10.1/bin/nsys") and found.found_by == "install folder"
    assert find_nsys({"PATH": ""}, patterns[1:]).path == str(bundled)
    with pytest.raises(ToolNotFoundError, match="was not found on PATH or in"):
        find_nsys({"PATH": ""}, (str(tmp_path / "none" / "nsys"),))


def _qdstrm_capture(tmp_path: Path, importer_body: str | None):
    root = tmp_path / "nsys"
    nsys = _exe(root / "target-linux-x64" / "nsys",
                'for a; do [ "$prev" = --output ] && out=$a; prev=$a; done\n'
                'echo raw > "$out.qdstrm"')
    if importer_body is not None:
        _exe(root / "host-linux-x64" / "QdstrmImporter", importer_body)
    install = find_nsys({"NSBRIDGE_NSYS": str(nsys)})
    return capture(install, trace=["nvtx"], output=tmp_path / "cap", child_argv=["true"],
                   cwd=tmp_path, env=os.environ, timeout=60, log=tmp_path / "cap.log",
                   echo=False)


def test_leftover_qdstrm_without_an_importer_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ToolFailedError) as err:
        _qdstrm_capture(tmp_path, None)
    message = str(err.value)
    assert "left only cap.qdstrm" in message and "found none next to" in message
    assert str(tmp_path / "nsys" / "target-linux-x64") in message
    assert (tmp_path / "cap.qdstrm").is_file()          # the raw capture is kept


def test_importer_missing_a_library_is_named(tmp_path: Path) -> None:
    body = ("echo 'QdstrmImporter: error while loading shared libraries: libpfm.so.4: cannot "
            "open shared object file: No such file or directory' >&2; exit 127")
    with pytest.raises(ToolFailedError, match=r"library libpfm\.so\.4 it needs is missing"):
        _qdstrm_capture(tmp_path, body)


def test_leftover_qdstrm_is_imported_by_the_importer_found(tmp_path: Path) -> None:
    result = _qdstrm_capture(tmp_path, 'f="$2"; echo rep > "${f%.qdstrm}.nsys-rep"')
    assert result.report == tmp_path / "cap.nsys-rep" and result.report.is_file()
    assert result.imported_with == str(tmp_path / "nsys" / "host-linux-x64" / "QdstrmImporter")


def test_doctor_round_trip_imports_a_leftover_qdstrm(fake_nsys: dict, tmp_path: Path) -> None:
    env = dict(os.environ, **fake_nsys["env"], FAKE_NSYS_MODE="qdstrm")
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "doctor"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    round_trip = next(l for l in lines if "nvtx round trip" in l)
    assert round_trip.startswith("OK   nvtx round trip: nsys recorded"), proc.stdout
    assert "imported with" in round_trip and "QdstrmImporter" in round_trip
    nsys_line = next(l for l in lines if l.startswith("OK   nsys:"))
    assert "found by NSBRIDGE_NSYS" in nsys_line and "host-linux-x64" in nsys_line


def test_missing_nsys_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(ToolNotFoundError, match="apt-get install nsight-systems"):
        find_nsys({"PATH": str(tmp_path)}, ())
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env_path = os.environ["PATH"]
    os.environ["PATH"] = str(tmp_path)
    try:
        proc = run_nsbridge("timeline", str(script), cwd=tmp_path)
    finally:
        os.environ["PATH"] = env_path
    assert proc.returncode == 1 and "was not found on PATH" in proc.stderr


def test_profile_argv_is_a_list_and_progress_is_hidden() -> None:
    argv = profile_argv("nsys", trace=["nvtx"], output=Path("/r/t"), child_argv=["py", "x.py"])
    assert argv[-2:] == ["py", "x.py"] and "--trace" in argv and "nvtx" in argv
    assert PROGRESS.search("[1/1] [=====   45%   ] timeline.nsys-rep")
    assert not PROGRESS.search("epoch 0: loss 1.0")


def test_nvtx_check() -> None:
    assert nvtx_check(100, 100, "2022.4")["warning"] is None
    assert "recorded 3 of the 100" in nvtx_check(100, 3, "2022.4")["warning"]
    assert nvtx_check(0, 0, None)["warning"] is None


THREADS_SCRIPT = """
import os, torch, nsbridge
with open("threads.txt", "a") as fh:
    fh.write(f"{torch.get_num_threads()} {os.environ.get('OMP_NUM_THREADS')}\\n")
m = torch.nn.Linear(8, 8)
for _ in range(3):
    m(torch.randn(4, 8)).sum().backward()
    nsbridge.step()
"""


def test_timeline_on_a_run_runs_with_the_threads_the_run_recorded(fake_nsys: dict,
                                                                  tmp_path: Path) -> None:
    """Regression (issue 50): `timeline --run` of a `triage --threads 1` run ran the
    script with torch's default threads and merged its numbers into a report whose
    machine line said 1 thread."""
    script = tmp_path / "threads.py"
    script.write_text(THREADS_SCRIPT)
    triage = run_nsbridge("triage", "--threads", "1", "--profile", "quick", "--out",
                          str(tmp_path / "run"), str(script), cwd=tmp_path)
    assert triage.returncode == 0, triage.stderr
    os.environ.update(fake_nsys["env"], FAKE_NSYS_MODE="ok")
    try:
        timeline = run_nsbridge("timeline", "--run", str(tmp_path / "run"), cwd=tmp_path)
    finally:
        for key in [*fake_nsys["env"], "FAKE_NSYS_MODE"]:
            os.environ.pop(key, None)
    assert timeline.returncode == 0, timeline.stderr
    assert (tmp_path / "threads.txt").read_text().splitlines() == ["1 1", "1 1"]
    said = timeline.stdout + timeline.stderr
    assert "1 intra-op thread(s) (as the run recorded)" in said and "profile quick" in said
