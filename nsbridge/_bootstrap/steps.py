"""Step boundaries in an unmodified script: optimizer steps, or `nsbridge.step()`; and the
bounded log of the steps' records.

torch's global optimizer-step hook sees every `optimizer.step()`. It runs inside torch's
``Optimizer.step#...`` record_function range, so after the first boundary the step the
script calls is wrapped once more (outside torch's wrapper: the optimizer's class, or the
optimizer itself where an LR scheduler made before the loop put its own step on it) and
later boundaries are taken when `step()` returns: a profiler window that closes there does
not charge its own stop/export to the optimizer. With several optimizers only the first one seen counts. Once the script
calls `nsbridge.step()`, optimizer steps are ignored. A closure given to ``step`` runs in a
``closure#`` range of its own (``closure_in_its_own_range``).

A tight loop runs tens of thousands of steps a second, so the per-step records are kept in
bounded memory (``StepLog``): every record of the first ``EXACT_STEPS``, then a uniform
sample (a seeded reservoir) of ``SAMPLED_STEPS`` of the later ones, and the count of all.
"""

from __future__ import annotations

import contextlib
import functools
import random
from typing import Any, Callable, Iterator, Optional

from nsbridge import _stepping
from nsbridge.schema import BACKWARD_RANGE, CLOSURE_PREFIX
from nsbridge.schema.records import ChildStep, StepsSampling


EXACT_STEPS = 5000     # steps whose records are all kept
SAMPLED_STEPS = 1000   # records kept of the steps after those, a uniform sample


class StepLog:
    """Per-step records in bounded memory; ``len()`` counts every step appended."""

    def __init__(self, exact: int = EXACT_STEPS, sampled: int = SAMPLED_STEPS) -> None:
        self._exact = exact
        self._size = sampled
        self._first: list[ChildStep] = []
        self._sample: list[ChildStep] = []
        self._later = 0
        self._random = random.Random(0)   # the same run keeps the same sample

    def __len__(self) -> int:
        return len(self._first) + self._later

    def append(self, record: ChildStep) -> None:
        if len(self._first) < self._exact:
            self._first.append(record)
            return
        self._later += 1
        if len(self._sample) < self._size:
            self._sample.append(record)
            return
        slot = self._random.randrange(self._later)
        if slot < self._size:
            self._sample[slot] = record

    def records(self) -> list[ChildStep]:
        """The records kept, in step order."""
        return self._first + sorted(self._sample, key=lambda r: r["index"])

    def sampling(self) -> Optional[StepsSampling]:
        """How the records were thinned (None when every step's record is kept): ``exact``
        steps kept one by one, then ``sampled`` of the ``later`` steps."""
        if self._later <= len(self._sample):
            return None
        return {"exact": len(self._first), "later": self._later, "sampled": len(self._sample)}


_open_ranges = 0      # nsbridge's own profiler ranges open now (own_range)


@contextlib.contextmanager
def own_range(name: str) -> Iterator[None]:
    """A profiler range of nsbridge's around the script's code, counted while open: the
    profiler must not stop or restart inside one (a range entered in one recording and
    left in none crashed the process: SIGSEGV in a budget-bounded time window stopped
    inside ``loss.backward()``), so the budget waits for ``in_own_range()`` to end."""
    import torch

    global _open_ranges
    _open_ranges += 1
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        _open_ranges -= 1


def in_own_range() -> bool:
    """Whether the script is inside one of nsbridge's own ranges now (own_range)."""
    return _open_ranges > 0


def closure_in_its_own_range(optimizer: Any, args: tuple[Any, ...],
                             kwargs: dict[str, Any]) -> Optional[tuple[Any, dict[str, Any]]]:
    """An optimizer-step pre-hook: a closure given to ``optimizer.step`` (Lightning's
    training_step and backward, LBFGS's loss) runs in a profiler range of its own named
    ``closure#<its name>``, so its Python is its own self time, not the optimizer's
    (``args[0]`` is the optimizer)."""
    positional = len(args) > 1
    closure = args[1] if positional else kwargs.get("closure")
    if not callable(closure) or getattr(closure, "_nsbridge", False):
        return None
    name = CLOSURE_PREFIX + _callable_name(closure)

    def ranged(*a: Any, **k: Any) -> Any:
        with own_range(name):
            return closure(*a, **k)

    ranged._nsbridge = True  # type: ignore[attr-defined]
    if positional:
        return (args[0], ranged, *args[2:]), kwargs
    return args, {**kwargs, "closure": ranged}


def backward_in_its_own_range() -> Any:
    """Wrap ``torch.autograd.backward`` (what ``loss.backward()`` calls) in a profiler
    range of its own, ``nsbridge::backward``: the autograd engine's final callbacks run
    inside the call but in no op (DDP waits there for its gradients' all-reduce, FSDP for
    its reduce-scatters), so without it that wait reads as time outside backward. Returns
    the function it replaced (None when already wrapped), for the uninstall."""
    import torch.autograd

    original = torch.autograd.backward
    if getattr(original, "_nsbridge", False):
        return None

    @functools.wraps(original)
    def backward(*args: Any, **kwargs: Any) -> Any:
        with own_range(BACKWARD_RANGE):
            return original(*args, **kwargs)

    backward._nsbridge = True  # type: ignore[attr-defined]
    torch.autograd.backward = backward
    return original


def _callable_name(fn: Any) -> str:
    """A function's qualified name; a partial's function's; else the object's class."""
    inner = fn.func if isinstance(fn, functools.partial) else fn
    return str(getattr(inner, "__qualname__", None) or type(inner).__qualname__)


class StepDetector:
    """Calls ``on_boundary()`` at the end of every training step."""

    def __init__(self, on_boundary: Callable[[], None]) -> None:
        self._on_boundary = on_boundary
        self.source: Optional[str] = None
        self.count = 0
        self._primary: Optional[int] = None
        self._inside_step = 0
        self._pending = False
        self._wrapped: list[tuple[Any, Any]] = []   # (class or optimizer, its step)
        self._hooks: list[Any] = []
        self._backward: Any = None      # torch.autograd.backward as it was, while wrapped

    def install(self) -> None:
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)

        self._hooks = [register_optimizer_step_pre_hook(closure_in_its_own_range),
                       register_optimizer_step_post_hook(self._on_optimizer_step)]
        _stepping.set_listener(self._on_user_step)
        self._backward = backward_in_its_own_range()

    def uninstall(self) -> None:
        _stepping.set_listener(None)
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        if self._backward is not None:
            import torch.autograd

            torch.autograd.backward = self._backward
            self._backward = None
        for owner, original in reversed(self._wrapped):
            owner.step = original
        self._wrapped.clear()

    def _boundary(self) -> None:
        self.count += 1
        self._on_boundary()

    def _on_user_step(self, source: str) -> None:
        self.source = source
        self._boundary()

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.source == "nsbridge.step":
            return
        if self._primary is None:
            self._primary = id(optimizer)
        if id(optimizer) != self._primary:
            return
        self.source = "optimizer"
        if self._inside_step:
            self._pending = True
            return
        self._boundary()
        self._wrap_step(optimizer)

    def _wrap_step(self, optimizer: Any) -> None:
        """Take later boundaries where the script's ``optimizer.step()`` returns: wrap the
        step the script calls, the optimizer's own where something (an LR scheduler made
        before the loop) put one on it, else its class's."""
        owner: Any = optimizer if "step" in vars(optimizer) else type(optimizer)
        original = vars(owner)["step"] if owner is optimizer else owner.step
        if getattr(original, "_nsbridge", False):
            return
        detector = self

        @functools.wraps(original)      # keeps a scheduler's own mark on it, too
        def step(*args: Any, **kwargs: Any) -> Any:
            detector._inside_step += 1
            try:
                return original(*args, **kwargs)
            finally:
                detector._inside_step -= 1
                if detector._pending and not detector._inside_step:
                    detector._pending = False
                    detector._boundary()

        step._nsbridge = True  # type: ignore[attr-defined]
        step.hooked = True  # type: ignore[attr-defined]  # torch must not wrap it again
        owner.step = step
        self._wrapped.append((owner, original))
