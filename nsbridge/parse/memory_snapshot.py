"""The CUDA caching allocator's snapshot (``torch.cuda.memory._snapshot()``, written by
``torch.cuda.memory._dump_snapshot`` as a pickle) as columns.

A pickle can run code when loaded, so the file is read by an unpickler that builds only
plain data (dicts, lists, tuples, strings, numbers) and refuses every class: a snapshot
holds nothing else (torch's format: ``segments`` and ``device_traces``, documented in
``torch.cuda.memory._snapshot``). The history (``device_traces``) becomes one frame per
device with numpy columns, and each entry's frames are kept as an index into a table of
distinct stacks, so a million entries that share a few thousand stacks stay small.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import TraceFormatError
from ..contract.snapshot import ACTIONS, CATEGORIES, Snapshot

MAX_BYTES = 8 << 30    # a snapshot file larger than this is refused before it is read


class _PlainData(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers; refuses every class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def read_snapshot(path: Path) -> Snapshot:
    """The snapshot in ``path``.

    Raises:
        TraceFormatError: not a pickle of plain data, not a snapshot's shape, or too large.
    """
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise TraceFormatError(f"{path} is {size / 2**30:.1f} GiB, over the {MAX_BYTES >> 30} "
                               "GiB nsbridge reads as an allocator snapshot.")
    try:
        with path.open("rb") as handle:
            data = _PlainData(io.BufferedReader(handle)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError,
            MemoryError, RecursionError) as exc:
        raise TraceFormatError(
            f"{path} is not an allocator snapshot nsbridge reads: {exc}. A snapshot is the "
            "pickle torch.cuda.memory._dump_snapshot writes (plain data only: a pickle that "
            "names a class is refused, since loading it could run code).") from None
    return snapshot_of(data, str(path))


def snapshot_of(data: Any, where: str = "the snapshot") -> Snapshot:
    """A snapshot from its decoded form (the dict torch.cuda.memory._snapshot returns)."""
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list) \
            or not isinstance(data.get("device_traces", []), list):
        raise TraceFormatError(f"{where} is not an allocator snapshot: it has no 'segments' "
                               "list (torch.cuda.memory._snapshot's format).")
    stacks: dict[tuple, int] = {}
    segments = _segments(data["segments"], stacks, where)
    histories = data.get("device_traces") or []
    traces = {device: _trace(entries, stacks, where)
              for device, entries in enumerate(histories)
              if isinstance(entries, list) and entries}
    from_profile = any((t["category"] >= 0).any() for t in traces.values())
    return Snapshot(segments, traces, list(stacks), len(histories), from_profile)


# a Python frame as torch.profiler names it, which the snapshots torch makes from a
# profile (torch.cuda._memory_viz._profile_to_snapshot) carry with filename "none"
_NAMED_FRAME = re.compile(r"^(?P<file>[^()]+\.py)\((?P<line>\d+)\): (?P<func>.+)$")


def _frame(f: dict) -> tuple[str, int, str]:
    name = str(f.get("name", ""))
    filename = str(f.get("filename", ""))
    m = _NAMED_FRAME.match(name) if filename in ("none", "") else None
    if m:
        return (m["file"], int(m["line"]), m["func"])
    return (filename, _int(f.get("line")), name)


def _stack(frames: Any, stacks: dict[tuple, int]) -> int:
    if not isinstance(frames, list) or not frames:
        return -1
    key = tuple(_frame(f) for f in frames if isinstance(f, dict))
    return stacks.setdefault(key, len(stacks)) if key else -1


def _segments(segments: list, stacks: dict[tuple, int], where: str) -> pd.DataFrame:
    rows = []
    for seg in segments:
        if not isinstance(seg, dict):
            raise TraceFormatError(f"{where}: a segment is not an object")
        for block in seg.get("blocks") or []:
            if isinstance(block, dict):
                rows.append((_int(seg.get("device")), _int(seg.get("address")),
                             _int(seg.get("total_size")), str(seg.get("segment_type", "")),
                             _int(block.get("address")), _int(block.get("size")),
                             _int(block.get("requested_size", block.get("size"))),
                             str(block.get("state", "")), _stack(block.get("frames"), stacks)))
    return pd.DataFrame(rows, columns=["device", "segment", "segment_size", "segment_type",
                                       "address", "size", "requested_size", "state", "stack"])


def _trace(entries: list, stacks: dict[tuple, int], where: str) -> pd.DataFrame:
    codes = {a: i for i, a in enumerate(ACTIONS)}
    n = len(entries)
    action = np.full(n, -1, dtype=np.int8)
    addr = np.zeros(n, dtype=np.int64)
    size = np.zeros(n, dtype=np.int64)
    time_us = np.full(n, np.nan)
    stack = np.full(n, -1, dtype=np.int64)
    device_free = np.full(n, np.nan)
    category = np.full(n, -1, dtype=np.int8)
    categories = {c: i for i, c in enumerate(CATEGORIES)}
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise TraceFormatError(f"{where}: history entry {i} is not an object")
        action[i] = codes.get(str(e.get("action")), -1)
        addr[i] = _int(e.get("addr"))
        size[i] = _int(e.get("size"))
        t = e.get("time_us")
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            time_us[i] = t
        stack[i] = _stack(e.get("frames"), stacks)
        free = e.get("device_free")
        if isinstance(free, (int, float)) and not isinstance(free, bool):
            device_free[i] = free
        category[i] = categories.get(str(e.get("category")), -1)
    return pd.DataFrame({"action": action, "addr": addr, "size": size, "time_us": time_us,
                         "stack": stack, "device_free": device_free, "category": category})


def _int(value: Any) -> int:
    """An integer field (0 when absent or of another type: the analysis then skips it)."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) \
        and -(1 << 63) <= value < (1 << 63) else 0
