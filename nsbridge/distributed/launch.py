"""Starting the ranks: torch.distributed.run's options, the torch.profiler pass on this
process's rank or (through torch.distributed.run) on every local rank, and what a script run
again under the same launcher needs.

Two ways in: nsbridge starts the ranks through torch.distributed.run (``launcher``), or a
launcher (torchrun, srun, mpirun) started one nsbridge per rank, each of which profiles its
own rank (rank 0 then merges once every rank's summary is there: job.summary).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .. import progress
from ..collect.torch_profiler import run_torch_pass
from ..errors import LaunchError
from ..profiles import Profile


def launcher_argv(*, nproc_per_node: int, nnodes: Optional[str], node_rank: Optional[int],
                  rdzv_endpoint: Optional[str]) -> list[str]:
    """torch.distributed.run's options (torchrun's own module does the launching)."""
    argv = ["--nproc-per-node", str(nproc_per_node)]
    if nnodes:
        argv += ["--nnodes", str(nnodes)]
    if node_rank is not None:
        argv += ["--node-rank", str(node_rank)]
    if rdzv_endpoint:
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint]
    else:
        argv += ["--standalone"] if not nnodes or str(nnodes) == "1" else []
    return argv


def profile_ranks(run_dir: Path, *, target: str, args: Sequence[str], module: bool,
                  profile: Profile, cwd: Path, timeout: Optional[float],
                  ranks: Optional[list[int]], launcher: Sequence[str] = (),
                  environ: Mapping[str, str] = os.environ) -> int:
    """Run this process's rank (or, with ``launcher``, all local ranks through
    torch.distributed.run) into rank folders; returns the exit status."""
    label = "the ranks" if launcher else "this rank"
    with progress.step(f"running {target} under torch.profiler ({label})", script_output=True):
        result = run_torch_pass(target=target, is_module=module, args=args, profile=profile,
                                run_dir=run_dir, cwd=cwd, timeout=timeout, environ=environ,
                                distributed={"ranks": ranks}, launcher=launcher)
    outcome = result.outcome
    if outcome.timed_out:
        return 124
    if outcome.interrupted:
        return 130
    return outcome.returncode


def one_node(nnodes: Optional[str]) -> bool:
    """Whether torch.distributed.run's --nnodes (``N`` or ``MIN:MAX``) is one machine."""
    return str(nnodes or "1").split(":")[-1] == "1"


def check_one_node(launcher: Sequence[str]) -> None:
    """LaunchError for a run whose ranks nsbridge started on several machines, given to
    `timeline --run` / `deep --run`: one process cannot start them again on every machine."""
    nnodes = launcher[launcher.index("--nnodes") + 1] if "--nnodes" in launcher else "1"
    if not one_node(nnodes):
        raise LaunchError("This run's ranks were started on several machines: a later pass "
                          "needs nsbridge on each again. Run triage with the passes in one go "
                          "on every machine (nsbridge triage --nsys --deep --nnodes ... "
                          "--node-rank R ...), or start one nsbridge per rank under a "
                          "launcher (srun nsbridge timeline --run-dir DIR).")


def fresh_store_env() -> dict[str, str]:
    """Environment for a script run again under the same torchrun: its own rendezvous
    store on a free port of this host (rank 0's), instead of torchrun's agent store, which
    still holds the previous run's addresses under the same keys (the ranks would connect
    to ports that are closed). Assumes rank 0 runs on MASTER_ADDR's host, as it does with
    torchrun on one node and with its static rendezvous."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return {"MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "False"}
