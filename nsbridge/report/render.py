"""Render a report dict: terminal summary and Markdown (report/html.py: the HTML page).
Formatting only."""

from __future__ import annotations

from typing import Any, Optional

from .definitions import markdown_block

PERFETTO = "https://ui.perfetto.dev"


def _ms(us: Optional[float]) -> str:
    return "-" if us is None else f"{us / 1e3:.3f}"


def _mib(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def _us(ns: Optional[float]) -> Optional[str]:
    return None if ns is None else f"{ns / 1e3:.2f}"


def _ms_or_dash(ms: Optional[float]) -> str:
    return "-" if ms is None else f"{ms:.3f}"


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
        rows.append([op["name"], _int(op["calls"]), _ms(op["cpu_self_us"]),
                     _ms(op["cpu_total_us"]), _ms(op["device_self_us"]),
                     _ms(op["device_total_us"]), _mib(op["mem_mib"]), _mib(op.get("mem_net_mib")),
                     "-" if op["self_pct"] is None else f"{op['self_pct']:.1f}",
                     "-" if op.get("spread_pct") is None else f"±{op['spread_pct']:.0f}",
                     str(sum(k["calls"] for k in op["kernels"])),
                     str(sum(c["calls"] for c in copies))])
    return rows


_DEVICE_COLUMNS = {"self device ms", "total device ms", "kernels", "copies+memsets"}
# per-op columns of the other passes, labelled by source: (header, key, format)
_PASS_COLUMNS = {
    "nsys": [("nsys kernel ms", "kernel_us", "ms"), ("nsys copy ms", "copy_us", "ms"),
             ("nsys idle before ms", "idle_before_us", "ms")],
    "ncu": [("ncu SM %", "sm_pct", "pct"), ("ncu mem %", "memory_pct", "pct"),
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
        return f"{value:.1f}"
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
    shares = mean["shares"]
    parts = " | ".join(f"{k} {v:.0%}" for k, v in shares.items())
    if (report.get("window") or {}).get("kind") == "trace":
        return f"none; the {mean['wall_ms']:.2f} ms window: {parts}"
    spread = steps.get("spread") or {}
    text = f"{mean['wall_ms']:.2f} ms per step (mean of {steps['count']}"
    if spread.get("n", 0) > 1:
        text += (f"; median {spread['median']:.2f}, 95% interval {spread['ci_low']:.2f}-"
                 f"{spread['ci_high']:.2f}")
    text += f"; steps from {steps['detected_by']}): {parts}"
    bare = steps.get("unprofiled")
    if bare:
        text += (f"; {bare['n']} unprofiled step(s): median {bare['median']:.2f} ms"
                 + (f" (p10-p90 {bare['p10']:.2f}-{bare['p90']:.2f})" if bare["n"] > 1 else ""))
    return text


def machine_line(facts: Optional[dict[str, Any]]) -> Optional[str]:
    """The machine facts in one line for the reports."""
    if not facts:
        return None
    cores = facts.get("cores") or {}
    threads = facts.get("threads") or {}
    parts = [f"{cores.get('usable')} usable cores" + (
        f" of {cores['logical']}" if cores.get("logical") not in (None, cores.get("usable"))
        else "")]
    if threads:
        parts.append(f"torch {threads.get('intra_op')} intra-op / {threads.get('inter_op')} "
                     "inter-op threads")
    load = facts.get("load") or {}
    if load.get("before") or load.get("after"):
        parts.append(f"load {_first(load.get('before'))} before, {_first(load.get('after'))} "
                     "after")
    laps = facts.get("measured_steps") or {}
    if laps.get("wait_ms_per_step") is not None:
        parts.append(f"CPU wait {laps['wait_ms_per_step']:.1f} ms/step "
                     f"({laps['wait_share']:.0%} of the step)")
    if laps.get("cpu_per_wall") is not None:
        parts.append(f"CPU time {laps['cpu_per_wall']:.2f}x wall")
    if laps.get("nivcsw_per_step") is not None:
        parts.append(f"{laps['nivcsw_per_step']:g} preemptions/step")
    if facts.get("steal_share") is not None:
        parts.append(f"steal {facts['steal_share']:.0%}")
    throttled = facts.get("cgroup_throttling")
    if throttled is not None:
        parts.append(f"cgroup throttled {throttled['throttled']}x")
    for gpu in facts.get("gpu") or []:
        parts.append(f"GPU {gpu['index']} SM {gpu.get('sm_clock_mhz')}/"
                     f"{gpu.get('sm_clock_max_mhz')} MHz"
                     + (f", throttle: {','.join(gpu['throttle_reasons'])}"
                        if gpu.get("throttle_reasons") else "")
                     + (f", {len(gpu['other_processes'])} other process(es)"
                        if gpu.get("other_processes") else ""))
    state = "CONTENDED" if (facts.get("contention") or {}).get("contended") else "quiet"
    return f"{state}: " + "; ".join(parts)


def _first(load: Optional[list[float]]) -> str:
    return "-" if not load else f"{load[0]:.2f}"


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
            f"{t['nvtx'].get('emitted')}, recorded {t['nvtx'].get('recorded')}; "
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


def rank_rows(dist: dict[str, Any]) -> list[list[str]]:
    """One row per rank of the cross-rank section."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"
    return [[str(r["rank"]), str(r.get("host") or "-"), r["status"], num(r["step_ms"]),
             num(r["collective_ms_per_step"]), num(r["work_ms_per_step"]),
             str(r.get("verdict") or "-")] for r in dist["ranks"]]


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
        err = f.get("error") or {}
        lines.append(f"rank {f['rank']} {f['status']}" + (f": {err.get('type')}: "
                                                          f"{err.get('message')}" if err else ""))
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
    """The short text printed after a run."""
    lines = [f"nsbridge {report['command']}: {report['target']}  [status: {report['status']}]"]
    if report.get("error"):
        err = report["error"]
        lines.append(f"  script error: {err.get('type')}: {err.get('message')}"
                     + (f" ({err['file']}:{err['line']})" if err.get("file") else ""))
    verdict = report.get("verdict")
    if verdict:
        lines.append(f"\nVerdict: {verdict_headline(verdict)}")
        lines += [f"  {kind} {text}" for kind, text in verdict_lines(verdict)]
    step = _step_line(report)
    if step:
        lines.append(f"\nSteps: {step}")
    window = window_line(report)
    if window:
        lines.append(f"Window: {window}")
    machine = machine_line(report.get("machine"))
    if machine:
        lines.append(f"Machine: {machine}")
    if report.get("device"):
        dev = report["device"]
        lines.append(f"Device: busy {dev['busy_pct']:.1f}% of the window, {dev['kernels']} kernels "
                     f"({kernel_rate(dev)})")
        early = _early_line(dev)
        if early:
            lines.append(f"  {early}")
    if report["ops"]:
        ranked = "self device time" if report["ranked_by"] == "device_self_us" else "self CPU time"
        lines.append(f"\nTop ops by {ranked}:")
        lines.append(_text_table(*op_table(report, top)))
        lines.append(f"  ({MEMORY_NOTE})")
    if report["sync_points"]:
        lines.append("\nSync points (host waits for the device):")
        for p in report["sync_points"][:5]:
            over = ("outside the training steps" if p.get("placement") == "outside"
                    else f"over the {p['counted_over']}")
            lines.append(f"  {p['kind']:<22} {_where(p)}  x{p['count']} {over} "
                         f"({_rate_text(p)}; {_sync_cost(p)})")
    if report["recommendations"]:
        lines.append("\nRecommendations:")
        for i, r in enumerate(report["recommendations"][:3], 1):
            lines.append(f"  {i}. {r['title']}: {r['why']}.\n     Fix: {r['fix']}")
    timeline = report.get("timeline")
    if timeline:
        lines.append(f"\nTimeline: {_timeline_line(timeline)}")
        if timeline["ops"]:
            lines.append(_text_table(TIMELINE_HEADER, _timeline_rows(timeline, top)))
        for g in timeline["idle_gaps"][:3]:
            lines.append(f"  GPU {g['device']} idle {g['dur_us'] / 1e3:.3f} ms while the host "
                         f"was in {_gap_host(g)}")
        if timeline.get("ranks"):
            lines.append(f"  nsys per rank (the table above is rank {timeline['shown_rank']}'s):")
            lines.append(_text_table(TIMELINE_RANK_HEADER, tool_rank_rows(timeline, "timeline")))
    dist = report.get("distributed")
    if dist:
        lines.append("\nRanks:")
        lines.append(_text_table(RANK_HEADER, rank_rows(dist)))
        lines += [f"  {line}" for line in distributed_lines(dist)]
    ncu = report.get("ncu")
    if ncu:
        lines.append(f"\nNsight Compute: {_ncu_line(ncu)}")
        for op, title, detail in _ncu_findings(report)[:12]:
            lines.append(f"  {op}: {title}: {detail}")
        if ncu.get("ranks"):
            lines.append(f"  ncu per rank (the findings above are rank {ncu['shown_rank']}'s):")
            lines.append(_text_table(NCU_RANK_HEADER, tool_rank_rows(ncu, "ncu")))
    overhead = report.get("overhead")
    if overhead and overhead.get("ratio"):
        lines.append(f"\nProfiler overhead: {overhead['note']}")
    for note in report.get("notes", []):
        lines.append(f"Note: {note}")
    if run_dir:
        files = report.get("files") or {}
        trace = files.get("merged_trace") or files.get("trace")
        lines.append(f"\nRun directory: {run_dir}  (report.md, report.html"
                     + (f", {trace} opens in {PERFETTO}" if trace else "") + ")")
    return "\n".join(lines)


def _text_table(header: list[str], rows: list[list[str]], name_width: int = 44) -> str:
    def clip(s: str) -> str:
        return s if len(s) <= name_width else s[: name_width - 1] + "…"
    rows = [[clip(r[0])] + r[1:] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = lambda cells: "  " + "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(header)] + [fmt(r) for r in rows])


def markdown(report: dict[str, Any], top: int = 15,
             key_averages: Optional[str] = None) -> str:
    """report.md, sized for a GitHub issue or PR comment; torch's own ``key_averages``
    table, when given, goes in a collapsed block."""
    md = [f"# nsbridge {report['command']}: `{report['target']}`", "",
          f"Status: **{report['status']}**"]
    if report.get("error"):
        err = report["error"]
        md.append(f"\nScript error: `{err.get('type')}`: {err.get('message')}")
    verdict = report.get("verdict")
    if verdict:
        md += ["", f"## Verdict: {verdict_headline(verdict)}", ""]
        marks = {"!": "**contended:** ", "-": "", "~": "", "?": "*", ">": ""}
        md += [f"- {marks[kind]}{text}" + ("*" if kind == "?" else "")
               for kind, text in verdict_lines(verdict)]
    step = _step_line(report)
    if step:
        md += ["", "## Steps", "", step]
    window = window_line(report)
    if window:
        md += ["", f"Window: {window}"]
    machine = machine_line(report.get("machine"))
    if machine:
        md += ["", f"Machine: {machine}"]
    if report["ops"]:
        header, op_rows = op_table(report, top)
        md += ["", "## Hot ops", "", "| " + " | ".join(header) + " |",
               "|" + "---|" * len(header)]
        for row in op_rows:
            md.append("| " + " | ".join([f"`{_md_cell(row[0])}`", *row[1:]]) + " |")
        md += ["", f"Memory: {MEMORY_NOTE}."]
        work = [(op["name"], k, "kernel") for op in report["ops"][:top] for k in op["kernels"][:3]]
        work += [(op["name"], c, c["kind"]) for op in report["ops"][:top]
                 for c in (op.get("copies") or [])[:2]]
        if work:
            md += ["", "### Kernels and copies per op (top 3 kernels, top 2 copies each)", "",
                   "| op | kind | name | calls | device ms |", "|---|---|---|---|---|"]
            md += [f"| `{_md_cell(o)}` | {kind} | `{_md_cell(k['name'][:120])}` | {k['calls']} | "
                   f"{k['device_us'] / 1e3:.3f} |" for o, k, kind in work]
    if report.get("device"):
        dev = report["device"]
        md += ["", "## Device", "", f"Busy {dev['busy_pct']:.1f}% of the measured window; "
               f"{dev['kernels']} kernels; linking: {dev['linking']}; attribution: "
               f"{_attribution(dev['attribution'])}"]
        early = _early_line(dev)
        if early:
            md += ["", f"Launched before the window: {early}"]
        if dev["idle_gaps"]:
            md += ["", "| device | gap ms | at ms | host was in |", "|---|---|---|---|"]
            md += [f"| {g['device']} | {g['dur_us'] / 1e3:.3f} | {g['start_us'] / 1e3:.3f} | "
                   f"`{_md_cell(g['host_op'] or 'Python between ops')}` |" for g in dev["idle_gaps"]]
    if report["sync_points"]:
        md += ["", "## Sync points", "", "| kind | where | op | count | counted over | per step "
               "| host ms | GPU idle after ms |", "|---|---|---|---|---|---|---|---|"]
        md += [f"| {p['kind']} | {_md_cell(_where(p))} | `{_md_cell(p['op'] or '')}` | {p['count']} "
               f"| {p['counted_over']} | {per_step_cell(p)} | {p['host_ms']:.3f} | "
               f"{_ms_or_dash(p.get('gpu_idle_ms'))} |" for p in report["sync_points"]]
    if report["recommendations"]:
        md += ["", "## Recommendations", ""]
        md += [f"{i}. **{r['title']}**: {r['why']}. Fix: {r['fix']} ([docs]({r['url']}))"
               for i, r in enumerate(report["recommendations"], 1)]
    timeline = report.get("timeline")
    if timeline:
        md += ["", "## Timeline (Nsight Systems)", "", _timeline_line(timeline)]
        if timeline["ops"]:
            md += ["", "| " + " | ".join(TIMELINE_HEADER) + " |", "|" + "---|" * len(TIMELINE_HEADER)]
            md += ["| " + " | ".join([f"`{_md_cell(r[0])}`", *r[1:]]) + " |"
                   for r in _timeline_rows(timeline, top)]
        if timeline["idle_gaps"]:
            md += ["", "| device | GPU idle ms | host was in |", "|---|---|---|"]
            md += [f"| {g['device']} | {g['dur_us'] / 1e3:.3f} | {_md_cell(_gap_host(g))} |"
                   for g in timeline["idle_gaps"]]
        if timeline.get("ranks"):
            md += ["", f"Per rank (the tables above are rank {timeline['shown_rank']}'s):"]
            md += _md_table(TIMELINE_RANK_HEADER, tool_rank_rows(timeline, "timeline"))
    dist = report.get("distributed")
    if dist:
        md += ["", "## Ranks", "", "| " + " | ".join(RANK_HEADER) + " |",
               "|" + "---|" * len(RANK_HEADER)]
        md += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rank_rows(dist)]
        md += [""] + [f"- {_md_cell(line)}" for line in distributed_lines(dist)]
    ncu = report.get("ncu")
    if ncu:
        md += ["", "## Kernels (Nsight Compute)", "", _ncu_line(ncu)]
        findings = _ncu_findings(report)
        if findings:
            md += ["", "| op | finding | numbers |", "|---|---|---|"]
            md += [f"| `{_md_cell(o)}` | {t} | {_md_cell(d)} |" for o, t, d in findings]
        if ncu.get("ranks"):
            md += ["", f"Per rank (the findings are rank {ncu['shown_rank']}'s):"]
            md += _md_table(NCU_RANK_HEADER, tool_rank_rows(ncu, "ncu"))
        md += ["", "| launch | op | kernel | µs | SM % | mem % | occupancy % | tensor % |",
               "|---|---|---|---|---|---|---|---|"]
        md += [f"| {k['launch']} | `{_md_cell(k.get('op') or '-')}` | `{_md_cell(str(k['kernel'])[:90])}` "
               f"| {_cell(_us(k.get('duration_ns')), 'text')} | {_cell(k.get('sm_pct'), 'pct')} | "
               f"{_cell(k.get('memory_pct'), 'pct')} | {_cell(k.get('achieved_occupancy_pct'), 'pct')}"
               f" | {_cell(k.get('tensor_pct'), 'pct')} |" for k in ncu["kernels"][:top]]
    if report.get("overhead"):
        md += ["", "## Profiler overhead", "", str(report["overhead"]["note"])]
    if report.get("ranks"):
        md += ["", "## Ranks", "", "| rank | file | verdict | step ms | device busy % |",
               "|---|---|---|---|---|"]
        md += [f"| {r['rank']} | {_md_cell(r['file'])} | {r['verdict']} | {r['step_ms']} | "
               f"{r['busy_pct']} |" for r in report["ranks"]]
    if report.get("notes"):
        md += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    if key_averages:
        fence = "`" * 3
        md += ["", "<details><summary>torch.profiler's own key_averages() table</summary>", "",
               fence, key_averages.rstrip().replace(fence, "'" * 3), fence, "", "</details>"]
    md += ["", "## Sources", ""] + [f"- {k}: {v}" for k, v in report.get("sources", {}).items()]
    md += ["", *markdown_block()]
    return "\n".join(md) + "\n"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows])


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")
