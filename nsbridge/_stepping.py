"""`nsbridge.step()`: mark a training step in loops that have no optimizer.

Outside `nsbridge triage` it does nothing, so scripts can keep the call. Inside, the
profiled process installs a listener that advances the profiler's schedule.
"""

from __future__ import annotations

from typing import Callable, Optional

_listener: Optional[Callable[[str], None]] = None


def step() -> None:
    """Mark the end of one training/inference step (no-op when not profiled by nsbridge)."""
    if _listener is not None:
        _listener("nsbridge.step")


def set_listener(listener: Optional[Callable[[str], None]]) -> None:
    """Install (or remove, with None) the function called on every `step()`."""
    global _listener
    _listener = listener
