"""The allocator-snapshot pass: snapshots captured elsewhere (``analyze x.pickle``) read
and analysed (model.device.snapshot_memory) into report["memory_snapshot"]."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .. import schema as S
from ..errors import TraceFormatError
from ..model.device.snapshot_memory import snapshot_memory
from ..parse.memory_snapshot import read_snapshot
from ..run import PassOutput, Run

SOURCE = ("the CUDA caching allocator's snapshot (torch.cuda.memory._snapshot: its history "
          "and segments), or one torch made from a profile (its memory categories)")


@dataclass(frozen=True)
class SnapshotFilesPass:
    """Allocator snapshots given to analyze (the first with a history is analysed)."""

    files: Sequence[Path]
    name: str = "memory snapshot"

    def plan(self, run: Run) -> None:
        return None

    def run(self, run: Run, plan: None) -> PassOutput:
        return snapshot_output(self.files)


def snapshot_output(files: Sequence[Path]) -> PassOutput:
    """The pass's output for ``files``.

    Raises:
        TraceFormatError: a file is not a snapshot, or none has a history.
    """
    for path in files:
        result = snapshot_memory(read_snapshot(path))
        if result is not None:
            notes = ([f"{len(files) - 1} more snapshot(s) given; the first with a history "
                      f"({path.name}) is analysed"] if len(files) > 1 else [])
            return PassOutput(name="memory snapshot",
                              manifest={"inputs": [str(f) for f in files]},
                              section=(S.SNAPSHOT_SECTION, result), notes=notes,
                              sources={S.SNAPSHOT_SECTION: SOURCE})
    raise TraceFormatError(
        f"{', '.join(str(f) for f in files)}: no allocation history in the snapshot(s). "
        "Record it before the snapshot: torch.cuda.memory._record_memory_history("
        "max_entries=100000), then torch.cuda.memory._dump_snapshot('x.pickle').")
