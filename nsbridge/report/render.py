"""Render a report dict: terminal summary and Markdown (report/html.py: the HTML page).
Formatting only."""

from __future__ import annotations

import math
from typing import Any, Collection, Optional

from .. import schema as S
from .build import STOPPED, conclusive, measured_anything, measured_steps
from .definitions import markdown_block
from .escape import md_cell, md_code, md_text, terminal

PERFETTO = "https://ui.perfetto.dev"


def _ms(us: Optional[float]) -> str:
    return _decimals(us, 1e3, 3) or "-"


def _mib(value: Optional[float]) -> str:
    return _decimals(value, 1, 2) or "-"


def _us(ns: Optional[float]) -> Optional[str]:
    return _decimals(ns, 1e3, 2)


def _ms_or_dash(ms: Optional[float]) -> str:
    return _decimals(ms, 1, 3) or "-"


def _decimals(value: Any, unit: float, digits: int) -> Optional[str]:
    """``value / unit`` with ``digits`` decimals; None when it was not measured."""
    number = _measured(value)
    return None if number is None else _fixed(number / unit, digits)


def _where(point: dict[str, Any]) -> str:
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


def _op_rows(report: dict[str, Any], limit: int) -> list[list[str]]:
    rows = []
    for op in report["ops"][:limit]:
        copies = op.get("copies") or []
        rows.append([op[S.NAME], _int(op[S.CALLS]), _ms(op[S.CPU_SELF_US]),
                     _ms(op[S.CPU_TOTAL_US]), _ms(op[S.DEVICE_SELF_US]),
                     _ms(op[S.DEVICE_TOTAL_US]), _mib(op[S.MEM_MIB]),
                     _mib(op.get(S.MEM_NET_MIB)),
                     "-" if op[S.SELF_PCT] is None else f"{op[S.SELF_PCT]:.1f}",
                     "-" if op.get(S.SPREAD_PCT) is None else f"±{op[S.SPREAD_PCT]:.0f}",
                     str(sum(k["calls"] for k in op["kernels"])),
                     str(sum(c["calls"] for c in copies))])
    return rows


_DEVICE_COLUMNS = {"self device ms", "total device ms", "kernels", "copies+memsets"}
# per-op columns of the other passes, labelled by source: (header, key, format)
_PASS_COLUMNS = {
    S.NSYS_KEY: [("nsys kernel ms", "kernel_us", "ms"), ("nsys copy ms", "copy_us", "ms"),
             ("nsys idle before ms", "idle_before_us", "ms")],
    S.NCU_KEY: [("ncu SM %", "sm_pct", "pct"), ("ncu mem %", "memory_pct", "pct"),
            ("ncu occupancy %", "achieved_occupancy_pct", "pct"),
            ("ncu tensor %", "tensor_pct", "pct"), ("ncu L2 hit %", "l2_hit_pct", "pct"),
            ("ncu bound", "bound", "text")],
}


def op_table(report: dict[str, Any], limit: int) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the op table: torch.profiler's columns, then nsys's and ncu's
    where those passes ran (each header names its source); no device columns without one."""
    header, rows = _host_only(report, OP_HEADER, _op_rows(report, limit))
    for key, columns in _PASS_COLUMNS.items():
        if not any(op.get(key) for op in report["ops"]):
            continue
        header = [*header, *(h for h, _, _ in columns)]
        for row, op in zip(rows, report["ops"][:limit]):
            values = op.get(key) or {}
            row.extend(_cell(values.get(k), kind) for _, k, kind in columns)
    return header, rows


def _host_only(report: dict[str, Any], header: list[str],
               rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """Without a device, drop the device columns (all '-') from a printed table."""
    if report.get("device") is not None:
        return header, rows
    keep = [i for i, h in enumerate(header) if h not in _DEVICE_COLUMNS]
    return [header[i] for i in keep], [[r[i] for i in keep] for r in rows]


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "ms":
        return _ms(value)
    if kind == "pct":
        return _decimals(value, 1, 1) or "-"
    return str(value)


def _int(value: Optional[int]) -> str:
    return "-" if value is None else str(value)


OP_HEADER = ["op", "calls", "self CPU ms", "total CPU ms", "self device ms", "total device ms",
             "gross MiB", "net MiB", "%", "±% per step", "kernels", "copies+memsets"]
MEMORY_NOTE = ("gross MiB: allocated inside the op itself, not its children (any device); "
               "net MiB: allocated minus freed during the op and all it calls, on the run's "
               "device (torch's CUDA Mem / CPU Mem); ±% per step: half the 95% interval of "
               "the op's ranking time per step")


def _step_line(report: dict[str, Any]) -> Optional[str]:
    steps = report.get("steps") or {}
    mean = steps.get("mean") or {}
    if not mean:
        return None
    parts = " | ".join(f"{k} {'-' if _measured(v) is None else _pct(v)}"
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
    steal = _measured(facts.get("steal_share"))
    if steal is not None:
        parts.append(f"steal {_pct(steal)}")
    throttled = _measured((facts.get("cgroup_throttling") or {}).get("throttled"))
    if throttled is not None:
        parts.append(f"cgroup throttled {throttled:g}x")
    parts += [_gpu(gpu) for gpu in facts.get("gpu") or []]
    state = "CONTENDED" if (facts.get("contention") or {}).get("contended") else "quiet"
    return f"{state}: " + ("; ".join(parts) or "no machine facts measured")


def _cores(cores: dict[str, Any]) -> Optional[str]:
    usable, logical = _measured(cores.get("usable")), _measured(cores.get("logical"))
    if usable is None:
        return None if logical is None else f"{logical:g} logical cores (usable not measured)"
    return f"{usable:g} usable cores" + (f" of {logical:g}" if logical not in (None, usable)
                                         else "")


def _threads(threads: dict[str, Any]) -> Optional[str]:
    counts = [f"{n:g} {kind}" for kind, n in (("intra-op", _measured(threads.get("intra_op"))),
                                               ("inter-op", _measured(threads.get("inter_op"))))
              if n is not None]
    return f"torch {' / '.join(counts)} threads" if counts else None


def _load(load: dict[str, Any]) -> Optional[str]:
    firsts = {when: _measured((load.get(when) or [None])[0]) for when in ("before", "after")}
    ends = [f"{_fixed(value, 2)} {when}" for when, value in firsts.items() if value is not None]
    return "load " + ", ".join(ends) if ends else None


def _step_facts(laps: dict[str, Any]) -> list[str]:
    """CPU wait, CPU time and preemptions per measured step, those measured."""
    parts = []
    wait, share = _measured(laps.get("wait_ms_per_step")), _measured(laps.get("wait_share"))
    if wait is not None:
        parts.append(f"CPU wait {_fixed(wait, 1)} ms/step"
                     + (f" ({_pct(share)} of the step)" if share is not None else ""))
    cpu = _measured(laps.get("cpu_per_wall"))
    if cpu is not None:
        parts.append(f"CPU time {_fixed(cpu, 2)}x wall")
    preempted = _measured(laps.get("nivcsw_per_step"))
    if preempted is not None:
        parts.append(f"{preempted + 0.0:g} preemptions/step")
    return parts


def _gpu(gpu: dict[str, Any]) -> str:
    clock, peak = _measured(gpu.get("sm_clock_mhz")), _measured(gpu.get("sm_clock_max_mhz"))
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


def _measured(value: Any) -> Optional[float]:
    """A measured number as a float; None for None, NaN, infinities and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, never '-0.0'."""
    return f"{round(value, digits) + 0.0:.{digits}f}"


def _pct(share: float) -> str:
    """A share as a whole percentage ('12%'), never '-0%'."""
    return f"{_fixed(100 * share, 0)}%"


def verdict_headline(verdict: dict[str, Any]) -> str:
    """'CPU-BOUND', or with its doubts: 'CPU-BOUND or INPUT-BOUND on a contended machine
    (confidence: low)'."""
    labels = [verdict["label"], *(a["label"] for a in verdict.get("alternatives") or [])]
    text = " or ".join(label.upper() for label in labels)
    if verdict.get("contention"):
        text += " on a contended machine"
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
                f"{_count(measured_steps(report), 'complete measured step')} recorded before "
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
    span = (f"one window of {_fixed(_measured(window.get('seconds')) or 0.0, 3)} s without "
            "steps" if window.get("kind") == "trace"
            else _count(measured_steps(report), "complete measured step"))
    return ", ".join([f"the {partial}trace ({trace})" if trace else "no trace", span,
                      _count(len(report.get("ops") or []), "op")])


def _count(n: int, noun: str) -> str:
    """'no op', '1 op', '41 ops'."""
    return f"no {noun}" if n == 0 else f"{n} {noun}" + ("" if n == 1 else "s")


TIMELINE_HEADER = ["op (nsys)", "ranges", "range ms", "kernels", "kernel ms", "copies",
                   "copy ms", "memsets", "launch lat µs", "idle before ms", "sync ms"]


def _timeline_rows(timeline: dict[str, Any], limit: int) -> list[list[str]]:
    rows = []
    for op in timeline["ops"][:limit]:
        lat = op.get("launch_latency_us")
        rows.append([op["op"], str(op["ranges"]), _ms(op.get("range_us")), str(op["kernels"]),
                     _ms(op.get("kernel_us")), str(op.get("copies", 0)), _ms(op.get("copy_us")),
                     str(op.get("memsets", 0)), "-" if lat is None else f"{lat:.1f}",
                     _ms(op.get("idle_before_us")), _ms(op.get("sync_us"))])
    return rows


def _counts(by_kind: dict[str, Any]) -> str:
    """'12 kernels, 3 copies' from {'kernels': 12, 'copies': 3, 'memsets': 0}."""
    parts = [f"{n} {kind}" for kind, n in by_kind.items() if isinstance(n, int) and n]
    return ", ".join(parts) or "none"


def _attribution(attribution: dict[str, Any]) -> str:
    """'nvtx_push_pop: 12 kernels, 3 copies; no_launch_in_capture: 5 kernels'."""
    if not attribution:
        return "n/a (no GPU activity)"
    return "; ".join(f"{rule}: {_counts(v) if isinstance(v, dict) else v}"
                     for rule, v in attribution.items())


def _timeline_line(t: dict[str, Any]) -> str:
    busy = "-" if t.get("gpu_busy_pct") is None else f"{t['gpu_busy_pct']:.1f}%"
    return (f"nsys {t.get('nsys_version') or '?'}: {t['op_ranges']} op ranges, "
            f"{t['module_ranges']} module ranges, {t['kernels']} kernels, {t['copies']} copies, "
            f"{t.get('memsets', 0)} memsets, GPU busy {busy}; attribution "
            f"{_attribution(t['attribution'])}; NVTX ranges emitted "
            f"{_int(t['nvtx'].get('emitted'))}, recorded {_int(t['nvtx'].get('recorded'))}; "
            + _timeline_window(t.get("window") or {}))


def _timeline_window(window: dict[str, Any]) -> str:
    if window.get("kind") == "steps":
        steps = window["steps"]
        return (f"over the measured steps (nsbridge's step ranges {steps[0]}-{steps[-1]}), as "
                "the torch.profiler figures")
    return "over the whole capture" + (f" ({window['why']})" if window.get("why") else "")


def kernel_rate(dev: dict[str, Any]) -> str:
    if dev.get("kernels_per_step") is not None:
        return f"{dev['kernels_per_step']:g} per step"
    return f"{dev.get('kernels_per_s') or 0:g} per second"


def _rate_text(point: dict[str, Any]) -> str:
    if point.get("per_step") is not None:
        return f"{point['per_step']:g}/step"
    if point.get("per_s") is not None:
        return f"{point['per_s']:g}/s"
    return point.get("placement_why") or "no per-step rate without steps"


def _sync_cost(point: dict[str, Any]) -> str:
    text = f"host {point['host_ms']:.2f} ms"
    if point.get("gpu_idle_ms") is not None:
        text += f", GPU idle after {point['gpu_idle_ms']:.2f} ms"
    return text


def _early_line(device: dict[str, Any]) -> Optional[str]:
    early = device.get("launched_before_window") or {}
    if not any(early.get(k) for k in ("kernels", "copies", "memsets")):
        return None
    total = sum(early.get(k, 0.0) for k in ("kernel_us", "copy_us", "memset_us"))
    return (f"{_counts({k: early[k] for k in ('kernels', 'copies', 'memsets')})} "
            f"({total / 1e3:.3f} ms of GPU time) {early['explanation']}")


def _gap_host(g: dict[str, Any]) -> str:
    parts = [f"{k} {g[k]}" for k in ("op", "module", "step") if g.get(k)]
    return ", ".join(parts) or "no nsbridge range (Python between ops)"


def _ncu_line(ncu: dict[str, Any]) -> str:
    plan = ncu.get("plan") or {}
    attribution = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in
                            (ncu.get("attribution") or {}).items())
    version = f" {ncu['ncu_version']}" if ncu.get("ncu_version") else ""
    text = (f"ncu{version} ({ncu['source']}, {ncu['file']}): "
            f"{ncu['launches']} kernel launches ({attribution})")
    if plan:
        text += (f"; plan: {len(plan['ops'])} op(s), skipped {plan['launch_skip']} warm-up "
                 f"launches, profiled {plan['launch_count']}")
    if ncu.get("missing_quantities"):
        text += f"; not measured on this GPU or in this capture: {', '.join(ncu['missing_quantities'])}"
    return text


def _ncu_findings(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(op, finding title, detail) for every op with ncu numbers, in op-table order."""
    return [(op["name"], f["title"], f["detail"]) for op in report["ops"] if op.get("ncu")
            for f in op["ncu"].get("findings", [])]


RANK_HEADER = ["rank", "host", "status", "step ms", "collectives ms/step", "work ms/step",
               "verdict"]


def rank_rows(dist: dict[str, Any], with_file: bool = False) -> list[list[str]]:
    """One row per rank of the cross-rank section (``with_file``: and its trace, last, for
    analyze of several traces; the header is ``RANK_HEADER + ["file"]``)."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"
    return [[str(r["rank"]), str(r.get("host") or "-"), r["status"], num(r["step_ms"]),
             num(r["collective_ms_per_step"]), num(r["work_ms_per_step"]),
             str(r.get("verdict") or "-")] + ([str(r.get("file") or "-")] if with_file else [])
            for r in dist["ranks"]]


TIMELINE_RANK_HEADER = ["rank", "host", "status", "GPU busy %", "kernels", "kernel ms",
                        "comm kernel ms", "sync calls", "nsys report"]
NCU_RANK_HEADER = ["rank", "why this rank", "status", "launches", "per op: µs, SM %, "
                   "occupancy %, tensor %", "ncu report"]


def tool_rank_rows(section: dict[str, Any], kind: str) -> list[list[str]]:
    """One row per rank of the timeline or ncu section of a run of several ranks (the
    failed ones with their error in the last column)."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)
    rows = []
    for r in section.get("ranks") or []:
        files = r.get("files") or {}
        last = r.get("error") or files.get("nsys_rep" if kind == "timeline" else "ncu_rep") or "-"
        if kind == "timeline":
            rows.append([str(r["rank"]), str(r.get("host") or "-"), r["status"],
                         num(r.get("gpu_busy_pct")), num(r.get("kernels")),
                         _ms(r.get("kernel_us")), _ms(r.get("comm_kernel_us")),
                         num(r.get("sync_calls")), last])
        else:
            ops = "; ".join(
                f"{op} {_us(c.get('duration_ns')) or '-'}, {num(c.get('sm_pct'))}, "
                f"{num(c.get('achieved_occupancy_pct'))}, {num(c.get('tensor_pct'))}"
                for op, c in (r.get("ops") or {}).items())
            rows.append([str(r["rank"]), str(r.get("reason") or "-"), r["status"],
                         num(r.get("launches")), ops or "-", last])
    return rows


def distributed_lines(dist: dict[str, Any]) -> list[str]:
    """The cross-rank findings as sentences: steps, straggler, failed ranks, skew, collectives."""
    lines = []
    step = dist.get("step")
    if step:
        lines.append(f"{dist['world_size']} ranks: step {step['min_ms']:.2f} / "
                     f"{step['median_ms']:.2f} / {step['max_ms']:.2f} ms (min / median / max); "
                     f"slowest rank {step['slowest_rank']} (+{step['slowest_over_median_pct']:g}% "
                     "over the median)")
    straggler = dist.get("straggler")
    if straggler:
        lines.append(f"{straggler['verdict'].upper()}: " + "; ".join(straggler["evidence"]))
    for f in dist.get("failed", []):
        err = f.get("error")
        lines.append(f"rank {f['rank']} {f['status']}" + (f": {error_text(err)}" if err else ""))
    for s in dist.get("skew", [])[:3]:
        lines.append(f"skew: {s['op']} on rank {s['max_rank']} {s['max_us'] / 1e3:.2f} ms per "
                     f"step against a median of {s['median_us'] / 1e3:.2f} ms ({s['source']})")
    kinds: dict[str, list[dict[str, Any]]] = {}
    for c in dist.get("collectives", []):
        kinds.setdefault(c["kind"], []).append(c)
    for kind, rows in kinds.items():
        times = ", ".join(f"rank {c['rank']} {c['time_per_step_us'] / 1e3:.2f}" for c in rows)
        size = rows[0]["bytes"]
        lines.append(f"{kind}: {rows[0]['per_step']:g} per step"
                     + (f", {size / rows[0]['count'] / 2**20:.2f} MiB each" if size else "")
                     + f"; ms per step: {times}")
    return lines


def terminal_summary(report: dict[str, Any], run_dir: Optional[str], top: int = 10) -> str:
    """The short text printed after a run. Each line is escaped (escape.terminal) as it is
    printed, so no name, path or message from a trace or a script can drive the terminal."""
    lines = [*_text_head(report), *_text_findings(report, top), *_text_passes(report, top)]
    overhead = report.get("overhead")
    if overhead and overhead.get("ratio"):
        lines += ["", f"Profiler overhead: {overhead['note']}"]
    lines += [f"Note: {note}" for note in report.get("notes", [])]
    if run_dir:
        files = report.get("files") or {}
        trace = files.get("merged_trace") or files.get("trace")
        lines += ["", f"Run directory: {run_dir}  (report.md, report.html"
                  + (f", {trace} opens in {PERFETTO}" if trace else "") + ")"]
    return "\n".join(terminal(line) for line in lines)


def _text_head(report: dict[str, Any]) -> list[str]:
    """Status, error, what a stopped or failed run kept, the verdict, steps and machine."""
    lines = [f"nsbridge {report['command']}: {report['target']}  [status: {report['status']}]"]
    if report.get("error"):
        lines.append(f"  error: {error_text(report['error'])}")
    outcome = outcome_line(report)
    if outcome:
        lines.append(f"  {outcome}")
    verdict = shown_verdict(report)
    if verdict:
        lines += ["", f"{verdict_title(report)}: {verdict_headline(verdict)}"]
        lines += [f"  {kind} {text}" for kind, text in verdict_lines(verdict)]
    step = _step_line(report)
    if step:
        lines += ["", f"Steps: {step}"]
    window = window_line(report)
    if window:
        lines.append(f"Window: {window}")
    machine = machine_line(report.get("machine"))
    if machine:
        lines.append(f"Machine: {machine}")
    return lines


def _text_findings(report: dict[str, Any], top: int) -> list[str]:
    """Device, top ops, sync points and recommendations."""
    lines = []
    if report.get("device"):
        dev = report["device"]
        lines.append(f"Device: busy {dev['busy_pct']:.1f}% of the window, {dev['kernels']} "
                     f"kernels ({kernel_rate(dev)})")
        early = _early_line(dev)
        if early:
            lines.append(f"  {early}")
    if report["ops"]:
        ranked = "self device time" if report["ranked_by"] == S.DEVICE_SELF_US else "self CPU time"
        lines += ["", f"Top ops by {ranked}:", *_text_table(*op_table(report, top)),
                  f"  ({MEMORY_NOTE})"]
    if report["sync_points"]:
        lines += ["", "Sync points (host waits for the device):"]
        for p in report["sync_points"][:5]:
            over = ("outside the training steps" if p.get("placement") == "outside"
                    else f"over the {p['counted_over']}")
            lines.append(f"  {p['kind']:<22} {_where(p)}  x{p['count']} {over} "
                         f"({_rate_text(p)}; {_sync_cost(p)})")
    recommendations = shown_recommendations(report)[:3]
    if recommendations:
        lines += ["", "Recommendations:"]
        for i, r in enumerate(recommendations, 1):
            lines += [f"  {i}. {r['title']}: {r['why']}.", f"     Fix: {r['fix']}"]
    return lines


def _text_passes(report: dict[str, Any], top: int) -> list[str]:
    """The timeline, cross-rank and Nsight Compute sections."""
    lines = []
    timeline = report.get("timeline")
    if timeline:
        lines += ["", f"Timeline: {_timeline_line(timeline)}"]
        if timeline["ops"]:
            lines += _text_table(TIMELINE_HEADER, _timeline_rows(timeline, top))
        lines += [f"  GPU {g['device']} idle {g['dur_us'] / 1e3:.3f} ms while the host was in "
                  f"{_gap_host(g)}" for g in timeline["idle_gaps"][:3]]
        if timeline.get("ranks"):
            lines.append(f"  nsys per rank (the table above is rank {timeline['shown_rank']}'s):")
            lines += _text_table(TIMELINE_RANK_HEADER, tool_rank_rows(timeline, "timeline"))
    dist = report.get("distributed")
    if dist:
        lines += ["", "Ranks:", *_text_table(RANK_HEADER, rank_rows(dist))]
        lines += [f"  {line}" for line in distributed_lines(dist)]
    ncu = report.get("ncu")
    if ncu:
        lines += ["", f"Nsight Compute: {_ncu_line(ncu)}"]
        lines += [f"  {op}: {title}: {detail}" for op, title, detail in _ncu_findings(report)[:12]]
        if ncu.get("ranks"):
            lines.append(f"  ncu per rank (the findings above are rank {ncu['shown_rank']}'s):")
            lines += _text_table(NCU_RANK_HEADER, tool_rank_rows(ncu, "ncu"))
    return lines


def _text_table(header: list[str], rows: list[list[str]], name_width: int = 44) -> list[str]:
    """The lines of an aligned table, its cells escaped before they are measured."""
    def clip(s: str) -> str:
        return s if len(s) <= name_width else s[: name_width - 1] + "…"
    rows = [[clip(terminal(r[0])), *map(terminal, r[1:])] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = lambda cells: "  " + "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [fmt(header)] + [fmt(r) for r in rows]


def markdown(report: dict[str, Any], top: int = 15,
             key_averages: Optional[str] = None) -> str:
    """report.md, sized for a GitHub issue or PR comment; torch's own ``key_averages``
    table, when given, goes in a collapsed block. Everything from a trace or a script is
    escaped where it is placed: names as code spans in tables (escape.md_code), other text
    as Markdown text (escape.md_cell, md_text)."""
    md = [*_md_head(report), *_md_ops(report, top), *_md_device(report),
          *_md_syncs(report), *_md_recommendations(report), *_md_timeline(report, top),
          *_md_ranks(report), *_md_ncu(report, top), *_md_notes(report)]
    if key_averages:
        fence = "`" * 3
        table = "\n".join(terminal(line) for line in key_averages.rstrip().splitlines())
        md += ["", "<details><summary>torch.profiler's own key_averages() table</summary>", "",
               fence, table.replace(fence, "'" * 3), fence, "", "</details>"]
    md += ["", "## Sources", ""] + [f"- {md_cell(k)}: {md_cell(v)}"
                                   for k, v in report.get("sources", {}).items()]
    md += ["", *markdown_block()]
    return "\n".join(md) + "\n"


def _md_head(report: dict[str, Any]) -> list[str]:
    """Title, status, error, what a stopped or failed run kept, verdict, steps, machine."""
    md = [f"# nsbridge {report['command']}: {md_cell(report['target'])}", "",
          f"Status: **{md_cell(report['status'])}**"]
    if report.get("error"):
        md += ["", f"Error: {md_cell(error_text(report['error']))}"]
    outcome = outcome_line(report)
    if outcome:
        md += ["", md_text(outcome)]
    verdict = shown_verdict(report)
    if verdict:
        md += ["", f"## {verdict_title(report)}: {md_cell(verdict_headline(verdict))}", ""]
        marks = {"!": "**contended:** ", "-": "", "~": "", "?": "*", ">": ""}
        md += [f"- {marks[kind]}{md_cell(text)}" + ("*" if kind == "?" else "")
               for kind, text in verdict_lines(verdict)]
    step = _step_line(report)
    if step:
        md += ["", "## Steps", "", md_text(step)]
    window = window_line(report)
    if window:
        md += ["", f"Window: {md_cell(window)}"]
    machine = machine_line(report.get("machine"))
    if machine:
        md += ["", f"Machine: {md_cell(machine)}"]
    return md


def _md_ops(report: dict[str, Any], top: int) -> list[str]:
    """The op table and each op's top kernels and copies."""
    if not report["ops"]:
        return []
    header, rows = op_table(report, top)
    md = ["", "## Hot ops", *_md_table(header, rows, code={0}), "", f"Memory: {MEMORY_NOTE}."]
    work = [(op["name"], k, "kernel") for op in report["ops"][:top] for k in op["kernels"][:3]]
    work += [(op["name"], c, c["kind"]) for op in report["ops"][:top]
             for c in (op.get("copies") or [])[:2]]
    if work:
        md += ["", "### Kernels and copies per op (top 3 kernels, top 2 copies each)"]
        md += _md_table(["op", "kind", "name", "calls", "device ms"],
                        [[o, kind, k["name"][:120], str(k["calls"]), f"{k['device_us'] / 1e3:.3f}"]
                         for o, k, kind in work], code={0, 2})
    return md


def _md_device(report: dict[str, Any]) -> list[str]:
    dev = report.get("device")
    if not dev:
        return []
    md = ["", "## Device", "", f"Busy {dev['busy_pct']:.1f}% of the measured window; "
          f"{dev['kernels']} kernels; linking: {md_cell(dev['linking'])}; attribution: "
          f"{md_cell(_attribution(dev['attribution']))}"]
    early = _early_line(dev)
    if early:
        md += ["", f"Launched before the window: {md_cell(early)}"]
    if dev["idle_gaps"]:
        md += _md_table(["device", "gap ms", "at ms", "host was in"],
                        [[str(g["device"]), f"{g['dur_us'] / 1e3:.3f}",
                          f"{g['start_us'] / 1e3:.3f}", g["host_op"] or "Python between ops"]
                         for g in dev["idle_gaps"]], code={3})
    return md


def _md_syncs(report: dict[str, Any]) -> list[str]:
    if not report["sync_points"]:
        return []
    header = ["kind", "where", "op", "count", "counted over", "per step", "host ms",
              "GPU idle after ms"]
    return ["", "## Sync points", *_md_table(header, [
        [p["kind"], _where(p), p["op"] or "", str(p["count"]), p["counted_over"],
         per_step_cell(p), f"{p['host_ms']:.3f}", _ms_or_dash(p.get("gpu_idle_ms"))]
        for p in report["sync_points"]], code={2})]


def _md_recommendations(report: dict[str, Any]) -> list[str]:
    recommendations = shown_recommendations(report)
    if not recommendations:
        return []
    return ["", f"## Recommendations{' (partial run)' if report.get('status') in STOPPED else ''}",
            ""] + [f"{i}. **{md_cell(r['title'])}**: {md_cell(r['why'])}. Fix: "
                   f"{md_cell(r['fix'])} ([docs]({r['url']}))"
                   for i, r in enumerate(recommendations, 1)]


def _md_timeline(report: dict[str, Any], top: int) -> list[str]:
    timeline = report.get("timeline")
    if not timeline:
        return []
    md = ["", "## Timeline (Nsight Systems)", "", md_text(_timeline_line(timeline))]
    if timeline["ops"]:
        md += _md_table(TIMELINE_HEADER, _timeline_rows(timeline, top), code={0})
    if timeline["idle_gaps"]:
        md += _md_table(["device", "GPU idle ms", "host was in"],
                        [[str(g["device"]), f"{g['dur_us'] / 1e3:.3f}", _gap_host(g)]
                         for g in timeline["idle_gaps"]])
    if timeline.get("ranks"):
        md += ["", f"Per rank (the tables above are rank {md_cell(timeline['shown_rank'])}'s):"]
        md += _md_table(TIMELINE_RANK_HEADER, tool_rank_rows(timeline, "timeline"))
    return md


def _md_ranks(report: dict[str, Any]) -> list[str]:
    """The cross-rank section of a distributed run or of analyze's several traces (with
    each rank's trace file)."""
    dist = report.get("distributed")
    if not dist:
        return []
    with_file = report.get("command") == "analyze"
    header = RANK_HEADER + (["file"] if with_file else [])
    md = ["", "## Ranks", *_md_table(header, rank_rows(dist, with_file)), ""]
    return md + [f"- {md_text(line)}" for line in distributed_lines(dist)]


def _md_ncu(report: dict[str, Any], top: int) -> list[str]:
    ncu = report.get("ncu")
    if not ncu:
        return []
    md = ["", "## Kernels (Nsight Compute)", "", md_text(_ncu_line(ncu))]
    findings = _ncu_findings(report)
    if findings:
        md += _md_table(["op", "finding", "numbers"], [list(f) for f in findings], code={0})
    if ncu.get("ranks"):
        md += ["", f"Per rank (the findings are rank {md_cell(ncu['shown_rank'])}'s):"]
        md += _md_table(NCU_RANK_HEADER, tool_rank_rows(ncu, "ncu"))
    md += _md_table(["launch", "op", "kernel", "µs", "SM %", "mem %", "occupancy %", "tensor %"],
                    [[str(k["launch"]), k.get("op") or "-", str(k["kernel"])[:90],
                      _cell(_us(k.get("duration_ns")), "text"), _cell(k.get("sm_pct"), "pct"),
                      _cell(k.get("memory_pct"), "pct"),
                      _cell(k.get("achieved_occupancy_pct"), "pct"),
                      _cell(k.get("tensor_pct"), "pct")] for k in ncu["kernels"][:top]],
                    code={1, 2})
    return md


def _md_notes(report: dict[str, Any]) -> list[str]:
    md = []
    if report.get("overhead"):
        md += ["", "## Profiler overhead", "", md_text(report["overhead"]["note"])]
    if report.get("notes"):
        md += ["", "## Notes", ""] + [f"- {md_text(n)}" for n in report["notes"]]
    return md


def _md_table(header: list[str], rows: list[list[str]], code: Collection[int] = ()) -> list[str]:
    """A Markdown table after a blank line: the columns in ``code`` (names) as code spans
    (escape.md_code), the others as text (escape.md_cell)."""
    def cell(i: int, value: Any) -> str:
        return md_code(value) if i in code else md_cell(value)
    return (["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell(i, v) for i, v in enumerate(row)) + " |" for row in rows])
