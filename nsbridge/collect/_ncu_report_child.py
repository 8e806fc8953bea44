"""Read one `.ncu-rep` with NVIDIA's ``ncu_report``, in a process of its own.

A damaged report can abort the native reader (a failed protobuf check ends the process
with SIGABRT), so nsbridge never loads one in its own process: ``collect.ncu_report`` runs
this module as ``python -m nsbridge.collect._ncu_report_child REPORT`` and reads one JSON
document from its stdout (``parse.ncu.report_data`` checks it):

- ``launches``: per profiled launch ``{kernel, process_id, device, cc, block, grid, nvtx}``
  (``nvtx`` a list of ``[domain, range]`` pairs, bottom first, ``""`` for the default domain);
- ``metrics``: ``[launch index, metric name, unit as ncu printed it, value]`` rows, the value
  a number, a string or null;
- ``cut_short``: how many launch records had no kernel name or no metrics.

A report the reader refuses gives ``{"error": message}`` and exit status 3. This module
imports nothing from nsbridge, so the child starts in a few tens of milliseconds.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

CANNOT_READ = 3


def extract(path: str) -> dict[str, Any]:
    """Everything nsbridge uses from the report at ``path`` as plain JSON values."""
    import ncu_report

    context = ncu_report.load_report(path)
    launches: list[dict[str, Any]] = []
    metrics: list[list[Any]] = []
    cut_short = 0
    for r in range(context.num_ranges()):
        profiled = context.range_by_idx(r)
        for a in range(profiled.num_actions()):
            action = profiled.action_by_idx(a)
            name, metric_names = action.name(), action.metric_names()
            if not isinstance(name, str) or not name or not metric_names:
                cut_short += 1
                continue
            get = action.metric_by_name
            index = len(launches)
            launches.append({"kernel": name,
                             "process_id": _text(get("ID_PROCESS_ID") or get("pid")),
                             "device": _text(get("device__attribute_display_name")),
                             "cc": _compute_capability(get),
                             "block": _text(get("launch__block_size")),
                             "grid": _text(get("launch__grid_size")),
                             "nvtx": _nvtx(action.nvtx_state())})
            for metric_name in metric_names:
                metric = get(metric_name)
                unit = metric.unit() if hasattr(metric, "unit") else ""
                metrics.append([index, str(metric_name), str(unit or ""),
                                _plain(metric.value()) if metric.has_value() else None])
    return {"launches": launches, "metrics": metrics, "cut_short": cut_short}


def _plain(value: Any) -> Any:
    """A metric value as JSON can carry it: numbers stay numbers, anything else is text."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    return str(value)


def _text(metric: Any) -> Optional[str]:
    if metric is None or not metric.has_value():
        return None
    return str(metric.value())


def _compute_capability(get: Any) -> Optional[str]:
    major, minor = get("device__attribute_compute_capability_major"), get(
        "device__attribute_compute_capability_minor")
    if major is None or minor is None:
        return None
    return f"{major.value()}.{minor.value()}"


def _nvtx(state: Any) -> list[list[str]]:
    if state is None:
        return []
    stack: list[list[str]] = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        name = str(domain.name())
        stack.extend([("" if name == "<default domain>" else name), str(pushed)]
                     for pushed in domain.push_pop_ranges())
    return stack


def main(argv: list[str]) -> int:
    try:
        document = extract(argv[1])
    except Exception as exc:  # noqa: BLE001 - the reader raises its own types; report any
        json.dump({"error": f"{type(exc).__name__}: {exc}"}, sys.stdout)
        return CANNOT_READ
    json.dump(document, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
