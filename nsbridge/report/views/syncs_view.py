"""The sync points (model.host.syncs): each call where the host waits for the device, by
its Python line, with its count over the measured steps and the GPU idle time after it."""

from __future__ import annotations

from typing import Any, Optional

from ..document.document import IN_FILES, TERMINAL, Section, Table, without_empty_columns
from ..document.formats import ms_or_dash
from ..document.wording import counted_over, per_step_cell, where
from ...contract.report import Report


SYNC_HEADER = ["kind", "where", "op", "count", "counted over", "per step", "host ms",
               "GPU idle after ms"]


# what a CPU-only run can show of the syncs a GPU would have (model.host.syncs)
CPU_REACH = ("shown are the script's read-backs (.item(), .cpu(), ...) and ops whose output "
             "size is the data's ('implicit': masks, nonzero, unique); other implicit syncs "
             "show only on a GPU run")


def syncs_section(report: Report) -> Optional[Section]:
    """The sync points: where the host waited for the device, how often, and for how long
    (a CPU-only run: what would wait, most calls per step first, and what it cannot show)."""
    points = report["sync_points"]
    on_cpu = not report.get("device") and bool(report.get("ops"))
    if not points:
        return Section("syncs", "Sync points", [], lead=f"none found; {CPU_REACH}") \
            if on_cpu else None
    rows = [[p["kind"], where(p), p["op"] or "", str(p["count"]), counted_over(p),
             per_step_cell(p), f"{p['host_ms']:.3f}", ms_or_dash(p.get("gpu_idle_ms"))]
            for p in points]
    header, rows = without_empty_columns(SYNC_HEADER, rows)   # no GPU: no idle after
    title = ("Sync points (host waits for the device)" if report.get("device")
             else "Sync points (calls that would wait for a GPU, most per step first; on "
                  "this CPU run none waits)")
    op = header.index("op")     # the terminal leaves the op out: the site is what to fix
    return Section("syncs", title, lead=CPU_REACH if on_cpu else None, blocks=[
        Table(header, rows, code=frozenset({1, 2}), brief=5, views=IN_FILES),
        Table(header[:op] + header[op + 1:], [r[:op] + r[op + 1:] for r in rows],
              code=frozenset({1}), brief=5, views=frozenset({TERMINAL}))])
