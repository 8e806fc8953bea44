"""Who am I: which rank this process is, from the launcher's environment, the job's id and
the rank folders' names (stdlib only: the profiled process imports it too)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from ..schema.records import MAX_RANKS


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
    """The rank from torchrun (RANK, LOCAL_RANK, WORLD_SIZE), an srun step (SLURM_PROCID,
    SLURM_LOCALID, SLURM_STEP_NUM_TASKS: an sbatch script or salloc shell is one process,
    not a rank) or Open MPI (OMPI_COMM_WORLD_*); None for one process."""
    host = socket.gethostname()
    for launcher, rank, local, size in (
            ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
            ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS"),
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
    if environ.get("SLURM_JOB_ID"):
        value = f"{environ['SLURM_JOB_ID']}.{environ.get('SLURM_STEP_ID', '0')}"
    else:
        value = next((environ[k] for k in ("TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid",
                                           "OMPI_MCA_orte_jobfam_session_dir")
                      if environ.get(k) and environ[k] != "none"),
                     f"port{environ.get('MASTER_PORT', '0')}")
    return "".join(c if c.isalnum() else "-" for c in value)[-24:]


def rank_dir_name(rank: int) -> str:
    return f"rank-{rank:02d}"


def rank_of_dir(name: str) -> Optional[int]:
    """The rank whose folder is named ``name`` (rank_dir_name's spelling exactly, below
    MAX_RANKS); None for any other name (``rank-x``, ``rank-``, ``rank-007``, a rank of
    twenty digits), which is not a rank folder."""
    digits = name[len("rank-"):]
    if not (name.startswith("rank-") and digits.isascii() and digits.isdigit()
            and len(digits) <= len(str(MAX_RANKS))):
        return None
    rank = int(digits)
    return rank if rank < MAX_RANKS and name == rank_dir_name(rank) else None


def ranked_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """(rank, folder) of each rank folder of a run directory, by rank; other folders whose
    names start with ``rank-`` are not rank folders and are left out."""
    found = ((rank_of_dir(p.name), p) for p in Path(run_dir).glob("rank-*"))
    return sorted((rank, p) for rank, p in found if rank is not None and p.is_dir())


def rank_dirs(run_dir: Path) -> list[Path]:
    """The rank folders of a run directory, by rank (ranked_dirs)."""
    return [folder for _, folder in ranked_dirs(run_dir)]
