"""torch.profiler (Kineto) Chrome trace -> EVENTS frame (see schema.py).

Reads .json and .json.gz (detected by content, not name) from every torch generation in
the fixtures: 2022 capitalised categories and lower-case ``external id``, integer and
fractional timestamps, driver-API (Triton) launches, ROCm traces. Only the fields the
analysis needs become columns; the decoded JSON is dropped before returning.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import schema as S
from ..errors import EmptyTraceError, TraceFormatError, TraceNotFoundError

_CAT_ALIASES = {"runtime": S.CUDA_RUNTIME, "driver": S.CUDA_DRIVER, "memcpy": S.MEMCPY,
                "memset": S.MEMSET}
_DROP_CATS = {"trace", "overhead", "ac2g", "async_cpu_to_gpu", "async_gpu", "fwdbwd"}


@dataclass
class TorchTrace:
    """One parsed trace: its events frame and the top-level metadata."""

    path: Path
    events: pd.DataFrame
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    base_time_ns: int | None = None

    @property
    def has_device(self) -> bool:
        """True when the trace holds GPU activity (kernels, copies or memsets)."""
        return bool(self.events[S.CAT].isin(S.GPU_CATS).any())


def read_trace(path: str | Path) -> TorchTrace:
    """Parse one torch.profiler trace file.

    Raises:
        TraceNotFoundError: the path does not exist.
        TraceFormatError: not JSON, truncated/corrupt gzip or JSON, or not a trace.
        EmptyTraceError: a trace without any complete or instant events.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceNotFoundError(f"Trace file {path} does not exist. Pass a torch.profiler "
                                 "trace (.json or .json.gz) or a folder that holds them.")
    doc = _load_json(path)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceFormatError(
            f"{path} is JSON but not a torch.profiler trace: it has no 'traceEvents' list. "
            "Export one with prof.export_chrome_trace(...) or tensorboard_trace_handler, or "
            "run `nsbridge triage` on the script to capture one.")
    events = _events_frame(doc["traceEvents"])
    if events.empty:
        raise EmptyTraceError(
            f"{path} is a torch.profiler trace with no events: the profiler recorded "
            "nothing. Check that the profiled code ran inside the profiler's active steps "
            "(schedule) and that the trace was exported after prof.stop().")
    dist = doc.get("distributedInfo") or {}
    return TorchTrace(path=path, events=events,
                      device_properties=list(doc.get("deviceProperties") or []),
                      rank=_int_or_none(dist.get("rank")),
                      world_size=_int_or_none(dist.get("world_size")),
                      base_time_ns=_int_or_none(doc.get("baseTimeNanoseconds")))


def _load_json(path: Path) -> Any:
    with path.open("rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
    try:
        if gzipped:
            with gzip.open(path, "rb") as fh:
                raw = fh.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(
            f"{path} is a gzip file that cannot be decompressed ({exc}); it is truncated or "
            "corrupt. Copy it again from where it was written, or re-export the trace."
        ) from exc
    head = raw[:64].lstrip()
    if not head.startswith((b"{", b"[")):
        raise TraceFormatError(
            f"{path} is not a text or gzip file holding JSON, so not a torch.profiler trace "
            "(expected Chrome-trace JSON, .json or .json.gz, as export_chrome_trace writes).")
    try:
        return json.loads(raw)
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path} is not a text or gzip file, so not a torch.profiler "
                               "trace (expected Chrome-trace JSON, .json or .json.gz).") from exc
    except json.JSONDecodeError as exc:
        where = "ends early (truncated)" if exc.pos >= len(raw) - 2 else f"is corrupt at byte {exc.pos}"
        raise TraceFormatError(
            f"{path} is not valid JSON: it {where} ({exc.msg}). A trace cut off while being "
            "written (a killed job, a full disk) cannot be analysed; capture it again."
        ) from exc


def _events_frame(raw_events: list) -> pd.DataFrame:
    cols: dict[str, list] = {c: [] for c in S.EVENT_COLUMNS}
    for ev in raw_events:
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        if ph != "X" and ph != "i":
            continue
        cat = str(ev.get("cat") or "").lower()
        if cat in _DROP_CATS:
            continue
        cat = _CAT_ALIASES.get(cat, cat)
        args = ev.get("args") or {}
        cols[S.CAT].append(cat)
        cols[S.NAME].append(str(ev.get("name", "")))
        cols[S.PH].append(ph)
        cols[S.PID].append(str(ev.get("pid")))
        cols[S.TID].append(str(ev.get("tid")))
        cols[S.TS].append(ev.get("ts"))
        cols[S.DUR].append(ev.get("dur", 0) if ph == "X" else 0)
        ext = args.get("External id")
        cols[S.EXT_ID].append(args.get("external id") if ext is None else ext)
        cols[S.CORRELATION].append(args.get("correlation"))
        dims = args.get("Input Dims")
        cols[S.INPUT_DIMS].append(None if dims is None else json.dumps(dims, separators=(",", ":")))
        cols[S.BYTES].append(args.get("bytes", args.get("Bytes")))
        cols[S.DEVICE].append(args.get("device", args.get("Device Id")))
    frame = pd.DataFrame(cols)
    for col in (S.TS, S.DUR, S.EXT_ID, S.CORRELATION, S.BYTES, S.DEVICE):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(np.float64)
    frame = frame[frame[S.TS].notna()].reset_index(drop=True)
    frame[S.DUR] = frame[S.DUR].fillna(0.0).clip(lower=0.0)
    frame[S.CAT] = frame[S.CAT].astype("category")
    return frame


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
