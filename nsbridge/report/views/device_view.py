"""The Device section (GPU runs): how busy the device was over the window, how its work
was linked to ops and attributed, what was queued before the window, where CUDA graphs'
and torch.compile's (Triton) kernels went, and the longest idle gaps."""

from __future__ import annotations

from typing import Any, Optional

from ..document.document import HTML, IN_FILES, Section, Table, Text, without_empty_columns
from ..document.formats import count, ms
from ..document.wording import attribution, counts, kernel_rate
from ...contract.report import Device, DeviceCudaGraph, DeviceTriton, Report


def _graph_line(graph: DeviceCudaGraph) -> str:
    """Where a CUDA graph's kernels went: the ops that replayed them."""
    where = ", ".join(f"{g['op'] or 'no op'} "
                      f"({count(g['kernels'], 'kernel')}, {ms(g['device_us'])} ms)"
                      for g in graph.get("by_op") or [])
    return (f"CUDA graphs: {count(graph.get('kernels'), 'kernel')} "
            f"({ms(graph.get('device_us'))} ms of GPU time) ran in "
            f"{count(graph.get('launches'), 'graph launch')}; torch.profiler "
            f"puts them under the op that replayed the graph: {where}")


def _triton_blocks(triton: DeviceTriton) -> list[Any]:
    """torch.compile's Triton kernels: a line, and per kernel its op and generated source."""
    known = triton["with_source"]
    sources = (f"the trace names the generated source of {known} of them" if known
               else "the trace names no generated source (torch writes it to the "
                    "launching op's args in recent versions; TORCH_COMPILE_DEBUG=1 keeps "
                    "the files)")
    line = (f"torch.compile (Triton) kernels: {count(triton.get('kernels'), 'launch')}, "
            f"{ms(triton.get('device_us'))} ms of GPU time; {sources}")
    rows = [[str(k.get("kernel")), k.get("op") or "no op", str(k.get("calls")),
             ms(k.get("device_us")), k.get("source") or "-"]
            for k in triton.get("by_kernel") or []]
    header, rows = without_empty_columns(["kernel", "op", "calls", "device ms", "source"], rows)
    code = frozenset(i for i, h in enumerate(header) if h in ("kernel", "op", "source"))
    return [Text(line), Table(header, rows, code=code, views=IN_FILES)]


def device_section(report: Report) -> Optional[Section]:
    """The device: how busy, how many kernels, how they were linked and attributed; work
    queued before the window, CUDA graphs' and torch.compile's kernels, idle gaps."""
    dev = report.get("device")
    if not dev:
        return None
    blocks: list[Any] = []
    early = early_line(dev)
    if early:
        blocks.append(Text(f"Launched before the window: {early}"))
    graph, triton, gaps = dev.get("cuda_graph"), dev.get("triton"), dev.get("idle_gaps")
    if graph:
        blocks.append(Text(_graph_line(graph)))
    if triton:
        blocks.extend(_triton_blocks(triton))
    if gaps:
        blocks.append(Table(["device", "gap ms", "at ms", "host was in"],
                            [[str(g.get("device")), ms(g.get("dur_us")), ms(g.get("start_us")),
                              g.get("host_op") or "Python between ops"] for g in gaps],
                            code=frozenset({3}), views=frozenset({HTML}), brief=3))
    lead = (f"busy {dev['busy_pct']:.1f}% of the measured window, {dev['kernels']} kernels "
            f"({kernel_rate(dev)}); linking: {dev.get('linking') or '-'}; attribution: "
            f"{attribution(dev.get('attribution') or {})}")
    return Section("device", "Device", blocks, lead=lead)


def early_line(device: Device) -> Optional[str]:
    """The GPU work queued before the window opened, when there was any."""
    early = device.get("launched_before_window") or {}
    if not any(early.get(k) for k in ("kernels", "copies", "memsets")):
        return None
    total = sum(us or 0.0 for us in (early.get("kernel_us"), early.get("copy_us"),
                                     early.get("memset_us")))
    return (f"{counts({k: early[k] for k in ('kernels', 'copies', 'memsets')})} "
            f"({total / 1e3:.3f} ms of GPU time) {early['explanation']}")
