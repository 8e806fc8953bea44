"""Machine facts of a run and the contention rule: was the run's time the script's own?

Inputs are what collect.machine measured: the parent's snapshots around the run (load
average, steal, cgroup throttling, usable cores), the profiled process's own record (torch
thread counts, GPU state as the window closed) and its per-step laps (wall time, CPU time
of all its threads, run-queue wait, involuntary context switches).

The rule (docs/explanation/noise.md): a run is **contended** when any of these holds over its
measured steps (all steps when none was measured):

1. its threads waited for a CPU (runnable, not running) for at least ``wait_share`` of the
   steps' wall time, summed over threads (``/proc/<tid>/schedstat``);
2. the hypervisor stole at least ``steal_share`` of all CPU time during the run;
3. the cgroup's CPU quota throttled the run for at least ``wait_share`` of its wall time;
4. where the run-queue wait cannot be read: the 1-minute load average at the start was at
   least the usable cores (others were already keeping every core busy);
5. on a GPU: another process was computing on the device, or its clocks were held down
   by a power, thermal or hardware slowdown.

torch using more intra-op threads than the usable cores is named too: its threads then
compete with each other.
"""

from __future__ import annotations

from typing import Literal, Optional, Sequence

from ..stats import summary
from ...schema.records import Around, ChildStep, ProcessMachine
from ...contract.report import Machine, MachineContention, MachineCores, MachineLoad, ProcessClock

GPU_SLOWDOWNS = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                 "hw_power_brake_slowdown"}
ONE_THREAD = ("nsbridge triage --threads 1 (or torch.set_num_threads(1) at the top of the "
              "script) so torch's threads stop waiting for each other on busy cores; ")
ELSEWHERE = ("profile on a quieter machine or with fewer co-located jobs; pool several "
             "processes with nsbridge triage --runs 5")


def fix(threads: Optional[float]) -> str:
    """What to do about contention: one thread first, unless torch already runs one."""
    return (ONE_THREAD if threads is None or threads > 1 else "") + ELSEWHERE


def machine_facts(*, cores: MachineCores, run: Around,
                  process: Optional[ProcessMachine], steps: Sequence[ChildStep],
                  wait_share: float = 0.10, steal_share: float = 0.05) -> Machine:
    """The report's ``machine`` section with its ``contention`` finding."""
    process = process or {}
    measured = [s for s in steps if s.get("phase") == "active"] or steps
    bare = [s for s in steps if s.get("phase") == "unprofiled"]
    facts: Machine = {
        "cores": cores, "threads": process.get("threads"),
        "load": {"before": run.get("load_before"), "at_start": process.get("load_at_start"),
                 "at_end": process.get("load_at_end"), "after": run.get("load_after")},
        "steal_share": run.get("steal_share"), "cgroup_throttling": run.get("cgroup_throttling"),
        "run_wait_measured": process.get("run_wait_measured"),
        "measured_steps": step_laps(measured), "unprofiled_steps": step_laps(bare),
        "gpu": process.get("gpu"),
    }
    facts["contention"] = contention(facts, wall_s=run.get("seconds"), wait_share=wait_share,
                                     steal_share=steal_share)
    return facts


def combine_runs(arounds: Sequence[Around]) -> Around:
    """collect.machine.between() of several runs in a row as one stretch: the first
    run's load before and the last's after, steal weighted by time, throttling summed."""
    if len(arounds) == 1:
        return arounds[0]
    seconds = sum(a.get("seconds") or 0.0 for a in arounds)
    steals = [(share, a.get("seconds") or 0.0) for a in arounds
              if (share := a.get("steal_share")) is not None]
    throttles = [t for a in arounds if (t := a.get("cgroup_throttling"))]
    combined: Around = {
        "load_before": arounds[0].get("load_before"),
        "load_after": arounds[-1].get("load_after"),
        "steal_share": round(sum(s * w for s, w in steals) / seconds, 4)
        if steals and seconds else None,
        "cgroup_throttling": {
            "periods": sum(t.get("periods") or 0 for t in throttles),
            "throttled": round(sum(t.get("throttled") or 0 for t in throttles), 3),
            "throttled_ms": round(sum(t.get("throttled_ms") or 0.0 for t in throttles), 3),
        } if throttles else None,
        "seconds": round(seconds, 3)}
    if "cores" in arounds[0]:
        combined["cores"] = arounds[0]["cores"]
    return combined


def step_laps(steps: Sequence[ChildStep]) -> Optional[ProcessClock]:
    """Per-step wall time (median and spread) and, per step, CPU time, run-queue wait and
    involuntary context switches of the process's threads."""
    if not steps:
        return None
    wall = sum(s["wall_ms"] for s in steps)
    out: ProcessClock = {"n": len(steps), "wall_ms": summary([s["wall_ms"] for s in steps])}
    cpu = _every(steps, "cpu_ms")
    if cpu is not None:
        out["cpu_ms_per_step"] = round(sum(cpu) / len(steps), 3)
        out["cpu_per_wall"] = round(sum(cpu) / wall, 3) if wall else None
    wait = _every(steps, "wait_ms")
    if wait is not None:
        out["wait_ms_per_step"] = round(sum(wait) / len(steps), 3)
        out["wait_share"] = round(sum(wait) / wall, 4) if wall else None
    switches = _every(steps, "nivcsw")
    if switches is not None:
        out["nivcsw_per_step"] = round(sum(switches) / len(steps), 1)
    return out


def _every(steps: Sequence[ChildStep], key: Literal["cpu_ms", "wait_ms", "nivcsw"]
           ) -> Optional[list[float]]:
    """Every step's ``key``, or None when a step lacks it (or holds None)."""
    values = [value for s in steps if (value := s.get(key)) is not None]
    return values if len(values) == len(steps) else None


def contention(facts: Machine, *, wall_s: Optional[float], wait_share: float,
               steal_share: float) -> MachineContention:
    """{contended, reasons[], evidence, share, oversubscribed, fix}: the rule in the module
    docstring; ``share`` is how much of the step the contention took (the run-queue wait's
    or steal's share, at most 1; 0.5 when only a load average or the GPU tells)."""
    usable = (facts.get("cores") or {}).get("usable")
    load = facts.get("load") or {}
    laps = facts.get("measured_steps") or {}
    reasons: list[str] = []
    busy = _load_text(load, usable)
    waited = laps.get("wait_share")
    if waited is not None and waited >= wait_share:
        reasons.append(
            f"this process's threads waited for a CPU {laps.get('wait_ms_per_step') or 0.0:.1f}"
            f" ms per step on average ({waited:.0%} of the steps' wall time, summed over "
            "its threads)"
            + (f", preempted {laps['nivcsw_per_step']:g} times per step"
               if laps.get("nivcsw_per_step") is not None else ""))
    steal = facts.get("steal_share")
    if steal is not None and steal >= steal_share:
        reasons.append(f"the hypervisor gave {steal:.0%} of the CPU time to other guests "
                       "(steal)")
    throttled = facts.get("cgroup_throttling") or {}
    throttled_ms = throttled.get("throttled_ms") or 0.0
    if wall_s and throttled_ms >= wait_share * wall_s * 1e3:
        reasons.append(f"the cgroup's CPU quota throttled the run {throttled.get('throttled')} "
                       f"times ({throttled_ms / 1e3:.1f} s)")
    start = load.get("at_start") or load.get("before")
    if laps.get("wait_share") is None and usable and start and start[0] >= usable:
        reasons.append(f"the load average was {start[0]:.2f} on {usable} usable cores when "
                       "the run started")
    for gpu in facts.get("gpu") or []:
        others = gpu.get("other_processes") or []
        if others:
            reasons.append(f"GPU {gpu['index']} also ran {len(others)} other process(es) "
                           f"(pid {', '.join(str(p['pid']) for p in others[:3])})")
        slow = sorted(GPU_SLOWDOWNS & set(gpu.get("throttle_reasons") or []))
        if slow:
            reasons.append(f"GPU {gpu['index']}'s clocks were held down ({', '.join(slow)}: "
                           f"SM {gpu.get('sm_clock_mhz')} of {gpu.get('sm_clock_max_mhz')} MHz)")
    threads = (facts.get("threads") or {}).get("intra_op")
    oversubscribed = bool(usable and threads and threads > usable)
    if oversubscribed:
        reasons.append(f"torch runs {threads} intra-op threads on {usable} usable cores")
    evidence = None
    if reasons:
        evidence = "the machine was busy" + (f" ({busy})" if busy else "") + ": " + \
            "; ".join(reasons)
    share = max(min(laps.get("wait_share") or 0.0, 1.0), steal or 0.0)
    return {"contended": bool(reasons), "reasons": reasons, "evidence": evidence,
            "share": round(share if share else (0.5 if reasons else 0.0), 3),
            "oversubscribed": oversubscribed, "fix": fix(threads) if reasons else None}


def _load_text(load: MachineLoad, usable: Optional[float]) -> Optional[str]:
    """'load 4.10 on 2 usable cores' when the 1-minute load reached the usable cores (a
    lower one lags behind a short run and would only confuse the evidence)."""
    values = [v[0] for v in (load.get("before"), load.get("at_end"), load.get("after")) if v]
    if not values or not usable or max(values) < usable:
        return None
    return f"load {max(values):.2f} on {usable} usable cores"
