"""NVTX ranges for every op, module and step, in the ``nsbridge`` domain.

Installed only for the timeline (nsys) pass: when off, nothing is patched and nothing runs.

- ops: a TorchDispatchMode pushes a range named as torch.profiler names the op
  (``aten::addmm``) around every dispatched op. Dispatch modes live in thread-local state
  that the autograd engine carries to its worker threads, so backward ops get their ranges
  on the thread that runs them.
- modules: global forward pre/post hooks push ``model.features.0``-style paths. For
  backward, the autograd nodes a module's forward created get pre/post hooks that push
  ``model.features.0 [backward]`` around each node, on the backward thread.
- steps: ``step N`` ranges between step boundaries (``step 0`` until the first one).

The nvtx package changed its API after 0.2.10 (``get_domain``); both are supported. Every
pushed range is counted so the report can say when nsys recorded fewer than were emitted.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from nsbridge.schema import NVTX_DOMAIN, NVTX_BACKWARD_SUFFIX
from nsbridge.schema.records import NvtxSummary


def _nvtx_api(domain: str) -> tuple[Callable[[str], Any], Callable[[Any], None], Callable[[], None]]:
    """(attributes(name), push(attributes), pop()) for the installed nvtx package."""
    import nvtx

    if hasattr(nvtx, "get_domain"):
        dom = nvtx.get_domain(domain)
        return (lambda name: dom.get_event_attributes(message=name), dom.push_range,
                dom.pop_range)
    from nvtx._lib import (Domain, EventAttributes, RegisteredString, pop_range,
                           push_range)

    handle = Domain(domain).handle
    return (lambda name: EventAttributes(RegisteredString(handle, name), "blue", None, None),
            lambda attrs: push_range(attrs, handle), lambda: pop_range(handle))


class NvtxInstrumentation:
    """Pushes op, module and step ranges while installed; counts what it pushed."""

    def __init__(self) -> None:
        self.emitted: Counter[str] = Counter()
        self._make, self._push, self._pop = _nvtx_api(NVTX_DOMAIN)
        self._attrs: dict[str, Any] = {}
        self._names: dict[int, str] = {}
        self._module_depth = 0
        self._roots = 0
        self._step_open = False
        self._steps = 0
        self._tagged: set[int] = set()   # ids of hooked autograd nodes (cleared each step)
        self._mode: _OpRanges | None = None
        self._handles: list[Any] = []

    # -- lifecycle -------------------------------------------------------------------------
    def install(self) -> None:
        from torch.nn.modules import module as nn_module

        self._handles = [nn_module.register_module_forward_pre_hook(self._forward_pre),
                         nn_module.register_module_forward_hook(self._forward_post)]
        self._mode = _OpRanges(self)
        self._mode.__enter__()
        self._push_step()

    def uninstall(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._step_open:
            self._pop()
            self._step_open = False

    def boundary(self) -> None:
        """End of a step: close its range and open the next one."""
        if self._step_open:
            self._pop()
            self._step_open = False
        self._steps += 1
        self._tagged.clear()
        self._push_step()

    def summary(self) -> NvtxSummary:
        return {"domain": NVTX_DOMAIN, "emitted": dict(self.emitted),
                "total": int(sum(self.emitted.values()))}

    # -- ranges ----------------------------------------------------------------------------
    def push(self, name: str, kind: str) -> None:
        attrs = self._attrs.get(name)
        if attrs is None:
            attrs = self._attrs[name] = self._make(name)
        self._push(attrs)
        self.emitted[kind] += 1

    def pop(self) -> None:
        self._pop()

    def _push_step(self) -> None:
        """Open ``step N``; its name is used once, so it is not cached (memory stays
        bounded however many steps run)."""
        self._push(self._make(f"step {self._steps}"))
        self.emitted["step"] += 1
        self._step_open = True

    # -- modules ---------------------------------------------------------------------------
    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        self.push(self._path(module), "module")
        self._module_depth += 1

    def _forward_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self._module_depth -= 1
        self.pop()
        if torch.is_grad_enabled():
            self._tag_backward(self._path(module), args, output)

    def _path(self, module: torch.nn.Module) -> str:
        name = self._names.get(id(module))
        if name is None:
            if self._module_depth == 0:
                root = "model" if self._roots == 0 else type(module).__name__
                self._roots += 1
                for sub_name, sub in module.named_modules():
                    self._names.setdefault(id(sub), f"{root}.{sub_name}" if sub_name else root)
                name = self._names[id(module)]
            else:
                name = self._names[id(module)] = type(module).__name__
        return name

    def _tag_backward(self, path: str, args: Any, output: Any) -> None:
        """Hook the autograd nodes this module's forward created (innermost module wins)."""
        stop = {t.grad_fn for t in tree_leaves(args) if isinstance(t, torch.Tensor)}
        todo = [t.grad_fn for t in tree_leaves(output)
                if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen: set[Any] = set()
        label = f"{path}{NVTX_BACKWARD_SUFFIX}"
        while todo:
            node = todo.pop()
            if node is None or node in seen or node in stop:
                continue
            seen.add(node)
            if type(node).__name__ == "AccumulateGrad":
                continue
            if id(node) not in self._tagged:
                self._tagged.add(id(node))
                try:
                    node.register_prehook(lambda grads, label=label: self.push(label, "backward_module"))
                    node.register_hook(lambda gin, gout: self.pop())
                except (AttributeError, RuntimeError):
                    pass  # a node type that takes no hooks
            todo.extend(fn for fn, _ in node.next_functions)


class _OpRanges(TorchDispatchMode):
    """One NVTX range per dispatched op, named like torch.profiler (``aten::addmm``)."""

    def __init__(self, owner: NvtxInstrumentation) -> None:
        super().__init__()
        self._owner = owner
        self._names: dict[Any, str] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = func._schema.name
        if name.startswith("profiler::"):  # record_function plumbing, not an op
            return func(*args, **(kwargs or {}))
        self._owner.push(name, "op")
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self._owner.pop()
