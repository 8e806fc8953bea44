"""The Nsight Compute pass: the script under `ncu`, filtered to the chosen ops' kernels.

The script runs through nsbridge's bootstrap in its ``nvtx`` pass, so every op is a
push/pop range in the ``nsbridge`` domain; ncu profiles only kernels whose innermost range
is one of the chosen ops (``--nvtx-include "nsbridge@aten::addmm]"``, one config per op,
OR-ed). Push/pop stacks are per thread and nsbridge pushes op ranges on the autograd
threads too, so backward ops are covered. Warm-up is skipped by launch counts, which ncu
counts over matching launches only: the plan skips ``skip_steps`` steps' worth of the ops'
launches and profiles ``profile_steps`` steps' worth.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ..errors import DeepError, ToolFailedError, ToolNotFoundError
from ._process import ChildOutcome, honour_umask, run_captured, run_filtered, which

INSTALL_HINT = ("Install Nsight Compute: it comes with the CUDA toolkit (`/usr/local/cuda/bin/"
                "ncu`), from developer.nvidia.com/nsight-compute, or as Debian/Ubuntu's "
                "`nsight-compute` package; or point NSBRIDGE_NCU at the ncu binary.")
SEARCH_PATTERNS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
PERMISSION = ("GPU performance counters are not accessible to this user (ERR_NVGPUCTRPERM). "
              "On bare metal run as root, or set the NVIDIA driver option "
              "NVreg_RestrictProfilingToAdminUsers=0 and reload the driver; in a container "
              "also start it with --cap-add=SYS_ADMIN; many cloud GPU hosts cannot grant "
              "counter access at all, so profile on a machine that can.")
PROGRESS = re.compile(r"^==PROF== (Profiling|Connected|Disconnected|Report|Creating|Trying)")
_NVTX_SPECIAL = re.compile(r"([@,\[\]/*+\\])")
_VERSION = re.compile(r"^Version (\d{4}\.\d+(?:\.\d+)*)", re.MULTILINE)
_GPU_LINE = re.compile(r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class NcuCapture:
    """What one ncu run left: how it ended, its report and its log."""

    outcome: ChildOutcome
    argv: list[str]
    report: Path
    log: Path


def find_ncu(environ: Mapping[str, str] = os.environ,
             patterns: Sequence[str] = SEARCH_PATTERNS) -> str:
    """ncu from NSBRIDGE_NCU, PATH, or the CUDA toolkit / Nsight Compute folders.

    Raises:
        ToolNotFoundError: none found, with how to install it.
    """
    import glob

    explicit = environ.get("NSBRIDGE_NCU")
    if explicit:
        if Path(explicit).is_file():
            return explicit
        raise ToolNotFoundError(f"NSBRIDGE_NCU={explicit} is not a file. {INSTALL_HINT}")
    found = which("ncu", environ.get("PATH"))
    if found:
        return found
    for pattern in patterns:
        hits = sorted(glob.glob(pattern), reverse=True)
        if hits:
            return hits[0]
    raise ToolNotFoundError(f"ncu (Nsight Compute) was not found on PATH or in "
                            f"{', '.join(patterns)}, so the deep pass cannot run. {INSTALL_HINT}")


def ncu_version(ncu: str, environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The version on ncu's own ``Version X`` line of stdout (None when there is none)."""
    done = run_captured([ncu, "--version"], timeout=60, env=environ)
    match = _VERSION.search(done.stdout) if done.code == 0 else None
    return match.group(1) if match else None


def gpu_names(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The GPUs `nvidia-smi -L` lists ([] without a driver or a GPU)."""
    smi = which("nvidia-smi", environ.get("PATH"))
    if not smi:
        return []
    done = run_captured([smi, "-L"], timeout=60, env=environ)
    return _GPU_LINE.findall(done.stdout) if done.code == 0 else []


def nvtx_include(op: str, domain: str = "nsbridge") -> str:
    """ncu's NVTX config for "innermost push/pop range is ``op`` in ``domain``"; ncu's
    special characters (``@ , [ ] / * +`` and backslash) in the name are escaped."""
    escaped = _NVTX_SPECIAL.sub(lambda m: "\\" + m.group(1), op)
    return f"{domain}@{escaped}]"


def profile_argv(ncu: str, *, ops: Sequence[str], launch_skip: int, launch_count: int,
                 sections: Sequence[str], metrics: Sequence[str], replay_mode: str,
                 clock_control: str, cache_control: str, output: Path,
                 child_argv: Sequence[str]) -> list[str]:
    """The `ncu` command line (an argument list; never a shell string)."""
    argv = [ncu, "--target-processes", "all", "--nvtx"]
    for op in ops:
        argv += ["--nvtx-include", nvtx_include(op)]
    argv += ["--launch-skip", str(launch_skip), "--launch-count", str(launch_count),
             "--replay-mode", replay_mode, "--clock-control", clock_control,
             "--cache-control", cache_control]
    for section in sections:
        argv += ["--section", section]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    return [*argv, "--export", str(output), "--force-overwrite", *child_argv]


def capture(argv: Sequence[str], *, report: Path, cwd: Path, env: Mapping[str, str],
            timeout: Optional[float], log: Path, ops: Sequence[str]) -> NcuCapture:
    """Run ncu; recognise its failures.

    Raises:
        DeepError: counters not permitted (how to fix it, by kind of machine), or no kernel
            matched the filter (the filter used).
        ToolFailedError: ncu failed or timed out and left no report (its own lines, the log).
    """
    env = dict(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    outcome = run_filtered(list(argv), cwd=cwd, env=env, timeout=timeout, log=log, hide=PROGRESS)
    honour_umask(report)
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    if "ERR_NVGPUCTRPERM" in text:
        raise DeepError(f"{PERMISSION} ncu's log: {log}.")
    if not report.is_file():
        if "No kernels were profiled" in text:
            filters = ", ".join(nvtx_include(op) for op in ops)
            raise DeepError(f"ncu profiled no kernel: no launch matched the NVTX filter "
                            f"{filters} after the warm-up skip. The op's kernels may run under "
                            "another op name (NVTX names are the dispatcher's, e.g. "
                            "aten::addmm rather than aten::linear), or the script ran fewer "
                            f"steps than the skip. ncu's log: {log}.")
        when = " (stopped by --timeout)" if outcome.timed_out else ""
        errors = [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")][-5:]
        raise ToolFailedError(
            f"ncu failed{when} with exit status {outcome.returncode} and wrote no report. "
            f"ncu said: {'; '.join(errors) or 'no error line'}. Command: {' '.join(argv)}. "
            f"Full log: {log}.")
    return NcuCapture(outcome=outcome, argv=list(argv), report=report, log=log)


def export_raw_csv(ncu: str, report: Path, out: Path,
                   environ: Mapping[str, str] = os.environ) -> Path:
    """`ncu --import REPORT --csv --page raw --print-units base` into ``out`` (used when the
    ncu-report package is not installed). Raises ToolFailedError with ncu's words."""
    argv = [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]
    done = run_captured(argv, env=environ)
    if done.code != 0 or not done.stdout.lstrip().startswith(('"ID"', "==")):
        said = done.text.strip()
        hint = (" The report may come from a newer ncu than this one; use that ncu or "
                "`pip install -U ncu-report`." if "Failed to load" in said else "")
        raise ToolFailedError(f"ncu could not export {report.name} (exit status {done.code}): "
                              f"{said.splitlines()[-1] if said else ''}.{hint}")
    out.write_text(done.stdout, encoding="utf-8")
    return out
