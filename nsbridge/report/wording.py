"""The sentences and numbers every renderer shares: a report's values as text (the
verdict and its doubts, the machine, the steps, what a stopped run kept). Formatting only:
no layout, no escaping (each renderer escapes where it places the text)."""

from __future__ import annotations

import math
import re
from typing import Any, Optional

from .. import schema as S
from .build import STOPPED, conclusive, measured_anything, measured_steps


def ms(us: Optional[float]) -> str:
    return decimals(us, 1e3, 3) or "-"


def mib(value: Optional[float]) -> str:
    return decimals(value, 1, 2) or "-"


def us_from_ns(ns: Optional[float]) -> Optional[str]:
    return decimals(ns, 1e3, 2)


def ms_or_dash(value: Optional[float]) -> str:
    return decimals(value, 1, 3) or "-"


def decimals(value: Any, unit: float, digits: int) -> Optional[str]:
    """``value / unit`` with ``digits`` decimals; None when it was not measured."""
    number = measured(value)
    return None if number is None else fixed(number / unit, digits)


def measured(value: Any) -> Optional[float]:
    """A measured number as a float; None for None, NaN, infinities and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, never '-0.0'."""
    return f"{round(value, digits) + 0.0:.{digits}f}"


def pct(share: float) -> str:
    """A share as a whole percentage ('12%'), never '-0%'."""
    return f"{fixed(100 * share, 0)}%"


def count(n: int, noun: str) -> str:
    """'no op', '1 op', '41 ops', '2 kernel launches'."""
    plural = "es" if noun.endswith(("ch", "sh", "s", "x")) else "s"
    return f"no {noun}" if n == 0 else f"{n} {noun}" + ("" if n == 1 else plural)


def is_number(cell: str) -> bool:
    """A table cell of a number: '12.5', '±3', '4/s', '7%', or '-' (not measured)."""
    text = cell.strip().lstrip("±").removesuffix("/s").removesuffix("%")
    if text == "-":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def int_text(value: Optional[int]) -> str:
    return "-" if value is None else str(value)


def cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "ms":
        return ms(value)
    if kind == "pct":
        return decimals(value, 1, 1) or "-"
    return str(value)


def where(point: dict[str, Any]) -> str:
    if point.get("file"):
        text = f"{point['file']}:{point['line']}"
        if point.get("function") and point.get("placement") == "outside":
            text = f"{point['function']}() at {text}"
        return text + (f" (via {point['via']})" if point.get("via") else "")
    return f"in {point['op']}" if point.get("op") else "(no Python line in the trace)"


def per_step_cell(point: dict[str, Any]) -> str:
    """A sync site's rate for a table cell: per step, per second, or '-' (outside)."""
    if point.get("per_step") is not None:
        return f"{point['per_step']:g}"
    return f"{point['per_s']:g}/s" if point.get("per_s") is not None else "-"


def counted_over(point: dict[str, Any]) -> str:
    """What a sync site's count covers: 'measured steps', 'whole run', or 'outside the
    training steps' for a site only outside them (evaluation, logging)."""
    return ("outside the training steps" if point.get("placement") == "outside"
            else str(point["counted_over"]))


_BACKWARD_NODE = re.compile(r"^[A-Z]\w*Backward\d*$")


def run_on_line(report: dict[str, Any]) -> Optional[str]:
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


def is_autograd_wrapper(name: str) -> bool:
    """autograd's own nodes around a backward op: evaluate_function ranges, ``XBackward0``
    nodes and AccumulateGrad, whose self time is the engine's bookkeeping (an op that
    launched kernels itself is never left out)."""
    return (name.startswith("autograd::engine::evaluate_function:")
            or name == "torch::autograd::AccumulateGrad" or bool(_BACKWARD_NODE.match(name)))


def model_ops(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops the tables and charts show: autograd's wrappers left out (an op that
    launched kernels itself is always kept)."""
    return [op for op in ops if op.get(S.KERNELS) or not is_autograd_wrapper(op[S.NAME])]


def span_text(report: dict[str, Any]) -> str:
    """What a total covers, said the same way everywhere: 'over the 3 measured steps', or
    'over the 0.087 s window' without steps."""
    window = report.get("window") or {}
    dist = report.get("distributed") or {}
    ranks = len(dist.get("ranks") or [])
    summed = ("" if ranks < 2 else f", rank {dist['shown_rank']}'s" if dist.get("shown_rank")
              is not None else f", summed over {ranks} ranks")
    runs = int(window.get("runs") or 1)
    pooled = f" of {runs} processes" if runs > 1 else ""
    if window.get("kind") == "trace":
        return f"over the {window['seconds']:.3f} s window{pooled}{summed}"
    steps = int(window.get("steps") or (report.get("steps") or {}).get("count") or 0)
    return (f"over the {steps} measured steps" if steps != 1
            else "over the 1 measured step") + pooled + summed


def window_line(report: dict[str, Any]) -> Optional[str]:
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


def step_line(report: dict[str, Any]) -> Optional[str]:
    steps = report.get("steps") or {}
    mean = steps.get("mean") or {}
    if not mean:
        return None
    parts = " | ".join(f"{k} {'-' if measured(v) is None else pct(v)}"
                       for k, v in (mean.get("shares") or {}).items())
    if (report.get("window") or {}).get("kind") == "trace":
        return f"none; the {mean['wall_ms']:.2f} ms window: {parts}"
    spread = steps.get("spread") or {}
    text = f"{mean['wall_ms']:.2f} ms per step (mean of {steps['count']}"
    if (spread.get("n") or 0) > 1 and spread.get("ci_low") is not None:
        text += (f"; median {spread['median']:.2f}, 95% interval {spread['ci_low']:.2f}-"
                 f"{spread['ci_high']:.2f}")
    text += f"; steps from {steps['detected_by']}): {parts}"
    bare = steps.get("unprofiled")
    if bare:
        text += (f"; {bare['n']} unprofiled step(s): median {bare['median']:.2f} ms"
                 + (f" (p10-p90 {bare['p10']:.2f}-{bare['p90']:.2f})" if bare["n"] > 1 else ""))
    return text


def machine_line(facts: Optional[dict[str, Any]]) -> Optional[str]:
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


def _cores(cores: dict[str, Any]) -> Optional[str]:
    usable, logical = measured(cores.get("usable")), measured(cores.get("logical"))
    if usable is None:
        return None if logical is None else f"{logical:g} logical cores (usable not measured)"
    return f"{usable:g} usable cores" + (f" of {logical:g}" if logical not in (None, usable)
                                         else "")


def _threads(threads: dict[str, Any]) -> Optional[str]:
    counts = [f"{n:g} {kind}" for kind, n in (("intra-op", measured(threads.get("intra_op"))),
                                               ("inter-op", measured(threads.get("inter_op"))))
              if n is not None]
    return f"torch {' / '.join(counts)} threads" if counts else None


def _load(load: dict[str, Any]) -> Optional[str]:
    firsts = {when: measured((load.get(when) or [None])[0]) for when in ("before", "after")}
    ends = [f"{fixed(value, 2)} {when}" for when, value in firsts.items() if value is not None]
    return "load " + ", ".join(ends) if ends else None


def _step_facts(laps: dict[str, Any]) -> list[str]:
    """CPU wait, CPU time and preemptions per measured step, those measured."""
    parts = []
    wait, share = measured(laps.get("wait_ms_per_step")), measured(laps.get("wait_share"))
    if wait is not None:
        parts.append(f"CPU wait {fixed(wait, 1)} ms/step"
                     + (f" ({pct(share)} of the step)" if share is not None else ""))
    cpu = measured(laps.get("cpu_per_wall"))
    if cpu is not None:
        parts.append(f"CPU time {fixed(cpu, 2)}x wall")
    preempted = measured(laps.get("nivcsw_per_step"))
    if preempted is not None:
        parts.append(f"{preempted + 0.0:g} preemptions/step")
    return parts


def _gpu(gpu: dict[str, Any]) -> str:
    clock, peak = measured(gpu.get("sm_clock_mhz")), measured(gpu.get("sm_clock_max_mhz"))
    text = "GPU" + (f" {gpu['index']}" if gpu.get("index") is not None else "")
    if clock is None:
        text += " SM clock not measured"
    else:
        text += f" SM {clock:g}" + (f"/{peak:g}" if peak is not None else "") + " MHz"
    if gpu.get("throttle_reasons"):
        text += f", throttle: {','.join(map(str, gpu['throttle_reasons']))}"
    if gpu.get("other_processes"):
        text += f", {len(gpu['other_processes'])} other process(es)"
    return text


def verdict_headline(verdict: dict[str, Any], report: Optional[dict[str, Any]] = None) -> str:
    """'CPU-BOUND', or with its doubts: 'CPU-BOUND or INPUT-BOUND on a contended machine
    (confidence: low)'; in a job whose ranks have a straggler, '..., RANK 3 A STRAGGLER
    (+42% work per step)': the finding that decides what to fix first."""
    labels = [verdict["label"], *(a["label"] for a in verdict.get("alternatives") or [])]
    text = " or ".join(label.upper() for label in labels)
    if verdict.get("contention"):
        text += " on a contended machine"
    straggler = ((report or {}).get(S.DISTRIBUTED_SECTION) or {}).get("straggler") or {}
    if straggler.get("verdict") == "straggler":
        text += (f"; RANK {straggler['rank']} A STRAGGLER"
                 + (f" (+{straggler['excess_pct']:.0f}%)"
                    if straggler.get("excess_pct") is not None else ""))
    if verdict.get("confidence"):
        text += f" (confidence: {verdict['confidence']})"
    return text


def verdict_lines(verdict: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, sentence): '!' contention, '-' evidence, '~' alternatives, '?' cannot tell,
    '>' what would settle it."""
    lines = []
    if verdict.get("contention"):
        lines.append(("!", verdict["contention"]))
    lines += [("-", e) for e in verdict["evidence"]]
    lines += [("~", f"{a['label']} is possible: {a['why']}")
              for a in verdict.get("alternatives") or []]
    lines += [("?", f"cannot tell {c}") for c in verdict.get("cannot_conclude", [])]
    if verdict.get("settle"):
        lines.append((">", "what would settle it: " + "; ".join(verdict["settle"])))
    return lines


def error_text(err: dict[str, Any]) -> str:
    """'ValueError: bad batch (at train.py:42)': the error's type, message and the script's
    line, leaving out what it does not have."""
    text = ": ".join(str(err[k]) for k in ("type", "message") if err.get(k) not in (None, ""))
    if err.get("file"):
        text += (f" (at {err['file']}" + (f":{err['line']}" if err.get("line") is not None
                                          else "") + ")")
    return text or "no details recorded"


def shown_verdict(report: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The verdict the outputs show: none for a run that concludes nothing
    (build.conclusive), whatever report.json holds (a pass after the torch.profiler one can
    fail the run after its verdict was built)."""
    return report.get("verdict") if conclusive(report) else None


def shown_recommendations(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The recommendations the outputs show (none where the verdict is not shown)."""
    return list(report.get("recommendations") or []) if conclusive(report) else []


def verdict_title(report: dict[str, Any]) -> str:
    """'Verdict', or 'Verdict (partial run)' for a run stopped before it finished."""
    return "Verdict" + (" (partial run)" if report.get("status") in STOPPED else "")


def outcome_line(report: dict[str, Any]) -> Optional[str]:
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


def _why_none(report: dict[str, Any]) -> str:
    status = report.get("status")
    if status in STOPPED:
        return f"the run was {STOPPED[status]} before its first complete measured step"
    return {"ok": "nothing was measured (no op, no GPU work)", "failed": "the run failed",
            "no-trace": "the run left no trace nsbridge could analyse",
            "hung": "a rank hung"}.get(str(status), f"the run did not finish (status {status})")


def kept_text(report: dict[str, Any]) -> str:
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


def counts(by_kind: dict[str, Any]) -> str:
    """'12 kernels, 3 copies' from {'kernels': 12, 'copies': 3, 'memsets': 0}."""
    parts = [f"{n} {kind}" for kind, n in by_kind.items() if isinstance(n, int) and n]
    return ", ".join(parts) or "none"


def attribution(by_rule: dict[str, Any]) -> str:
    """'nvtx_push_pop: 12 kernels, 3 copies; no_launch_in_capture: 5 kernels'."""
    if not by_rule:
        return "n/a (no GPU activity)"
    return "; ".join(f"{rule}: {counts(v) if isinstance(v, dict) else v}"
                     for rule, v in by_rule.items())


def kernel_rate(dev: dict[str, Any]) -> str:
    """'120 per step', or per second without steps."""
    if dev.get("kernels_per_step") is not None:
        return f"{dev['kernels_per_step']:g} per step"
    return f"{dev.get('kernels_per_s') or 0:g} per second"


def rate_text(point: dict[str, Any]) -> str:
    """A sync site's rate ('3/step', '12/s'), or why it has none."""
    if point.get("per_step") is not None:
        return f"{point['per_step']:g}/step"
    if point.get("per_s") is not None:
        return f"{point['per_s']:g}/s"
    return point.get("placement_why") or "no per-step rate without steps"


def sync_cost(point: dict[str, Any]) -> str:
    """What a sync site cost: host time, and GPU idle after it where measured."""
    text = f"host {point['host_ms']:.2f} ms"
    if point.get("gpu_idle_ms") is not None:
        text += f", GPU idle after {point['gpu_idle_ms']:.2f} ms"
    return text


def early_line(device: dict[str, Any]) -> Optional[str]:
    """The GPU work queued before the window opened, when there was any."""
    early = device.get("launched_before_window") or {}
    if not any(early.get(k) for k in ("kernels", "copies", "memsets")):
        return None
    total = sum(early.get(k, 0.0) for k in ("kernel_us", "copy_us", "memset_us"))
    return (f"{counts({k: early[k] for k in ('kernels', 'copies', 'memsets')})} "
            f"({total / 1e3:.3f} ms of GPU time) {early['explanation']}")


def gap_host(g: dict[str, Any]) -> str:
    """Where the host was (nsbridge's op, module and step ranges) during a GPU idle gap."""
    parts = [str(g[k]) if str(g[k]).startswith(f"{k} ") else f"{k} {g[k]}"   # 'step 4'
             for k in ("op", "module", "step") if g.get(k)]
    return ", ".join(parts) or "no nsbridge range (Python between ops)"


def trouble_lines(report: dict[str, Any]) -> list[str]:
    """What went wrong, for the head of every view: 'Error: ...' and the outcome line
    (outcome_line), those the run has."""
    lines = [f"Error: {error_text(report['error'])}"] if report.get("error") else []
    outcome = outcome_line(report)
    return lines + ([outcome] if outcome else [])


def context_lines(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) of the run's steps, window and machine, those it has."""
    found = (("Run on", run_on_line(report)), ("Steps", step_line(report)),
             ("Window", window_line(report)), ("Machine", machine_line(report.get("machine"))))
    return [(label, text) for label, text in found if text]
