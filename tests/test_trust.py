"""A run directory is code (nsbridge.commands.trust): `gate` and `deep --run` run a
manifest's script only from a trusted folder, never a module it names, and of its
environment only torch's and threading's variables; what each side runs is shown before
anything runs.

The tests not marked slow call the library in this process, where tests/conftest.py fails
any test that starts a process: a refusal there is proof that nothing ran, not even git.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nsbridge
from nsbridge.api import analyze
from nsbridge.errors import UntrustedRunError
from nsbridge.commands.interleave import describe, resolve_side
from nsbridge.commands.trust import may_apply

from conftest import ROOT, TORCH_DATA
from test_gate import TINY

MARKER = "marker"
EVIL = f"open({MARKER!r}, 'w').write('ran')\n"


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """A trusted folder ``home`` with a run directory in it, and ``outside`` with a script
    that would leave a marker file."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    for folder in (home, outside):
        folder.mkdir()
        (folder / "t.py").write_text(EVIL)
    (home / "run").mkdir()
    return {"home": home, "outside": outside, "run": home / "run"}


def _manifest(run: Path, **fields: object) -> str:
    manifest = {"command": "triage", "status": "ok", "target": "t.py", "args": [],
                "cwd": str(run.parent),
                "module": False, "env": {}, **fields}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return str(run)


@pytest.mark.parametrize("fields, why", [
    ({"cwd": "OUTSIDE"}, "names the folder .*outside, outside the trusted folders"),
    ({"target": "../outside/t.py"}, "names the script .*outside/t.py, outside the trusted"),
    ({"target": "OUTSIDE/t.py"}, "names the script .*outside/t.py, outside the trusted"),
    ({"env": {"LD_PRELOAD": "/tmp/evil.so", "OMP_NUM_THREADS": "1"}}, "sets LD_PRELOAD,"),
    ({"env": {"PYTHONPATH": "OUTSIDE"}}, "sets PYTHONPATH,"),
    ({"env": {"CUDA_INJECTION64_PATH": "/x.so", "NCCL_NET_PLUGIN": "x"}},
     "sets CUDA_INJECTION64_PATH, NCCL_NET_PLUGIN,"),
    ({"module": True, "target": "pip"}, "the module 'pip' .*never takes from a run"),
])
def test_a_tampered_run_directory_runs_nothing_and_says_why(place: dict[str, Path],
                                                           fields: dict, why: str) -> None:
    fields = json.loads(json.dumps(fields).replace("OUTSIDE", str(place["outside"])))
    run = _manifest(place["run"], **fields)
    with pytest.raises(UntrustedRunError, match=why) as refused:
        nsbridge.gate(run, run, trust=[place["home"]], environ={})
    assert "Nothing was run" in str(refused.value) and refused.value.exit_code == 5
    assert not (place["home"] / MARKER).exists() and not (place["outside"] / MARKER).exists()


def test_a_symlink_out_of_the_trusted_folder_is_followed_and_refused(
        place: dict[str, Path]) -> None:
    (place["home"] / "link.py").symlink_to(place["outside"] / "t.py")
    run = _manifest(place["run"], target="link.py")
    with pytest.raises(UntrustedRunError, match="outside/t.py, outside the trusted"):
        resolve_side("base", run, None, (), False, {}, [place["home"]], {})
    (place["home"] / "link").symlink_to(place["outside"])
    run = _manifest(place["run"], cwd=str(place["home"] / "link"))
    with pytest.raises(UntrustedRunError, match="names the folder .*outside,"):
        resolve_side("base", run, None, (), False, {}, [place["home"]], {})


def test_trusting_the_folder_lets_its_script_run_and_the_plan_says_what_is_set(
        place: dict[str, Path]) -> None:
    run = _manifest(place["run"], cwd=str(place["outside"]), args=["--n", "a b"],
                    env={"OMP_NUM_THREADS": "2", "PATH": "/usr/bin", "NSBRIDGE_X": "y"},
                    threads=2)
    with pytest.raises(UntrustedRunError):
        resolve_side("base", run, None, (), False, {}, None, {})    # default: the cwd
    side = resolve_side("base", run, None, (), False, {"NSBRIDGE_X": "z", "A": "1"},
                        [place["home"], place["outside"]], {"PATH": "/usr/bin"})
    assert side.cwd == place["outside"] and side.target == "t.py" and side.threads == 2
    # PATH is already what the user has: nothing applied; the option wins over the manifest
    assert side.env == {"OMP_NUM_THREADS": "2", "NSBRIDGE_X": "z", "A": "1"}
    shown = describe({"base": side}, None, "a GPU is visible")
    assert f"base ({run}): python t.py --n 'a b'\n    in {place['outside']}\n" in shown
    assert f"OMP_NUM_THREADS=2  ({run}'s manifest)" in shown
    assert "NSBRIDGE_X=z  (--base-env)" in shown and "PATH" not in shown
    assert shown.endswith("threads: as each script sets them (a GPU is visible)")
    shown = describe({"base": side}, 1, "--threads")     # the gate's threads are set last
    assert "OMP_NUM_THREADS=1  (the gate's threads)" in shown and "=2" not in shown


def test_only_torch_and_threading_variables_may_come_from_a_manifest() -> None:
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF",
                 "CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG", "NSBRIDGE_NOTE",
                 "PYTHONHASHSEED"):
        assert may_apply(name), name
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PATH", "PYTHONSTARTUP",
                 "CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "OMP_TOOL_LIBRARIES",
                 "TORCH_HOME", "TORCHINDUCTOR_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
                 "NCCL_TOPO_FILE", "NSBRIDGE_NSYS", "NSBRIDGE_NCU", "NSBRIDGE_UMASK"):
        assert not may_apply(name), name


@pytest.mark.parametrize("script", ["../../outside/t.py", "OUTSIDE/t.py", "link.py"])
def test_a_checkouts_script_must_lie_inside_the_checkout(place: dict[str, Path],
                                                        script: str) -> None:
    checkout = place["home"] / "a"
    checkout.mkdir()
    (checkout / "link.py").symlink_to(place["outside"] / "t.py")
    script = script.replace("OUTSIDE", str(place["outside"]))
    with pytest.raises(UntrustedRunError, match="outside the checkout"):
        nsbridge.gate(checkout, checkout, script, trust=[place["home"]], environ={})
    (checkout / "bench").mkdir()
    (checkout / "bench" / "t.py").write_text("")
    assert resolve_side("new", str(checkout), "bench/../bench/t.py", (), False, {}).cwd == checkout


def _run_outside(place: dict[str, Path], name: str) -> tuple[Path, dict]:
    """A run directory in ``home`` whose manifest runs ``t.py`` in ``outside``."""
    run = place["home"] / name
    analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz"], out=run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(command="triage", target="t.py", args=[], cwd=str(place["outside"]))
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run, manifest


def test_deep_on_a_run_whose_script_lies_outside_runs_nothing(place: dict[str, Path]) -> None:
    run, manifest = _run_outside(place, "deep-run")
    with pytest.raises(UntrustedRunError, match="outside the trusted folders"):
        nsbridge.deep(run=run, top=1, trust=[place["home"]], environ={})
    manifest.update(cwd=str(place["home"]), launcher=["--nproc-per-node", "2", "--no-python"])
    (run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UntrustedRunError, match="torch.distributed.run options"):
        nsbridge.deep(run=run, top=1, trust=[place["home"]], environ={})
    assert not (place["outside"] / MARKER).exists()


def test_timeline_on_a_run_whose_script_lies_outside_runs_nothing(
        place: dict[str, Path]) -> None:
    run, manifest = _run_outside(place, "timeline-run")
    with pytest.raises(UntrustedRunError, match="outside the trusted folders"):
        nsbridge.timeline(None, run=run, trust=[place["home"]], environ={})
    manifest.update(module=True, target="pip", cwd=str(place["home"]))
    (run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UntrustedRunError, match="module 'pip'"):
        nsbridge.timeline(None, run=run, trust=[place["home"]], environ={})
    assert not (place["outside"] / MARKER).exists()


def _nsbridge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsbridge", "-q", *args], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_the_cli_refuses_without_trust_and_gates_with_it(place: dict[str, Path]) -> None:
    outside = place["outside"]
    run = _manifest(place["run"], cwd=str(outside))
    refused = _nsbridge("gate", run, run, cwd=place["home"])
    assert refused.returncode == 5 and refused.stdout == ""
    assert "outside the trusted folders" in refused.stderr and "--trust DIR" in refused.stderr
    _manifest(place["run"], cwd=str(outside), env={"LD_PRELOAD": str(outside / "x.so")})
    tainted = _nsbridge("gate", "--trust", str(outside), run, run, cwd=place["home"])
    assert tainted.returncode == 5 and "sets LD_PRELOAD" in tainted.stderr
    assert not (outside / MARKER).exists()      # nothing ran

    (outside / "t.py").write_text(TINY)
    _manifest(place["run"], cwd=str(outside), env={"NSBRIDGE_NOTE": "kept"})
    proc = _nsbridge("gate", "--trust", str(outside), "--processes", "1", "--max-processes",
                     "1", "--steps", "3", "--format", "json", "--out", str(place["home"] / "g"), run, run,
                     cwd=place["home"])
    assert proc.returncode in (0, 4), proc.stderr
    plan = proc.stderr.index("gate: what each side runs")
    assert plan < proc.stderr.index("gate: process 1 of 2")
    assert f"  base ({run}): python t.py\n    in {outside}\n" in proc.stderr
    assert f"    NSBRIDGE_NOTE=kept  ({run}'s manifest)\n" in proc.stderr
    side = json.loads(proc.stdout)["gate"]["sides"]["base"]
    assert side["env"]["NSBRIDGE_NOTE"] == "kept" and side["env_from"]["NSBRIDGE_NOTE"] == (
        f"{run}'s manifest")
