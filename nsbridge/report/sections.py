"""The one list of sections every renderer shows, built from report.json.

The torch.profiler pass's sections come first (ops, device, sync points,
recommendations); then one section per other top-level key of the report, each drawn
by the ``PassView`` registered for that key (ranks, the nsys timeline, ncu) or, for a
key no view knows, by ``generic_section``; then profiler overhead, notes and sources.
The op table likewise takes each pass's per-op columns from its view (``op_columns``),
or every scalar under an ops[] key no view knows.

A new pass needs no edit here: its section and per-op columns show as they are; one
``register_view(...)`` line gives them titles and formats (tests/test_pipeline.py).
"""

from __future__ import annotations

from typing import Any, Optional

from .. import schema as S
from .build import STOPPED
from .document import (EVERYWHERE, HTML, IN_FILES, MARKDOWN, TERMINAL, Items, Section, Table,
                       Text, without_empty_columns)
from .kernels_view import kernel_section, launch_cell
from .memory_view import MEMORY_VIEW
from .ncu_view import NCU_VIEW
from .op_groups_view import OP_GROUPS_VIEW, group_blocks
from .ranks_view import RANKS_VIEW
from .tensor_cores_view import TENSOR_CORES_VIEW
from .timeline_view import TIMELINE_VIEW
from .formats import cell, count, int_text, mib, ms, ms_or_dash
from .views import OpColumn, register_view, view_for_key, views_by_op_key
from .wording import (attribution, counted_over, early_line, kernel_rate, model_ops,
                      per_step_cell, shown_recommendations, span_text, where)


def sections(report: dict[str, Any], limit: Optional[int] = None) -> list[Section]:
    """Every section the report has, in order; tables of ops, sync points and kernels
    keep at most ``limit`` rows (None: all)."""
    first = [S.DISTRIBUTED_SECTION]   # a job's ranks right under the verdict
    built = [view.section(report, limit) for key in first if report.get(key)
             for view in [view_for_key(key)] if view]
    built += [_ops(report, limit), _device(report), kernel_section(report, limit),
              _syncs(report), _recommendations(report)]
    for key, value in report.items():
        if key in S.REPORT_KEYS or key in first or not value:
            continue
        view = view_for_key(key)
        built.append(view.section(report, limit) if view else generic_section(key, value, limit))
    built += [_overhead(report), _notes(report), _sources(report)]
    return [section for section in built if section is not None]


def generic_section(key: str, value: Any, limit: Optional[int]) -> Section:
    """A section no view knows: its scalars as items, each list of records as a table."""
    if not isinstance(value, dict):
        return Section(key, key, [Items([_scalar(value)])])
    items = [f"{name}: {_scalar(v)}" for name, v in value.items()
             if not _is_records(v)]
    blocks: list[Any] = [Items(items)] if items else []
    for name, records in value.items():
        if _is_records(records):
            header = list(dict.fromkeys(k for r in records for k in r))
            blocks.append(Table(header, [[_scalar(r.get(h)) for h in header]
                                         for r in records[:limit]], lead=f"{name}:"))
    return Section(key, key, blocks)


OP_HEADER = ["op", "calls", "self CPU ms", "total CPU ms", "self device ms", "total device ms",
             "gross MiB", "net MiB", "%", "±% per step", "kernels", "copies+memsets"]
_DEVICE_COLUMNS = {"self device ms", "total device ms", "kernels", "copies+memsets"}
MEMORY_NOTE = ("gross MiB: allocated inside the op itself, not its children (any device); "
               "net MiB: allocated minus freed during the op and all it calls, on the run's "
               "device (torch's CUDA Mem / CPU Mem); ±% per step: half the 95% interval of "
               "the op's ranking time per step")
TORCH_SOURCE = "torch.profiler"


def op_table(report: dict[str, Any], ops: list[dict[str, Any]]
             ) -> tuple[list[str], list[list[str]], list[tuple[str, int]]]:
    """Header, rows and column groups (source, width) of the op table of ``ops``:
    torch.profiler's columns (no device columns without a device), then each other pass's
    where it ran."""
    header, rows = list(OP_HEADER), [_torch_cells(op) for op in ops]
    if report.get("device") is None:
        keep = [i for i, h in enumerate(header) if h not in _DEVICE_COLUMNS]
        header, rows = [header[i] for i in keep], [[r[i] for i in keep] for r in rows]
    groups = [(TORCH_SOURCE, len(header))]
    if not _torch_measured(report):   # the ops come from other passes only (nsys, ncu)
        header, rows, groups = header[:1], [r[:1] for r in rows], [("", 1)]
    for key, source, columns in _op_column_groups(report["ops"]):
        cells = [[cell((op.get(key) or {}).get(c.key), c.kind) for c in columns] for op in ops]
        names, cells = without_empty_columns([c.header for c in columns], cells, keep=0)
        if not names:    # the pass measured none of its columns (nsys without a GPU)
            continue
        header += names
        for row, extra in zip(rows, cells):
            row.extend(extra)
        groups.append((source, len(names)))
    return header, rows, groups


def _torch_measured(report: dict[str, Any]) -> bool:
    """Whether a torch.profiler pass ranked the report's ops (an ``analyze`` of nsys
    exports or ncu reports alone has ops only from those passes, and no ranking)."""
    return report.get("ranked_by") is not None


def _torch_cells(op: dict[str, Any]) -> list[str]:
    copies = op.get(S.COPIES) or []
    return [op[S.NAME], int_text(op[S.CALLS]), ms(op[S.CPU_SELF_US]), ms(op[S.CPU_TOTAL_US]),
            ms(op[S.DEVICE_SELF_US]), ms(op[S.DEVICE_TOTAL_US]), mib(op[S.MEM_MIB]),
            mib(op.get(S.MEM_NET_MIB)),
            "-" if op[S.SELF_PCT] is None else f"{op[S.SELF_PCT]:.1f}",
            "-" if op.get(S.SPREAD_PCT) is None else f"±{op[S.SPREAD_PCT]:.0f}",
            str(sum(k["calls"] for k in op.get(S.KERNELS) or [])),
            str(sum(c["calls"] for c in copies))]


def _op_column_groups(ops: list[dict[str, Any]]) -> list[tuple[str, str, list[OpColumn]]]:
    """(ops[] key, source, columns) of each other pass with numbers for some op: a view's
    declared columns, or every scalar the pass gave (``KEY name``) for a key no view knows."""
    own = {*S.OP_COLUMNS, S.SPREAD_PCT}
    keys = list(dict.fromkeys(k for op in ops for k, v in op.items()
                              if k not in own and isinstance(v, dict) and v))
    views = views_by_op_key()
    groups = []
    for key in keys:
        view = views.get(key)
        if view is not None:
            groups.append((key, view.source or key, list(view.op_columns)))
            continue
        names = dict.fromkeys(name for op in ops for name, v in (op.get(key) or {}).items()
                              if not isinstance(v, (list, dict)))
        groups.append((key, key, [OpColumn(f"{key} {name}", name, "text") for name in names]))
    return groups


def _ops(report: dict[str, Any], limit: Optional[int]) -> Optional[Section]:
    """The op table: on the page every op (sortable, each row's kernels folded under it,
    grouped by shape or caller behind a toggle); in the terminal and report.md the top
    ops without autograd's wrappers, whose own time is the engine's, not the model's."""
    if not report["ops"]:
        return None
    ops = report["ops"][:limit]
    header, rows, groups = op_table(report, ops)
    launches = {(w["name"], w["op"]): w for w in (report.get("device") or {}).get("work") or []
                if w.get("launch")}
    details = [[f"{kind} {k['name']} x{k['calls']}, {k['device_us'] / 1e3:.3f} ms"
                + (f", {launch_cell(launches[k['name'], op[S.NAME]])}"
                   if (k["name"], op[S.NAME]) in launches else "")
                + (f" (source {k['source']})" if k.get("source") else "")
                for kind, k in _work(op, kernels=10, copies=5)] for op in ops]
    shown = model_ops(report["ops"])
    wrappers = len(report["ops"]) - len(shown)
    short_header, short_rows, short_groups = op_table(report, shown[:limit])
    ranked = ("self device time" if report["ranked_by"] == S.DEVICE_SELF_US
              else "self CPU time")
    brief = frozenset({TERMINAL, MARKDOWN})
    torch_ran = _torch_measured(report)
    blocks: list[Any] = [
        Table(header, rows, code=frozenset({0}), groups=groups, details=details,
              html_id="op-table", sortable=True, toggle="op", views=frozenset({HTML})),
        Table(short_header, short_rows, code=frozenset({0}), groups=short_groups, views=brief),
        *([Text(MEMORY_NOTE + (f"; {count(wrappers, 'autograd wrapper')} (autograd::engine::"
                               "evaluate_function: ..., ...Backward0) left out here, listed "
                               "in report.html" if wrappers else ""), note=True, views=brief)]
          if torch_ran else []),
        *group_blocks(report, limit),
        *([Text(MEMORY_NOTE, note=True, views=frozenset({HTML}))] if torch_ran else [])]
    if not torch_ran:   # an analyze of nsys exports or ncu reports alone: each pass's own
        # section has its op table; the page adds one table of all their columns
        return Section("ops", "Ops (no torch.profiler pass: the columns are the other "
                              "passes')", blocks, views=frozenset({HTML}))
    return Section("ops", f"Top ops by {ranked} (totals {span_text(report)})", blocks)


def _work(op: dict[str, Any], kernels: int, copies: int) -> list[tuple[str, dict[str, Any]]]:
    """An op's first ``kernels`` kernels and ``copies`` copies/memsets, with their kind
    ('graph kernel' for a CUDA graph replay's, 'Triton kernel' for torch.compile's)."""
    return ([(_kernel_kind(k), k) for k in (op.get(S.KERNELS) or [])[:kernels]]
            + [(c["kind"], c) for c in (op.get(S.COPIES) or [])[:copies]])


def _kernel_kind(kernel: dict[str, Any]) -> str:
    kind = "Triton kernel" if kernel.get("source") or str(kernel["name"]).startswith(
        S.TRITON_PREFIX) else "kernel"
    return f"graph {kind[0].lower()}{kind[1:]}" if kernel.get("via") == S.CUDA_GRAPH else kind


def _graph_line(graph: dict[str, Any]) -> str:
    """Where a CUDA graph's kernels went: the ops that replayed them."""
    where = ", ".join(f"{g['op'] or 'no op'} "
                      f"({count(g['kernels'], 'kernel')}, {g['device_us'] / 1e3:.3f} ms)"
                      for g in graph["by_op"])
    return (f"CUDA graphs: {count(graph['kernels'], 'kernel')} "
            f"({graph['device_us'] / 1e3:.3f} ms of GPU time) ran in "
            f"{count(graph['launches'], 'graph launch')}; torch.profiler "
            f"puts them under the op that replayed the graph: {where}")


def _triton_blocks(triton: dict[str, Any]) -> list[Any]:
    """torch.compile's Triton kernels: a line, and per kernel its op and generated source."""
    known = triton["with_source"]
    sources = (f"the trace names the generated source of {known} of them" if known
               else "the trace names no generated source (torch writes it to the "
                    "launching op's args in recent versions; TORCH_COMPILE_DEBUG=1 keeps "
                    "the files)")
    line = (f"torch.compile (Triton) kernels: {count(triton['kernels'], 'launch')}, "
            f"{triton['device_us'] / 1e3:.3f} ms of GPU time; {sources}")
    rows = [[k["kernel"], k["op"] or "no op", str(k["calls"]), f"{k['device_us'] / 1e3:.3f}",
             k["source"] or "-"] for k in triton["by_kernel"]]
    header, rows = without_empty_columns(["kernel", "op", "calls", "device ms", "source"], rows)
    code = frozenset(i for i, h in enumerate(header) if h in ("kernel", "op", "source"))
    return [Text(line), Table(header, rows, code=code, views=IN_FILES)]


def _device(report: dict[str, Any]) -> Optional[Section]:
    dev = report.get("device")
    if not dev:
        return None
    blocks: list[Any] = []
    early = early_line(dev)
    if early:
        blocks.append(Text(f"Launched before the window: {early}"))
    if dev.get("cuda_graph"):
        blocks.append(Text(_graph_line(dev["cuda_graph"])))
    if dev.get("triton"):
        blocks.extend(_triton_blocks(dev["triton"]))
    if dev.get("idle_gaps"):
        blocks.append(Table(["device", "gap ms", "at ms", "host was in"],
                            [[str(g["device"]), f"{g['dur_us'] / 1e3:.3f}",
                              f"{g['start_us'] / 1e3:.3f}", g["host_op"] or "Python between ops"]
                             for g in dev["idle_gaps"]], code=frozenset({3}), views=frozenset({HTML}),
                            brief=3))
    lead = (f"busy {dev['busy_pct']:.1f}% of the measured window, {dev['kernels']} kernels "
            f"({kernel_rate(dev)}); linking: {dev.get('linking') or '-'}; attribution: "
            f"{attribution(dev.get('attribution') or {})}")
    return Section("device", "Device", blocks, lead=lead)


SYNC_HEADER = ["kind", "where", "op", "count", "counted over", "per step", "host ms",
               "GPU idle after ms"]


def _syncs(report: dict[str, Any]) -> Optional[Section]:
    points = report["sync_points"]
    if not points:
        return None
    rows = [[p["kind"], where(p), p["op"] or "", str(p["count"]), counted_over(p),
             per_step_cell(p), f"{p['host_ms']:.3f}", ms_or_dash(p.get("gpu_idle_ms"))]
            for p in points]
    header, rows = without_empty_columns(SYNC_HEADER, rows)   # no GPU: no idle after
    title = ("Sync points (host waits for the device)" if report.get("device")
             else "Sync points (calls that would wait for a GPU; on this CPU run none waits)")
    op = header.index("op")     # the terminal leaves the op out: the site is what to fix
    return Section("syncs", title, [
        Table(header, rows, code=frozenset({1, 2}), brief=5, views=IN_FILES),
        Table(header[:op] + header[op + 1:], [r[:op] + r[op + 1:] for r in rows],
              code=frozenset({1}), brief=5, views=frozenset({TERMINAL}))])


def _recommendations(report: dict[str, Any]) -> Optional[Section]:
    shown = shown_recommendations(report)
    if not shown:
        return None
    partial = " (partial run)" if report.get("status") in STOPPED else ""
    items = [f"{r['title']}: {r['why']}. Fix: {r['fix']}"
             + (f" (docs: {r['url']})" if r.get("url") else "") for r in shown]
    return Section("recommendations", f"Recommendations{partial}",
                   [Items(items, numbered=True, brief=3)])


def _overhead(report: dict[str, Any]) -> Optional[Section]:
    overhead = report.get("overhead")
    if not overhead:
        return None
    return Section("overhead", "Profiler overhead", [], lead=overhead["note"],
                   views=EVERYWHERE if overhead.get("ratio") else IN_FILES)


def _notes(report: dict[str, Any]) -> Optional[Section]:
    notes = report.get("notes")
    return Section("notes", "Notes", [Items(list(notes))]) if notes else None


def _sources(report: dict[str, Any]) -> Optional[Section]:
    sources = report.get("sources") or {}
    if not sources:
        return None
    return Section("sources", "Sources", [Items([f"{k}: {v}" for k, v in sources.items()])],
                   views=frozenset({HTML}), folded=True)


def _is_records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _scalar(value: Any) -> str:
    """A value as a cell: '-' for None, lists and dicts in short."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return f"{len(value)} item(s)"
    return str(value)


for _view in (TENSOR_CORES_VIEW, MEMORY_VIEW, OP_GROUPS_VIEW, RANKS_VIEW, TIMELINE_VIEW,
              NCU_VIEW):
    register_view(_view)
