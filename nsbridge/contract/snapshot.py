"""An allocator snapshot as columns (parse.memory_snapshot reads one; model.device.snapshot_memory
analyses it): the history's actions, torch's memory categories and the ``Snapshot`` type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the contract loads no pandas; the frames are the readers'
    import pandas as pd

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "oom", "snapshot", "segment_map", "segment_unmap")
# torch's memory profiler's categories (torch.profiler._memory_profiler.Category), which
# a snapshot made from a profile carries on each allocation
CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "input", "temporary",
              "autograd_detail", "unknown")


@dataclass(frozen=True)
class Snapshot:
    """One snapshot: its segments (the allocator's state when it was taken) and each
    device's history.

    Attributes:
        segments: one row per block: device, segment (its address), segment_size,
            segment_type, address, size, requested_size, state, stack (index into
            ``stacks``).
        traces: device -> one row per history entry, in order: action (a code into
            ACTIONS), addr, size, time_us (NaN when not recorded), stack, device_free
            (the OOM entries' free device memory, else NaN), category (torch's memory
            profiler's category, a code into CATEGORIES; -1 when not given).
        stacks: each distinct stack, innermost frame first, as (filename, line, name).
        devices: how many device histories the snapshot has (a snapshot made from a
            profile puts the host last, after the GPUs).
        from_profile: made from a torch.profiler profile
            (torch.cuda._memory_viz._profile_to_snapshot): its allocations carry torch's
            categories, and its segments only span addresses (no reserved memory).
    """

    segments: pd.DataFrame
    traces: dict[int, pd.DataFrame]
    stacks: list[tuple[tuple[str, int, str], ...]]
    devices: int = 0            # device_traces' length
    from_profile: bool = False  # made from a torch.profiler profile: categories, no segments
