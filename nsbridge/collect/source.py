"""Where a run's code and settings came from: the git commit of its folder and the
environment variables that change how torch runs. A run's manifest keeps both, so that
`nsbridge gate` can run it again as it was (and say when its folder has moved on)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional

from ..schema.records import GitState
from ._process import run_captured

# variables that size thread pools, pick allocators, devices and kernels, or configure
# torch and nsbridge; others (credentials, paths of the shell) are not recorded
RECORDED_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "TORCH", "PYTORCH_",
                     "CUDA_", "CUBLAS", "CUDNN", "NCCL_", "NVIDIA_TF32", "NSBRIDGE_", "MALLOC_",
                     "PYTHONHASHSEED")
# what torchrun sets for each launch (its run id, error file, restart count, store): a
# rerun is another launch, and gets its own (a manifest that has them: they are left out)
PER_LAUNCH = ("TORCHELASTIC_",)
NOT_RECORDED = ("NSBRIDGE_UMASK", *PER_LAUNCH)   # and nsbridge's own umask
GIT_TIMEOUT_S = 5.0


def recorded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` a rerun needs (``RECORDED_PREFIXES``)."""
    return {k: v for k, v in sorted(environ.items())
            if k.startswith(RECORDED_PREFIXES) and not k.startswith(NOT_RECORDED)}


def git_state(folder: Path) -> Optional[GitState]:
    """{commit, dirty} of the git checkout holding ``folder``; None outside one, or
    without git."""
    commit = _git(folder, "rev-parse", "HEAD")
    if commit is None:
        return None
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)}


def _git(folder: Path, *args: str) -> Optional[str]:
    done = run_captured(["git", "-C", str(folder), *args], timeout=GIT_TIMEOUT_S)
    return done.stdout.strip() if done.code == 0 else None
