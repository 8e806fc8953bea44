"""The kernel view (GPU runs): the costliest kernels of the window with their op, calls,
time, launch configuration and Tensor Core path (from the name), from ``device.work``."""

from __future__ import annotations

from typing import Any, Optional

from ...model.device.tensor_cores import kernel_path
from ..document.document import Section, Table
from ..document.formats import decimals, ms
from ..document.shown import Shown
from ...contract.report import DeviceWork, Report

TOP_KERNELS = 15
HEADER = ["kernel", "op", "calls", "total ms", "mean µs", "launch", "Tensor Cores"]


def launch_cell(work: DeviceWork) -> str:
    """The launch configuration, and how many others the kernel had."""
    if not work.get("launch"):
        return "-"
    others = (work.get("launch_configs") or 1) - 1
    return str(work["launch"]) + (f" (+{others} other)" if others == 1 else
                             f" (+{others} others)" if others > 1 else "")


def kernel_section(report: Report, shown: Shown,
                   limit: Optional[int]) -> Optional[Section]:
    """The costliest kernels (at most ``limit``, and never more than TOP_KERNELS)."""
    kernels = shown.kernels[:min(limit or TOP_KERNELS, TOP_KERNELS)]
    if not kernels:
        return None
    rows = [[str(w.get("name")), w.get("op") or f"no op ({w.get('attribution')})",
             str(w.get("calls")), ms(w.get("device_us")),
             decimals((w.get("device_us") or 0.0) / max(w.get("calls") or 0, 1), 1, 1) or "-",
             launch_cell(w), kernel_path(str(w.get("name"))) or "-"] for w in kernels]
    lead = (f"costliest first, of {len(shown.kernels)} (kernel, op) pairs; GPU time "
            f"{shown.span}; launch as the trace gives it (grid, block, registers per "
            "thread, shared memory bytes); Tensor Cores from the kernel's name")
    return Section("kernels", "Kernels", [Table(HEADER, rows, code=frozenset({0, 1}), brief=3)],
                   lead=lead)
