"""The profiler inside the user's process: the measured window, driven by step boundaries.

Until the first step nsbridge records everything, so a script without steps still gets a
whole-run profile; at the first step that recording is dropped and the profile's schedule
(skip_first, wait, warmup, active, repeat) takes over. The device is synchronized before a
measured window closes, inside a ``nsbridge::own_sync`` range so no analysis charges that
wait to the script. Every step's wall time is kept with its phase, so unprofiled steps
give the baseline for the profiler-overhead estimate.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule

from nsbridge.collect.machine import ProcessClock, gpu_state, load_average
from nsbridge.schema import OWN_SYNC_RANGE

_PHASES = {ProfilerAction.NONE: "unprofiled", ProfilerAction.WARMUP: "warmup",
           ProfilerAction.RECORD: "active", ProfilerAction.RECORD_AND_SAVE: "active"}


class ProfilerSession:
    """Drives torch.profiler from step boundaries and writes traces into the run directory."""

    def __init__(self, capture: dict[str, Any], sched: dict[str, int], run_dir: Path) -> None:
        self._capture = capture
        self._sched = sched
        self._run_dir = run_dir
        self.use_cuda = capture["cuda"] is True or (capture["cuda"] == "auto"
                                                    and torch.cuda.is_available())
        self._schedule: Optional[Callable[[int], ProfilerAction]] = None
        self._prof: Optional[profile] = None
        self.mode = "whole-run"          # whole-run -> scheduled
        self.steps: list[dict[str, Any]] = []
        self.traces: list[str] = []
        self.table: Optional[str] = None
        self.machine: dict[str, Any] = {}
        self._clock: Optional[ProcessClock] = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.machine = {"threads": _threads(), "load_at_start": load_average(),
                        "run_wait_measured": None, "gpu": None}
        self._prof = self._new_profiler(None)
        self._prof.start()
        self._clock = ProcessClock()
        self.machine["run_wait_measured"] = self._clock.has_wait

    def finish(self) -> Optional[str]:
        """Stop profiling; write the last trace. Returns a note when nothing was measured."""
        prof, self._prof = self._prof, None
        if prof is None:
            return None
        self.machine["load_at_end"] = load_average()
        if self._clock is not None:
            self._clock.close()
        self._synchronize()
        if self.mode == "whole-run":
            prof.stop()
            self._save(prof)
            return None
        prof.stop()  # a window still recording is saved by on_trace_ready
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
        if self._prof is None:
            return
        lap = self._clock.lap() if self._clock is not None else {}
        if self.mode == "whole-run":
            self.steps.append({"index": 0, **lap, "phase": "first"})
            self._prof.stop()  # recorded only in case no step ever came: drop it
            s = self._sched
            self._schedule = schedule(skip_first=max(s["skip_first"] - 1, 0), wait=s["wait"],
                                      warmup=s["warmup"], active=s["active"],
                                      repeat=s["repeat"])
            self._prof = self._new_profiler(self._schedule)
            self.mode = "scheduled"
            self._prof.start()
        else:
            action = self._schedule(self._prof.step_num)
            self.steps.append({"index": len(self.steps), **lap, "phase": _PHASES[action]})
            if action == ProfilerAction.RECORD_AND_SAVE:
                if self.use_cuda and self.machine.get("gpu") is None:
                    self.machine["gpu"] = gpu_state((os.getpid(),))
                self._synchronize()
            self._prof.step()
        if self._clock is not None:
            self._clock.lap()   # the profiler's own step work is not the next step's

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
        n = len(self.traces) + 1
        name = "trace.json.gz" if n == 1 else f"trace.{n}.json.gz"
        path = self._run_dir / name
        prof.export_chrome_trace(str(path))
        self.traces.append(name)
        if self.table is None:
            sort = "self_device_time_total" if self.use_cuda else "self_cpu_time_total"
            table = prof.key_averages().table(sort_by=sort, row_limit=40)
            (self._run_dir / "key_averages.txt").write_text(table + "\n", encoding="utf-8")
            self.table = "key_averages.txt"

    def _synchronize(self) -> None:
        """Wait for the device before a window closes: nsbridge's own sync, named as such."""
        if self.use_cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
            with record_function(OWN_SYNC_RANGE):
                torch.cuda.synchronize()


def _threads() -> dict[str, Any]:
    """torch's thread pools and the environment variables that size them."""
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(),
            "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
                    if k in os.environ}}
