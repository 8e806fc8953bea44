"""The profiler's noise in a profiled script's stderr (kineto's USDT lines, the CPU
allocator warning) is kept out of the terminal and in profiler-noise.log; everything else
the script prints passes through untouched; -v passes the noise too."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from nsbridge.collect import noise
from nsbridge.collect._process import run_passthrough
from nsbridge.collect.noise import NoiseFilter, is_noise

from conftest import ROOT

USDT = b"USDT:2026-11-27 00:26:26 16887:16887 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
ALLOC = (b"[W1127 00:26:26.056363896 CPUAllocator.cpp:245] Memory block of unknown size was "
         b"allocated before the profiling started, profiler results will not include the "
         b"deallocation event\n")
OTHER_WARNING = b"[W1127 00:26:26.1 ProcessGroupNCCL.cpp:1] a warning the user should see\n"


def _run(chunks: list[bytes]) -> tuple[bytes, list[bytes]]:
    f = NoiseFilter()
    passed, noise = b"", []
    for chunk in chunks:
        out, dropped = f.feed(chunk)
        passed += out
        noise += dropped
    return passed + f.flush(), noise


def test_noise_lines_are_dropped_and_the_rest_passes_byte_for_byte() -> None:
    text = b"epoch 0\n" + USDT + "ünïcode \xe2\x9c\x93\n".encode("latin-1") + ALLOC + OTHER_WARNING
    passed, noise = _run([text])
    assert passed == b"epoch 0\n" + "ünïcode \xe2\x9c\x93\n".encode("latin-1") + OTHER_WARNING
    assert noise == [USDT, ALLOC]


def test_a_noise_line_split_across_reads_is_still_dropped() -> None:
    text = b"a\n" + USDT + b"b\n"
    for cut in range(1, len(text)):
        passed, noise = _run([text[:cut], text[cut:]])
        assert passed == b"a\nb\n" and noise == [USDT], cut


def test_progress_updates_pass_at_once_and_are_never_judged_mid_line() -> None:
    f = NoiseFilter()
    assert f.feed(b"  5%|#   |\r")[0] == b"  5%|#   |\r"        # no newline: passed now
    assert f.feed(b"USDT: not a line start\n") == (b"USDT: not a line start\n", [])
    assert f.feed(b"US")[0] == b""                                 # may become noise: held
    assert f.feed(b"ER 1\n")[0] == b"USER 1\n"


def test_is_noise_knows_only_the_profilers_lines() -> None:
    assert is_noise(USDT) and is_noise(ALLOC)
    assert not is_noise(OTHER_WARNING) and not is_noise(b"USD: 3\n")


def test_torchruns_rank_prefix_is_seen_through() -> None:
    """torchrun puts "[rankN]:" before each line of a rank's output."""
    lines = [b"[rank1]:" + ALLOC, b"[rank0]:" + USDT, b"[rank0]: loss 3.2\n"]
    for cut in (3, 9, 20):
        text = b"".join(lines)
        passed, noise = _run([text[:cut], text[cut:]])
        assert passed == b"[rank0]: loss 3.2\n" and noise == lines[:2], cut


class _Terminal:
    """Stands in for sys.stderr: pump writes to its binary buffer."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_pump_passes_a_progress_update_while_the_stream_is_still_open(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    terminal, log = _Terminal(), tmp_path / "noise.log"
    pump = threading.Thread(target=noise.pump, args=(os.fdopen(read_end, "rb", 0), terminal, log))
    pump.start()
    try:
        os.write(write_end, USDT + b" 10%|#  |\r")
        assert _wait_for(lambda: terminal.buffer.getvalue() == b" 10%|#  |\r"), \
            terminal.buffer.getvalue()                   # no newline yet, and not held back
        os.write(write_end, b" 20%|## |\r\n" + ALLOC[:30])
        os.write(write_end, ALLOC[30:] + b"done\n")
    finally:
        os.close(write_end)
        pump.join(timeout=10)
    assert terminal.buffer.getvalue() == b" 10%|#  |\r 20%|## |\r\ndone\n"
    assert log.read_bytes() == USDT + ALLOC


CHILD = """
import json, os, sys
fd = lambda n: [os.fstat(n).st_dev, os.fstat(n).st_ino]
json.dump({"stdout": fd(1), "stderr": fd(2)}, open(sys.argv[1], "w"))
err = sys.stderr.buffer
err.write(b"before\\n"); err.flush()
os.write(2, %r)
err.write(b"\\xff raw \\r"); err.flush()
""" % (USDT + ALLOC,)


def _fd(n: int) -> list[int]:
    return [os.fstat(n).st_dev, os.fstat(n).st_ino]


@pytest.mark.slow      # runs a child with its streams
@pytest.mark.parametrize("shown", [False, True])
def test_only_stderr_is_filtered_and_stdout_stays_the_terminal(
        tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes],
        monkeypatch: pytest.MonkeyPatch, shown: bool) -> None:
    monkeypatch.setattr(noise, "_shown", shown)
    script, fds, log = tmp_path / "child.py", tmp_path / "fds.json", tmp_path / "noise.log"
    script.write_text(CHILD)
    outcome = run_passthrough([sys.executable, str(script), str(fds)], cwd=tmp_path,
                              env=os.environ, timeout=60, noise_log=log)
    assert outcome.returncode == 0
    child = json.loads(fds.read_text())
    assert child["stdout"] == _fd(1)                   # nsbridge's own stdout, not a pipe
    assert (child["stderr"] == _fd(2)) is shown        # a pipe through the filter unless -v
    err = capfdbinary.readouterr().err
    if shown:
        assert err == b"before\n" + USDT + ALLOC + b"\xff raw \r" and not log.exists()
    else:
        assert err == b"before\n\xff raw \r" and log.read_bytes() == USDT + ALLOC


SCRIPT = """
import sys, torch
w = torch.randn(32, 32, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for step in range(8):
    opt.zero_grad()
    (torch.randn(16, 32) @ w).sum().backward()
    opt.step()
print("script says hello")
err = sys.stderr.buffer
for i in range(3):
    err.write(b"\\rstep %d/3" % (i + 1))
    err.flush()
err.write(b"\\n[W not a warning, latin-1 \\xe9\\n")
"""
SCRIPT_STDERR = b"\rstep 1/3\rstep 2/3\rstep 3/3\n[W not a warning, latin-1 \xe9\n"


def _triage(*flags: str, script: Path, run: Path) -> subprocess.CompletedProcess:
    """`nsbridge FLAGS -q triage --out RUN SCRIPT`, its output kept as bytes."""
    return subprocess.run([sys.executable, "-m", "nsbridge", *flags, "-q", "triage", "--out",
                           str(run), str(script)], cwd=str(ROOT), capture_output=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=300)


def _lines(data: bytes) -> list[bytes]:
    """Lines split at newlines only (a progress bar's \\r stays inside its line)."""
    return re.findall(rb"[^\n]*\n|[^\n]+\Z", data)


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [False, True])
def test_triage_prints_only_its_own_lines_and_the_scripts(tmp_path: Path, verbose: bool) -> None:
    script = tmp_path / "tiny.py"
    script.write_text(SCRIPT)
    run = tmp_path / "run"
    proc = _triage(*(["-v"] if verbose else []), script=script, run=run)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    ours, summary = proc.stdout.split(b"nsbridge triage: ", 1)
    assert ours == b"script says hello\n" and b"Verdict:" in summary
    log = run / "profiler-noise.log"
    report = json.loads((run / "report.json").read_text())
    if verbose:     # this torch prints kineto's USDT lines on every profiled run
        assert any(line.startswith(b"USDT:") for line in _lines(proc.stderr))
        assert b"".join(line for line in _lines(proc.stderr) if not is_noise(line)) \
            == SCRIPT_STDERR
        assert not log.exists() and report["files"]["profiler_noise"] is None
        return
    assert proc.stderr == SCRIPT_STDERR                # the script's bytes, and nothing else
    assert b"USDT:" not in summary and b"CPUAllocator.cpp" not in summary
    lines = _lines(log.read_bytes())                   # the noise is kept, not lost
    assert lines and all(is_noise(line) for line in lines)
    assert any(line.startswith(b"USDT:") for line in lines)
    assert report["files"]["profiler_noise"] == "profiler-noise.log"


def test_a_ranks_progress_update_is_not_held_back() -> None:
    """After a whole "[rankN]:" prefix, a partial line that cannot become noise passes."""
    f = NoiseFilter()
    assert f.feed(b"[rank0]: 10%|#   |\r")[0] == b"[rank0]: 10%|#   |\r"
    assert NoiseFilter().feed(b"[rank1]:")[0] == b""   # may still become noise: held


def test_a_noise_log_that_cannot_be_written_loses_only_the_noise(tmp_path: Path) -> None:
    """A full disk (here: a log path that is a folder) must not stop the script's stderr
    from passing, nor raise in the reader thread."""
    import io
    import os
    import threading

    from nsbridge.collect.noise import pump

    read, write = os.pipe()
    sink = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    log = tmp_path / "log-is-a-folder"
    log.mkdir()
    errors: list[BaseException] = []
    threading.excepthook = lambda args: errors.append(args.exc_value)   # noqa: E731
    try:
        thread = threading.Thread(target=pump, args=(os.fdopen(read, "rb"), sink, log))
        thread.start()
        os.write(write, USDT + b"still here\n" + ALLOC + b"and here\n")
        os.close(write)
        thread.join(10)
    finally:
        threading.excepthook = threading.__excepthook__
    assert errors == [] and not thread.is_alive()
    assert sink.buffer.getvalue() == b"still here\nand here\n"


WARNS = """
import torch
x = torch.ones(1, requires_grad=True) * 2
for _ in range(2):
    print(float(x))
    print(x.item(), int(x))
"""


@pytest.mark.slow
def test_a_warning_torch_raises_in_a_wrapped_call_reads_as_without_nsbridge(
        tmp_path: Path) -> None:
    """Regression (issue 50): `print(float(x))` of a tensor that requires grad printed
    torch's warning at nsbridge's _bootstrap/syncs.py instead of the script's line. Under
    triage the script's stderr is what python prints: each warning at the script's line,
    once per line, as the default filters show it."""
    script = tmp_path / "warns.py"
    script.write_text(WARNS)
    plain = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    profiled = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "triage", "--profile",
                               "quick", "--out", str(tmp_path / "run"), str(script)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert profiled.returncode == 0, profiled.stderr
    expected = plain.stderr
    assert expected.count("UserWarning") == 1 and f"{script}:5:" in expected  # torch: once
    # nsbridge's own lines may come around it (a busy machine's note); the script's
    # warning is the same block, once
    assert expected in profiled.stderr, profiled.stderr
    assert profiled.stderr.count("UserWarning") == 1 and "syncs.py" not in profiled.stderr
