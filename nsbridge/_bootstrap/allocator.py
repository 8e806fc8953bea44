"""The CUDA caching allocator's record in the profiled process, on a GPU run.

- Always: an out-of-memory observer (``torch._C._cuda_attach_out_of_memory_observer``)
  that writes the allocator's snapshot at the failure, ``oom-snapshot.pickle``: its
  segments (what was allocated and cached, fragmentation) and, with the history on, the
  allocations that led there. It costs nothing until the script runs out of memory.
- With the history on (the memory profile: stacks and memory): the allocator's history from
  the script's start (``torch.cuda.memory._record_memory_history``, Python stacks, at most
  HISTORY_ENTRIES entries) and its snapshot at the end, ``allocator-snapshot.pickle``.

nsbridge reads both (parse.memory_snapshot, model.device.snapshot_memory). Everything
here is torch's private API: a torch without it is said on stderr, never an error.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

from nsbridge.rundir import write_atomic
from nsbridge.schema import ALLOCATOR_SNAPSHOT, OOM_SNAPSHOT

HISTORY_ENTRIES = 200_000   # a few steps of a large model; the oldest entries go first


class AllocatorRecord:
    """Arms the observer (and the history) while installed; writes the snapshots."""

    def __init__(self, run_dir: Path, history: bool) -> None:
        self._run_dir = run_dir
        self._history = history
        self._armed = False
        self.written: list[str] = []

    def start(self) -> None:
        import torch

        if not torch.cuda.is_available():
            return
        try:
            if self._history:
                torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES,
                                                         stacks="python")
            torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
            self._armed = True
        except (AttributeError, RuntimeError, TypeError) as exc:
            _say(f"the allocator's record is off on this torch: {exc}")

    def finish(self) -> None:
        """The history's snapshot, then the history off (the observer stays: harmless)."""
        if not (self._armed and self._history):
            return
        import torch

        self._dump(ALLOCATOR_SNAPSHOT)
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except (AttributeError, RuntimeError, TypeError):
            pass

    def _on_oom(self, device: Any, alloc: Any, device_allocated: Any, device_free: Any) -> None:
        """torch calls this as an allocation fails, before it raises OutOfMemoryError."""
        if OOM_SNAPSHOT not in self.written:    # the first failure is the one that ended it
            self._dump(OOM_SNAPSHOT)

    def _dump(self, name: str) -> None:
        import torch

        try:
            data = pickle.dumps(torch.cuda.memory._snapshot(), protocol=pickle.HIGHEST_PROTOCOL)
            write_atomic(self._run_dir / name, data)
            self.written.append(name)
        except Exception as exc:   # noqa: BLE001 - never a new failure inside the script's
            _say(f"the allocator's snapshot {name} could not be written: {exc}")


def _say(text: str) -> None:
    print(f"nsbridge: {text}"[:400], file=sys.stderr)
