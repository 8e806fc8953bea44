"""The profiler's noise in a profiled script's stderr (kineto's USDT lines, the CPU
allocator warning) is kept out of the terminal and in profiler-noise.log; everything else
the script prints passes through untouched; -v passes the noise too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsbridge.collect.noise import NoiseFilter, is_noise

from conftest import ROOT, run_nsbridge

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


SCRIPT = """
import sys, torch
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(8):
    opt.zero_grad()
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
print("script says hello")
print("script warns on stderr", file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [False, True])
def test_triage_prints_only_its_own_lines_and_the_scripts(tmp_path: Path, verbose: bool) -> None:
    script = tmp_path / "tiny.py"
    script.write_text(SCRIPT)
    run = tmp_path / "run"
    flags = ["-q", "-v"] if verbose else ["-q"]
    proc = run_nsbridge(*flags, "triage", "--out", str(run), str(script), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "script says hello" in proc.stdout and "script warns on stderr" in proc.stderr
    log = run / "profiler-noise.log"
    report = json.loads((run / "report.json").read_text())
    if verbose:     # this torch prints kineto's USDT lines on every profiled run
        assert "USDT:" in proc.stderr
        assert not log.exists() and report["files"]["profiler_noise"] is None
        return
    assert "USDT:" not in proc.stderr + proc.stdout
    assert "CPUAllocator" not in proc.stderr + proc.stdout
    foreign = [line for line in proc.stderr.splitlines() if line.strip()
               and line != "script warns on stderr"]
    assert foreign == [], foreign
    lines = log.read_bytes().splitlines()          # the noise is kept, not lost
    assert lines and all(is_noise(line + b"\n") for line in lines)
    assert any(line.startswith(b"USDT:") for line in lines)
    assert report["files"]["profiler_noise"] == "profiler-noise.log"
