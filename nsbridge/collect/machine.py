"""What the machine was doing around a run: cores, load, steal, cgroup throttling, GPU state.

Linux readers of ``/proc`` and ``/sys/fs/cgroup`` (stdlib only, so the profiled process can
use them too); each returns None where the machine does not expose the quantity, never
raises. ``ProcessClock`` samples the calling process at step boundaries: wall time, CPU
time of all its threads, time its threads spent runnable but waiting for a CPU (the
scheduler's run-queue delay from ``/proc/self/task/*/schedstat``) and involuntary context
switches. GPU state (clocks, throttle reasons, other processes on the device) comes from
NVML through the optional ``nvidia-ml-py`` package.
"""

from __future__ import annotations

import math
import os
import resource
import time
from pathlib import Path
from typing import Any, Optional

from ..schema.records import (Around, Cores, GpuProcess, GpuState, Snapshot, StepLap,
                              Throttling)

_PROC = Path("/proc")
_CGROUP = Path("/sys/fs/cgroup")
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def usable_cores() -> Cores:
    """{logical, affinity, cgroup_quota, usable}: cores this process may run on."""
    logical = os.cpu_count()
    try:
        affinity: Optional[int] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    quota = cgroup_quota()
    candidates = [c for c in (logical, affinity,
                              math.ceil(quota) if quota is not None else None) if c]
    return {"logical": logical, "affinity": affinity, "cgroup_quota": quota,
            "usable": min(candidates) if candidates else None}


def load_average() -> Optional[list[float]]:
    """The 1-, 5- and 15-minute load averages (runnable and uninterruptible tasks)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cpu_times() -> Optional[dict[str, int]]:
    """System-wide CPU time by state, in clock ticks (``/proc/stat``'s cpu line)."""
    try:
        first = (_PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:1 + len(_STAT_FIELDS)]]
    return dict(zip(_STAT_FIELDS, values + [0] * (len(_STAT_FIELDS) - len(values))))


def steal_share(before: Optional[dict[str, int]],
                after: Optional[dict[str, int]]) -> Optional[float]:
    """Share of all CPU time between two ``cpu_times`` the hypervisor gave to other guests."""
    if not before or not after:
        return None
    total = sum(after.values()) - sum(before.values())
    return round((after["steal"] - before["steal"]) / total, 4) if total > 0 else None


def _cgroup_dir() -> Optional[Path]:
    """This process's cgroup folder holding the CPU controller (v2, else v1)."""
    try:
        lines = (_PROC / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1].split(","), parts[2].lstrip("/")
        if parts[0] == "0" and (_CGROUP / path / "cpu.max").is_file():
            return _CGROUP / path
        if "cpu" in controllers:
            for base in (_CGROUP / "cpu", _CGROUP / "cpu,cpuacct"):
                if (base / path / "cpu.cfs_quota_us").is_file():
                    return base / path
    return None


def cgroup_quota() -> Optional[float]:
    """CPUs the cgroup's CFS quota allows (None: no quota)."""
    folder = _cgroup_dir()
    if folder is None:
        return None
    try:
        if (folder / "cpu.max").is_file():
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else round(int(quota) / int(period), 2)
        quota_us = int((folder / "cpu.cfs_quota_us").read_text())
        period_us = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else round(quota_us / period_us, 2)


def cgroup_throttling() -> Optional[Throttling]:
    """{periods, throttled, throttled_ms} of the cgroup's CPU controller so far."""
    folder = _cgroup_dir()
    if folder is None:
        return None
    try:
        stat = dict(line.split()[:2] for line in (folder / "cpu.stat").read_text().splitlines()
                    if len(line.split()) >= 2)
    except OSError:
        return None
    if "throttled_usec" in stat:       # v2
        throttled_ms = int(stat["throttled_usec"]) / 1e3
    elif "throttled_time" in stat:     # v1, nanoseconds
        throttled_ms = int(stat["throttled_time"]) / 1e6
    else:
        return None
    return {"periods": int(stat.get("nr_periods", 0)),
            "throttled": int(stat.get("nr_throttled", 0)), "throttled_ms": throttled_ms}


def snapshot() -> Snapshot:
    """Counters to difference later (``between``) and the load average now."""
    return {"at": time.time(), "load": load_average(), "cpu": cpu_times(),
            "cgroup": cgroup_throttling()}


def between(before: Snapshot, after: Snapshot) -> Around:
    """What happened on the machine between two snapshots."""
    throttled: Optional[Throttling] = None
    b, a = before["cgroup"], after["cgroup"]
    if b and a:
        throttled = {"periods": (a["periods"] or 0) - (b["periods"] or 0),
                     "throttled": (a["throttled"] or 0) - (b["throttled"] or 0),
                     "throttled_ms": round((a["throttled_ms"] or 0) - (b["throttled_ms"] or 0), 3)}
    return {"load_before": before["load"], "load_after": after["load"],
            "steal_share": steal_share(before["cpu"], after["cpu"]),
            "cgroup_throttling": throttled,
            "seconds": round(after["at"] - before["at"], 3)}


class ProcessClock:
    """Per-interval wall time, CPU time, run-queue wait and involuntary context switches
    of the calling process (all its threads), and the run-queue wait of the thread that
    made the clock (the training loop's: ``loop_wait_ms``; a collective backend's worker
    threads wait while the loop waits in the collective, not while it works)."""

    def __init__(self) -> None:
        self._task_dir = _PROC / "self" / "task"
        self._files: dict[str, int] = {}
        self._loop = str(_tid())
        self.has_wait = (self._task_dir / self._loop / "schedstat").is_file()
        self._last = self._read()

    def lap(self) -> StepLap:
        """Since the previous lap (or creation): wall_ms, cpu_ms, wait_ms, loop_wait_ms,
        nivcsw."""
        now = self._read()
        last, self._last = self._last, now
        return {"wall_ms": round((now[0] - last[0]) * 1e3, 3),
                "cpu_ms": round((now[1] - last[1]) * 1e3, 3),
                "wait_ms": _ms_between(last[2], now[2]),
                "loop_wait_ms": _ms_between(last[4], now[4]), "nivcsw": now[3] - last[3]}

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()

    def _read(self) -> tuple[float, float, Optional[int], int, Optional[int]]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        total, loop = self._run_wait_ns()
        return (time.perf_counter(), time.process_time(), total, usage.ru_nivcsw, loop)

    def _run_wait_ns(self) -> tuple[Optional[int], Optional[int]]:
        """Run-queue delay so far (ns) of every thread of this process (threads that ended
        take theirs with them, so the sum is for the threads alive now), and of the loop's
        thread alone."""
        if not self.has_wait:
            return None, None
        try:
            tids = os.listdir(self._task_dir)
        except OSError:
            return None, None
        total, loop = 0, None
        for tid in tids:
            fd = self._files.get(tid)
            try:
                if fd is None:
                    fd = self._files[tid] = os.open(self._task_dir / tid / "schedstat",
                                                    os.O_RDONLY)
                waited = int(os.pread(fd, 96, 0).split()[1])
            except (OSError, ValueError, IndexError):
                if fd is not None:
                    os.close(fd)
                self._files.pop(tid, None)
                continue
            total += waited
            if tid == self._loop:
                loop = waited
        for gone in set(self._files) - set(tids):
            os.close(self._files.pop(gone))
        return total, loop


def _ms_between(before_ns: Optional[int], after_ns: Optional[int]) -> Optional[float]:
    """The milliseconds between two nanosecond counter readings (None if one is missing)."""
    return None if before_ns is None or after_ns is None else round((after_ns - before_ns) / 1e6, 3)


def _tid() -> int:
    return getattr(os, "gettid", os.getpid)()


def gpu_state(pids_of_run: tuple[int, ...] = ()) -> Optional[list[GpuState]]:
    """Per GPU through NVML (the optional nvidia-ml-py package): SM clock and its maximum,
    active throttle reasons, temperature, and compute processes other than ``pids_of_run``.
    None when NVML is not available (no package, no driver, no GPU)."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:   # NVMLError and driver load failures alike
        return None
    try:
        return [_one_gpu(pynvml, i, pids_of_run) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


# NVML clocks-event (throttle) reason bits, as nvml.h names them
THROTTLE_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                    0x100: "display_clock_setting"}


def throttle_names(mask: int) -> list[str]:
    """Names of the reason bits set in an NVML clocks-event mask."""
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def _one_gpu(nvml: Any, index: int, ours: tuple[int, ...]) -> GpuState:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = nvml.nvmlDeviceGetName(handle)
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    others: list[GpuProcess] = [{"pid": int(p.pid), "used_mib": None if p.usedGpuMemory is None
               else round(p.usedGpuMemory / 2**20, 1)}
              for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
              if int(p.pid) not in ours]
    return {"index": index, "name": name.decode() if isinstance(name, bytes) else str(name),
            "sm_clock_mhz": int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "sm_clock_max_mhz": int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "throttle_reasons": throttle_names(int(reasons(handle))),
            "temperature_c": int(nvml.nvmlDeviceGetTemperature(handle,
                                                                nvml.NVML_TEMPERATURE_GPU)),
            "other_processes": others}
