"""`nsbridge diff` on runs it cannot compare: refused with exit 1 and one paragraph naming
the side, never a traceback, never a pass, whatever --inconclusive says.

Every case starts from a real run directory (`nsbridge analyze` of a recorded H200 trace)
and mutates a copy of it, the way a crashed, unfinished, foreign or edited run looks.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner, Result

import nsbridge
from nsbridge.cli import main
from nsbridge.errors import DiffRefusedError, RunDirError
from nsbridge.report.render.diff_render import render_diff
from nsbridge.report.document.escape import md_cell, terminal
from nsbridge.report.document.wording import is_autograd_wrapper

from conftest import TORCH_DATA, run_nsbridge

Mutation = Callable[[dict[str, Any]], Any]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory nsbridge wrote: manifest.json, report.json (status ok), report.md."""
    out = tmp_path_factory.mktemp("real") / "base"
    nsbridge.analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz"], out=out)
    return out


@pytest.fixture(autouse=True)
def _keep_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI turns SIGTERM into an exception; not in the test process."""
    monkeypatch.setattr("nsbridge.errors.stop_on_sigterm", lambda: None)


def _copy(run: Path, where: Path, mutate: Mutation) -> Path:
    """A copy of ``run`` whose report.json is ``mutate`` of the original report."""
    shutil.copytree(run, where)
    report = json.loads((where / "report.json").read_text())
    (where / "report.json").write_text(json.dumps(mutate(report)))
    return where


def _with(**changes: Any) -> Mutation:
    return lambda report: {**report, **changes}


def _op0(**changes: Any) -> Mutation:
    return lambda report: {**report, "ops": [{**report["ops"][0], **changes},
                                             *report["ops"][1:]]}


def _without(key: str) -> Mutation:
    return lambda report: {k: v for k, v in report.items() if k != key}


def _diff(*args: Any) -> Result:
    return CliRunner().invoke(main, ["diff", *map(str, args)])


def _refused(result: Result, *phrases: str) -> None:
    """Exit 5 with the refusal paragraph on stderr, nothing compared on stdout."""
    assert result.exit_code == 5, result.output
    assert result.stderr.startswith("nsbridge: error: diff refused, nothing was compared:")
    assert result.stdout == "" and "Traceback" not in result.output
    assert "None" not in result.output and "nan" not in result.output
    for phrase in phrases:
        assert phrase in result.stderr, (phrase, result.stderr)


BROKEN = {
    "failed": (_with(status="failed", error={"type": "ChildDied", "message": "the profiled "
                                             "process ended with status 3 (os._exit)"}),
               ["did not finish cleanly (status 'failed': ChildDied", "its own error is in"]),
    "syntax error": (_with(status="failed", ops=[], steps=None, verdict=None,
                           error={"type": "SyntaxError", "message": "invalid syntax"}),
                     ["status 'failed': SyntaxError: invalid syntax"]),
    "running": (_with(status="running", ops=[], steps=None, verdict=None, ranked_by=None),
                ["still running, or was cut off", "(status 'running')"]),
    "terminated": (_with(status="terminated"), ["status 'terminated'"]),
    "timeout": (_with(status="timeout"), ["status 'timeout'"]),
    "interrupted": (_with(status="interrupted"), ["status 'interrupted'"]),
    "no ops": (_with(ops=[]), ["has no ops to compare"]),
    "no op time": (lambda r: {**r, "ops": [{**op, "device_self_us": 0.0} for op in r["ops"]]},
                   ["measured no time in any op"]),
    "no steps": (_with(steps={"count": 0}), ["has no measured steps"]),
    "no torch pass": (_with(ranked_by=None), ["has no torch.profiler op times"]),
    "window without steps": (_with(window={"kind": "trace", "seconds": 5.0}),
                             ["has no training steps"]),
    "schema 0": (_with(schema_version=0), ["with schema_version 0; this nsbridge reads "
                                           "schema_version 1"]),
    "schema 2": (_with(schema_version=2), ["schema_version 2"]),
    "schema missing": (_without("schema_version"), ["with no schema_version"]),
    "schema as text": (_with(schema_version="1"), ['schema_version "1"']),
    "a list": (lambda r: [r], ["it is a list, not an object"]),
    "ops not a list": (_with(ops="x"), ['ops is "x", not a list']),
    "only ops": (lambda r: {"ops": "x"}, ["with no schema_version"]),
    "op without name": (lambda r: {**r, "ops": [{k: v for k, v in r["ops"][0].items()
                                                 if k != "name"}]}, ["ops[0].name is missing"]),
    "time as text": (_op0(device_self_us="419.674"),
                     ['ops[0].device_self_us is "419.674", not a number']),
    "calls as text": (_op0(calls="9"), ['ops[0].calls is "9", not a number']),
    "NaN time": (_op0(cpu_self_us=float("nan")), ["ops[0].cpu_self_us is NaN"]),
    "samples as text": (_op0(per_step_us="1,2,3"), ["ops[0].per_step_us is"]),
    "step wall as text": (lambda r: {**r, "steps": {**r["steps"], "per_step": [
        {**r["steps"]["per_step"][0], "wall_ms": "8.1"}]}},
                          ['steps.per_step[0].wall_ms is "8.1", not a number of 0 or more']),
    "steps a list": (_with(steps=[1, 2]), ["steps is a list, not an object"]),
    "status a number": (_with(status=0), ["status is 0, not a string"]),
    "error a string": (_with(status="failed", error="boom"), ["error is \"boom\""]),
    "verdict a string": (_with(verdict="cpu-bound"), ["verdict is \"cpu-bound\""]),
    "machine of another shape": (_with(machine={"load": {"before": "high"}}),
                                 ['machine.load.before is "high", not a list']),
    "sync point without kind": (_with(sync_points=[{"file": "t.py", "line": 3}]),
                                ["sync_points[0].kind is missing"]),
    "runs not matching steps": (lambda r: {**r, "steps": {**r["steps"], "unprofiled_ms": [
        5.0, 5.1, 5.2], "unprofiled_runs": [1, 2]}}, ["steps.unprofiled_runs has 2 entries"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
@pytest.mark.parametrize("side", ["base", "new"])
def test_a_run_diff_cannot_compare_is_refused_naming_the_side(real_run: Path, tmp_path: Path,
                                                              case: str, side: str) -> None:
    mutate, phrases = BROKEN[case]
    broken = _copy(real_run, tmp_path / "broken", mutate)
    pair = (broken, real_run) if side == "base" else (real_run, broken)
    _refused(_diff(*pair), f"the {side} run ({broken})", *phrases)


@pytest.mark.parametrize("case", ["failed", "running", "schema missing", "a list", "no ops"])
@pytest.mark.parametrize("mapping", ["pass", "fail", "exit"])
def test_no_inconclusive_mapping_turns_a_refusal_into_a_pass(real_run: Path, tmp_path: Path,
                                                             case: str, mapping: str) -> None:
    broken = _copy(real_run, tmp_path / "broken", BROKEN[case][0])
    _refused(_diff(real_run, broken, "--inconclusive", mapping, "--allow-different-target",
                   "--allow", "args,torch,gpu,threads,cores"))


def test_both_sides_broken_are_named_in_one_paragraph(real_run: Path, tmp_path: Path) -> None:
    failed = _copy(real_run, tmp_path / "failed", BROKEN["failed"][0])
    running = _copy(real_run, tmp_path / "running", BROKEN["running"][0])
    result = _diff(failed, running)
    _refused(result, f"the base run ({failed}) did not finish", f"the new run ({running}) is "
             "still running", "Rerun the base side", "rerun the new side")
    assert result.stderr.count("\n") == 1


def test_a_fix_both_sides_need_is_said_once(real_run: Path, tmp_path: Path) -> None:
    old_a = _copy(real_run, tmp_path / "a", BROKEN["schema 2"][0])
    old_b = _copy(real_run, tmp_path / "b", BROKEN["schema 2"][0])
    result = _diff(old_a, old_b)
    _refused(result, f"the base run ({old_a}) has a report.json with schema_version 2",
             f"the new run ({old_b}) has a report.json with schema_version 2")
    assert result.stderr.count("Make both runs with the same nsbridge version.") == 1


def test_the_failed_side_points_to_its_own_report(real_run: Path, tmp_path: Path) -> None:
    failed = _copy(real_run, tmp_path / "new", BROKEN["failed"][0])
    _refused(_diff(real_run, failed), f"its own error is in {failed / 'report.md'}")
    _refused(_diff(real_run, failed / "report.json"), f"its own error is in {failed / 'report.md'}")


def test_a_run_directory_without_its_report_is_refused(real_run: Path, tmp_path: Path) -> None:
    """Still being written, or cut off: the manifest is there, report.json is not (or is
    cut short)."""
    missing = _copy(real_run, tmp_path / "missing", lambda r: r)
    (missing / "report.json").unlink()
    _refused(_diff(real_run, missing), f"the new run ({missing}) has no readable report.json")
    cut = _copy(real_run, tmp_path / "cut", lambda r: r)
    (cut / "report.json").write_text((cut / "report.json").read_text()[:500])
    _refused(_diff(cut, real_run, "--inconclusive", "pass"), f"the base run ({cut}) has no "
             "readable report.json")


def test_what_is_not_a_run_at_all_stays_bad_input(real_run: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not json")
    for path in (tmp_path / "nowhere", tmp_path, tmp_path / "notes.txt"):
        result = _diff(real_run, path, "--inconclusive", "pass")
        assert result.exit_code == 2 and "neither an nsbridge run directory" in result.stderr
        assert "Traceback" not in result.output


def test_different_scripts_are_refused_unless_meant(real_run: Path, tmp_path: Path) -> None:
    base = _copy(real_run, tmp_path / "base", _with(target="train.py --lr 1"))
    other = _copy(real_run, tmp_path / "other", _with(target="other.py --lr 1"))
    _refused(_diff(base, other, "--inconclusive", "pass"),
             f"the base run ({base}) and the new run ({other}) profiled different targets "
             "(train.py vs other.py)", "--allow-different-target")
    for flag in (["--allow-different-target"], ["--allow", "target"]):
        result = _diff(base, other, *flag)
        assert result.exit_code == 0 and "PASS:" in result.stdout, result.output
    same = _copy(real_run, tmp_path / "same", _with(target="./train.py --lr 1"))
    assert _diff(base, same).exit_code == 0


def test_other_differences_stay_inconclusive_and_can_be_mapped(real_run: Path,
                                                                tmp_path: Path) -> None:
    """Arguments (like torch, GPU, threads, cores) are a difference a user may mean: exit 4,
    which --inconclusive may map; only refusals are beyond it."""
    base = _copy(real_run, tmp_path / "base", _with(target="train.py --lr 1"))
    other = _copy(real_run, tmp_path / "args", _with(target="train.py --lr 2"))
    result = _diff(base, other)
    assert result.exit_code == 4 and "different arguments" in result.stdout
    assert _diff(base, other, "--inconclusive", "pass").exit_code == 0
    assert _diff(base, other, "--allow", "args").exit_code == 0


def test_runs_timed_on_different_devices_are_refused(real_run: Path, tmp_path: Path) -> None:
    cpu = _copy(real_run, tmp_path / "cpu", _with(ranked_by="cpu_self_us"))
    _refused(_diff(real_run, cpu, "--inconclusive", "pass"), "were timed differently")


def test_the_library_raises_the_refusal(real_run: Path, tmp_path: Path) -> None:
    broken = _copy(real_run, tmp_path / "broken", BROKEN["running"][0])
    with pytest.raises(DiffRefusedError) as caught:
        nsbridge.diff(real_run, broken)
    assert caught.value.exit_code == 5 and "still running" in str(caught.value)


def test_a_base_without_a_verdict_prints_none_not_python_none(real_run: Path,
                                                               tmp_path: Path) -> None:
    base = _copy(real_run, tmp_path / "base", _with(verdict=None))
    for fmt in ("text", "md"):
        result = _diff(base, real_run, "--format", fmt)
        assert result.exit_code == 0, result.output
        assert "Verdict: none -> cpu-bound (changed)" in result.stdout
        assert "None" not in result.output and "nan" not in result.output


EVIL = "a|b<script>`x`y"


def _with_op(name: str, us: float) -> Mutation:
    def mutate(report: dict[str, Any]) -> dict[str, Any]:
        op = {**report["ops"][0], "name": name, "device_self_us": us,
              "per_step_us": [us / 3] * 3, "shape_work": []}
        return {**report, "ops": [*report["ops"], op]}
    return mutate


def test_markdown_keeps_its_table_whatever_the_op_is_called(real_run: Path,
                                                            tmp_path: Path) -> None:
    from markdown_it import MarkdownIt

    new = _copy(real_run, tmp_path / "new", _with_op(EVIL, 3000.0))
    result = nsbridge.diff(real_run, new)
    assert result["outcome"] == "regression" and result["ops"][0]["op"] == EVIL
    text = render_diff(result, "md", top=len(result["ops"]))
    assert md_cell(EVIL) in text and EVIL not in text
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<script" not in html and "<code>" not in html
    rows = html.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    wrappers = [r for r in result["ops"] if is_autograd_wrapper(r["op"])]
    assert wrappers and len(rows) == len(result["ops"]) - len(wrappers)   # those left out
    assert all(row.count("<td>") == 8 for row in rows)
    assert rows[0].split("</td>")[0] == "\n<td>a|b&lt;script&gt;`x`y"
    assert "REGRESSED: a|b&lt;script&gt;`x`y (new," in html


def test_the_terminal_sees_control_characters_escaped(real_run: Path, tmp_path: Path) -> None:
    name = "aten::evil\x1b[2J\rnew\x9b"
    new = _copy(real_run, tmp_path / "new\x1b", _with_op(name, 3000.0))
    text = _diff(real_run, new).output
    assert "aten::evil\\x1b[2J\\rnew\\x9b" in text and str(tmp_path / "new\\x1b") in text
    assert not any(ch in text for ch in "\x1b\r\x9b")


def test_escape_helpers() -> None:
    assert terminal("a\x1b[31m\r\n\t\x7f\x85\u202eb") == "a\\x1b[31m\\r\\n\\t\\x7f\\x85\\u202eb"
    assert terminal("µs ± ok") == "µs ± ok"
    assert md_cell("a|b\\|c") == "a\\|b\\\\\\|c"
    assert md_cell("<b>&`_*[]~") == "&lt;b&gt;&amp;\\`\\_\\*\\[\\]\\~"
    assert md_cell("line\nbreak") == "line\\\\nbreak"


@pytest.mark.slow
def test_the_real_command_refuses_a_crashed_run(real_run: Path, tmp_path: Path) -> None:
    """End to end, as CI runs it: `python -m nsbridge diff` on a crashed new side."""
    crashed = _copy(real_run, tmp_path / "crashed", BROKEN["failed"][0])
    proc = run_nsbridge("diff", str(real_run), str(crashed), "--inconclusive", "pass",
                        "--format", "md", cwd=tmp_path)
    assert proc.returncode == 5 and proc.stdout == ""
    assert "diff refused" in proc.stderr and "Traceback" not in proc.stderr


# -- one report reader for load and diff -----------------------------------------------------
@pytest.mark.parametrize("mutate, field", [
    (_with(sync_points=None), "sync_points is missing"),
    (_op0(calls=10 ** 400), "ops[0].calls is"),
    (_op0(cpu_self_us=2 ** 64 * 1e6), "ops[0].cpu_self_us is"),
    (_op0(calls="12"), 'ops[0].calls is "12", not a number of 0 or more'),
    (_op0(kernels=[{"name": 3}]), "ops[0].kernels[0].name is 3, not a string"),
    (_with(schema_version=99), "schema_version 99"),
    (_without("ops"), "ops is missing"),
    (_with(steps={"count": 3, "per_step": {"wall_ms": 1}}), "steps.per_step is an object"),
])
def test_load_and_diff_name_the_first_wrong_field(real_run: Path, tmp_path: Path,
                                                  mutate: Mutation, field: str) -> None:
    """load and diff read report.json through one check (contract.check): the same
    field is named by both, as RunDirError / a refusal (exit 5), never a traceback."""
    bad = _copy(real_run, tmp_path / "bad", mutate)
    with pytest.raises(RunDirError, match=re.escape(field)):
        nsbridge.load(bad)
    result = _diff(real_run, bad)
    _refused(result)
    assert field in " ".join(result.stderr.split())


def test_a_run_diffed_against_itself_passes(real_run: Path) -> None:
    """One measurement on both sides has no change and no noise between them: PASS, however
    noisy its steps (3 measured steps of a real trace here), never INCONCLUSIVE."""
    result = nsbridge.diff(real_run, real_run)
    assert result["exit_code"] == 0 and result["outcome"] == "pass", result["reasons"]
    assert result["step"]["ci_pct"] == [0.0, 0.0]
    assert not result["inconclusive"]           # each op: no change, no interval either
