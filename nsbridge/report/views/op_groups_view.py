"""The op table grouped by input shape and by calling function (report key ``op_groups``,
model.host.op_groups): on the page, two more views of the op table behind a toggle; in the
terminal and report.md, the top shapes of the top ops."""

from __future__ import annotations

import json
from typing import Any, Optional

from ... import schema as S
from ..document.document import HTML, MARKDOWN, TERMINAL, Block, Table, Text
from ..document.pass_view import PassView
from ..document.formats import int_text, ms
from ...contract.report import OpGroupsByShape, RankedBy, Report

TOP_OPS, SHAPES_PER_OP = 2, 2


def shape_text(shape: str) -> str:
    """Input dims without the trailing scalars' empty lists: '[[8,3,32,32],[16,3,3,3]]'."""
    try:
        dims = json.loads(shape)
    except ValueError:
        return shape
    if not isinstance(dims, list):
        return shape
    while dims and dims[-1] == []:
        dims.pop()
    return json.dumps(dims, separators=(",", ":"))


def _time_header(report: Report) -> tuple[RankedBy, str]:
    key: RankedBy = report.get("ranked_by") or S.CPU_SELF_US
    return key, ("self device ms" if key == S.DEVICE_SELF_US else "self CPU ms")


def group_blocks(report: Report, limit: Optional[int]) -> list[Block]:
    """The blocks the op section adds: the page's grouped tables (toggled with the op
    table) and the terminal's and report.md's top shapes of the top ops."""
    groups = report.get(S.OP_GROUPS_SECTION)
    if not groups:
        return []
    key, header = _time_header(report)
    runs = int((report.get("window") or {}).get("runs") or 1)
    whose = f" (run 1 of {runs} processes)" if runs > 1 else ""   # grouped from run 1's trace
    blocks: list[Block] = []
    tables = (("by_shape", "op and input shapes", "input shapes",
               [(r, shape_text(r.get("shape") or "")) for r in groups.get("by_shape") or []]),
              ("by_source", "op and calling function", "called from",
               [(r, str(r.get("source"))) for r in groups.get("by_source") or []]))
    for rows_key, label, column, rows in tables:
        if not rows:
            continue
        blocks.append(Table(
            ["op", column, "calls", header, "total CPU ms"],
            [[str(r.get(S.NAME)), value, int_text(r.get(S.CALLS)), ms(r.get(key)),
              ms(r.get(S.CPU_TOTAL_US))] for r, value in rows[:limit]], code=frozenset({0, 1}),
            html_id=f"op-table-{rows_key.replace('_', '-')}", sortable=True, toggle=label + whose,
            views=frozenset({HTML})))
    top = _top_shapes(report, groups.get("by_shape") or [], key)
    if top:
        blocks.append(Table(["op", "input shapes", "calls", header], top,
                            lead=f"Top input shapes of the top ops{whose}:",
                            code=frozenset({0, 1}),
                            views=frozenset({TERMINAL, MARKDOWN})))
    blocks += [Text(note, note=True, views=frozenset({HTML})) for note in groups.get("notes") or []]
    return blocks


def _top_shapes(report: Report, by_shape: list[OpGroupsByShape],
                key: RankedBy) -> list[list[str]]:
    """The costliest SHAPES_PER_OP shapes of each of the TOP_OPS top ops that have shapes."""
    rows: list[list[str]] = []
    shown = 0
    for op in report["ops"]:
        mine = [r for r in by_shape if r[S.NAME] == op[S.NAME]][:SHAPES_PER_OP]
        if not mine:
            continue
        rows += [[op[S.NAME], shape_text(r.get("shape") or ""), int_text(r.get(S.CALLS)),
                  ms(r.get(key))]
                 for r in mine]
        shown += 1
        if shown == TOP_OPS:
            break
    return rows


# The op section draws this key (group_blocks); it has no section of its own.
OP_GROUPS_VIEW = PassView(report_key=S.OP_GROUPS_SECTION, section=lambda report, limit: None)
