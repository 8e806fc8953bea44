"""Host-device sync points with the exact Python file:line that caused them.

torch.profiler's stacks only give a function's first line (facts.md), so the call site of
`.item()`, `.tolist()`, `.cpu()`, `.to("cpu")` and `torch.cuda.synchronize()` is taken here,
in the profiled process, by wrapping those few methods. Only these Python entry points pay
a wrapper; ordinary ops are untouched.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

import torch

# kind -> (owner, attribute, aten op that performs the sync on a CUDA tensor)
_TARGETS = {
    "item": (torch.Tensor, "item", "aten::_local_scalar_dense"),
    "tolist": (torch.Tensor, "tolist", "aten::_local_scalar_dense"),
    "cpu": (torch.Tensor, "cpu", "aten::_to_copy"),
    "to_cpu": (torch.Tensor, "to", "aten::_to_copy"),
}
_SKIP_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))


class SyncRecorder:
    """Counts sync calls per (kind, file, line); `install()` wraps, `uninstall()` restores."""

    def __init__(self, current_step: Callable[[], int]) -> None:
        self._current_step = current_step
        self._records: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._originals: list[tuple[Any, str, Any]] = []
        self._local = threading.local()

    def install(self) -> None:
        for kind, (owner, attr, op) in _TARGETS.items():
            self._patch(owner, attr, kind, op)
        if hasattr(torch, "cuda"):
            self._patch(torch.cuda, "synchronize", "cuda_synchronize", "cudaDeviceSynchronize")

    def uninstall(self) -> None:
        for owner, attr, original in reversed(self._originals):
            setattr(owner, attr, original)
        self._originals.clear()

    def records(self) -> list[dict[str, Any]]:
        """One dict per call site: kind, op, device, file, line, function, count, cost_ms, steps."""
        out = []
        for rec in self._records.values():
            row = dict(rec)
            row["steps"] = len(rec["steps"])
            row["cost_ms"] = round(rec["cost_ms"], 4)
            out.append(row)
        return sorted(out, key=lambda r: -r["count"])

    def _patch(self, owner: Any, attr: str, kind: str, op: str) -> None:
        original = getattr(owner, attr)
        recorder = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if getattr(recorder._local, "busy", False) or _called_from_torch():
                return original(*args, **kwargs)
            device = _device_of(kind, args, kwargs)
            if device is None:
                return original(*args, **kwargs)
            recorder._local.busy = True
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                recorder._local.busy = False
                recorder._add(kind, op, device, (time.perf_counter() - start) * 1e3)

        wrapper.__name__ = getattr(original, "__name__", attr)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        setattr(owner, attr, wrapper)
        self._originals.append((owner, attr, original))

    def _add(self, kind: str, op: str, device: str, cost_ms: float) -> None:
        file, line, function = _call_site()
        key = (kind, file, line)
        rec = self._records.get(key)
        if rec is None:
            rec = self._records[key] = {"kind": kind, "op": op, "device": device, "file": file,
                                        "line": line, "function": function, "count": 0,
                                        "cost_ms": 0.0, "steps": set()}
        rec["count"] += 1
        rec["cost_ms"] += cost_ms
        rec["steps"].add(self._current_step())


def _device_of(kind: str, args: tuple, kwargs: dict) -> str | None:
    """The tensor's device type for a call that syncs, or None when this call cannot sync."""
    if kind == "cuda_synchronize":
        return "cuda"
    tensor = args[0] if args else None
    if not isinstance(tensor, torch.Tensor):
        return None
    device = tensor.device.type
    if kind == "cpu" and device == "cpu":
        return None
    if kind == "to_cpu":
        try:
            target = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
        except Exception:  # an invalid call: let torch raise its own error
            return None
        if target is None or target.type != "cpu" or device == "cpu":
            return None
    return device


def _called_from_torch() -> bool:
    """True when torch itself made the call (a sampler's randperm().tolist(), say)."""
    return sys._getframe(2).f_code.co_filename.startswith(_SKIP_DIRS[0])


def _call_site() -> tuple[str, int, str]:
    """The innermost frame outside torch and nsbridge: the user's line."""
    frame = sys._getframe(3)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP_DIRS):
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0, "")
    path = frame.f_code.co_filename
    try:
        rel = os.path.relpath(path)
        path = path if rel.startswith("..") else rel
    except ValueError:
        pass
    return (path, frame.f_lineno, frame.f_code.co_name)
