"""Fuzzing: mutated real traces through `nsbridge.analyze` and `nsbridge.load`.

Over a fixed budget of seeded cases (NSBRIDGE_FUZZ_CASES, default 400, 1,000 under
NSBRIDGE_FUZZ=all; run 20,000 locally before a release) the only exceptions that may escape are nsbridge's documented errors
(NsbridgeError), and no case may hang. The fast tier runs the first FAST_CASES of them, the
slow tier (`-m slow`) the rest. A case that fails is replayed from its number alone
(`NSBRIDGE_FUZZ_START=N NSBRIDGE_FUZZ_CASES=1 pytest -m slow -k fuzz_mutated`); keep its bytes
in tests/data/fuzz/ as case-N.json.gz, where test_fuzz_reproducers replays every case ever
found.
"""

from __future__ import annotations

import gzip
import os
import random
import signal
import traceback
from pathlib import Path

import pytest

import nsbridge
from nsbridge.errors import NsbridgeError

from fuzz_traces import mutate
from sweeps import EVERY_CASE

DATA = Path(__file__).parent / "data"
SEEDS = [DATA / "torch" / name for name in (
    "inference_rank_1_2022-10_libkineto.json.gz",   # 2022 libkineto: capitalised categories
    "triton_example_a100_2024-10.json.gz",          # driver-API (Triton) launches
    "mi250_rocm6.2_2024-12.json.gz",                # ROCm, ProfilerStep ranges
    "h200/input_bound_h200.json.gz")]               # nsbridge's own H200 capture, 6 steps
REPRODUCERS = sorted((DATA / "fuzz").glob("case-*.json.gz"))
HANG_S = 60
FAST_CASES = 100    # the fast tier's share of the budget: about 6 s of make test-fast


def _analyze_and_load(trace: Path, out: Path) -> None:
    """What a user does with a trace: analyse it, then read the run back."""
    try:
        nsbridge.analyze([trace], out=out)
        nsbridge.load(out)
    except NsbridgeError:
        pass    # a documented, one-paragraph failure is a correct answer to bad input


def _on_hang(signum: int, frame: object) -> None:
    raise TimeoutError(f"a case ran for more than {HANG_S} s")


def test_fuzz_mutated_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The budget's first FAST_CASES cases."""
    _fuzz(range(FAST_CASES), tmp_path, capsys)


@pytest.mark.slow
def test_fuzz_mutated_traces_to_the_budget(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The budget's other cases, or the NSBRIDGE_FUZZ_CASES from NSBRIDGE_FUZZ_START on."""
    cases = int(os.environ.get("NSBRIDGE_FUZZ_CASES", "1000" if EVERY_CASE else "400"))
    start = os.environ.get("NSBRIDGE_FUZZ_START")
    _fuzz(range(FAST_CASES, cases) if start is None else range(int(start), int(start) + cases),
          tmp_path, capsys)


def _fuzz(numbers: range, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seeds = [gzip.open(p).read() for p in SEEDS]
    start, cases = numbers.start, len(numbers)
    escapes: dict[str, list[int]] = {}
    previous = signal.signal(signal.SIGALRM, _on_hang)
    try:
        for case in numbers:
            folder = tmp_path / str(case)
            folder.mkdir()
            trace = folder / "trace.json"
            trace.write_bytes(mutate(seeds[case % len(seeds)], random.Random(case)))
            signal.alarm(HANG_S)
            try:
                _analyze_and_load(trace, folder / "run")
            except Exception as exc:  # noqa: BLE001 - every escape is recorded
                where = traceback.extract_tb(exc.__traceback__)[-1]
                key = f"{type(exc).__name__} at {where.filename}:{where.lineno}: {exc}"[:300]
                escapes.setdefault(key, []).append(case)
            finally:
                signal.alarm(0)
            if not escapes:
                _remove(folder)
    finally:
        signal.signal(signal.SIGALRM, previous)
    summary = (f"fuzz: {cases:,} mutated traces (cases {start}-{start + cases - 1}), "
               f"{sum(map(len, escapes.values()))} escapes")
    with capsys.disabled():
        print(f"\n{summary}")
    assert not escapes, summary + "\n" + "\n".join(
        f"{key}\n    cases {cases_[:10]}" for key, cases_ in escapes.items())


@pytest.mark.parametrize("case", REPRODUCERS, ids=lambda p: p.name.split(".")[0])
def test_fuzz_reproducers(case: Path, tmp_path: Path) -> None:
    """Every trace the fuzzer ever broke nsbridge with, replayed as it was found."""
    trace = tmp_path / "trace.json"
    trace.write_bytes(gzip.open(case).read())
    _analyze_and_load(trace, tmp_path / "run")


def _remove(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    folder.rmdir()
