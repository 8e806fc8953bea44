"""The test tiers' rule (tests/conftest.py): a test that starts a process is marked slow, so
that `make test-fast` (-m "not slow and not gpu") starts none. An unmarked one fails, named."""

from __future__ import annotations

import conftest
import pytest

pytest_plugins = ["pytester"]

INNER = '''
import multiprocessing
import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def triaged():
    return os.posix_spawnp("true", ["true"], dict(os.environ))   # refused before it runs


def test_runs_a_tool():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_hides_its_process():
    try:
        multiprocessing.Process(target=print).start()
    except Exception:
        pass


def test_uses_a_triage(triaged):
    pass


def test_in_process():
    assert sorted([2, 1]) == [1, 2]


@pytest.mark.slow
def test_marked():
    pass
'''


def test_unmarked_tests_that_start_processes_fail(pytester: pytest.Pytester) -> None:
    """Run in this process, with conftest's hooks as the inner session's plugin: the three
    unmarked tests that try to start a process (directly, behind an except, in a
    module-scoped fixture) fail, each named with the fix; the others pass. No process is
    started: the refusal comes before one would be."""
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider",
                                          "-W", "ignore::pytest.PytestUnknownMarkWarning",
                                          plugins=[conftest])
    result.assert_outcomes(passed=2, failed=2, errors=1)
    text = conftest.flat(result.stdout.str())
    for name, how in (("test_runs_a_tool", "Popen._execute_child"),
                      ("test_hides_its_process", "BaseProcess.start"),
                      ("test_uses_a_triage", "os.posix_spawnp")):
        assert (f"test_inner.py::{name} starts a child process ({how}, in the test or one of "
                "its fixtures) but is not marked slow: mark it @pytest.mark.slow") in text, name
