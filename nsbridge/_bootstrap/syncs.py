"""Host-device sync points with the exact Python file:line that caused them.

torch.profiler's stacks only give a function's first line (facts.md), so the call site of a
host-device sync is taken here, in the profiled process, by wrapping the few Python entry
points that reach one. Only these entry points pay a wrapper; ordinary ops are untouched.

Entry points (kind: what the script wrote):

- ``item``, ``tolist``, ``cpu``, ``to_cpu``: ``t.item()``, ``t.tolist()``, ``t.cpu()``,
  ``t.to("cpu")``; ``cuda_synchronize``: ``torch.cuda.synchronize()``;
- relayed through Python's formatting and conversions, whose inner ``.item()`` or copy runs
  in torch's own code: ``format`` (``f"{t:.2f}"``, ``"{}".format(t)``; the 0-dim path ends
  in ``aten::_local_scalar_dense``), ``repr`` (``print(t)``, ``str(t)``, ``repr(t)``; the
  copy to the host, ``aten::_to_copy``), ``float``, ``int``, ``bool`` (``if t:``) and
  ``index`` (``range(t)``, ``x[:t]``), each an ``aten::_local_scalar_dense``. A conversion
  that runs inside another recorded call (``.item()`` inside ``__format__``) is not counted
  again, and a call that torch refuses (``bool`` of a many-element tensor) is not counted.

On a CPU-only run nothing waits, so the script's calls on CPU tensors stand in for the
syncs they would be on a GPU, judged by where the tensor would live there:

- ``t.cpu()``, and ``t.to("cpu")`` with ``cpu`` written in the call's line, are read-backs
  (the script asks for the host); ``t.to(device)`` on a CPU run is an upload or nothing,
  never a sync;
- a tensor a read-back returned, and its views (``correct = (a == b).cpu()``, then
  ``int(correct[i])``), is on the host either way: conversions of it are not syncs;
- neither are calls made while a DataLoader fetches a batch (a Dataset's ``__getitem__``
  reading its own index tensor): datasets run on the host on any machine.

A tensor computed from host data without either mark (``torch.tensor(results).sum()``)
still counts: nsbridge does not follow tensors through ops (that would cost every op).

What is recorded, per (kind, file, line):

- calls made by the script or a library it uses, with the tensor's device (a meta
  tensor, which holds no data, never syncs);
- not calls made by torch itself or by nsbridge (a repr built for torch's own error
  message, closing a measured window), and not library calls on CPU tensors, which never
  wait for a device (``library`` is True when the innermost frame outside torch and
  nsbridge is a library's: an installed package's or the standard library's);
- the line is the script's: a call made inside a library helper is attributed to the
  script line that led into the library (the first frame outward that is neither torch,
  nsbridge nor a library), and ``via`` names the library frame (``path:line in function``;
  None for a direct call, and when no script frame exists, as in a library's own thread,
  where the library's line is kept); a site's device, function, library and via are
  those of its first call, so one script line that reaches several library lines is one
  record;
- ``code``, the text of the site's line (at most STATEMENT_CHARS), read once per site;
- count, host time in the calls, and the steps it ran in (``current_step()``: the step
  boundaries seen so far): ``steps`` (how many distinct steps), ``first_step``,
  ``last_step`` and ``max_in_one_step`` (most calls within one step), so the analysis can
  tell calls in the training steps from those outside them (evaluation, a final test).
  Kept in O(1) per site: step indices only grow.

While the profiler records, each recorded call on a device tensor also runs inside a
``nsbridge::sync_site KIND DEVICE FILE:LINE`` range, so the trace ties the runtime's
blocking call to the line that asked for it (and a later ``analyze`` reads it back). CPU
tensors get no range: nothing there waits, and the records alone serve CPU-only runs.
`uninstall()` restores the wrapped attributes exactly: one inherited before (``float`` and
the other C-level methods live on ``torch._C.TensorBase``) is deleted again. A warning torch
raises inside a wrapped call is shown at the script's line, as without nsbridge
(``_WarningsAtCaller``).
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import sysconfig
import threading
import time
import warnings
import weakref
from types import FrameType
from typing import Any, Callable, Optional, cast

import torch

from nsbridge.schema import SYNC_SITE_PREFIX
from nsbridge.schema.records import SyncRecord

_ITEM_OP = "aten::_local_scalar_dense"
_COPY_OP = "aten::_to_copy"
# kind -> (owner, attribute, aten op that performs the sync on a CUDA tensor)
_TARGETS = {
    "item": (torch.Tensor, "item", _ITEM_OP),
    "tolist": (torch.Tensor, "tolist", _ITEM_OP),
    "cpu": (torch.Tensor, "cpu", _COPY_OP),
    "to_cpu": (torch.Tensor, "to", _COPY_OP),
    "format": (torch.Tensor, "__format__", _ITEM_OP),
    "repr": (torch.Tensor, "__repr__", _COPY_OP),
    "float": (torch.Tensor, "__float__", _ITEM_OP),
    "int": (torch.Tensor, "__int__", _ITEM_OP),
    "bool": (torch.Tensor, "__bool__", _ITEM_OP),
    "index": (torch.Tensor, "__index__", _ITEM_OP),
}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DATA_DIR = os.path.join(_TORCH_DIR, "utils", "data", "")
_READ_BACKS = ("cpu", "to_cpu")
# .to("cpu"), .to(device="cpu"), .to(torch.device('cpu')) written in the line
_TO_CPU_WRITTEN = re.compile(r"""\.to\(\s*(device\s*=\s*)?(torch\.device\(\s*)?["']cpu["']""")
_NSBRIDGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INTERNAL = (_TORCH_DIR, _NSBRIDGE_DIR)
_LIBRARY_DIRS = tuple(sorted({os.path.join(sysconfig.get_paths()[k], "")
                              for k in ("stdlib", "purelib", "platlib")}))
_MISSING = object()
# a named range in the trace: the C++ fast path (about 2 µs) where torch has it (>= 2.2),
# else the Python one (about 20 µs)
_RANGE = getattr(torch._C._profiler, "_RecordFunctionFast", None) or torch.profiler.record_function

# (file, line, function, library, via)
Site = tuple[str, int, str, bool, Optional[str]]
STATEMENT_CHARS = 200   # of a site's line kept in its record


class SyncRecorder:
    """Counts sync calls per (kind, file, line); `install()` wraps, `uninstall()` restores."""

    def __init__(self, current_step: Callable[[], int]) -> None:
        self._current_step = current_step
        self._records: dict[tuple[str, str, int], dict[str, Any]] = {}
        # (owner, attribute, what owner.__dict__ held before, or _MISSING if inherited)
        self._originals: list[tuple[Any, str, Any]] = []
        self._local = threading.local()
        # tensors a read-back returned (id -> tensor): on the host on any machine
        self._host: "weakref.WeakValueDictionary[int, torch.Tensor]" = \
            weakref.WeakValueDictionary()
        self._writes_cpu: dict[tuple[str, int], bool] = {}

    def install(self) -> None:
        for kind, (owner, attr, op) in _TARGETS.items():
            self._patch(owner, attr, kind, op)
        if hasattr(torch, "cuda"):
            self._patch(torch.cuda, "synchronize", "cuda_synchronize", "cudaDeviceSynchronize")
        _CALLERS_WARNINGS.install()

    def uninstall(self) -> None:
        _CALLERS_WARNINGS.uninstall()
        for owner, attr, own in reversed(self._originals):
            if own is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, own)
        self._originals.clear()

    def records(self) -> list[SyncRecord]:
        """One dict per call site: kind, op, device, file, line, function, code, library, via,
        count, cost_ms (host time in the calls), steps (distinct steps it ran in),
        first_step, last_step, max_in_one_step."""
        out = []
        for rec in self._records.values():   # the working record, less its private keys
            row = cast(SyncRecord, {k: v for k, v in rec.items() if not k.startswith("_")})
            row["cost_ms"] = round(rec["cost_ms"], 4)
            out.append(row)
        return sorted(out, key=lambda r: -r["count"])

    def _patch(self, owner: Any, attr: str, kind: str, op: str) -> None:
        own = vars(owner).get(attr, _MISSING)
        original = getattr(owner, attr)
        recorder = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if getattr(recorder._local, "busy", False) or _called_internally():
                return original(*args, **kwargs)
            device = _device_of(kind, args, kwargs)
            if device is None:
                return original(*args, **kwargs)
            site = _call_site()
            if device == "cpu" and (site[3] or recorder._stays_on_host(kind, args[0], site)):
                result = original(*args, **kwargs)
            else:
                result = recorder._recorded(original, args, kwargs, (kind, op, device, site))
            if device == "cpu" and kind in _READ_BACKS:
                recorder._mark_host(result)
            return result

        wrapper.__name__ = getattr(original, "__name__", attr)
        wrapper.__qualname__ = getattr(original, "__qualname__", attr)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        setattr(owner, attr, wrapper)
        self._originals.append((owner, attr, own))

    def _recorded(self, original: Callable[..., Any], args: Any, kwargs: Any,
                  call: tuple[str, str, str, Site]) -> Any:
        """``original(*args, **kwargs)``, recorded as a sync (``call``: kind, op, device,
        site), inside a sync_site range while the profiler records a device tensor's."""
        kind, op, device, site = call
        self._local.busy = True
        refused = False
        start = time.perf_counter()
        try:
            if device != "cpu" and torch.autograd._profiler_enabled():
                with _RANGE(f"{SYNC_SITE_PREFIX}{kind} {device} {site[0]}:{site[1]}"):
                    return original(*args, **kwargs)
            return original(*args, **kwargs)
        except Exception:  # torch refused the call (bool of many values): no sync
            refused = True
            raise
        finally:
            self._local.busy = False
            if not refused:
                self._add(kind, op, device, site, (time.perf_counter() - start) * 1e3)

    def _stays_on_host(self, kind: str, tensor: torch.Tensor, site: Site) -> bool:
        """True when this call on a CPU tensor would stay on the host on a GPU too: an
        upload (``.to(device)``), a tensor a read-back returned or a view of one, or a
        call made while a DataLoader fetches (module docstring)."""
        if kind == "to_cpu" and not self._writes_cpu_at(site):
            return True
        for held in (tensor, tensor._base):
            if held is not None and self._host.get(id(held)) is held:
                return True
        return _fetching_data()

    def _writes_cpu_at(self, site: Site) -> bool:
        """Whether the line of a ``.to(...)`` call names the host (cached per line)."""
        key = (site[0], site[1])
        known = self._writes_cpu.get(key)
        if known is None:
            text = linecache.getline(site[0], site[1])
            known = self._writes_cpu[key] = bool(_TO_CPU_WRITTEN.search(text))
        return known

    def _mark_host(self, result: Any) -> None:
        if isinstance(result, torch.Tensor):
            try:
                self._host[id(result)] = result
            except TypeError:  # a tensor subclass without weak references
                pass

    def _add(self, kind: str, op: str, device: str, site: Site, cost_ms: float) -> None:
        file, line, function, library, via = site
        key = (kind, file, line)
        step = self._current_step()
        rec = self._records.get(key)
        if rec is None:
            rec = self._records[key] = {
                "kind": kind, "op": op, "device": device, "file": file, "line": line,
                "function": function, "code": _statement(file, line), "library": library,
                "via": via, "count": 0,
                "cost_ms": 0.0, "steps": 1, "first_step": step, "last_step": step,
                "max_in_one_step": 0, "_step": step, "_in_step": 0}
        elif step != rec["_step"]:  # a later step (indices only grow): O(1), no step set
            rec["steps"] += 1
            rec["_step"], rec["_in_step"] = step, 0
            rec["first_step"] = min(rec["first_step"], step)
            rec["last_step"] = max(rec["last_step"], step)
        rec["count"] += 1
        rec["cost_ms"] += cost_ms
        rec["_in_step"] += 1
        rec["max_in_one_step"] = max(rec["max_in_one_step"], rec["_in_step"])


class _WarningsAtCaller:
    """A warning torch raises inside a wrapped call (``float(x)`` of a tensor that
    requires grad) is the script's: torch warns at the innermost Python frame, which is
    the wrapper's, so it is shown again at the line that called the wrapper, with that
    module's filters and once-per-line registry, exactly as without nsbridge. Every
    warning at the wrapper's own lines reaches ``showwarning`` (an "always" filter for
    this module only), which hands it on; no other warning changes. Nothing runs per call:
    only a warning pays, and the stack it walks is its own thread's."""

    def __init__(self) -> None:
        self._shown: Optional[Callable[..., Any]] = None
        self._filter: Optional[tuple] = None

    def install(self) -> None:
        warnings.filterwarnings("always", module=re.escape(__name__) + r"\Z")
        self._filter = warnings.filters[0]
        self._shown = warnings.showwarning
        warnings.showwarning = self._show

    def uninstall(self) -> None:
        if self._shown is not None and warnings.showwarning == self._show:
            warnings.showwarning = self._shown
        filters: list = warnings.filters  # type: ignore[assignment]
        if self._filter in filters:
            filters.remove(self._filter)
            warnings._filters_mutated()  # type: ignore[attr-defined]
        self._shown = self._filter = None

    def _show(self, message: Any, category: type, filename: str, lineno: int,
              file: Any = None, line: Optional[str] = None) -> None:
        caller = _wrapper_caller() if filename == __file__ else None
        if caller is None:
            assert self._shown is not None
            self._shown(message, category, filename, lineno, file, line)
            return
        warnings.warn_explicit(message, category, caller.f_code.co_filename, caller.f_lineno,
                               module=caller.f_globals.get("__name__"),
                               registry=caller.f_globals.setdefault("__warningregistry__", {}),
                               module_globals=caller.f_globals)


def _wrapper_caller() -> Optional[FrameType]:
    """The frame that called the innermost sync wrapper on this thread's stack."""
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "wrapper" and code.co_filename == __file__:
            return frame.f_back
        frame = frame.f_back
    return None


_CALLERS_WARNINGS = _WarningsAtCaller()


def _device_of(kind: str, args: tuple, kwargs: dict) -> Optional[str]:
    """The tensor's device type for a call that syncs, or None when this call cannot sync."""
    if kind == "cuda_synchronize":
        return "cuda"
    tensor = args[0] if args else None
    if not isinstance(tensor, torch.Tensor):
        return None
    try:
        device = tensor.device.type
    except Exception:  # a subclass without a device: leave the call to torch
        return None
    if device == "meta":  # a meta tensor has no data
        return None
    if kind == "to_cpu":
        try:
            target = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
        except Exception:  # an invalid call: let torch raise its own error
            return None
        if target is None or target.type != "cpu":
            return None
    return device


def _fetching_data() -> bool:
    """True when a DataLoader is fetching a batch somewhere up the stack."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith(_DATA_DIR):
            return True
        frame = frame.f_back
    return False


def _called_internally() -> bool:
    """True when torch (a sampler's randperm().tolist(), a repr in torch's own error
    message) or nsbridge itself made the call, or no Python frame did."""
    try:
        return sys._getframe(2).f_code.co_filename.startswith(_INTERNAL)
    except ValueError:  # called straight from C with no Python caller
        return True


def _is_library(path: str) -> bool:
    """A file of an installed package or of the standard library, not the user's code."""
    if path.startswith("<frozen "):  # a frozen stdlib module (runpy, importlib)
        return True
    path = os.path.abspath(path)
    return path.startswith(_LIBRARY_DIRS) or any(
        part in ("site-packages", "dist-packages") for part in path.split(os.sep))


def _shown(path: str) -> str:
    """The path relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(path)
        return path if rel.startswith("..") else rel
    except ValueError:
        return path


# code file -> (as shown, is a library's), worked out once per file (relpath alone costs
# about 5 µs): a file keeps one name for the whole run even if the script changes directory
_FILES: dict[str, tuple[str, bool]] = {}


def _file(path: str) -> tuple[str, bool]:
    known = _FILES.get(path)
    if known is None:
        known = _FILES[path] = (_shown(path), _is_library(path))
    return known


def _statement(path: str, line: int) -> Optional[str]:
    """The text of the call's line (what `diff` matches a site by when edits above it move
    it), None where the source cannot be read."""
    text = linecache.getline(path, line).strip()
    return text[:STATEMENT_CHARS] or None


def _call_site() -> Site:
    """(file, line, function, library, via): the innermost frame outside torch and nsbridge,
    or, when that frame is a library's (``library`` True), the first frame outward that is
    neither torch, nsbridge nor a library, with ``via`` naming the library frame
    ("path:line in function"); the library frame itself when no such frame exists."""
    frame: Optional[FrameType] = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0, "", False, None)
    shown, library = _file(frame.f_code.co_filename)
    via = None
    if library:
        outer = frame.f_back
        while outer is not None and (outer.f_code.co_filename.startswith(_INTERNAL)
                                     or _file(outer.f_code.co_filename)[1]):
            outer = outer.f_back
        if outer is not None:
            via = f"{shown}:{frame.f_lineno} in {frame.f_code.co_name}"
            frame = outer
            shown = _file(frame.f_code.co_filename)[0]
    return (shown, frame.f_lineno, frame.f_code.co_name, library, via)
