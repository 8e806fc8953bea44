"""The Tensor Core section (report key ``tensor_cores``): each matmul, convolution and
attention op's mark from the triage (ops[].tensor_cores), and the op table's column."""

from __future__ import annotations

from typing import Any, Optional

from ... import schema as S
from ..document.document import EVERYWHERE, IN_FILES, Section, Table
from ..document.pass_view import OpColumn, PassView
from ...contract.report import Report

HEADER = ["op", "Tensor Cores", "dtype", "why (evidence)"]


def tensor_cores_section(report: Report, limit: Optional[int]) -> Optional[Section]:
    """One row per marked op, in op-table order; the lead counts each mark."""
    counts = report.get(S.TENSOR_CORES_SECTION)
    marked = [op for op in report["ops"] if op.get(S.TENSOR_CORES_SECTION)]
    if not counts or not marked:
        return None
    rows = [[op[S.NAME], str(m.get("status")), m.get("dtype") or "-",
             f"{m.get('reason')} ({m.get('evidence')})"]
            for op in marked[:limit] if (m := op.get(S.TENSOR_CORES_SECTION))]
    lead = ", ".join(f"{n} {status}" for status, n in counts.items()
                     if status != "ops" and n) + " (from the triage; ncu's counters settle it)"
    # a CPU run's marks say what a GPU would do: in report.md and report.html, not among
    # the terminal's measured findings
    views = EVERYWHERE if report.get("device") else IN_FILES
    return Section("tensor-cores", "Tensor Cores", [Table(HEADER, rows, code=frozenset({0}),
                                                          brief=3)], lead=lead, views=views)


TENSOR_CORES_VIEW = PassView(
    report_key=S.TENSOR_CORES_SECTION, section=tensor_cores_section,
    op_key=S.TENSOR_CORES_SECTION, source="Tensor Cores (triage)",
    op_columns=(OpColumn("Tensor Cores", "status", "text"),))
