"""The Nsight Systems section (report key ``timeline``) and the nsys columns of the op
table (ops[].nsys)."""

from __future__ import annotations

from typing import Any, Optional

from ... import schema as S
from ..document.document import Items, Section, Table, without_empty_columns
from ..document.pass_view import OpColumn, PassView
from ..document.formats import file_names, int_text, ms
from ..document.wording import attribution, gap_host
from ...contract.report import Report, Timeline, TimelineOp, TimelineWindow

TIMELINE_HEADER = ["op (nsys)", "ranges", "range ms", "kernels", "kernel ms", "copies",
                   "copy ms", "memsets", "launch lat µs", "idle before ms", "sync ms"]
TIMELINE_RANK_HEADER = ["rank", "host", "status", "GPU busy %", "kernels", "kernel ms",
                        "comm kernel ms", "sync calls", "nsys report"]


def timeline_section(report: Report, limit: Optional[int]) -> Optional[Section]:
    """What nsys recorded, per op (nsbridge's NVTX ranges), the longest GPU idle gaps with
    where the host was, and each rank's capture in a job of several."""
    t = report.get(S.TIMELINE_SECTION)
    if not t:
        return None
    blocks: list[Any] = []
    ops, gaps = t.get("ops"), t.get("idle_gaps")
    if ops:
        header, rows = without_empty_columns(TIMELINE_HEADER, _rows(ops[:limit]))
        blocks.append(Table(header, rows, code=frozenset({0})))
    if gaps:
        blocks.append(Items([f"GPU {g.get('device')} idle {ms(g.get('dur_us'))} ms while the "
                             f"host was in {gap_host(g)}" for g in gaps], brief=3))
    if t.get("ranks"):
        blocks.append(Table(TIMELINE_RANK_HEADER, rank_rows(t), code=frozenset({8}),
                            lead=f"Per rank (the tables above are rank "
                                 f"{t['shown_rank']}'s):"))
    with_torch = report.get("ranked_by") is not None     # a torch.profiler pass ran too
    return Section("timeline", "Timeline (Nsight Systems)", blocks,
                   lead=timeline_line(t, with_torch),
                   brief_title="Timeline")


def _rows(ops: list[TimelineOp]) -> list[list[str]]:
    rows = []
    for op in ops:
        lat = op.get("launch_latency_us")
        rows.append([str(op.get("op")), str(op.get("ranges")), ms(op.get("range_us")),
                     int_text(op.get("kernels")), ms(op.get("kernel_us")),
                     int_text(op.get("copies")), ms(op.get("copy_us")),
                     int_text(op.get("memsets")), "-" if lat is None else f"{lat:.1f}",
                     ms(op.get("idle_before_us")), ms(op.get("sync_us"))])
    return rows


def timeline_line(t: Timeline, with_torch: bool = True) -> str:
    """The capture in one sentence: version, ranges, GPU work, busy, attribution, window."""
    busy = "-" if t.get("gpu_busy_pct") is None else f"{t['gpu_busy_pct']:.1f}%"
    gpu = (f"{t['kernels']} kernels, {t['copies']} copies, {t.get('memsets', 0)} memsets, "
           f"GPU busy {busy}; attribution {attribution(t.get('attribution') or {})}"
           if t.get("gpu_traced", True) else
           "no GPU activity traced (no CUDA in this capture: the GPU columns are not shown)")
    nvtx = t.get("nvtx") or {}
    return (f"nsys {t.get('nsys_version') or '?'}: {t['op_ranges']} op ranges, "
            f"{t['module_ranges']} module ranges, {gpu}; NVTX ranges emitted "
            f"{int_text(nvtx.get('emitted'))}, recorded "
            f"{int_text(nvtx.get('recorded'))}; "
            + _window(t.get("window") or {}, with_torch))


def _window(window: TimelineWindow, with_torch: bool) -> str:
    steps = window.get("steps")
    if window.get("kind") == "steps" and steps:
        return (f"over the measured steps (nsbridge's step ranges {steps[0]}-{steps[-1]})"
                + (", as the torch.profiler figures" if with_torch else ""))
    return "over the whole capture" + (f" ({window['why']})" if window.get("why") else "")


def rank_rows(t: Timeline) -> list[list[str]]:
    """One row per rank's nsys capture (a failed one with its error in the last column)."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)
    return [[str(r["rank"]), str(r.get("host") or "-"), r["status"], num(r.get("gpu_busy_pct")),
             num(r.get("kernels")), ms(r.get("kernel_us")), ms(r.get("comm_kernel_us")),
             num(r.get("sync_calls")),
             r.get("error") or file_names((r.get("files") or {}).get("nsys_rep"))]
            for r in t.get("ranks") or []]


# ops[].nsys (and the timeline's own ops frame): each number's pandas dtype
NSYS_OP_DTYPES = {"ranges": "Int64", "range_us": "float64", "kernels": "Int64",
                  "kernel_us": "float64", "copies": "Int64", "copy_us": "float64",
                  "memsets": "Int64", "memset_us": "float64", "gpu_us": "float64",
                  "launch_latency_us": "float64", "idle_before_us": "float64",
                  **{f"copy_bytes_{d}": "Int64" for d in ("htod", "dtoh", "dtod", "other")},
                  "sync_us": "float64"}

TIMELINE_VIEW = PassView(
    report_key=S.TIMELINE_SECTION, section=timeline_section, op_key=S.NSYS_KEY,
    source="Nsight Systems",
    op_columns=(OpColumn("nsys kernel ms", "kernel_us", "ms", chart=True),
                OpColumn("nsys copy ms", "copy_us", "ms"),
                OpColumn("nsys idle before ms", "idle_before_us", "ms")),
    frame_dtypes=tuple(NSYS_OP_DTYPES.items()),
    trace_fields=("kernels", "kernel_us", "copies", "copy_us", "launch_latency_us",
                  "idle_before_us", "sync_us"))
