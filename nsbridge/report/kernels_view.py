"""The kernel view (GPU runs): the costliest kernels of the window with their op, calls,
time, launch configuration and Tensor Core path (from the name), from ``device.work``."""

from __future__ import annotations

from typing import Any, Optional

from ..model.device.tensor_cores import kernel_path
from .document import Section, Table
from .wording import span_text

TOP_KERNELS = 15
HEADER = ["kernel", "op", "calls", "total ms", "mean µs", "launch", "Tensor Cores"]


def top_kernels(report: dict[str, Any], limit: Optional[int] = TOP_KERNELS) -> list[dict[str, Any]]:
    """The window's kernels (not copies), costliest first."""
    work = (report.get("device") or {}).get("work") or []
    return [w for w in work if w["kind"] == "kernel"][:limit]


def launch_cell(work: dict[str, Any]) -> str:
    """The launch configuration, and how many others the kernel had."""
    if not work.get("launch"):
        return "-"
    others = (work.get("launch_configs") or 1) - 1
    return work["launch"] + (f" (+{others} other)" if others == 1 else
                             f" (+{others} others)" if others > 1 else "")


def kernel_section(report: dict[str, Any], limit: Optional[int]) -> Optional[Section]:
    kernels = top_kernels(report, min(limit or TOP_KERNELS, TOP_KERNELS))
    if not kernels:
        return None
    rows = [[w["name"], w["op"] or f"no op ({w['attribution']})", str(w["calls"]),
             f"{w['device_us'] / 1e3:.3f}", f"{w['device_us'] / max(w['calls'], 1):.1f}",
             launch_cell(w), kernel_path(w["name"]) or "-"] for w in kernels]
    all_kernels = sum(1 for w in (report["device"].get("work") or []) if w["kind"] == "kernel")
    lead = (f"costliest first, of {all_kernels} (kernel, op) pairs; GPU time "
            f"{span_text(report)}; launch as the trace gives it (grid, block, registers per "
            "thread, shared memory bytes); Tensor Cores from the kernel's name")
    return Section("kernels", "Kernels", [Table(HEADER, rows, code=frozenset({0, 1}), brief=3)],
                   lead=lead)
