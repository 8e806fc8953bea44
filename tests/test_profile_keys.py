"""Every key docs/reference/profiles.md documents changes what nsbridge does.

Each key is set away from its default and what it configures is compared with what the
default gives, on real inputs: the records and files of real triages of a small
TorchScript model (torch records the module hierarchy of TorchScript models only) for the
capture and schedule keys; re-analyses of a real run, of the H200 traces and of a real
nsys export for the analysis and timeline keys; the deep pass's plan and ncu command line
(a fake ncu at the process boundary) for the deep keys. A key added to nsbridge/profiles.py
without a check here fails test_every_documented_key_is_checked.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from nsbridge.api import analyze, deep
from nsbridge.errors import NsbridgeError
from nsbridge.passes.torch_pass import process_machine
from nsbridge.profiles import SECTIONS, Profile, load_profile

from conftest import DATA, ROOT, TORCH_DATA, fake_ncu_env, run_nsbridge

pytestmark = pytest.mark.slow

ALL_KEYS = {f"{section}.{f.name}" for section, cls in SECTIONS.items()
            for f in dataclasses.fields(cls)}

# checked where their pass is run with a fake tool or for long enough: the budget keys bite
# only on a script without steps that runs for tens of seconds
ELSEWHERE = {
    "timeline.trace": "test_nsys_collect.py::test_the_profile_picks_what_nsys_traces",
    "schedule.wait_for_step_s": "test_real_loops.py::test_loop_without_optimizer_gets_a_bounded_time_window",
    "schedule.window_s": "test_real_loops.py::test_loop_without_optimizer_gets_a_bounded_time_window",
    "schedule.max_record_mib": "test_real_loops.py::test_memory_budget_stops_a_recording_and_keeps_it",
}

SCRIPT = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
model = torch.jit.script(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for step in range(24):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(round(loss.item(), 3))
"""

# two changed runs, as one run per key would take a minute: keys whose effects overlap
# (with_flops records shapes too) are in different runs
CHANGED_RUNS = {
    "b": {"capture": {"cuda": True, "record_shapes": False, "profile_memory": False,
                      "with_modules": True},
          "schedule": {"skip_first": 3, "wait": 2, "warmup": 2, "active": 2, "repeat": 2,
                       "speed_probe": True}},
    "c": {"capture": {"with_stack": True, "with_flops": True}},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Triages of SCRIPT: ``a`` with the default profile, ``b`` and ``c`` with CHANGED_RUNS."""
    folder = tmp_path_factory.mktemp("keys")
    (folder / "job.py").write_text(SCRIPT)
    made = {}
    for name in ("a", *CHANGED_RUNS):
        argv = ["-q", "triage", "--out", name]
        if name in CHANGED_RUNS:
            (folder / f"{name}.json").write_text(json.dumps({"version": 1,
                                                            **CHANGED_RUNS[name]}))
            argv += ["--profile", f"{name}.json"]
        proc = run_nsbridge(*argv, "job.py", cwd=folder)
        assert proc.returncode == 0, proc.stderr
        made[name] = folder / name
    return made


def _events(run: Path) -> list[dict[str, Any]]:
    with gzip.open(run / "trace.json.gz", "rt") as fh:
        return json.load(fh)["traceEvents"]


def _count(run: Path, match: Callable[[dict[str, Any]], bool]) -> int:
    return sum(1 for e in _events(run) if match(e))


def _child(run: Path) -> dict[str, Any]:
    return json.loads((run / "child.json").read_text())


RECORDED = {   # key: (the run that changes it, what shows it)
    "capture.cuda": ("b", lambda run: _child(run)["use_cuda"]),
    "capture.record_shapes": ("b", lambda run: _count(run, lambda e: "Input Dims" in e.get("args", {}))),
    "capture.profile_memory": ("b", lambda run: _count(run, lambda e: e.get("name") == "[memory]")),
    "capture.with_modules": ("b", lambda run: _count(run, lambda e: "Module Hierarchy"
                                             in e.get("args", {}))),
    "capture.with_stack": ("c", lambda run: _count(run, lambda e: e.get("cat") == "python_function")),
    "capture.with_flops": ("c", lambda run: "FLOPs" in (run / "key_averages.txt").read_text()),
    "schedule.speed_probe": ("b", lambda run: _count(run, lambda e: e.get("name")
                                            == "nsbridge::speed_probe")),
}


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_a_capture_key_changes_the_recording(runs: dict[str, Path], key: str) -> None:
    changed, shown = RECORDED[key]
    assert shown(runs["a"]) != shown(runs[changed]), key


def _cycles(child: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(steps before its warm-up, warm-up steps, measured steps) of each profiled cycle."""
    cycles: list[list[int]] = []
    before = 0
    for phase in [s["phase"] for s in child["steps"]]:
        if phase in ("first", "unprofiled"):
            before += 1
        elif phase == "warmup":
            if not cycles or cycles[-1][2]:
                cycles.append([before, 0, 0])
                before = 0
            cycles[-1][1] += 1
        elif phase == "active":
            cycles[-1][2] += 1
    return [tuple(c) for c in cycles]   # type: ignore[misc]


def test_the_schedule_keys_shape_the_profiled_steps(runs: dict[str, Path]) -> None:
    """Each run's steps follow its own schedule exactly: a key read nowhere would leave its
    default's count in the changed run."""
    for name, profile in (("a", load_profile("default")), ("b", None)):
        sched = (dataclasses.asdict(profile.schedule) if profile
                 else CHANGED_RUNS["b"]["schedule"])
        first = (sched["skip_first"] + sched["wait"], sched["warmup"], sched["active"])
        later = (sched["wait"], sched["warmup"], sched["active"])
        assert _cycles(_child(runs[name])) == [first] + [later] * (sched["repeat"] - 1), name


def _report(paths: list[Path], profile: Profile, out: Path) -> dict[str, Any]:
    result = analyze(paths, profile=profile, out=out, jobs=1)
    report = json.loads(json.dumps(result.report))
    report.pop("files")
    report.pop("target")
    report["report.md"] = (out / "report.md").read_text()
    return report


def _analysis(**keys: Any) -> Profile:
    base = load_profile("default")
    return dataclasses.replace(base, analysis=dataclasses.replace(base.analysis, **keys))


H200, RANKS = TORCH_DATA / "h200", TORCH_DATA / "two_ranks"
# key: (input, the other keys both sides set so that the rule the key sits in can bite, the
# changed value); "run": a copy of run ``a`` re-analysed with its own records
ANALYSIS: dict[str, tuple[Any, dict[str, Any], Any]] = {
    "top_ops": ("run", {}, 1),
    "top_gaps": ([H200 / "train_cnn_h200.json.gz"], {}, 1),
    "input_bound_share": ([H200 / "input_bound_h200.json.gz"], {}, 1.0),
    "sync_bound_share": ([H200 / "sync_bound_h200.json.gz"], {}, 1.0),
    "gpu_bound_busy": ([H200 / "train_cnn_h200.json.gz"], {}, 0.01),
    "sync_calls_per_step": ("run", {}, 0.5),
    "sync_max_ops_between": ("run", {"sync_calls_per_step": 0.5}, 1.0),
    "sync_recommend_per_step": ("run", {}, 2.0),
    "straggler_pct": ([RANKS / "sampled_rank-0.json.gz", RANKS / "sampled_rank-1.json.gz"],
                      {"straggler_min_ms": 0.0}, 0.01),
    "straggler_min_ms": ([RANKS / "sampled_rank-0.json.gz", RANKS / "sampled_rank-1.json.gz"],
                         {"straggler_pct": 0.01}, 1e6),
}


@pytest.mark.parametrize("key", sorted(ANALYSIS))
def test_an_analysis_key_changes_the_report(runs: dict[str, Path], tmp_path: Path,
                                            key: str) -> None:
    inputs, context, value = ANALYSIS[key]
    paths = [runs["a"]] if inputs == "run" else inputs
    before = _report(paths, _analysis(**context), tmp_path / "default")
    after = _report(paths, _analysis(**context, **{key: value}), tmp_path / "changed")
    assert before != after, key
    if key == "top_ops":     # report.md keeps one row per table, the op table's first
        assert after["report.md"].count("| `") < before["report.md"].count("| `")


@pytest.mark.parametrize("key", ["contention_wait_share", "contention_steal_share"])
def test_a_contention_key_changes_the_machine_finding(runs: dict[str, Path], key: str) -> None:
    """The run's own process record, its steps waiting 5% of their wall time and the host
    stealing 2%: contended only below the default thresholds (10%, 5%)."""
    child = _child(runs["a"])
    for step in child["steps"]:
        step["wait_ms"] = 0.05 * step["wall_ms"]
    around = {"cores": {"usable": 2}, "seconds": 3.0, "steal_share": 0.02,
              "load_before": [0.1, 0.1, 0.1], "load_after": [0.1, 0.1, 0.1]}
    found = {value: process_machine(around, child.get("machine"), child["steps"],
                                    _analysis(**{key: value}))["contention"]
             for value in (getattr(load_profile("default").analysis, key), 0.01)}
    assert [c["contended"] for c in found.values()] == [False, True], found


def test_timeline_top_gaps_changes_the_idle_gaps(tmp_path: Path) -> None:
    sqlite = DATA / "nsys" / "nsbridge_sync_bound_h100_nsys2025.3.sqlite"
    base = load_profile("default")
    gaps = []
    for n, top in enumerate((base.timeline.top_gaps, 1)):
        profile = dataclasses.replace(base, timeline=dataclasses.replace(base.timeline,
                                                                         top_gaps=top))
        gaps.append(analyze([sqlite], profile=profile, out=tmp_path / str(n)).report[
            "timeline"]["idle_gaps"])
    assert len(gaps[0]) > 1 and len(gaps[1]) == 1


DEEP = {   # key: changed value
    "top": 1, "min_kernel_us": 1e6, "skip_steps": 0, "profile_steps": 2, "max_launches": 1,
    "replay_mode": "application", "clock_control": "none", "cache_control": "none",
    "sections": ("Occupancy",), "metrics": ("sm__cycles_elapsed.avg",),
    "quantities": {"cycles": ["sm__cycles_elapsed.max"]}, "passes_per_kernel": 1,
    "seconds_per_pass": 10.0, "timeout_s": 0.01,
}


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run as a GPU triage leaves it (the H200 CNN trace's ops), a fake ncu on PATH."""
    folder = tmp_path_factory.mktemp("deep")
    run = folder / "run"
    analyze([H200 / "train_cnn_h200.json.gz"], out=run)
    (folder / "job.py").write_text("import torch\nprint('ran')\n")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(command="triage", target=str(folder / "job.py"), args=[], cwd=str(folder))
    manifest["passes"] = [{"name": "torch.profiler", "status": "ok", "exit_code": 0}]
    (run / "manifest.json").write_text(json.dumps(manifest))
    return {"run": run, "env": fake_ncu_env(folder), "log": folder / "calls", "cwd": folder}


def _deep_attempt(gpu_run: dict[str, Any], **keys: Any) -> tuple[list[str], list[str], str]:
    """(the plan, ncu's profiling command line, the outcome) of a deep pass on the run
    with the deep profile's ``keys`` changed; the fake ncu fails at once unless a timeout
    is what is checked (then it runs the script)."""
    base = load_profile("deep")
    profile = dataclasses.replace(base, deep=dataclasses.replace(base.deep, **keys))
    gpu_run["log"].unlink(missing_ok=True)
    run = gpu_run["cwd"] / "attempt"     # each attempt on the run as the triage left it
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(gpu_run["run"], run)
    plan: list[str] = []
    env = dict(gpu_run["env"], FAKE_NCU_MODE="ok" if "timeout_s" in keys else "fail")
    try:
        outcome = deep(run=run, profile=profile, environ=env, on_plan=plan.append,
                       trust=[gpu_run["cwd"]]).report["status"]
    except NsbridgeError as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    calls = [json.loads(line) for line in gpu_run["log"].read_text().splitlines()] \
        if gpu_run["log"].exists() else []
    return plan, next((c for c in calls if "--nvtx" in c), []), outcome


@pytest.mark.parametrize("key", sorted(DEEP))
def test_a_deep_key_changes_the_plan_or_the_ncu_command(gpu_run: dict[str, Any],
                                                        key: str) -> None:
    default = load_profile("deep").deep
    assert getattr(default, key) != DEEP[key], key
    if key == "timeout_s":   # the script runs under ncu: the timeout is what stops it
        outcomes = [_deep_attempt(gpu_run, timeout_s=t)[2] for t in (600.0, DEEP[key])]
        assert outcomes[0] == "ok" and "timeout" in outcomes[1].lower(), outcomes
        return
    before = _deep_attempt(gpu_run)
    after = _deep_attempt(gpu_run, **{key: DEEP[key]})
    assert before != after, (key, before, after)


def test_every_documented_key_is_checked() -> None:
    checked = (set(RECORDED)
               | {f"schedule.{k}" for k in ("skip_first", "wait", "warmup", "active", "repeat")}
               | {f"analysis.{k}" for k in ANALYSIS}
               | {"analysis.contention_wait_share", "analysis.contention_steal_share"}
               | {"timeline.top_gaps"}
               | {f"deep.{k}" for k in DEEP} | set(ELSEWHERE))
    assert checked == ALL_KEYS, (ALL_KEYS - checked, checked - ALL_KEYS)
    for key, node in ELSEWHERE.items():
        file, name = node.split("::")
        source = (ROOT / "tests" / file).read_text()
        body = source.split(f"def {name}(")[1].split("\ndef ")[0]
        assert key.split(".")[1] in body, (key, node)


def _terminal_op_rows(text: str) -> int:
    table = text.split("Top ops by")[1].split("\n  (")[0].splitlines()[1:]
    return sum(1 for line in table if any(c.isdigit() for c in line))   # not the header


def _markdown_op_rows(text: str) -> int:
    table = text.split("## Top ops by")[1].split("\n\n")[0].splitlines()
    return sum(1 for line in table if line.startswith("| `"))


def test_top_sets_the_rows_of_the_summary_and_report_md_and_show_keeps_them(
        runs: dict[str, Path], tmp_path: Path) -> None:
    proc = run_nsbridge("analyze", "--top", "2", "--out", "two", str(runs["a"]), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _terminal_op_rows(proc.stdout) == 2
    assert _markdown_op_rows((tmp_path / "two" / "report.md").read_text()) == 2
    shown = run_nsbridge("show", "two", cwd=tmp_path)          # the run's own choice
    assert _terminal_op_rows(shown.stdout) == 2
    assert _terminal_op_rows(run_nsbridge("show", "--top", "4", "two", cwd=tmp_path).stdout) == 4
    default = run_nsbridge("show", str(runs["a"]), cwd=tmp_path)
    assert _terminal_op_rows(default.stdout) == load_profile("default").analysis.top_ops
