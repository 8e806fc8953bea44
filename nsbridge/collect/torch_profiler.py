"""The torch.profiler pass: run the user's script in a child Python under the bootstrap."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .. import schema as S
from ..guard.confine import readable
from ..profiles import Profile
from ..rundir import load_record
from . import machine
from ._process import ChildOutcome, run_passthrough


@dataclass(frozen=True)
class TorchPass:
    """What the torch.profiler pass left: the child's own record and how it ended."""

    outcome: ChildOutcome
    child: Optional[S.ChildRecord]    # child.json, None when the child died before writing it
    traces: list[Path]
    table: Optional[Path]
    machine: machine.Around           # machine.between() the run, and the usable cores
    doing: Optional[str] = None       # what the profiler was doing when the process died


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def with_threads(environ: Mapping[str, str], threads: Optional[int]) -> dict[str, str]:
    """The environment of a profiled process with ``threads`` intra-op threads: the
    OpenMP, MKL and OpenBLAS pools sized before torch (or numpy) starts them."""
    env = dict(environ)
    if threads:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    return env


def run_torch_pass(*, target: str, is_module: bool, args: Sequence[str], profile: Profile,
                   run_dir: Path, cwd: Path, timeout: Optional[float],
                   environ: Mapping[str, str] = os.environ,
                   distributed: Optional[dict[str, Any]] = None,
                   launcher: Sequence[str] = (), threads: Optional[int] = None) -> TorchPass:
    """Run the target under torch.profiler and return what it wrote into run_dir
    (``threads``: torch's intra-op threads, set in the process before the script runs).

    ``distributed`` ({"ranks": [...] or None}): every rank writes into its own rank-NN/
    folder (the record returned is then None: see the rank folders). ``launcher``: options
    for torch.distributed.run, which starts the ranks (torchrun's own module).
    """
    rank = (environ.get("RANK") or environ.get("SLURM_PROCID")
            or environ.get("OMPI_COMM_WORLD_RANK")) if distributed is not None else None
    config_name = S.child_config_rank(rank) if rank and not launcher else S.CHILD_CONFIG
    argv = bootstrap_argv(run_dir, config_name, target=target, is_module=is_module,
                          args=args, extra={"capture": profile.to_dict()["capture"],
                                            "schedule": profile.to_dict()["schedule"],
                                            "analysis": profile.to_dict()["analysis"],
                                            "distributed": distributed, "threads": threads})
    if launcher:
        argv = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m",
                "nsbridge._bootstrap.entry", argv[-1]]
    env = with_threads(environ, threads)
    env.setdefault("PYTHONUNBUFFERED", "1")
    before = machine.snapshot()
    outcome = run_passthrough(argv, cwd=cwd, env=env, timeout=timeout,
                              noise_log=run_dir / S.PROFILER_NOISE_LOG)
    around = machine.between(before, machine.snapshot())
    around["cores"] = machine.usable_cores()
    return recorded_pass(run_dir, outcome, around)


def recorded_pass(run_dir: Path, outcome: ChildOutcome, around: machine.Around) -> TorchPass:
    """What a profiled process left in ``run_dir``: its record (child.json), its traces
    and torch's table.

    Raises:
        RunDirError: child.json is not of its declared shape (schema.records.CHILD_SHAPE).
    """
    child_path = run_dir / S.CHILD_JSON
    child: Optional[S.ChildRecord] = None
    if child_path.is_file():
        child = load_record(readable(child_path), S.ChildRecord)
    traces = [readable(run_dir / name) for name in (child.get("traces", []) if child else [])]
    if child is None:  # killed before writing its record: keep any trace it managed to write
        traces = [readable(t) for t in sorted(run_dir.glob("trace*.json.gz"))]
    table_name = child.get("table") if child else None
    table = readable(run_dir / table_name) if table_name else None
    doing_path = run_dir / S.PROFILER_DOING
    doing = readable(doing_path).read_text(encoding="utf-8", errors="replace") if \
        doing_path.is_file() else None
    doing_path.unlink(missing_ok=True)
    return TorchPass(outcome=outcome, child=child, traces=traces, table=table, machine=around,
                     doing=doing)


def bootstrap_argv(run_dir: Path, config_name: str, *, target: str, is_module: bool,
                   args: Sequence[str], extra: Mapping[str, Any]) -> list[str]:
    """Write the profiled process's config into run_dir; return the argv that starts it."""
    config = {"script": None if is_module else target, "module": target if is_module else None,
              "args": list(args), "run_dir": str(run_dir.resolve()), **extra}
    config_path = run_dir / config_name
    config_path.write_text(json.dumps(config, indent=1), encoding="utf-8")
    return [sys.executable, "-m", "nsbridge._bootstrap.entry", str(config_path.resolve())]
