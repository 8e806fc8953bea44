"""The sentences of a report's head, which every view shows above its sections: the verdict
(its title, headline and lines: evidence, doubts, alternatives), what went wrong and what a
stopped or failed run kept, the steps, the window and the machine. Text only: numbers come
formatted from report.document.formats; no layout, no escaping."""

from __future__ import annotations

from typing import Any, Optional

from ... import schema as S
from .build import STOPPED, conclusive, measured_anything, measured_steps
from .formats import count, fixed, measured, pct
from ...contract.report import Error, Machine, MachineCores, MachineGpu, MachineLoad, MachineThreads, ProcessClock, Report, Verdict


def run_on_line(report: Report) -> Optional[str]:
    """Host, Python, torch, device and cores in one line, where the run recorded them."""
    env = report.get("environment") or {}
    if not env:
        return None
    gpus = [g if isinstance(g, str) else str(g.get("name")) for g in env.get("gpus") or []]
    names = sorted(set(gpus))
    device = (", ".join(f"{n} x{gpus.count(n)}" for n in names)
              + (f" (CUDA {env['cuda']})" if env.get("cuda") else "")) if gpus else "no GPU"
    cores = ((report.get("machine") or {}).get("cores") or {}).get("usable")
    parts = [f"host {env['host']}" if env.get("host") else None,
             f"Python {env['python']}" if env.get("python") else None,
             f"torch {env['torch']}" if env.get("torch") else None, device,
             f"{cores} usable cores" if cores else None]
    return " · ".join(p for p in parts if p)

def window_line(report: Report) -> Optional[str]:
    """What the figures cover, when that is not simply the measured steps."""
    window = report.get("window") or {}
    if not window:
        return None
    notes = "; ".join(window.get("notes") or [])
    if window.get("kind") == "trace":
        return (f"one window of {window['seconds']:.3f} s without steps ("
                + ("--window trace" if window.get("asked") == "trace" else "no step ranges in "
                   "the trace") + "): figures are totals over it and rates per second"
                + (f"; {notes}" if notes else ""))
    return notes or None

GPU_BEHIND = 1.25   # the GPU's step cadence over the host's median step: the GPU ran behind


def step_line(report: Report) -> Optional[str]:
    steps = report.get("steps")
    mean = (steps.get("mean") if steps else None) or {}
    if not steps or not mean:
        return None
    parts = " | ".join(f"{k} {'-' if (share := measured(v)) is None else pct(share)}"
                       for k, v in (mean.get("shares") or {}).items())
    if (report.get("window") or {}).get("kind") == "trace":
        return f"none; the {mean['wall_ms']:.2f} ms window: {parts}"
    spread = steps.get("spread") or {}
    text = f"{mean['wall_ms']:.2f} ms per step (mean of {steps['count']}"
    if (spread.get("n") or 0) > 1 and spread.get("ci_low") is not None:
        text += (f"; median {spread['median']:.2f}, 95% interval {spread['ci_low']:.2f}-"
                 f"{spread['ci_high']:.2f}")
    text += f"; steps from {steps['detected_by']}): {parts}"
    done = steps.get("gpu_done") or {}
    done_ms, step_ms = done.get("median"), spread.get("median")
    if done_ms and step_ms and done_ms > GPU_BEHIND * step_ms:
        text += (f"; the GPU finished a step every {done_ms:.2f} ms (median of "
                 f"{done['n']}): it ran behind the host, whose step times measure the "
                 "queueing, not the work")
    bare = steps.get("unprofiled")
    if bare:
        text += (f"; {bare['n']} unprofiled step(s): median {bare['median']:.2f} ms"
                 + (f" (p10-p90 {bare['p10']:.2f}-{bare['p90']:.2f})" if (bare.get("n") or 0) > 1 else ""))
    return text

def machine_line(facts: Optional[Machine]) -> Optional[str]:
    """The machine facts in one line for the reports; what was not measured is left out."""
    if not facts:
        return None
    parts = [part for part in (_cores(facts.get("cores") or {}),
                               _threads(facts.get("threads") or {}),
                               _load(facts.get("load") or {})) if part]
    parts += _step_facts(facts.get("measured_steps") or {})
    steal = measured(facts.get("steal_share"))
    if steal is not None:
        parts.append(f"steal {pct(steal)}")
    throttled = measured((facts.get("cgroup_throttling") or {}).get("throttled"))
    if throttled is not None:
        parts.append(f"cgroup throttled {throttled:g}x")
    parts += [_gpu(gpu) for gpu in facts.get("gpu") or []]
    state = "CONTENDED" if (facts.get("contention") or {}).get("contended") else "quiet"
    return f"{state}: " + ("; ".join(parts) or "no machine facts measured")

def _cores(cores: MachineCores) -> Optional[str]:
    usable, logical = measured(cores.get("usable")), measured(cores.get("logical"))
    if usable is None:
        return None if logical is None else f"{logical:g} logical cores (usable not measured)"
    return f"{usable:g} usable cores" + (f" of {logical:g}" if logical not in (None, usable)
                                         else "")

def _threads(threads: MachineThreads) -> Optional[str]:
    counts = [f"{n:g} {kind}" for kind, n in (("intra-op", measured(threads.get("intra_op"))),
                                               ("inter-op", measured(threads.get("inter_op"))))
              if n is not None]
    return f"torch {' / '.join(counts)} threads" if counts else None

def _load(load: MachineLoad) -> Optional[str]:
    firsts = {when: measured(values[0]) if values else None
              for when, values in (("before", load.get("before")), ("after", load.get("after")))}
    ends = [f"{fixed(value, 2)} {when}" for when, value in firsts.items() if value is not None]
    return "load " + ", ".join(ends) if ends else None

def _step_facts(laps: ProcessClock) -> list[str]:
    """CPU wait, CPU time and preemptions per measured step, those measured."""
    parts = []
    wait, share = measured(laps.get("wait_ms_per_step")), measured(laps.get("wait_share"))
    if wait is not None:
        # a sub-millisecond step's wait keeps two decimals: "0.0 ms (5% of the step)" reads
        # as a contradiction
        parts.append(f"CPU wait {fixed(wait, 1 if wait >= 0.1 or wait == 0 else 2)} ms/step"
                     + (f" ({pct(share)} of the step)" if share is not None else ""))
    cpu = measured(laps.get("cpu_per_wall"))
    if cpu is not None:
        parts.append(f"CPU time {fixed(cpu, 2)}x wall")
    preempted = measured(laps.get("nivcsw_per_step"))
    if preempted is not None:
        parts.append(f"{preempted + 0.0:g} preemptions/step")
    return parts

def _gpu(gpu: MachineGpu) -> str:
    clock, peak = measured(gpu.get("sm_clock_mhz")), measured(gpu.get("sm_clock_max_mhz"))
    text = "GPU" + (f" {gpu['index']}" if gpu.get("index") is not None else "")
    if clock is None:
        text += " SM clock not measured"
    else:
        text += f" SM {clock:g}" + (f"/{peak:g}" if peak is not None else "") + " MHz"
    reasons, others = gpu.get("throttle_reasons"), gpu.get("other_processes")
    if reasons:
        text += f", throttle: {','.join(map(str, reasons))}"
    if others:
        text += f", {len(others)} other process(es)"
    return text

def verdict_headline(verdict: Verdict, report: Optional[Report] = None) -> str:
    """'CPU-BOUND', or with its doubts: 'CPU-BOUND or INPUT-BOUND on a contended machine
    (confidence: low)'; in a job whose ranks have a straggler, '..., RANK 3 A STRAGGLER
    (+42% work per step)': the finding that decides what to fix first."""
    labels = [verdict["label"], *(a.get("label") for a in verdict.get("alternatives") or [])]
    text = " or ".join(label.upper() for label in labels if label)
    if verdict.get("contention"):
        text += " on a contended machine"
    ranks = report.get(S.DISTRIBUTED_SECTION) if report else None
    straggler = (ranks or {}).get("straggler") or {}
    if straggler.get("verdict") == "straggler":
        text += (f"; RANK {straggler['rank']} A STRAGGLER"
                 + (f" (+{straggler['excess_pct']:.0f}%)"
                    if straggler.get("excess_pct") is not None else ""))
    if verdict.get("confidence"):
        text += f" (confidence: {verdict['confidence']})"
    return text

def verdict_lines(verdict: Verdict) -> list[tuple[str, str]]:
    """(kind, sentence): '!' contention, '-' evidence, '~' alternatives, '?' cannot tell,
    '>' what would settle it."""
    lines: list[tuple[str, str]] = []
    contention, settle = verdict.get("contention"), verdict.get("settle")
    if contention:
        lines.append(("!", contention))
    lines += [("-", e) for e in verdict.get("evidence") or []]
    lines += [("~", f"{a['label']} is possible: {a['why']}")
              for a in verdict.get("alternatives") or []]
    lines += [("?", f"cannot tell {c}") for c in verdict.get("cannot_conclude") or []]
    if settle:
        lines.append((">", "what would settle it: " + "; ".join(settle)))
    return lines

def error_text(err: Error) -> str:
    """'ValueError: bad batch (at train.py:42)': the error's type, message and the script's
    line, leaving out what it does not have."""
    text = ": ".join(str(err[k]) for k in ("type", "message") if err.get(k) not in (None, ""))
    if err.get("file"):
        text += (f" (at {err['file']}" + (f":{err['line']}" if err.get("line") is not None
                                          else "") + ")")
    return text or "no details recorded"

def shown_verdict(report: Report) -> Optional[Verdict]:
    """The verdict the outputs show: none for a run that concludes nothing
    (build.conclusive), whatever report.json holds (a pass after the torch.profiler one can
    fail the run after its verdict was built)."""
    return report.get("verdict") if conclusive(report) else None

def verdict_title(report: Report) -> str:
    """'Verdict', or 'Verdict (partial run)' for a run stopped before it finished."""
    return "Verdict" + (" (partial run)" if report.get("status") in STOPPED else "")

def outcome_line(report: Report) -> Optional[str]:
    """For a run stopped, failed or with nothing measured in its window: whether its
    verdict is partial or withheld, and what was kept. None for any other run that ended
    ok (one without a torch.profiler window has no verdict to withhold)."""
    status = report.get("status")
    if status == "ok" and (measured_anything(report) or not report.get("window")):
        return None
    if status in STOPPED and conclusive(report):
        return (f"Partial run, {STOPPED[status]}: the verdict and recommendations rest on the "
                f"{count(measured_steps(report), 'complete measured step')} recorded before "
                f"it stopped. Kept: {kept_text(report)}.")
    return f"No verdict or recommendations: {_why_none(report)}. Kept: {kept_text(report)}."

def _why_none(report: Report) -> str:
    status = report.get("status")
    if status in STOPPED:
        return f"the run was {STOPPED[status]} before its first complete measured step"
    return {"ok": "nothing was measured (no op, no GPU work)", "failed": "the run failed",
            "no-trace": "the run left no trace nsbridge could analyse",
            "hung": "a rank hung"}.get(str(status), f"the run did not finish (status {status})")

def kept_text(report: Report) -> str:
    """What a run kept: its trace file, its measured steps (or window) and ops."""
    files = report.get("files") or {}
    trace = files.get("trace") or files.get("trace_input")
    partial = "" if report.get("status") == "ok" else "partial "
    window = report.get("window") or {}
    span = (f"one window of {fixed(measured(window.get('seconds')) or 0.0, 3)} s without "
            "steps" if window.get("kind") == "trace"
            else count(measured_steps(report), "complete measured step"))
    return ", ".join([f"the {partial}trace ({trace})" if trace else "no trace", span,
                      count(len(report.get("ops") or []), "op")])

def trouble_lines(report: Report) -> list[str]:
    """What went wrong, for the head of every view: 'Error: ...' and the outcome line
    (outcome_line), those the run has."""
    error = report.get("error")
    lines = [f"Error: {error_text(error)}"] if error else []
    outcome = outcome_line(report)
    return lines + ([outcome] if outcome else [])

def context_lines(report: Report) -> list[tuple[str, str]]:
    """(label, text) of the run's steps, window and machine, those it has."""
    found = (("Run on", run_on_line(report)), ("Steps", step_line(report)),
             ("Window", window_line(report)), ("Machine", machine_line(report.get("machine"))))
    return [(label, text) for label, text in found if text]
