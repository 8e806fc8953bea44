"""The records nsbridge writes are untrusted when read back: a real run's manifest.json and
child.json, and real rank summaries, mutated at random (seeded: every JSON type put where
any field was, keys dropped, values wrapped in lists, huge and negative numbers, NaN, deep
nesting, the text damaged) are read by their readers (`analyze RUN`, `timeline --run`'s
steps, `analyze` of a ranked folder, a gate's gate.json) into a result or refused with
nsbridge's own error, never a traceback, each within a time bound. A world_size in a
summary never drives a loop: 10**7 and 10**19 are refused at once through the CLI."""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from nsbridge.api import analyze
from nsbridge.commands.gate import _read_gate
from nsbridge.cli import main
from nsbridge.errors import NsbridgeError
from nsbridge.job.summary import read_summaries, write_summary
from nsbridge.passes.nsys_pass import measured_steps
from nsbridge.passes.torch_pass import analyse_run_dir
from nsbridge.profiles import Analysis, load_profile
from nsbridge.run import Run

from conftest import DATA
from sweeps import seeded
from test_fuzz_reports import random_path

RUN = DATA / "runs" / "triage_tiny"   # a real `nsbridge triage` of a small CPU script
CASES = 3000
CASE_S = 2.0                          # a case slower than this is a hang
DEEP = 10_000                         # nesting beyond Python's recursion limit
VALUES: list[Any] = [None, True, False, 0, -1, 1, 0.5, -0.5, 2 ** 64, 10 ** 19, 10 ** 401,
                     -(10 ** 19), "", "x", "../../outside", "/etc/passwd", [], [1, 2], ["x"],
                     [None], {}, {"a": 1}, [[[]]], "1e999", 10 ** 7, 1 << 20]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The real run, and a two-rank job folder whose summaries were made from its trace by
    job.summary (as each rank makes its own), each rank with the run's child.json."""
    base = tmp_path_factory.mktemp("records")
    run = base / "run"
    shutil.copytree(RUN, run)
    job = base / "job"
    for rank in (0, 1):
        folder = job / f"rank-{rank:02d}"
        folder.mkdir(parents=True)
        for name in ("trace.json.gz", "child.json"):
            shutil.copy(RUN / name, folder / name)
        write_summary(folder, trace=folder / "trace.json.gz", thresholds=Analysis(), rank=rank,
                      host="node0", world_size=2, status="ok", exit_code=0, error=None)
    return {"run": run, "job": job}


def mutate(record: Any, rng: random.Random) -> str:
    """``record``'s JSON text after one random damage."""
    kind = rng.choice(["value", "value", "value", "drop", "wrap", "deep", "text"])
    if kind == "text":
        text = json.dumps(record)
        at = rng.randrange(len(text))
        return rng.choice([text[:at], text[:at] + "NaN" + text[at:], "[" * DEEP,
                           text.replace("1", "1" * 400, 1), text.replace('"', "", 1),
                           json.dumps([record]), text[:at] + "-Infinity" + text[at:]])
    path = random_path(rng, record)
    if not path:
        return json.dumps(rng.choice(VALUES))
    *above, last = path
    parent = record
    for key in above:
        parent = parent[key]
    if kind == "value":
        parent[last] = rng.choice(VALUES + [float("nan"), float("inf")])
    elif kind == "drop":
        del parent[last]
    elif kind == "wrap":
        parent[last] = [parent[last]]
    else:   # as deep as the recursion limit allows a reader, and deeper
        parent[last] = "[" * DEEP + "]" * DEEP
        return json.dumps(record).replace('"' + "[" * DEEP + "]" * DEEP + '"',
                                          "[" * DEEP + "]" * DEEP)
    return json.dumps(record)


def _tamper(path: Path, case: int) -> None:
    path.write_text(mutate(json.loads(path.read_text()), random.Random(case)))


def _outcome(read: Callable[[], Any], case: int, what: str) -> str:
    """'read' or 'refused' (an NsbridgeError); anything else, or a slow case, fails."""
    started = time.monotonic()
    try:
        read()
        outcome = "read"
    except NsbridgeError:
        outcome = "refused"
    except Exception as exc:   # noqa: BLE001 - the point: nothing but nsbridge's errors
        raise AssertionError(f"case {case} ({what}): {exc!r}") from exc
    assert time.monotonic() - started < CASE_S, f"case {case} ({what}) took too long"
    return outcome


def _run_case(runs: dict[str, Path], tmp: Path, case: int, name: str) -> str:
    """A copy of the run with ``name`` tampered, read as `analyze RUN`, `timeline --run`
    and `deep --run` read it."""
    run = tmp / f"case{case}"
    shutil.copytree(runs["run"], run)
    _tamper(run / name, case)
    profile = load_profile("default")

    def read() -> None:
        analyse_run_dir(run, None, "steps")
        measured_steps(run, profile)
        Run.open(run).script()
    outcome = _outcome(read, case, name)
    shutil.rmtree(run)
    return outcome


def _job_case(runs: dict[str, Path], tmp: Path, case: int) -> str:
    """A copy of the job with one rank's summary tampered, merged again as `analyze`
    merges a ranked folder."""
    job = tmp / f"job{case}"
    shutil.copytree(runs["job"], job)
    _tamper(job / f"rank-{case % 2:02d}" / "summary.json", case)
    summaries: list[Any] = []

    def read() -> None:
        summaries.extend(read_summaries(job))
        if summaries:
            from nsbridge.distributed.triage import reduce

            reduce(job, summaries, load_profile("default"), str(job), command="analyze")
    outcome = _outcome(read, case, "summary.json")
    shutil.rmtree(job)
    return outcome


def _gate_case(tmp: Path, case: int) -> str:
    gate = {"a_label": "base", "b_label": "new", "gate": {
        "dir": str(tmp), "processes": 4, "threads": 1, "steps": 20, "order": ["base-01"],
        "wall_s": 3.5, "threads_from": "--threads", "sides": {"base": {}}, "notes": []}}
    (tmp / "gate.json").write_text(mutate(gate, random.Random(case)))
    return _outcome(lambda: _read_gate(tmp), case, "gate.json")


def _fuzz(runs: dict[str, Path], tmp: Path, cases: int, seed: int = 0) -> dict[str, set[str]]:
    """``cases`` cases, a quarter per record kind; the outcomes seen per kind."""
    quarter = cases // 4
    kinds: dict[str, Callable[[int], str]] = {
        "child.json": lambda case: _run_case(runs, tmp, case, "child.json"),
        "manifest.json": lambda case: _run_case(runs, tmp, case, "manifest.json"),
        "summary.json": lambda case: _job_case(runs, tmp, case),
        "gate.json": lambda case: _gate_case(tmp, case)}
    return {kind: {check(seed + i * quarter + case) for case in range(quarter)}
            for i, (kind, check) in enumerate(kinds.items())}


def test_mutated_records_are_read_or_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    for kind, outcomes in _fuzz(runs, tmp_path, 240).items():
        assert outcomes == {"read", "refused"}, kind    # both paths exercised


@pytest.mark.slow
def test_thousands_of_mutated_records(runs: dict[str, Path], tmp_path: Path) -> None:
    """A quarter of CASES (all of them under NSBRIDGE_FUZZ=all: about 2 minutes)."""
    _fuzz(runs, tmp_path, len(seeded(0, CASES)), seed=10_000)


@pytest.mark.parametrize("world", [10 ** 7, 10 ** 19])
def test_a_huge_world_size_is_refused_at_once(runs: dict[str, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              world: int) -> None:
    monkeypatch.setattr("nsbridge.errors.stop_on_sigterm", lambda: None)   # not in pytest
    job = tmp_path / "job"
    shutil.copytree(runs["job"], job)
    path = job / "rank-01" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "world_size": world}))
    started = time.monotonic()
    result = CliRunner().invoke(main, ["analyze", str(job), "--out", str(tmp_path / "out")],
                                prog_name="nsbridge")
    assert time.monotonic() - started < 5.0
    assert result.exit_code == 1, result.output
    assert f"world_size is {world}" in result.output and "rank-01" in result.output
    assert len(result.output) < 600 and "Traceback" not in result.output


def test_ranks_missing_on_disk_are_counted_not_listed(runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """A world_size of a million with two rank folders: 2 of 1048576 ranks, at once;
    folders named like ranks but not (rank-x, rank-, twenty digits) are not ranks."""
    job = tmp_path / "job"
    shutil.copytree(runs["job"], job)
    for name in ("rank-x", "rank-", "rank-99999999999999999999", "rank-1"):
        (job / name).mkdir()
    path = job / "rank-00" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "world_size": 1 << 20}))
    started = time.monotonic()
    report = analyze([job], out=tmp_path / "out").report
    assert time.monotonic() - started < 5.0
    assert [r["rank"] for r in report["distributed"]["ranks"]] == [0, 1]
    assert any("2 of 1048576 ranks present" in note for note in report["notes"])


def test_a_summary_in_another_ranks_folder_is_refused(runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(runs["job"], job)
    path = job / "rank-01" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "rank": 0}))
    with pytest.raises(NsbridgeError, match="summary of rank 0, in the folder of rank 1"):
        read_summaries(job)
