"""Synthetic EVENTS frames for model tests (columns as schema.EVENT_COLUMNS)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsbridge import schema as S


def events(*rows: dict[str, Any]) -> pd.DataFrame:
    """Build an EVENTS frame; each row needs cat, name, ts, dur; the rest defaults."""
    base = {S.PH: "X", S.PID: "1", S.TID: "1", S.EXT_ID: np.nan, S.CORRELATION: np.nan,
            S.INPUT_DIMS: None, S.INPUT_TYPES: None, S.INPUT_STRIDES: None, S.BYTES: np.nan,
            S.DEVICE: np.nan,
            S.KERNEL_FILE: None, S.TOTAL_ALLOCATED: np.nan, S.TOTAL_RESERVED: np.nan,
            S.ADDR: np.nan, S.LAUNCH: None}
    frame = pd.DataFrame([{**base, **r} for r in rows])[S.EVENT_COLUMNS]
    for col in (S.TS, S.DUR, S.EXT_ID, S.CORRELATION, S.BYTES, S.DEVICE, S.TOTAL_ALLOCATED,
                S.TOTAL_RESERVED, S.ADDR):
        frame[col] = frame[col].astype(np.float64)
    frame[S.CAT] = frame[S.CAT].astype("category")
    return frame


def op(name: str, ts: float, dur: float, **kw: Any) -> dict[str, Any]:
    return {S.CAT: kw.pop("cat", S.CPU_OP), S.NAME: name, S.TS: ts, S.DUR: dur, **kw}


def kernel(name: str, ts: float, dur: float, corr: float, ext: float | None = None,
           **kw: Any) -> dict[str, Any]:
    return {S.CAT: kw.pop("cat", S.KERNEL), S.NAME: name, S.TS: ts, S.DUR: dur,
            S.PID: "0", S.TID: "7", S.CORRELATION: corr,
            S.EXT_ID: corr if ext is None else ext, S.DEVICE: 0.0, **kw}


def launch(ts: float, corr: float, ext: float | None = None, **kw: Any) -> dict[str, Any]:
    return {S.CAT: S.CUDA_RUNTIME, S.NAME: kw.pop("name", "cudaLaunchKernel"), S.TS: ts,
            S.DUR: kw.pop("dur", 2.0), S.CORRELATION: corr,
            S.EXT_ID: corr if ext is None else ext, **kw}
