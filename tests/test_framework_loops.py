"""Loops a framework or a library shapes: step boundaries stay outside the optimizer's own
step whatever wraps it (an LR scheduler made before the loop, a closure), so nsbridge's work
at a boundary never lands inside a user op."""

from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path
from statistics import median
from typing import Callable

import pytest
import torch

from nsbridge._bootstrap.steps import StepDetector

from conftest import DATA, run_nsbridge

OPTIMIZER_MODULE = "torch/optim/optimizer.py"


def _inside_torchs_step() -> bool:
    return any(frame.filename.replace("\\", "/").endswith(OPTIMIZER_MODULE)
               for frame in inspect.stack())


def _boundaries(loop: Callable[[], None]) -> list[bool]:
    """For each step boundary the detector took: was it inside torch's Optimizer.step?"""
    seen: list[bool] = []
    detector = StepDetector(lambda: seen.append(_inside_torchs_step()))
    detector.install()
    try:
        loop()
    finally:
        detector.uninstall()
    return seen


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(8, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("scheduler", [
    lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9),
    lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=20),
    lambda opt: None])
def test_boundaries_after_the_first_are_outside_the_optimizers_step(scheduler) -> None:
    """Regression: an LR scheduler made before the loop (pytorch/examples mnist_rnn) puts
    its own `step` on the optimizer, bound to the class's step of that moment; nsbridge's
    wrapper on the class was never called, and the window's stop and export were charged
    to Optimizer.step#Adadelta.step (45 ms in the last step against 0.82 ms)."""
    model, opt = _model_and_optimizer()
    sched = scheduler(opt)

    def loop() -> None:
        for _ in range(6):
            opt.zero_grad()
            model(torch.ones(4, 8)).sum().backward()
            opt.step()
            if sched is not None:
                sched.step()

    inside = _boundaries(loop)
    assert len(inside) == 6
    assert inside[1:] == [False] * 5      # the first is taken by torch's hook, inside


def test_a_scheduler_made_after_the_first_step_still_works_and_counts_once() -> None:
    """A scheduler that wraps the step nsbridge already wrapped: no double boundaries, and
    the scheduler's own bookkeeping sees the optimizer step (no "lr_scheduler.step() before
    optimizer.step()" warning)."""
    model, opt = _model_and_optimizer()
    schedulers: list[torch.optim.lr_scheduler.LRScheduler] = []

    def loop() -> None:
        for i in range(6):
            if i == 1:
                schedulers.append(torch.optim.lr_scheduler.StepLR(opt, step_size=1))
            opt.zero_grad()
            model(torch.ones(4, 8)).sum().backward()
            opt.step()
            for sched in schedulers:
                sched.step()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inside = _boundaries(loop)
    assert len(inside) == 6 and inside[1:] == [False] * 5


SLOW_COMPILE = """
import time, torch

def slow_backend(gm, example_inputs):   # a cold-cache compile, shortened; Python running
    end = time.monotonic() + 4
    while time.monotonic() < end:
        pass
    return gm.forward

model = torch.nn.Linear(8, 8)
compiled = torch.compile(model, backend=slow_backend)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(12):
    opt.zero_grad()
    compiled(torch.ones(4, 8)).sum().backward()
    opt.step()
"""


@pytest.mark.slow
def test_the_wait_for_a_first_step_never_stops_the_profiler_mid_compile(tmp_path: Path) -> None:
    """Regression: a cold-cache compile outlasted schedule.wait_for_step_s, nsbridge stopped
    and restarted the profiler mid-compile, and torch crashed (3 of 4 runs). The stop now
    waits for the compile; the notes say how long, and that the first step's time was
    compile."""
    (tmp_path / "compiled.py").write_text(SLOW_COMPILE)
    (tmp_path / "short-wait.yaml").write_text("version: 1\nschedule:\n  wait_for_step_s: 1\n")
    done = run_nsbridge("-q", "triage", "--profile", str(tmp_path / "short-wait.yaml"),
                        "--out", str(tmp_path / "run"), str(tmp_path / "compiled.py"),
                        cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    child = json.loads((tmp_path / "run" / "child.json").read_text())
    assert child["compile_wait_s"] > 1.0       # held from about 1 s until the compile's end
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["steps"]["count"] == 3
    assert any("the stop waited" in note for note in report["notes"])
    first = child["steps"][0]                  # the first call compiled: named so
    assert first["compile_ms"] > 3000 and first["compile_ms"] <= first["wall_ms"] + 1
    assert not any(s.get("compile_ms") for s in child["steps"][1:])
    assert any("torch.compile compiled for" in note and "in 1 step(s) (step 0" in note
               for note in report["notes"])
    fixes = " ".join(rec["fix"] for rec in report["recommendations"])
    assert "model = torch.compile(model)" not in fixes      # it is compiled already


@pytest.mark.parametrize("positional", [True, False])
def test_a_closure_given_to_the_optimizer_runs_in_a_range_of_its_own(positional) -> None:
    """optimizer.step(closure) (LBFGS, Lightning): the closure runs, once per call the
    optimizer makes, inside ``closure#<its name>`` nested in torch's Optimizer.step range,
    and its loss comes back to the optimizer; none of it once nsbridge uninstalls."""
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3)

    def closure():
        opt.zero_grad()
        loss = model(torch.ones(4, 8)).pow(2).sum()
        loss.backward()
        return loss

    def events() -> list[torch.autograd.profiler_util.FunctionEvent]:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            loss = opt.step(closure) if positional else opt.step(closure=closure)
        assert isinstance(loss, torch.Tensor)
        return list(prof.events())

    detector = StepDetector(lambda: None)
    detector.install()
    try:
        seen = events()
    finally:
        detector.uninstall()
    name = "closure#" + closure.__qualname__
    ranges = [e for e in seen if e.name == name]
    step = next(e for e in seen if e.name == "Optimizer.step#LBFGS.step")
    assert len(ranges) == 3                   # LBFGS called it once per iteration
    assert all(step.time_range.start <= r.time_range.start
               and r.time_range.end <= step.time_range.end for r in ranges)
    assert not any(e.name.startswith("closure#") for e in events())


def test_loss_backward_runs_in_a_range_of_its_own_and_is_given_back() -> None:
    """loss.backward() and torch.autograd.backward run inside nsbridge::backward (the
    engine's final callbacks, where DDP waits for its gradients' all-reduce, are in no op:
    model.host.steps counts the range as backward), the gradients as without it; once
    nsbridge uninstalls, torch.autograd.backward is torch's own again."""
    from nsbridge.schema import BACKWARD_RANGE

    own = torch.autograd.backward
    model = torch.nn.Linear(8, 2)
    finished_inside: list[bool] = []

    def events() -> list[torch.autograd.profiler_util.FunctionEvent]:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            loss = model(torch.ones(4, 8)).sum()
            # a callback at the end of backward, as DDP's reducer queues one
            loss.grad_fn.register_hook(lambda *_: torch.autograd.Variable._execution_engine
                                       .queue_callback(lambda: finished_inside.append(True)))
            loss.backward()
            torch.autograd.backward(model(torch.ones(4, 8)).sum())
        return list(prof.events())

    detector = StepDetector(lambda: None)
    detector.install()
    try:
        assert torch.autograd.backward is not own
        seen = events()
    finally:
        detector.uninstall()
    ranges = [e for e in seen if e.name == BACKWARD_RANGE]
    assert len(ranges) == 2 and finished_inside == [True]
    first = ranges[0].time_range
    inside = [e for e in seen if e.name.startswith("autograd::engine::evaluate_function")
              and first.start <= e.time_range.start < first.end]
    assert inside and torch.autograd.backward is own
    assert model.weight.grad is not None and float(model.weight.grad.sum()) == 128.0   # 2 x 4 rows
    assert not any(e.name == BACKWARD_RANGE for e in events())


def test_a_budget_stop_waits_until_nsbridges_own_range_is_left(tmp_path: Path) -> None:
    """A time window stopped by its budget while loss.backward() ran in nsbridge::backward
    crashed the process (SIGSEGV, 1 of 4 runs of examples/train_no_optimizer.py): the range
    was entered in one recording and left in none. A budget stop asked inside one of
    nsbridge's own ranges is asked again later; outside, it stops the recording."""
    from nsbridge._bootstrap.session import ProfilerSession
    from nsbridge._bootstrap.steps import in_own_range, own_range

    class Recording:
        stopped = 0

        def stop(self) -> None:
            self.stopped += 1

    session = ProfilerSession({"cuda": False}, {}, tmp_path)
    session.mode = "scheduled"
    recording = Recording()
    session._prof = recording  # type: ignore[assignment]
    with own_range("nsbridge::backward"):
        assert in_own_range()
        session._over_budget("time")
    assert recording.stopped == 0 and session.mode == "scheduled" and not in_own_range()
    session._over_budget("time")
    assert recording.stopped == 1 and session.mode == "stopped"
    assert session.window["stopped_by"] == "time"


COMPILED_THEN_SLOW = """
import time, torch

model = torch.nn.Linear(8, 8)
compiled = torch.compile(model, backend=lambda gm, example_inputs: gm.forward)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(12):
    opt.zero_grad()
    compiled(torch.ones(4, 8)).sum().backward()
    if i == 0:
        for _ in range(80):   # the first step goes on 8 s after the compile, in Python
            time.sleep(0.1)
    opt.step()
"""


@pytest.mark.slow
def test_after_a_compile_the_start_up_recording_is_stopped_only_by_the_first_step(
        tmp_path: Path) -> None:
    """Regression: a cold-cache Inductor run with wait_for_step_s 3 crashed (SIGSEGV, 1 of 5)
    after the start-up recording was stopped and restarted between compiles of its first
    step, where no compile frame is on the stack. Once torch.compile has compiled, the
    start-up's time limit (4 s, after the compile) waits for the first step's end (8 s of
    it after the compile), and no time window replaced the start-up recording."""
    (tmp_path / "compiled.py").write_text(COMPILED_THEN_SLOW)
    (tmp_path / "short-wait.yaml").write_text("version: 1\nschedule:\n  wait_for_step_s: 4\n")
    done = run_nsbridge("-q", "triage", "--profile", str(tmp_path / "short-wait.yaml"),
                        "--out", str(tmp_path / "run"), str(tmp_path / "compiled.py"),
                        cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    child = json.loads((tmp_path / "run" / "child.json").read_text())
    assert child["compile_wait_s"] > 3.0     # the old rule stopped 4 s in, mid-sleep
    assert child["window"]["kind"] == "steps" and child["window"].get("stopped_by") is None
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["steps"]["count"] == 3


def test_a_crash_while_the_profiler_stops_names_what_nsbridge_was_doing(tmp_path: Path) -> None:
    """The profiled process left word before a profiler stop and died in it (SIGSEGV): the
    error says what nsbridge was doing and the setting that avoids it, not "a C/C++/CUDA
    extension"; the word is read once and removed."""
    from nsbridge.collect._process import ChildOutcome
    from nsbridge.collect.torch_profiler import recorded_pass
    from nsbridge.passes.outcome import pass_status
    from nsbridge.schema import PROFILER_DOING

    (tmp_path / PROFILER_DOING).write_text(
        "stopping the start-up recording, because no step came within "
        "schedule.wait_for_step_s (20 s), and starting a time window; a larger "
        "schedule.wait_for_step_s (above the first step's time) avoids that")
    died = ChildOutcome(returncode=-11, wall_s=30.0, timed_out=False, interrupted=False,
                        killed=False)
    recorded = recorded_pass(tmp_path, died, {})
    status, code, error = pass_status(recorded.outcome, recorded.child, recorded.doing)
    assert (status, code) == ("failed", 139)
    assert error is not None and "killed by SIGSEGV (signal 11): a crash in native code, " \
        "while nsbridge was stopping the start-up recording" in error["message"]
    assert "a larger schedule.wait_for_step_s" in error["message"]
    assert "extension" not in error["message"]
    assert not (tmp_path / PROFILER_DOING).exists()


@pytest.mark.parametrize("threads, advised", [(1, False), (4, True), (None, True)])
def test_contention_advice_offers_one_thread_only_where_torch_runs_more(threads, advised) -> None:
    from nsbridge.model.judging.contention import contention

    facts = {"cores": {"usable": 2}, "threads": {"intra_op": threads},
             "measured_steps": {"wait_share": 0.4, "wait_ms_per_step": 12.0}}
    found = contention(facts, wall_s=10.0, wait_share=0.10, steal_share=0.05)
    assert found["contended"]
    assert ("set_num_threads(1)" in found["fix"]) is advised
    assert "--runs 5" in found["fix"]


def _triage_own_split(tmp_path: Path, script: str) -> tuple[list[dict], list[dict]]:
    """Triage a tests/data script that writes its framework's own timings to argv[1]:
    (report.json's per-step rows, the script's own rows)."""
    split = tmp_path / "split.json"
    done = run_nsbridge("-q", "triage", "--out", str(tmp_path / "run"), str(DATA / script),
                        str(split), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    steps = json.loads((tmp_path / "run" / "report.json").read_text())["steps"]["per_step"]
    return steps, json.loads(split.read_text())


@pytest.mark.slow
def test_a_lightning_training_step_is_forward_as_lightning_times_it(tmp_path: Path) -> None:
    """Regression: Lightning runs training_step inside optimizer.step(closure); its Python
    (here 4 ms of it) was counted as optimizer ('optimizer 52 %, forward 6 %'). The
    forward phase now matches Lightning's own timing of training_step in the same steps."""
    pytest.importorskip("lightning")
    steps, own = _triage_own_split(tmp_path, "lightning_split.py")
    assert len(steps) == 3 and steps[0]["step"] >= 1
    forward = median(s["forward_ms"] for s in steps)
    training_step = median(own[s["step"]]["training_step"] * 1e3 for s in steps)
    assert forward == pytest.approx(training_step, rel=0.25)   # it was a fifth of it
    for s in steps:
        # the optimizer phase lies in what Lightning's clock leaves outside training_step
        # and backward, in the same interval (waits hit both); the edges of the backward
        # hooks differ a little, far less than the training_step it once took in
        own_step = own[s["step"]]
        rest_ms = 1e3 * (own_step["batch"] - own_step["training_step"] - own_step["backward"])
        assert s["optimizer_ms"] <= rest_ms + 500 * own_step["training_step"], (s, own_step)
    for s in steps:
        phases = [s[k] for k in ("data_ms", "forward_ms", "backward_ms", "optimizer_ms",
                                 "other_ms")]
        assert sum(phases) == pytest.approx(s["wall_ms"], abs=5e-3)
    # the closure's Python is its own row, not Optimizer.step's self time (it was 80 %):
    # the 4 ms a step of Python in training_step (a wall-clock floor) is in its self time
    ops = {op["name"]: op for op in
           json.loads((tmp_path / "run" / "report.json").read_text())["ops"]}
    assert ops["closure#Precision._wrap_closure"]["cpu_self_us"] / 3e3 >= 3.9


@pytest.mark.slow
def test_a_hugging_face_trainer_split_is_its_own_stopwatch(tmp_path: Path) -> None:
    """The Trainer owns the loop (accelerate's optimizer wrapper, gradient clipping, a
    scheduler): the phases equal a stopwatch on the model's forward (hooks), accelerate's
    backward and the Trainer's step in the same steps; the Python between forward ops is
    forward (it was 12 % short without it)."""
    pytest.importorskip("transformers")
    steps, own = _triage_own_split(tmp_path, "hf_trainer_split.py")
    assert len(steps) == 3 and len(own) == 30

    def ratio(phase: str, theirs: str) -> float:
        return median(s[phase] / (own[s["step"]][theirs] * 1e3) for s in steps)

    assert ratio("forward_ms", "forward") == pytest.approx(1, abs=0.10)
    assert ratio("backward_ms", "backward") == pytest.approx(1, abs=0.10)
    assert ratio("wall_ms", "step") == pytest.approx(1, abs=0.10)
    # torch's Optimizer.step range: inside the Trainer's optimizer-step callbacks
    assert 0 < median(s["optimizer_ms"] for s in steps) <= median(
        own[s["step"]]["optimizer"] * 1e3 for s in steps[:-1])
