"""The sentences the sections share: where a sync point is and how it was counted, how GPU
work was attributed, which ops the op table shows (autograd wrappers left out), the span a
table covers. Text only: numbers come formatted from report.document.formats; no layout, no
escaping (each renderer escapes where it places the text)."""

from __future__ import annotations

import re
from typing import Any, Union

from ... import schema as S
from .build import conclusive
from ...contract.report import Device, DeviceAttribution, Op, Recommendation, Report, SyncPoint, TimelineAttribution, TimelineIdleGap

_BACKWARD_NODE = re.compile(r"^[A-Z]\w*Backward\d*$")


def where(point: SyncPoint) -> str:
    if point.get("file"):
        text = f"{point['file']}:{point['line']}"
        if point.get("function") and point.get("placement") == "outside":
            text = f"{point['function']}() at {text}"
        return text + (f" (via {point['via']})" if point.get("via") else "")
    return f"in {point['op']}" if point.get("op") else "(no Python line in the trace)"

def per_step_cell(point: SyncPoint) -> str:
    """A sync site's rate for a table cell: per step, per second, or '-' (outside)."""
    if point.get("per_step") is not None:
        return f"{point['per_step']:g}"
    return f"{point['per_s']:g}/s" if point.get("per_s") is not None else "-"

def counted_over(point: SyncPoint) -> str:
    """What a sync site's count covers: 'measured steps', 'whole run', or 'outside the
    training steps' for a site only outside them (evaluation, logging)."""
    return ("outside the training steps" if point.get("placement") == "outside"
            else str(point["counted_over"]))

def is_autograd_wrapper(name: str) -> bool:
    """autograd's own nodes around a backward op: evaluate_function ranges, ``XBackward0``
    nodes and AccumulateGrad, whose self time is the engine's bookkeeping (an op that
    launched kernels itself is never left out)."""
    return (name.startswith("autograd::engine::evaluate_function:")
            or name == "torch::autograd::AccumulateGrad" or bool(_BACKWARD_NODE.match(name)))

def model_ops(ops: list[Op]) -> list[Op]:
    """The ops the tables and charts show: autograd's wrappers left out (an op that
    launched kernels itself is always kept)."""
    return [op for op in ops if op.get(S.KERNELS) or not is_autograd_wrapper(op[S.NAME])]

def span_text(report: Report) -> str:
    """What a total covers, said the same way everywhere: 'over the 3 measured steps', or
    'over the 0.087 s window' without steps."""
    window = report.get("window") or {}
    dist = report.get("distributed") or {}
    ranks = len(dist.get("ranks") or [])
    summed = ("" if ranks < 2 else f", rank {dist['shown_rank']}'s" if dist.get("shown_rank")
              is not None else f", summed over {ranks} ranks")
    runs = int(window.get("runs") or 1)
    pooled = f" of {runs} processes" if runs > 1 else ""
    if window.get("kind") == "trace":
        return f"over the {window['seconds']:.3f} s window{pooled}{summed}"
    steps_section = report.get("steps")
    steps = int(window.get("steps") or (steps_section.get("count") if steps_section else 0)
                or 0)
    return (f"over the {steps} measured steps" if steps != 1
            else "over the 1 measured step") + pooled + summed

def shown_recommendations(report: Report) -> list[Recommendation]:
    """The recommendations the outputs show (none where the verdict is not shown)."""
    return list(report.get("recommendations") or []) if conclusive(report) else []

def counts(by_kind: dict[str, Any]) -> str:
    """'12 kernels, 3 copies' from {'kernels': 12, 'copies': 3, 'memsets': 0}."""
    parts = [f"{n} {kind}" for kind, n in by_kind.items() if isinstance(n, int) and n]
    return ", ".join(parts) or "none"

def attribution(by_rule: Union[DeviceAttribution, TimelineAttribution]) -> str:
    """'nvtx_push_pop: 12 kernels, 3 copies; no_launch_in_capture: 5 kernels'."""
    if not by_rule:
        return "n/a (no GPU activity)"
    return "; ".join(f"{rule}: {counts(v) if isinstance(v, dict) else v}"
                     for rule, v in by_rule.items())

def kernel_rate(dev: Device) -> str:
    """'120 per step', or per second without steps."""
    if dev.get("kernels_per_step") is not None:
        return f"{dev['kernels_per_step']:g} per step"
    return f"{dev.get('kernels_per_s') or 0:g} per second"

def gap_host(g: TimelineIdleGap) -> str:
    """Where the host was (nsbridge's op, module and step ranges) during a GPU idle gap."""
    parts = [str(g[k]) if str(g[k]).startswith(f"{k} ") else f"{k} {g[k]}"   # 'step 4'
             for k in ("op", "module", "step") if g.get(k)]
    return ", ".join(parts) or "no nsbridge range (Python between ops)"
