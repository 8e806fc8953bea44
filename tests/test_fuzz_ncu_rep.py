"""Nsight Compute reports (`.ncu-rep`) are untrusted input: real reports damaged at random
(seeded: bits flipped, bytes zeroed or set, a chunk repeated, the file cut short) give a
report or nsbridge's own error through `nsbridge analyze`, never a traceback and never the
end of nsbridge: NVIDIA's reader aborts on some damaged files, so it runs in a child.
Fast tier a few hundred cases, slow tier hundreds more, `make fuzz` thousands
(tests/sweeps.py)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

import nsbridge

from conftest import ROOT, analyzed_or_refused
from sweeps import seeded

SHARED = ROOT.parent / "shared" / "fixtures"
SOURCES = [path for path in (SHARED / "gpu-h200" / "ncu" / "matmul_bf16_full.ncu-rep",
                             SHARED / "real" / "ncar-gpu-workshop" / "MW_Baseline.ncu-rep")
           if path.is_file()]
pytestmark = [pytest.mark.skipif(not SOURCES, reason="../shared/fixtures has no .ncu-rep"),
              pytest.mark.skipif(not __import__("importlib").util.find_spec("ncu_report"),
                                 reason="the ncu-report package is not installed")]
_BYTES: dict[Path, bytes] = {}


def _source(case: int) -> tuple[Path, bytes]:
    path = SOURCES[case % len(SOURCES)]
    if path not in _BYTES:
        _BYTES[path] = path.read_bytes()
    return path, _BYTES[path]


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One random damage: most keep the file's framing so the reader gets far into it."""
    out = bytearray(data)
    kind = rng.choice(["flip", "flip", "flip", "zero", "ones", "repeat", "cut"])
    at = rng.randrange(len(out))
    if kind == "flip":
        for _ in range(rng.choice([1, 1, 2, 4, 16])):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind in ("zero", "ones"):
        size = min(rng.randint(1, 64), len(out) - at)
        out[at:at + size] = (b"\x00" if kind == "zero" else b"\xff") * size
    elif kind == "repeat":
        start = rng.randrange(len(out))
        out[at:at] = out[start:start + rng.randint(1, 200)]
    else:
        del out[at:]
    return bytes(out), kind


def _check(tmp: Path, case: int) -> None:
    rng = random.Random(case)
    source, data = _source(case)
    data, kind = mutate(data, rng)
    path = tmp / f"case{case}.ncu-rep"
    path.write_bytes(data)
    report = analyzed_or_refused(path, tmp / f"run{case}", f"case {case} ({source.name}: {kind})")
    if report is None:
        return
    for family in report["ncu"].get("families") or []:
        duration = family.get("duration_ns")
        assert duration is None or not duration < 0, (case, kind, family["kernel"])
    path.unlink()


@pytest.mark.slow      # an .ncu-rep is read in a child process
def test_an_undamaged_report_still_reads_in_full(tmp_path: Path) -> None:
    """The child process changes nothing in what is read: every launch, its duration."""
    source, _ = _source(0)
    report = nsbridge.analyze([source], out=tmp_path / "run").report
    families = report["ncu"]["families"]
    assert families and all(math.isfinite(f["duration_ns"]) and f["duration_ns"] > 0
                            for f in families)
    assert not any("warned" in note for note in report["ncu"].get("notes", []))


@pytest.mark.slow      # an .ncu-rep is read in a child process
@pytest.mark.parametrize("block", range(3))
def test_damaged_ncu_reports_give_a_report_or_a_clear_error(tmp_path: Path, block: int) -> None:
    for case in range(block * 70, block * 70 + 70):
        _check(tmp_path, case)


@pytest.mark.slow
def test_thousands_of_damaged_ncu_reports(tmp_path: Path) -> None:
    for case in seeded(1000, 2000, share=10):   # a child process each
        _check(tmp_path, case)
