"""Run directories: where every command writes, never over an earlier run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

from .errors import RunDirError

DEFAULT_BASE = Path("nsbridge-runs")


def new_run_dir(out: Optional[Path], label: str, base: Path = DEFAULT_BASE,
                shared: bool = False) -> Path:
    """Create and return a fresh run directory.

    With ``out``: that directory, which must not exist yet (or be empty). Without: ``base/
    <YYYYmmdd-HHMMSS>-<label>``, with ``-2``, ``-3``... when two runs start in one second.
    ``shared``: the ranks of one job write into one directory (``out``, or ``base/label``),
    each into its own rank folder, so the directory may already exist.

    Raises:
        RunDirError: ``out`` exists with files in it, or the directory cannot be created
            or written.
    """
    if shared:
        path = Path(out) if out is not None else base / _safe(label)
    elif out is not None:
        path = Path(out)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise RunDirError(
                f"--out {path} already exists and is not an empty directory; nsbridge never "
                "overwrites an earlier run. Choose a new directory, or leave --out off to get "
                f"a fresh one under {base}/.")
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = base / f"{stamp}-{_safe(label)}"
        n = 2
        while path.exists():
            path = base / f"{stamp}-{_safe(label)}-{n}"
            n += 1
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".nsbridge-write-test-{os.getpid()}"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise RunDirError(
            f"Cannot create or write the run directory {path}: {exc.strerror or exc}. Pick a "
            "writable location with --out DIR (or run from a writable working directory)."
        ) from exc
    return path


def free_stem(run_dir: Path, stem: str, suffixes: tuple[str, ...]) -> str:
    """``stem``, or ``stem-2``, ``stem-3``... : the first name no file with these suffixes
    uses yet (a pass run twice into one run directory keeps both outputs)."""
    n, name = 1, stem
    while any((run_dir / f"{name}{ext}").exists() for ext in suffixes):
        n += 1
        name = f"{stem}-{n}"
    return name


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a crash never leaves half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _safe(label: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)
    return keep.strip("-.") or "run"
