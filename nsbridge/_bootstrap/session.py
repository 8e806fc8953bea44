"""The profiler inside the user's process: the measured window, driven by step boundaries.

Until the first step nsbridge records everything, so a script without steps still gets a
profile; at the first step that recording is dropped and the profile's schedule
(skip_first, wait, warmup, active, repeat) takes over. Every recording is bounded
(``budget.py``): waiting for a first step it may last ``schedule.wait_for_step_s``; when no
step has come by then, the recording so far (start-up) is dropped as warm-up and a time
window of ``schedule.window_s`` is profiled instead, and the script runs on unprofiled
(a step that comes later still starts the schedule). Any recording that grows the process
by ``schedule.max_record_mib`` is stopped there and kept. A budget stop that comes while
torch.compile compiles waits for the compile to end, and the start-up's time limit waits
for the first step when torch.compile compiled before it (``compile_wait_s``). The device is
synchronized
before a window closes, inside a ``nsbridge::own_sync`` range so no analysis charges that
wait to the script. Every step's wall time is kept with its phase, so unprofiled steps
give the baseline for the profiler-overhead estimate (in bounded memory: a tight loop
under --timeout runs millions of steps; steps.StepLog), and ``window`` says what the saved
trace holds.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Optional

import torch
from torch.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule

from nsbridge._bootstrap.budget import MIB, RecordingBudget, memory_limit_bytes
from nsbridge._bootstrap.speed_probe import probe_ms
from nsbridge._bootstrap.steps import StepLog, in_own_range
from nsbridge.collect.machine import ProcessClock, gpu_state, load_average
from nsbridge.errors import RunDirError
from nsbridge.rundir import atomic_path, write_atomic
from nsbridge.schema import (KEY_AVERAGES, MEMORY_SNAPSHOT, OWN_SYNC_RANGE, PROFILER_DOING,
                             trace_name)
from nsbridge.schema.records import ChildStep, ProcessMachine, StepLap, Threads, Window

_PHASES = {ProfilerAction.NONE: "unprofiled", ProfilerAction.WARMUP: "warmup",
           ProfilerAction.RECORD: "active", ProfilerAction.RECORD_AND_SAVE: "active"}
_COMPILE_FRAMES = ("torch/_dynamo/convert_frame.py", "torch/_inductor/compile_fx.py")
_COMPILE_TIMINGS = ("compile_inner", "_backward_impl")   # Dynamo's outermost compile timers
TABLE_LIMIT_MIB = 128   # key_averages() of a bigger recording is left out (minutes, GiBs)
_RECORDING = (ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

# modes: whole-run (recording, no step yet) -> scheduled (steps drive the schedule);
# whole-run -> time-window (no step in time: a window after the start-up) -> bounded
# (window saved, script runs on unprofiled) -> scheduled when a step comes after all;
# scheduled -> stopped (a window hit the memory budget: saved as far as it got)


class ProfilerSession:
    """Drives torch.profiler from step boundaries and writes traces into the run directory."""

    def __init__(self, capture: dict[str, Any], sched: dict[str, Any], run_dir: Path) -> None:
        self._capture = capture
        self._sched = sched
        self._run_dir = run_dir
        self.use_cuda = capture["cuda"] is True or (capture["cuda"] == "auto"
                                                    and torch.cuda.is_available())
        self._schedule: Optional[Callable[[int], ProfilerAction]] = None
        self._prof: Optional[profile] = None
        self.mode = "whole-run"
        self.steps = StepLog()
        self.traces: list[str] = []
        self.table: Optional[str] = None
        self.write_error: Optional[str] = None   # a trace or table that could not be written
        self.machine: ProcessMachine = {}
        self.window: Window = {"kind": "whole-run", "stopped_by": None}
        self._clock: Optional[ProcessClock] = None
        self._budget = RecordingBudget(memory_limit_bytes(float(sched.get("max_record_mib",
                                                                          512))),
                                       self._over_budget)
        self._in_session = False
        self._recording_since = 0.0
        self._own_s = 0.0   # nsbridge's own work inside the current step (a budget stop)
        self._kept: Optional[Window] = None   # a time window a late step may replace
        self._compile_since: Optional[float] = None   # a budget stop waiting for a compile
        self.compile_wait_s = 0.0   # how long budget stops waited for torch.compile, in all
        self._compiled_s = 0.0      # torch.compile's compile time so far (compile_seconds)
        self._probe_ms: Optional[float] = None   # the speed probe run as this step began

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.machine = {"threads": _threads(), "load_at_start": load_average(),
                        "run_wait_measured": None, "gpu": None}
        self._prof = self._new_profiler(None)
        self._prof.start()
        self._recording_since = time.monotonic()
        self._budget.watch(float(self._sched.get("wait_for_step_s", 20.0)))
        self._budget.start()
        self._clock = ProcessClock()
        self.machine["run_wait_measured"] = self._clock.has_wait

    def finish(self) -> Optional[str]:
        """Stop profiling; write the last trace. Returns a note when nothing was measured."""
        self._in_session = True
        self._budget.close()
        prof, self._prof = self._prof, None
        self.machine["load_at_end"] = load_average()
        if self._clock is not None:
            self._clock.close()
        if self._budget.error:
            self.window["budget_error"] = self._budget.error
        if prof is None:
            if self.mode == "stopped" and not self.traces:
                return ("The memory budget (schedule.max_record_mib) stopped the profiler "
                        "before a measured step was recorded; nothing was measured.")
            return None
        self._synchronize()
        recorded_s = time.monotonic() - self._recording_since
        self._doing("stopping the profiler at the script's end and saving its trace")
        prof.stop()  # a scheduled window still recording is saved by on_trace_ready
        self._doing(None)
        if self.mode in ("whole-run", "time-window"):
            self._keep(prof, stopped_by=None, seconds=recorded_s)
            return None
        if self._kept is not None:   # the late steps saved nothing: the time window stands
            self.window, self._kept = self._kept, None
        if self.traces:
            return None
        s = self._sched
        need = max(s["skip_first"], 1) + s["wait"] + s["warmup"] + s["active"]
        return (f"The script ran {len(self.steps)} step(s) but the profile's schedule needs "
                f"{need} (skip_first {s['skip_first']}, wait {s['wait']}, warmup "
                f"{s['warmup']}, active {s['active']}) before anything is measured. Run more "
                "steps or use a profile with a shorter schedule (--profile quick).")

    # -- steps -----------------------------------------------------------------------------
    def current_step(self) -> int:
        return len(self.steps)

    def boundary(self) -> None:
        """End of a training step: advance the schedule and time the step."""
        if self._prof is None and self.mode not in ("bounded", "stopped"):
            return
        self._in_session = True
        try:
            lap = self._lap()
            if self.mode in ("whole-run", "time-window", "bounded"):
                self.steps.append(_step(len(self.steps), lap, "first"))
                self._start_schedule()
            else:
                self._advance(lap)
            if self._sched.get("speed_probe"):
                self._probe_ms = probe_ms()   # the next step's record carries it
            if self._clock is not None:
                self._clock.lap()   # the profiler's own step work is not the next step's
        finally:
            self._in_session = False
        reason = self._budget.over()   # asked during nsbridge's own work: still over?
        if reason is not None:
            self._over_budget(reason)

    def _lap(self) -> StepLap:
        """The step's clock lap, without the time nsbridge spent stopping a recording in it,
        with the time torch.compile compiled in it (``compile_ms``)."""
        lap: StepLap = self._clock.lap() if self._clock is not None else {}
        own, self._own_s = self._own_s * 1e3, 0.0
        if own and "wall_ms" in lap:
            lap["wall_ms"] = max(lap["wall_ms"] - own, 0.0)
            lap["nsbridge_ms"] = round(own, 3)
        compiled, self._compiled_s = self._compiled_s, compile_seconds()
        if self._compiled_s > compiled:
            lap["compile_ms"] = round((self._compiled_s - compiled) * 1e3, 3)
        if self._probe_ms is not None:
            lap["probe_ms"], self._probe_ms = round(self._probe_ms, 4), None
        return lap

    def _start_schedule(self) -> None:
        """The first step: whatever was recorded while waiting is dropped; a time window
        already kept stays until the schedule's first window replaces it."""
        self._budget.idle()
        self._compile_ended()
        if self._prof is not None:
            self._doing("stopping the start-up recording at the first step to start the "
                        "profile's schedule")
            self._prof.stop()
        if self.mode == "bounded":
            self._kept = self.window
        s = self._sched
        self._schedule = schedule(skip_first=max(s["skip_first"] - 1, 0), wait=s["wait"],
                                  warmup=s["warmup"], active=s["active"], repeat=s["repeat"])
        self._prof = self._new_profiler(self._schedule)
        self.mode = "scheduled"
        self.window = {"kind": "steps", "stopped_by": None}
        self._doing("starting the profile's schedule at the first step")
        self._prof.start()
        self._doing(None)
        self._budget.idle()
        self._watch_scheduled()

    def _advance(self, lap: StepLap) -> None:
        if self.mode == "stopped" or self._prof is None:
            self.steps.append(_step(len(self.steps), lap, _bare(lap)))
            return
        assert self._schedule is not None   # set with the scheduled profiler (_start_schedule)
        action = self._schedule(self._prof.step_num)
        phase = _PHASES[action]
        self.steps.append(_step(len(self.steps), lap,
                                _bare(lap) if phase == "unprofiled" else phase))
        if action == ProfilerAction.RECORD_AND_SAVE:
            if self.use_cuda and self.machine.get("gpu") is None:
                self.machine["gpu"] = gpu_state((os.getpid(),))
            self._synchronize()
            self._budget.idle()   # the export's own memory is not the window's
        self._prof.step()
        self._watch_scheduled()

    def _watch_scheduled(self) -> None:
        """In scheduled mode only the memory of a recording step is watched."""
        assert self._schedule is not None and self._prof is not None   # scheduled mode: both set
        recording = self._schedule(self._prof.step_num) in _RECORDING
        if recording and not self._budget.watching:
            self._budget.watch(None)
        elif not recording:
            self._budget.idle()

    # -- the budget ------------------------------------------------------------------------
    def _over_budget(self, reason: str) -> None:
        """The current recording is over its budget (called on the main thread)."""
        if self._in_session:   # inside nsbridge's own step work: boundary() asks again after
            return
        prof = self._prof
        if prof is None:
            return
        if in_own_range():   # a stop inside nsbridge's own open range crashes torch: later
            self._budget.ask_again()
            return
        if self._waits_for_compile(reason):   # a stop near a compile crashes torch: later
            if self._compile_since is None:
                self._compile_since = time.monotonic()
            self._budget.ask_again()
            return
        self._compile_ended()
        self._in_session = True
        began = time.monotonic()
        try:
            grew = round(self._budget.peak_growth / MIB, 1)
            self._budget.idle()
            if self.mode == "whole-run" and reason == "time":
                wait = self._sched.get("wait_for_step_s")
                self._doing(f"stopping the start-up recording, because no step came within "
                            f"schedule.wait_for_step_s ({wait:g} s), and starting a time "
                            "window; a larger schedule.wait_for_step_s (above the first "
                            "step's time) avoids that")
                prof.stop()          # start-up only: dropped, it counts as warm-up
                self._prof = self._new_profiler(None)
                self._prof.start()
                self._doing(None)
                self.mode = "time-window"
                self._recording_since = time.monotonic()
                self._budget.watch(float(self._sched.get("window_s", 5.0)))
                return
            self._prof = None
            self._synchronize()
            recorded_s = time.monotonic() - self._recording_since
            self._doing(f"stopping a recording that went over its {reason} budget "
                        "(schedule.window_s or schedule.max_record_mib)")
            prof.stop()              # a scheduled window in RECORD is saved as far as it got
            self._doing(None)
            if self.mode == "scheduled":
                self.mode = "stopped"
                self.window.update({"stopped_by": reason, "grew_mib": grew,
                                    "limit_mib": round(self._budget.memory_limit / MIB, 1),
                                    "after_steps": len(self.steps)})
                return
            self._keep(prof, stopped_by=reason, seconds=recorded_s, grew_mib=grew)
            self.mode = "bounded"
        finally:
            self._in_session = False
            self._own_s += time.monotonic() - began

    def _waits_for_compile(self, reason: str) -> bool:
        """Whether a budget stop must wait: torch.compile is compiling now, or (for the
        start-up recording's time limit) it has compiled before the first step, whose
        backward and optimizer may still compile without a frame to show it. Stopping and
        restarting the profiler there crashed 1 of 5 cold-cache runs; the first step's end
        settles it (the schedule then starts and the start-up recording is dropped)."""
        if compiling():
            return True
        return reason == "time" and self.mode == "whole-run" and compile_seconds() > 0

    def _doing(self, what: Optional[str]) -> None:
        """Leave word of a profiler stop or start while it runs (PROFILER_DOING), so that if
        the process dies in it, nsbridge can say what it was doing; None: done."""
        path = self._run_dir / PROFILER_DOING
        try:
            if what is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(what, encoding="utf-8")
        except OSError:
            pass   # only a better message is lost

    def _compile_ended(self) -> None:
        """A budget stop that waited for torch.compile goes ahead (or a step made it moot)."""
        if self._compile_since is not None:
            self.compile_wait_s += time.monotonic() - self._compile_since
            self._compile_since = None

    def _keep(self, prof: profile, *, stopped_by: Optional[str], seconds: float,
              grew_mib: Optional[float] = None) -> None:
        """Save a stepless recording, saying what it covers (``seconds`` recorded); the
        description is written first, so a save cut short still says what was recorded."""
        if grew_mib is None:
            self._budget.over()   # the latest growth, for the record
            grew_mib = round(self._budget.peak_growth / MIB, 1)
        self.window = {"kind": self.mode, "stopped_by": stopped_by,
                       "seconds": round(seconds, 3),
                       "grew_mib": grew_mib,
                       "limit_mib": round(self._budget.memory_limit / MIB, 1),
                       "wait_for_step_s": self._sched.get("wait_for_step_s"),
                       "window_s": self._sched.get("window_s")}
        self._save(prof)

    # -- helpers ---------------------------------------------------------------------------
    def _new_profiler(self, sched: Optional[Callable[[int], ProfilerAction]]) -> profile:
        activities = [ProfilerActivity.CPU]
        if self.use_cuda:
            activities.append(ProfilerActivity.CUDA)
        c = self._capture
        return profile(activities=activities, schedule=sched,
                       on_trace_ready=self._save if sched is not None else None,
                       record_shapes=c["record_shapes"], profile_memory=c["profile_memory"],
                       with_stack=c["with_stack"], with_flops=c["with_flops"],
                       with_modules=c["with_modules"])

    def _save(self, prof: profile) -> None:
        """Write a recording (torch calls this inside the script's step: a full disk is
        recorded in ``write_error``, never raised into the script)."""
        if self._kept is not None and self.mode != "bounded":   # the schedule's first window
            self.traces.clear()
            self.table = None
            self._kept = None
        n = len(self.traces) + 1
        name = trace_name(n)
        try:
            export_gzipped(prof, self._run_dir / name)
            self.traces.append(name)
            if self.table is None:
                write_atomic(self._run_dir / KEY_AVERAGES, self._table(prof))
                self.table = KEY_AVERAGES
                self._memory_snapshot(prof)
        except (RunDirError, RuntimeError) as exc:   # torch reports a failed export so
            self.write_error = self.write_error or (
                str(exc) if isinstance(exc, RunDirError)
                else f"torch could not export the trace {name}: {exc}")

    def _memory_snapshot(self, prof: profile) -> None:
        """memory-snapshot.pickle: torch's own snapshot of the recording's memory, each
        allocation with torch's memory category (parameter, gradient, activation, ...),
        when the capture has what torch needs for it (stacks, shapes, memory) and the
        recording is small enough for torch's memory profile (seconds, not minutes)."""
        c = self._capture
        if not (c["with_stack"] and c["record_shapes"] and c["profile_memory"]) \
                or self._budget.peak_growth > TABLE_LIMIT_MIB * MIB:
            return
        import pickle

        from torch.cuda._memory_viz import _profile_to_snapshot
        try:
            data = pickle.dumps(_profile_to_snapshot(prof), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:   # noqa: BLE001 - torch's private helper: said, not a failure
            print(f"nsbridge: torch could not make its memory snapshot (the report goes on "
                  f"without it): {exc}"[:400], file=sys.stderr)
            return
        write_atomic(self._run_dir / MEMORY_SNAPSHOT, data)

    def _table(self, prof: profile) -> str:
        """key_averages.txt: torch's own op table, unless the recording is too big for it."""
        if self._budget.peak_growth > TABLE_LIMIT_MIB * MIB:
            return (f"not written: the recording grew the process by "
                    f"{self._budget.peak_growth / MIB:.0f} MiB, and torch's key_averages() of "
                    "that many events takes minutes and several times that memory\n")
        sort = "self_device_time_total" if self.use_cuda else "self_cpu_time_total"
        return prof.key_averages().table(sort_by=sort, row_limit=40) + "\n"

    def _synchronize(self) -> None:
        """Wait for the device before a window closes: nsbridge's own sync, named as such."""
        if self.use_cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
            with record_function(OWN_SYNC_RANGE):
                torch.cuda.synchronize()


def compile_seconds() -> float:
    """Seconds torch.compile has spent compiling in this process so far (Dynamo's own
    timings of its frame compiles and lazy backward compiles; 0 when it never ran)."""
    utils = sys.modules.get("torch._dynamo.utils")
    metrics = getattr(utils, "compilation_time_metrics", None) or {}
    try:
        return float(sum(sum(times) for key, times in metrics.items()
                         if str(key).endswith(_COMPILE_TIMINGS)))
    except (TypeError, ValueError):   # another torch's layout: no compile time known
        return 0.0


def _step(index: int, lap: StepLap, phase: str) -> ChildStep:
    """A step's record: its index, its clock lap, its phase."""
    return {"index": index, **lap, "phase": phase}   # type: ignore[typeddict-item]


def _bare(lap: StepLap) -> str:
    """An unrecorded step's phase: ``compile`` when torch.compile compiled in it (its time
    is compile, not a step's: no baseline counts it), else ``unprofiled``."""
    return "compile" if lap.get("compile_ms") else "unprofiled"


def compiling() -> bool:
    """Whether torch.compile is compiling on this thread now: a frame of Dynamo's frame
    conversion or Inductor's compile is on the stack (the budget's stops run on the main
    thread, between the script's bytecodes). Stopping or restarting torch.profiler then
    crashes the process (SIGSEGV/SIGABRT in 3 of 4 cold-cache runs, with or without
    nsbridge)."""
    if "torch._dynamo" not in sys.modules:
        return False
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.replace("\\", "/").endswith(_COMPILE_FRAMES):
            return True
        frame = frame.f_back
    return False


def export_gzipped(prof: profile, path: Path) -> None:
    """The chrome trace as ``path`` (.json.gz): exported beside it, then compressed at
    level 1 in large blocks (torch's own .gz export compresses line by line at level 9,
    minutes for a big recording)."""
    plain = path.with_name(path.name[:-len(".gz")] + ".partial")
    torch_tmp = plain.with_name(plain.name + ".tmp")   # where torch writes before renaming
    try:
        with atomic_path(path) as packed:
            prof.export_chrome_trace(str(plain))
            with plain.open("rb") as source, gzip.open(packed, "wb", compresslevel=1) as target:
                shutil.copyfileobj(source, target, 1 << 20)
    finally:
        plain.unlink(missing_ok=True)
        torch_tmp.unlink(missing_ok=True)


def _threads() -> Threads:
    """torch's thread pools and the environment variables that size them."""
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(),
            "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
                    if k in os.environ}}
