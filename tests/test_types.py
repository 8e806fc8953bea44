"""mypy on every module of the package (pyproject.toml's [tool.mypy] names the package, so
`mypy` run by hand at the repository root checks the same). Skipped without mypy (it is in
the `dev` extra, so `make install` brings it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.slow,    # mypy runs in a child process
              pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                 reason="mypy is not installed (pip install -e '.[dev]')")]


def test_mypy_checks_every_module_and_passes() -> None:
    modules = [*(ROOT / "nsbridge").rglob("*.py"), *(ROOT / "nsbridge").rglob("*.pyi")]
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"no issues found in {len(modules)} source files" in proc.stdout


def test_every_function_is_typed_and_every_body_checked() -> None:
    """pyproject's mypy settings: a function without annotations is an error, and its body
    is checked (mypy skips the bodies of untyped functions otherwise)."""
    import tomllib

    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    for key in ("disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs"):
        assert settings.get(key) is True, key
