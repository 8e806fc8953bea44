"""`nsbridge gate`: both sides run again in interleaved pairs, from run directories or
checkouts; the answer on stdout alone; a failed process stops it with its runs kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsbridge.errors import DiffInputError
from nsbridge.commands.interleave import order, resolve_side

from conftest import ROOT

TINY = """\
import os, torch
dtype = getattr(torch, os.environ.get("DTYPE", "float32"))
if os.environ.get("FAIL"):
    raise SystemExit(3)
model = torch.nn.Linear(96, 96).to(dtype)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(128, 96, dtype=dtype)
for _ in range(int(os.environ.get("STEPS", "14"))):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _nsbridge(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsbridge", "-q", *args], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=900)


def test_pairs_alternate_which_side_goes_first() -> None:
    assert order(3) == [(1, "base"), (1, "new"), (2, "new"), (2, "base"), (3, "base"),
                        (3, "new")]


def test_runs_of_other_arguments_or_scripts_are_refused_before_any_process(
        tmp_path: Path) -> None:
    """What only an inconclusive answer could follow is said first, with the flag that
    judges it (in this process: a process started would fail the test)."""
    import nsbridge
    from nsbridge.errors import DiffRefusedError
    from nsbridge.commands.interleave import judged_apart

    (tmp_path / "t.py").write_text(TINY)
    (tmp_path / "u.py").write_text(TINY)
    runs = {}
    for name, target, args in (("a", "t.py", ["--x", "1"]), ("b", "t.py", ["--x", "2"]),
                               ("c", "u.py", ["--x", "1"])):
        runs[name] = tmp_path / name
        runs[name].mkdir()
        (runs[name] / "manifest.json").write_text(json.dumps({
            "command": "triage", "status": "ok", "target": target, "args": args,
            "cwd": str(tmp_path)}))
    with pytest.raises(DiffRefusedError, match=r"different arguments \(--x 1 vs --x 2\).*"
                                               r"Nothing was run.*--allow args"):
        nsbridge.gate(runs["a"], runs["b"], trust=[tmp_path], out=tmp_path / "g")
    with pytest.raises(DiffRefusedError, match="different scripts.*--allow-different-target"):
        nsbridge.gate(runs["a"], runs["c"], trust=[tmp_path], out=tmp_path / "g")
    assert not (tmp_path / "g").exists()
    sides = {side: resolve_side(side, str(runs[name]), None, (), False, {}, [tmp_path], {})
             for side, name in (("base", "a"), ("new", "b"))}
    assert judged_apart(sides, ["args"]) is None
    assert judged_apart({"base": sides["base"], "new": sides["base"]}, []) is None


def test_a_run_directory_brings_its_script_arguments_folder_and_environment(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({
        "command": "triage", "status": "ok", "target": "t.py", "args": ["--x", "1"],
        "cwd": str(tmp_path),
        "module": False, "threads": 1, "env": {"OMP_NUM_THREADS": "1", "NSBRIDGE_X": "y"}}))
    side = resolve_side("base", str(run), None, (), False, {"EXTRA": "1"}, [tmp_path], {})
    assert (side.target, side.args, side.cwd, side.threads) == ("t.py", ["--x", "1"],
                                                                tmp_path, 1)
    assert side.env == {"OMP_NUM_THREADS": "1", "NSBRIDGE_X": "y", "EXTRA": "1"}
    with pytest.raises(DiffInputError, match="brings its own script|runs its own script"):
        resolve_side("base", str(run), "t.py", (), False, {})


def test_a_checkout_runs_the_script_inside_it_first_on_pythonpath(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "t.py").write_text("")
    side = resolve_side("new", str(tmp_path), "bench/t.py", ["-n", "2"], False, {})
    assert side.cwd == tmp_path.resolve() and side.target == "bench/t.py"
    assert side.env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path.resolve())
    with pytest.raises(DiffInputError, match="name the script"):
        resolve_side("new", str(tmp_path), None, (), False, {})
    with pytest.raises(DiffInputError, match="has no missing.py"):
        resolve_side("new", str(tmp_path), "missing.py", (), False, {})
    with pytest.raises(DiffInputError, match="neither a run directory"):
        resolve_side("new", str(tmp_path / "nowhere"), "t.py", (), False, {})


@pytest.mark.slow
def test_a_run_made_at_another_commit_is_rerun_with_a_note(tmp_path: Path) -> None:
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True,  # noqa: E731
                                    capture_output=True)
    git("init", "-q")
    (tmp_path / "t.py").write_text("")
    git("add", "t.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({
        "command": "triage", "status": "ok", "target": "t.py", "args": [], "cwd": str(tmp_path),
        "git": {"commit": "0" * 40, "dirty": False}}))
    side = resolve_side("base", str(run), None, (), False, {}, [tmp_path])
    assert side.notes and "now at" in side.notes[0] and "0" * 12 in side.notes[0]


@pytest.mark.slow
def test_a_dtype_switch_fails_the_gate_and_stdout_holds_only_the_answer(tmp_path: Path) -> None:
    (tmp_path / "tiny.py").write_text(TINY + "print('the script talks')\n")
    out = tmp_path / "gate"
    proc = _nsbridge("gate", "--processes", "2", "--max-processes", "2", "--steps", "6",
                     "--format", "json",
                     "--out", str(out), "--new-env", "DTYPE=float64", str(tmp_path),
                     str(tmp_path), "tiny.py", cwd=tmp_path)
    # never a pass: a regression, or (two pairs on a busy machine: a float64 matmul read -13%
    # with its interval -100%..>+999% beside two CPU hogs) other work the pairs cannot size
    assert proc.returncode in (1, 4), proc.stdout + proc.stderr
    result = json.loads(proc.stdout)            # nothing else on stdout
    assert "the script talks" in proc.stderr
    # the matmuls are named as other work (float64) whatever their timing
    ops = {r["op"]: r for r in result["ops"]}
    matmuls = [ops[n] for n in ("aten::addmm", "aten::mm") if n in ops]
    assert matmuls and all(r["basis"] == "dtype" for r in matmuls)
    assert all("float64" in r["work"] for r in matmuls)
    dtype_regressions = [r for r in result["regressions"] if r["basis"] == "dtype"]
    if proc.returncode == 1:
        assert dtype_regressions and all("float64" in r["detail"] for r in dtype_regressions)
    else:
        assert not dtype_regressions and result["advice"]
        assert any("now runs in float64 (was float32): its time" in reason
                   for reason in result["reasons"]), result["reasons"]
    assert result["gate"]["order"] == ["base-01", "new-01", "new-02", "base-02"]
    assert result["gate"]["threads"] == 1 and result["mode"] == "interleaved"
    for run in result["gate"]["order"]:
        report = json.loads((out / run / "report.json").read_text())
        assert report["machine"]["threads"]["intra_op"] == 1
        assert report["machine"]["threads"]["requested"] == 1
    assert (out / "gate.json").is_file()
    assert ("REGRESSED:" if proc.returncode == 1 else "INCONCLUSIVE") in (out / "gate.md").read_text()


@pytest.mark.slow
def test_a_run_gated_against_itself_never_fails(tmp_path: Path) -> None:
    (tmp_path / "tiny.py").write_text(TINY)
    run = tmp_path / "runs" / "x"
    made = _nsbridge("triage", "--threads", "1", "--out", str(run), "tiny.py", cwd=tmp_path,
                     env={"NSBRIDGE_NOTE": "kept", "STEPS": "40"})
    assert made.returncode == 0, made.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["threads"] == 1 and manifest["env"]["NSBRIDGE_NOTE"] == "kept"
    assert "STEPS" not in manifest["env"]      # only what changes how torch runs is kept
    proc = _nsbridge("gate", "--processes", "2", "--max-processes", "2", "--steps", "10",
                     str(run), str(run),
                     cwd=tmp_path, env={"STEPS": "40"})
    assert proc.returncode in (0, 4), proc.stdout + proc.stderr
    if proc.returncode == 0:   # a PASS says what it excluded: a change beyond ±X%, or, with
        # an interval wider than the threshold but wholly under it, a slowdown beyond +H%
        assert ("Outcome: PASS (exit 0): no change beyond ±" in proc.stdout
                or "Outcome: PASS (exit 0): no slowdown beyond +" in proc.stdout
                or "Outcome: PASS (exit 0): step time -" in proc.stdout), proc.stdout
    else:
        assert "What would settle it:" in proc.stdout       # more processes, or steps
        assert "--max-processes" in proc.stdout or "--steps" in proc.stdout


@pytest.mark.slow
def test_a_process_that_fails_stops_the_gate_and_keeps_its_runs(tmp_path: Path) -> None:
    (tmp_path / "tiny.py").write_text(TINY)
    out = tmp_path / "gate"
    proc = _nsbridge("gate", "--processes", "2", "--max-processes", "2", "--steps", "4",
                     "--out", str(out),
                     "--new-env", "FAIL=1", str(tmp_path), str(tmp_path), "tiny.py",
                     cwd=tmp_path)
    assert proc.returncode == 5 and proc.stdout == ""    # refused: not "slower" (1)
    assert "new process" in proc.stderr and "did not finish cleanly" in proc.stderr
    assert (out / "base-01" / "report.json").is_file() and (out / "new-01").is_dir()


def _gate_folder(folder: Path, pairs: list[tuple[dict, dict]]) -> Path:
    for i, (a, b) in enumerate(pairs, 1):
        for side, report in (("base", a), ("new", b)):
            run = folder / f"{side}-{i:02d}"
            run.mkdir(parents=True)
            (run / "report.json").write_text(json.dumps(report))
    return folder


@pytest.mark.slow
def test_rejudge_judges_an_earlier_gate_again_without_running_anything(tmp_path: Path) -> None:
    from test_paired_gate import pairs

    folder = _gate_folder(tmp_path / "gate", pairs(11, k=6, process=0.01, noise=0.01,
                                                    scale={"gatebench::busy": 1.08}))
    strict = _nsbridge("gate", "--rejudge", str(folder), "--fail-above", "5", "--format",
                       "json", cwd=tmp_path)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    result = json.loads(strict.stdout)
    assert result["gate"]["rejudged"] and result["gate"]["processes"] == 6
    assert "gatebench::busy" in [r["what"] for r in result["regressions"]]
    lenient = _nsbridge("gate", "--rejudge", str(folder), "--fail-above", "25", cwd=tmp_path)
    assert lenient.returncode == 0 and "Outcome: PASS" in lenient.stdout
    assert not list(folder.glob("gate.*"))        # the folder is only read


@pytest.mark.slow
def test_gate_usage_and_bad_input_exit_2(tmp_path: Path) -> None:
    assert _nsbridge("gate", cwd=tmp_path).returncode == 2
    both = _nsbridge("gate", "--rejudge", str(tmp_path), "a", "b", cwd=tmp_path)
    assert both.returncode == 2 and "give no BASE or NEW" in both.stderr
    empty = _nsbridge("gate", "--rejudge", str(tmp_path), cwd=tmp_path)
    assert empty.returncode == 2 and "not a gate folder" in empty.stderr
    (tmp_path / "base-01").mkdir()
    half = _nsbridge("gate", "--rejudge", str(tmp_path), cwd=tmp_path)
    assert half.returncode == 2 and "it lacks new-01" in half.stderr
    nowhere = _nsbridge("gate", str(tmp_path / "x"), str(tmp_path / "y"), "t.py", cwd=tmp_path)
    assert nowhere.returncode == 2 and "neither a run directory" in nowhere.stderr


@pytest.mark.slow
def test_a_planted_activation_is_a_memory_regression_of_its_size(tmp_path: Path) -> None:
    """examples/train_cnn.py with a 16 MiB activation saved for backward on the new side:
    `gate --fail-above-mib` records memory on both sides and names the added bytes, within 5%
    of the planted size, as activations made by aten::ones; unchanged code (its own base
    processes) passes on memory."""
    out = tmp_path / "gate"
    proc = _nsbridge("gate", "--processes", "2", "--max-processes", "2", "--steps", "4",
                     "--fail-above-mib", "4", "--format", "json", "--out", str(out),
                     "--new-env", "NSBRIDGE_EXAMPLE_EXTRA_ACTIVATION_MIB=16",
                     str(ROOT), str(ROOT), "examples/train_cnn.py", cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    memory = result["memory"]
    assert memory["status"] == "regressed" and memory["threshold_mib"] == 4
    # the peak rises by the plant and what moves with it (x + ... copies the 0.4 MiB batch;
    # where the peak falls varies by about 1 MiB between processes on a busy machine) ...
    assert 16.0 <= memory["rise_mib"] <= 16.0 * 1.15
    # ... and the bytes named as added are the plant's, within 5%
    assert memory["rises"][0]["kind"] == "activations"
    assert memory["rises"][0]["op"] == "aten::ones"
    assert memory["rises"][0]["added_mib"] == pytest.approx(16.0, rel=0.05)
    assert any(r["what"] == "peak memory" and "aten::ones" in r["detail"]
               for r in result["regressions"])
    same = _nsbridge("diff", "--fail-above-mib", "4", "--format", "json",
                     str(out / "base-01"), str(out / "base-02"), cwd=ROOT)
    assert json.loads(same.stdout)["memory"]["status"] == "pass", same.stdout + same.stderr
