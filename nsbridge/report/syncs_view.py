"""The sync points (model.host.syncs): each call where the host waits for the device, by
its Python line, with its count over the measured steps and the GPU idle time after it."""

from __future__ import annotations

from typing import Any, Optional

from .document import IN_FILES, TERMINAL, Section, Table, without_empty_columns
from .formats import ms_or_dash
from .wording import counted_over, per_step_cell, where


SYNC_HEADER = ["kind", "where", "op", "count", "counted over", "per step", "host ms",
               "GPU idle after ms"]


def syncs_section(report: dict[str, Any]) -> Optional[Section]:
    """The sync points: where the host waited for the device, how often, and for how long."""
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
