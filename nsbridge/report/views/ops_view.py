"""The op table (torch.profiler's ops, with each other pass's per-op columns beside them):
on the page every op, sortable, each row's kernels folded under it; in the terminal and
report.md the top ops without autograd's wrappers (report.document.shown)."""

from __future__ import annotations

from typing import Any, Optional, Union

from ... import schema as S
from ..document.document import (HTML, MARKDOWN, TERMINAL, Section, Table, Text,
                                 without_empty_columns)
from ..document.formats import cell, count, int_text, mib, ms
from .kernels_view import launch_cell
from .op_groups_view import group_blocks
from ..document.shown import Shown
from . import catalog
from ..document.pass_view import OpColumn
from ...contract.report import Op, OpCopy, OpKernel, Report, pass_numbers


OP_HEADER = ["op", "calls", "self CPU ms", "total CPU ms", "self device ms", "total device ms",
             "gross MiB", "net MiB", "%", "±% per step", "kernels", "copies+memsets"]
_DEVICE_COLUMNS = {"self device ms", "total device ms", "kernels", "copies+memsets"}
MEMORY_NOTE = ("gross MiB: allocated inside the op itself, not its children (any device); "
               "net MiB: allocated minus freed during the op and all it calls, on the run's "
               "device (torch's CUDA Mem / CPU Mem); ±% per step: half the 95% interval of "
               "the op's ranking time per step")
TORCH_SOURCE = "torch.profiler"


def op_table(report: Report, ops: list[Op]
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
        cells = [[cell(pass_numbers(op, key).get(c.key), c.kind) for c in columns] for op in ops]
        names, cells = without_empty_columns([c.header for c in columns], cells, keep=0)
        if not names:    # the pass measured none of its columns (nsys without a GPU)
            continue
        header += names
        for row, extra in zip(rows, cells):
            row.extend(extra)
        groups.append((source, len(names)))
    return header, rows, groups


def _torch_measured(report: Report) -> bool:
    """Whether a torch.profiler pass ranked the report's ops (an ``analyze`` of nsys
    exports or ncu reports alone has ops only from those passes, and no ranking)."""
    return report.get("ranked_by") is not None


def _torch_cells(op: Op) -> list[str]:
    copies = op.get(S.COPIES) or []
    return [op[S.NAME], int_text(op.get(S.CALLS)), ms(op[S.CPU_SELF_US]), ms(op[S.CPU_TOTAL_US]),
            ms(op[S.DEVICE_SELF_US]), ms(op[S.DEVICE_TOTAL_US]), mib(op[S.MEM_MIB]),
            mib(op.get(S.MEM_NET_MIB)),
            "-" if op[S.SELF_PCT] is None else f"{op[S.SELF_PCT]:.1f}",
            "-" if op.get(S.SPREAD_PCT) is None else f"±{op[S.SPREAD_PCT]:.0f}",
            str(sum(k.get("calls") or 0 for k in op.get(S.KERNELS) or [])),
            str(sum(c.get("calls") or 0 for c in copies))]


def _op_column_groups(ops: list[Op]) -> list[tuple[str, str, list[OpColumn]]]:
    """(ops[] key, source, columns) of each other pass with numbers for some op: a view's
    declared columns, or every scalar the pass gave (``KEY name``) for a key no view knows."""
    own = {*S.OP_COLUMNS, S.SPREAD_PCT}
    keys = list(dict.fromkeys(k for op in ops for k, v in op.items()
                              if k not in own and isinstance(v, dict) and v))
    views = catalog.views_by_op_key()
    groups = []
    for key in keys:
        view = views.get(key)
        if view is not None:
            groups.append((key, view.source or key, list(view.op_columns)))
            continue
        names = dict.fromkeys(name for op in ops for name, v in pass_numbers(op, key).items()
                              if not isinstance(v, (list, dict)))
        groups.append((key, key, [OpColumn(f"{key} {name}", name, "text") for name in names]))
    return groups


def ops_section(report: Report, shown: Shown, limit: Optional[int]) -> Optional[Section]:
    """The op table: on the page every op (sortable, each row's kernels folded under it,
    grouped by shape or caller behind a toggle); in the terminal and report.md the top
    ops without autograd's wrappers, whose own time is the engine's, not the model's."""
    if not report["ops"]:
        return None
    ops, torch_ran = report["ops"][:limit], _torch_measured(report)
    # the page's table of every op, and the terminal's and report.md's of the shown ones
    (header, rows, groups), (short_header, short_rows, short_groups) = (
        op_table(report, listed) for listed in (ops, shown.ops[:limit]))
    launches = {(w["name"], w["op"]): w for w in (report.get("device") or {}).get("work") or []
                if w.get("launch")}
    details = [[f"{kind} {k['name']} x{k.get('calls')}, {ms(k.get('device_us'))} ms"
                + (f", {launch_cell(launches[k['name'], op[S.NAME]])}"
                   if (k["name"], op[S.NAME]) in launches else "")
                + (f" (source {k['source']})" if k.get("source") else "")
                for kind, k in _work(op, kernels=10, copies=5)] for op in ops]
    wrappers = len(report["ops"]) - len(shown.ops)
    ranked = ("self device time" if report["ranked_by"] == S.DEVICE_SELF_US
              else "self CPU time")
    brief = frozenset({TERMINAL, MARKDOWN})
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
    return Section("ops", f"Top ops by {ranked} (totals {shown.span})", blocks)


def _work(op: Op, kernels: int, copies: int) -> list[tuple[str, Union[OpKernel, OpCopy]]]:
    """An op's first ``kernels`` kernels and ``copies`` copies/memsets, with their kind
    ('graph kernel' for a CUDA graph replay's, 'Triton kernel' for torch.compile's)."""
    work: list[tuple[str, Union[OpKernel, OpCopy]]] = [
        (_kernel_kind(k), k) for k in (op.get(S.KERNELS) or [])[:kernels]]
    return work + [(str(c.get("kind")), c) for c in (op.get(S.COPIES) or [])[:copies]]


def _kernel_kind(kernel: Union[OpKernel, OpCopy]) -> str:
    kind = "Triton kernel" if kernel.get("source") or str(kernel["name"]).startswith(
        S.TRITON_PREFIX) else "kernel"
    return f"graph {kind[0].lower()}{kind[1:]}" if kernel.get("via") == S.CUDA_GRAPH else kind
