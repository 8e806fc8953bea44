"""Shared fixtures: test data paths, a CLI runner, and a real `nsbridge` subprocess runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
TORCH_DATA = DATA / "torch"
EXAMPLES = ROOT / "examples"
SHARED_REAL = ROOT.parent / "shared" / "fixtures" / "real"


@pytest.fixture
def torch_data() -> Path:
    return TORCH_DATA


def run_nsbridge(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `nsbridge` command as a user would (python -m nsbridge ...)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "nsbridge", *args], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=timeout)


def requires_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
