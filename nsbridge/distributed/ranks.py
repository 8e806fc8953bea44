"""Which rank this process is, from the launcher's environment (stdlib only: the profiled
process imports it too)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional


@dataclass(frozen=True)
class RankEnv:
    """This process's place in a distributed job."""

    rank: int
    local_rank: int
    world_size: int
    launcher: str          # "torchrun", "slurm" or "mpi"
    host: str

    @property
    def dir_name(self) -> str:
        return rank_dir_name(self.rank)


def detect(environ: Mapping[str, str] = os.environ) -> Optional[RankEnv]:
    """The rank from torchrun (RANK, LOCAL_RANK, WORLD_SIZE), SLURM (SLURM_PROCID,
    SLURM_LOCALID, SLURM_NTASKS) or Open MPI (OMPI_COMM_WORLD_*); None for one process."""
    host = socket.gethostname()
    for launcher, rank, local, size in (
            ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
            ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
            ("mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_SIZE")):
        if rank in environ and size in environ:
            try:
                env = RankEnv(rank=int(environ[rank]), local_rank=int(environ.get(local, 0)),
                              world_size=int(environ[size]), launcher=launcher, host=host)
            except ValueError:
                continue
            return env if env.world_size > 1 else None
    return None


def job_id(environ: Mapping[str, str] = os.environ) -> str:
    """A name every rank of one launch computes alike: the scheduler's job id, else the
    rendezvous port torchrun chose for this launch."""
    for key in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "OMPI_MCA_orte_jobfam_session_dir"):
        value = environ.get(key)
        if value and value != "none":
            return "".join(c if c.isalnum() else "-" for c in value)[-24:]
    return f"port{environ.get('MASTER_PORT', '0')}"


def rank_dir_name(rank: int) -> str:
    return f"rank-{rank:02d}"


def rank_dirs(run_dir: Path) -> list[Path]:
    """The rank folders of a run directory, by rank."""
    return sorted((p for p in Path(run_dir).glob("rank-*") if p.is_dir()),
                  key=lambda p: int(p.name.split("-", 1)[1]))
