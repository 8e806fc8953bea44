"""`nsbridge doctor`: what this machine can profile, each line OK / WARN / FAIL with the fix."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import ToolFailedError, ToolNotFoundError
from .ncu import ncu_version
from .nsys import (INSTALL_HINT, NsysInstall, capture, export_sqlite, find_nsys, nsys_version,
                   nvtx_fix)
from ._process import Captured, run_captured, which

# What the profiled Python sees, written to the file named by argv[1]: torch and CUDA
# builds print warnings (a driver too old for the build) on stdout and stderr, so the data
# never travels on either.
_PROBE = """
import json, sys
info = {"python": sys.version.split()[0]}
try:
    import torch
    info.update(torch=torch.__version__, cuda=torch.version.cuda,
                cuda_available=torch.cuda.is_available(),
                gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                if torch.cuda.is_available() else [])
except Exception as exc:
    info["torch_error"] = repr(exc)
try:
    from importlib.metadata import version
    info["nvtx"] = version("nvtx")
except Exception:
    info["nvtx"] = None
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump(info, out)
"""
CHATTER_CHARS = 600   # of what the probe printed, shown on the "torch warned" line

_NVTX_ROUND_TRIP = """
from nsbridge._bootstrap.nvtx_ranges import _nvtx_api
make, push, pop = _nvtx_api("nsbridge")
for name in ("doctor::a", "doctor::b", "doctor::c"):
    push(make(name)); pop()
"""


@dataclass(frozen=True)
class Check:
    level: str          # OK | WARN | FAIL
    name: str
    detail: str
    fix: Optional[str] = None


def run_checks() -> list[Check]:
    """Every check, in order; never raises for a missing tool (that is a WARN line)."""
    checks: list[Check] = []
    info, done = probe_python()
    printed = done.text
    checks.append(Check("OK", "python", f"{info.get('python', sys.version.split()[0])} "
                                        f"({sys.executable})"))
    if "torch" in info:
        checks.append(Check("OK", "torch", f"{info['torch']} (CUDA build: {info['cuda'] or 'no'})"))
    else:
        checks.append(Check("FAIL", "torch", "cannot import torch: "
                            + (info.get("torch_error") or one_line(printed)
                               or f"the probe ended with status {done.code} and said nothing"),
                            "pip install torch (a CPU build is enough for triage)"))
    if info and printed.strip():
        checks.append(Check("WARN", "torch warned", one_line(printed)))
    gpus = info.get("gpus") or []
    if gpus:
        checks.append(Check("OK", "gpu", ", ".join(gpus)))
    else:
        checks.append(Check("WARN", "gpu", "no CUDA GPU visible: triage runs on CPU; kernel "
                            "numbers and ncu need a GPU",
                            None if info.get("cuda") else "install a CUDA build of torch on a "
                            "GPU machine for device numbers"))
    checks.append(Check("OK" if info.get("nvtx") else "WARN", "nvtx package",
                        info.get("nvtx") or "not installed",
                        None if info.get("nvtx") else "pip install nvtx"))
    checks.append(_trace_reader_check())
    checks.extend(_nsys_checks(info.get("nvtx")))
    checks.extend(_ncu_checks(bool(gpus)))
    return checks


# nsbridge's C extension, the trace scanner, and what is used where it is missing (setup.py
# says the same at install, where pip shows it); _stream.py falls back on ImportError
SCANNER = "nsbridge.parse._scan"
SCANNER_FALLBACK = ("the pure-Python reader is in use: msgspec reads every batch, and a "
                    "large trace takes about 1.5-2x as long to analyse")
NATIVE_FIX = ("install a C compiler and Python's headers (apt install gcc python3-dev) and "
              "reinstall nsbridge: pip install --force-reinstall --no-deps --no-cache-dir "
              "nsbridge (pip install -e . in a checkout)")


def _native_state(name: str) -> Optional[str]:
    """None when the extension loads; else why not: never compiled (no file, as an install
    without a C compiler leaves it), or compiled but refused by this Python."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return "not built when nsbridge was installed (no C compiler or Python headers then?)"
    try:
        importlib.import_module(name)
    except ImportError as exc:
        return f"built but does not load ({one_line(str(exc), 200)})"
    return None


def _trace_reader_check() -> Check:
    """Whether the C trace scanner (nsbridge/parse/_scan.c) was compiled at install and
    loads; where not, why, and the pure-Python reader in use instead."""
    state = _native_state(SCANNER)
    if state is None:
        return Check("OK", "trace reader", "C scanner (msgspec for batches it declines)")
    return Check("WARN", "trace reader", f"C scanner: {state}; {SCANNER_FALLBACK}",
                 NATIVE_FIX)


def probe_python() -> tuple[dict[str, Any], Captured]:
    """(what the probe wrote, how it ran): the data from the file it writes (empty when it
    wrote none), and its exit status and output (torch's warnings) apart."""
    with tempfile.TemporaryDirectory(prefix="nsbridge-doctor-") as tmp:
        data = Path(tmp) / "probe.json"
        done = run_captured([sys.executable, "-c", _PROBE, str(data)], timeout=300)
        try:
            info = json.loads(data.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            info = {}
    return (info if isinstance(info, dict) else {}), done


def one_line(text: str, limit: int = CHATTER_CHARS) -> str:
    """A tool's output as one doctor line: its non-blank lines joined, cut at ``limit``."""
    joined = " / ".join(line.strip() for line in text.splitlines() if line.strip())
    return joined if len(joined) <= limit else joined[:limit - 3] + "..."


def _nsys_checks(nvtx_version: Optional[str]) -> list[Check]:
    try:
        install = find_nsys()
    except ToolNotFoundError:
        return [Check("WARN", "nsys", "not found: `nsbridge timeline` and `triage --nsys` "
                      "cannot run", INSTALL_HINT)]
    version = nsys_version(install.path)
    importer = (f"importer {Path(install.importer).parent}" if install.importer else
                "no QdstrmImporter beside it (fine while nsys finds its own)")
    checks = [Check("OK", "nsys", f"{version or 'unknown version'} ({install.path}, found by "
                                  f"{install.found_by}); {importer}")]
    checks.append(_nvtx_round_trip(install, version, nvtx_version))
    return checks


def _nvtx_round_trip(install: NsysInstall, version: Optional[str],
                     nvtx_version: Optional[str]) -> Check:
    """Three NVTX ranges through the timeline pass's own capture-and-import routine."""
    with tempfile.TemporaryDirectory(prefix="nsbridge-doctor-") as tmp:
        log = Path(tmp) / "doctor.nsys.log"
        try:
            result = capture(install, trace=["nvtx"], output=Path(tmp) / "roundtrip",
                             child_argv=[sys.executable, "-c", _NVTX_ROUND_TRIP],
                             cwd=Path(tmp), env=os.environ, timeout=300, log=log, echo=False)
            sqlite = export_sqlite(install.path, result.report, log)
        except ToolFailedError as exc:
            return Check("FAIL", "nvtx round trip", str(exc),
                         "run `nsys profile python -c pass` to see nsys's own error")
        with sqlite3.connect(sqlite) as conn:
            try:
                found = conn.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59"
                                     ).fetchone()[0]
            except sqlite3.OperationalError:
                found = 0
    imported = (f"; nsys left a .qdstrm, imported with {result.imported_with}"
                if result.imported_with else "")
    if found >= 3:
        return Check("OK", "nvtx round trip", f"nsys recorded {found} of 3 test ranges{imported}")
    return Check("FAIL", "nvtx round trip",
                 f"nsys {version} recorded {found} of 3 NVTX ranges from nvtx {nvtx_version}"
                 f"{imported}",
                 nvtx_fix())


def _ncu_checks(has_gpu: bool) -> list[Check]:
    ncu = which("ncu")
    if not ncu:
        return [Check("WARN", "ncu", "not found: the kernel deep pass cannot run",
                      "install Nsight Compute (Debian non-free `nsight-compute`, or the CUDA "
                      "toolkit)")]
    version = ncu_version(ncu)
    checks = [Check("OK" if version else "WARN", "ncu",
                    f"{version or 'unknown version'} ({ncu})")]
    if not has_gpu:
        checks.append(Check("WARN", "gpu counters", "not checked: no GPU"))
        return checks
    params = Path("/proc/driver/nvidia/params")
    restricted = params.is_file() and "RmProfilingAdminOnly: 1" in params.read_text()
    if restricted and os.geteuid() != 0:
        checks.append(Check("FAIL", "gpu counters", "performance counters are limited to admin "
                            "users (ERR_NVGPUCTRPERM)", "run as root, or set the driver option "
                            "NVreg_RestrictProfilingToAdminUsers=0 and reload it; containers "
                            "also need --cap-add=SYS_ADMIN"))
    else:
        checks.append(Check("OK", "gpu counters", "accessible" + (" (root)" if restricted else "")))
    return checks
