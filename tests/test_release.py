"""The release path: one version, the CHANGELOG, setup.py's report of a C scanner that
does not compile, and `nsbridge doctor` naming the pure-Python reader where the scanner is
missing. Building and installing the sdist and wheel themselves is .ci/dist.sh's job."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional

import pytest
from click.testing import CliRunner

import nsbridge
from nsbridge.collect import doctor

ROOT = Path(__file__).resolve().parents[1]
SCAN = "nsbridge.parse._scan"


def test_the_version_is_written_once() -> None:
    """nsbridge/__init__.py holds it; pyproject.toml reads it (statically, nsbridge not
    imported), the CHANGELOG has its section and `nsbridge --version` prints it."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "nsbridge.__version__"}
    tree = ast.parse((ROOT / "nsbridge" / "__init__.py").read_text(encoding="utf-8"))
    literal = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
               and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
               and isinstance(node.value, ast.Constant)]
    assert literal == [nsbridge.__version__], "setuptools reads __version__ as a literal"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{nsbridge.__version__}]" in changelog and "## [Unreleased]" in changelog

    from nsbridge.cli import main
    result = CliRunner().invoke(main, ["--version"], prog_name="nsbridge")
    assert result.exit_code == 0 and nsbridge.__version__ in result.output, result.output


def test_doctor_names_the_pure_python_reader_without_the_c_scanner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the scanner cannot be imported (an install without a C compiler), doctor
    warns, names the fallback in use and how to build the scanner."""
    monkeypatch.setitem(sys.modules, SCAN, None)       # `import` of it now fails
    check = doctor._trace_reader_check()
    assert (check.level, check.name) == ("WARN", "trace reader")
    assert "C scanner: not built" in check.detail, check.detail
    assert "pure-Python reader" in check.detail and "msgspec reads every batch" in check.detail
    assert re.search(r"about [\d.-]+x", check.detail), "says how much slower"
    assert check.fix and "gcc python3-dev" in check.fix and "--no-cache-dir" in check.fix


def test_doctor_names_only_the_c_scanner() -> None:
    """The scanner is nsbridge's one C extension: the nesting is numpy's alone (a C
    nesting sweep saved 32 ms of a 0.97 s analysis at 1M events and was removed), so
    doctor neither checks for nor names it."""
    check = doctor._trace_reader_check()
    assert check.level == "OK", check.detail
    assert check.detail == "C scanner (msgspec for batches it declines)"
    assert "nest" not in check.detail


def test_doctor_names_an_extension_that_is_there_but_does_not_load(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A .so for another Python or a newer glibc: its file is found, its import fails, and
    the reader falls back as if it were missing."""
    real = doctor.importlib.import_module

    def refuse(name: str, package: Optional[str] = None) -> ModuleType:
        if name == SCAN:
            raise ImportError("_scan.so: undefined symbol: PyFoo_Bar")
        return real(name, package)

    monkeypatch.setattr(doctor.importlib, "import_module", refuse)
    check = doctor._trace_reader_check()
    assert check.level == "WARN"
    assert "C scanner: built but does not load (_scan.so: undefined symbol" in check.detail
    assert "pure-Python reader" in check.detail


# a process in which the scanner cannot be imported, as after an install without a C
# compiler: the reader really falls back, and doctor says so
WITHOUT_C = f"""
import importlib.abc, sys
class NotBuilt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == {SCAN!r}:
            raise ImportError(name + " was not built")
sys.meta_path.insert(0, NotBuilt())
from nsbridge.collect.doctor import _trace_reader_check
from nsbridge.parse._stream import native_scanner
check = _trace_reader_check()
print(native_scanner(), check.level)
print(check.detail)
"""


@pytest.mark.slow
def test_doctor_and_the_reader_agree_in_a_process_without_the_scanner() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_C], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    state, detail = done.stdout.splitlines()[:2]
    assert state == "False WARN"
    assert "C scanner: not built" in detail and "pure-Python reader" in detail


@pytest.mark.slow
@pytest.mark.parametrize("cc, why", [("/bin/false", "/bin/false failed"),
                                     ("/nonexistent/cc", "no C compiler: /nonexistent/cc")])
def test_setup_says_which_extension_did_not_compile(tmp_path: Path, cc: str, why: str) -> None:
    """setup.py's build_ext with a compiler that fails or is missing: the build succeeds
    without the scanner and its output (pip -v, python -m build) and its warnings (pip
    26.3+ on a local folder) say what was not built, the fallback, and how to build it."""
    pytest.importorskip("setuptools")
    env = dict(os.environ, CC=cc)
    done = subprocess.run([sys.executable, "-W", "always", "setup.py", "-q", "build_ext",
                           "--build-lib", str(tmp_path / "lib"),
                           "--build-temp", str(tmp_path / "temp")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said = done.stderr
    assert "the C trace scanner (nsbridge/parse/_scan.c) was not built" in said, said
    assert "_nest" not in said, "the scanner is the one extension setup.py builds"
    assert why in said and "msgspec reads every trace batch" in said
    assert "NsbridgeBuildWarning" in said, "a Python warning too: what pip passes on"
    assert "nsbridge doctor" in said and "apt install gcc python3-dev" in said
    assert not list(tmp_path.rglob("*.so"))
