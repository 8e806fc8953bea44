"""`nsbridge doctor` on a machine without nsys/ncu (PATH emptied for the command)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_doctor_without_nsys_warns_with_the_fix(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))
    env.pop("NSBRIDGE_NSYS", None)
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "doctor"], env=env,
                          capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr        # WARN lines are not failures
    assert any(l.startswith("WARN nsys: not found") for l in lines), proc.stdout
    assert any("apt-get install nsight-systems" in l for l in lines)
    assert any(l.startswith("WARN ncu: not found") for l in lines)
    assert any(l.startswith("OK   torch:") for l in lines)
    assert not any("nvtx round trip" in l for l in lines)


def test_doctor_names_the_trace_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """OK with the C scanner built; a WARN with the fix when it is missing."""
    import importlib.util

    from nsbridge.collect import doctor

    check = doctor._trace_reader_check()
    assert (check.level, check.name) == ("OK", "trace reader") and "C scanner" in check.detail
    assert "nest" not in check.detail     # the nesting is numpy's: no C sweep to name
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None
                        if name == "nsbridge.parse._scan" else real(name, *a))
    check = doctor._trace_reader_check()
    assert check.level == "WARN" and "msgspec reads every batch" in check.detail
    assert "C scanner: not built" in check.detail and "gcc" in check.fix


def test_the_package_requires_an_nvtx_every_listed_nsys_records() -> None:
    """pip install as the README says: nsys 2022.4-2023.4 drop ranges of nvtx 0.2.11+."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    wanted = [r for r in map(Requirement, requires("nsbridge") or [])
              if r.name == "nvtx" and (r.marker is None or r.marker.evaluate())]
    assert len(wanted) == 1, wanted
    admits = wanted[0].specifier
    assert admits.contains("0.2.10")
    assert admits.contains("0.2.17") == (sys.version_info >= (3, 13))  # no 0.2.10 wheel there
    assert admits.contains(version("nvtx"))            # what this environment got from it
