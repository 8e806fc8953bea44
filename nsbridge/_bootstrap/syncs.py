"""Host-device sync points with the exact Python file:line that caused them.

torch.profiler's stacks only give a function's first line (facts.md), so the call site of
`.item()`, `.tolist()`, `.cpu()`, `.to("cpu")` and `torch.cuda.synchronize()` is taken here,
in the profiled process, by wrapping those few methods. Only these Python entry points pay
a wrapper; ordinary ops are untouched.

What is recorded:

- calls made by the script or a library it uses, with the tensor's device;
- not calls made by torch itself or by nsbridge (closing a measured window), and not
  library calls on CPU tensors, which never wait for a device.

While the profiler records, each recorded call on a device tensor also runs inside a
``nsbridge::sync_site KIND DEVICE FILE:LINE`` range, so the trace ties the runtime's
blocking call to the line that asked for it (and a later ``analyze`` reads it back). CPU
tensors get no range: nothing there waits, and the records alone serve CPU-only runs.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from typing import Any, Callable, Optional

import torch

from nsbridge.schema import SYNC_SITE_PREFIX

# kind -> (owner, attribute, aten op that performs the sync on a CUDA tensor)
_TARGETS = {
    "item": (torch.Tensor, "item", "aten::_local_scalar_dense"),
    "tolist": (torch.Tensor, "tolist", "aten::_local_scalar_dense"),
    "cpu": (torch.Tensor, "cpu", "aten::_to_copy"),
    "to_cpu": (torch.Tensor, "to", "aten::_to_copy"),
}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_NSBRIDGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INTERNAL = (_TORCH_DIR, _NSBRIDGE_DIR)
_LIBRARY_DIRS = tuple(sorted({os.path.join(sysconfig.get_paths()[k], "")
                              for k in ("stdlib", "purelib", "platlib")}))
# a named range in the trace: the C++ fast path (about 2 µs) where torch has it (>= 2.2),
# else the Python one (about 20 µs)
_RANGE = getattr(torch._C._profiler, "_RecordFunctionFast", None) or torch.profiler.record_function


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
        """One dict per call site: kind, op, device, file, line, function, library, count,
        cost_ms (host time in the calls), steps (distinct steps it ran in)."""
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
            if getattr(recorder._local, "busy", False) or _called_internally():
                return original(*args, **kwargs)
            device = _device_of(kind, args, kwargs)
            site = _call_site() if device is not None else None
            if site is None or (device == "cpu" and site[3]):
                return original(*args, **kwargs)
            recorder._local.busy = True
            start = time.perf_counter()
            try:
                if device != "cpu" and torch.autograd._profiler_enabled():
                    name = f"{SYNC_SITE_PREFIX}{kind} {device} {site[0]}:{site[1]}"
                    with _RANGE(name):
                        return original(*args, **kwargs)
                return original(*args, **kwargs)
            finally:
                recorder._local.busy = False
                recorder._add(kind, op, device, site, (time.perf_counter() - start) * 1e3)

        wrapper.__name__ = getattr(original, "__name__", attr)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        setattr(owner, attr, wrapper)
        self._originals.append((owner, attr, original))

    def _add(self, kind: str, op: str, device: str, site: tuple[str, int, str, bool],
             cost_ms: float) -> None:
        file, line, function, library = site
        key = (kind, file, line)
        rec = self._records.get(key)
        if rec is None:
            rec = self._records[key] = {"kind": kind, "op": op, "device": device, "file": file,
                                        "line": line, "function": function,
                                        "library": library, "count": 0,
                                        "cost_ms": 0.0, "steps": set()}
        rec["count"] += 1
        rec["cost_ms"] += cost_ms
        rec["steps"].add(self._current_step())


def _device_of(kind: str, args: tuple, kwargs: dict) -> Optional[str]:
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


def _called_internally() -> bool:
    """True when torch (a sampler's randperm().tolist()) or nsbridge itself made the call."""
    return sys._getframe(2).f_code.co_filename.startswith(_INTERNAL)


def _is_library(path: str) -> bool:
    """A file of an installed package or of the standard library, not the user's code."""
    return path.startswith(_LIBRARY_DIRS) or any(
        part in ("site-packages", "dist-packages") for part in path.split(os.sep))


def _call_site() -> tuple[str, int, str, bool]:
    """The innermost frame outside torch and nsbridge: (file, line, function, is_library).
    The file is relative to the working directory when it lies below it."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0, "", False)
    path = frame.f_code.co_filename
    library = _is_library(os.path.abspath(path))
    try:
        rel = os.path.relpath(path)
        path = path if rel.startswith("..") else rel
    except ValueError:
        pass
    return (path, frame.f_lineno, frame.f_code.co_name, library)
