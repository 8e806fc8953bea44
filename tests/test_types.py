"""mypy on the modules that type-check: the list is pyproject.toml's [tool.mypy] files, so
`mypy` run by hand at the repository root checks the same set. Skipped without mypy (it is
in the `dev` extra, so `make install` brings it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed (pip install -e '.[dev]')")


def _typed_files() -> list[str]:
    try:
        import tomllib
    except ImportError:   # Python < 3.11
        tomli = pytest.importorskip("tomli", reason="reading pyproject.toml needs tomli")
        return tomli.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]


def test_the_typed_modules_are_named_and_exist() -> None:
    files = _typed_files()
    assert len(files) >= 40 and files == sorted(set(files))
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"renamed or removed: update [tool.mypy] files: {missing}"


def test_mypy_passes_on_the_typed_modules() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"no issues found in {len(_typed_files())} source files" in proc.stdout
