"""How nsbridge's processes of one job talk, one per rank, started by a launcher: through
the key-value store torch already runs for the job (torch.distributed.TCPStore), under a
prefix of the job's own. Rank 0 says whether each pass runs and with which spec (``say``);
the other ranks block on that word (``hear``); each rank marks what it has done, with
where its result lies (``mark``), and rank 0 blocks until every rank has (``gather``),
naming the ranks whose mark did not come when the time limit passed. Nothing polls, and
nothing is judged by a file's time: a key lives as long as the job's store.

Where the store is (``connect``): torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE,
MASTER_ADDR, MASTER_PORT), every rank a client; else, with MASTER_ADDR set (srun, mpirun
with the script's own rendezvous variables), one that rank 0's nsbridge serves at
MASTER_ADDR, port NSBRIDGE_STORE_PORT or MASTER_PORT + 1 (the script's rank 0 serves
MASTER_PORT), the others clients. Neither: no store, and the caller says so and falls back
to the launcher as the barrier (each pass a step of its own).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterable, Mapping, Optional, TypeVar, cast

from .. import schema as S
from .identity import RankEnv, job_id

RecordT = TypeVar("RecordT")
CONNECT_S = 300.0       # how long a rank waits for the store to answer (rank 0 may start late)
PORT_ENV = "NSBRIDGE_STORE_PORT"
_connected: dict[str, "JobStore"] = {}   # one connection per process, job and store


class NoStore(Exception):
    """No store can be reached; the text says why and what to do instead."""


@dataclass
class JobStore:
    """The job's store under its prefix, as one member sees it (a rank, or a machine when
    nsbridge starts the ranks of several): ``rank`` and ``world_size`` are its number and
    how many members there are. ``where``: its address, and whose it is, for messages."""

    store: Any
    rank: int
    world_size: int
    where: str

    def say(self, key: str, value: Mapping[str, Any]) -> None:
        """Set ``key`` to ``value`` (JSON) for every rank to read."""
        self.store.set(key, json.dumps(value))

    def hear(self, key: str, kind: type[RecordT], timeout_s: float) -> Optional[RecordT]:
        """``key``'s value, blocking until it is set; None when it is not set within
        ``timeout_s`` or is not a ``kind`` record (schema.records)."""
        if not self._wait([key], timeout_s):
            return None
        return _record(self.store.get(key), kind)

    def mark(self, what: str, value: Mapping[str, Any]) -> None:
        """This rank has done ``what``: its key ``what/RANK`` holds ``value`` (where its
        result lies, its exit status)."""
        self.say(f"{what}/{self.rank}", value)

    def gather(self, what: str, ranks: Iterable[int], kind: type[RecordT],
               timeout_s: float) -> dict[int, Optional[RecordT]]:
        """Each of ``ranks``' mark of ``what``, blocking until all are there or
        ``timeout_s`` has passed: None for a rank whose mark did not come (dead, hung, or
        too slow) or is not a ``kind`` record."""
        keys = {rank: f"{what}/{rank}" for rank in ranks}
        if self._wait(list(keys.values()), timeout_s):
            present = list(keys)
        else:   # named one by one, once, when the time is up
            present = [rank for rank, key in keys.items() if self.store.check([key])]
        values = self.store.multi_get([keys[rank] for rank in present]) if present else []
        found = {rank: _record(value, kind) for rank, value in zip(present, values)}
        return {rank: found.get(rank) for rank in keys}

    def _wait(self, keys: list[str], timeout_s: float) -> bool:
        try:
            self.store.wait(keys, timedelta(seconds=max(timeout_s, 0.001)))
            return True
        except Exception as exc:  # torch raises DistStoreError (RuntimeError before 2.3)
            if "timeout" in str(exc).lower() or "timed out" in str(exc).lower():
                return False
            raise


def connect(rank: RankEnv, environ: Mapping[str, str] = os.environ,
            timeout_s: float = CONNECT_S) -> JobStore:
    """This rank's connection to its job's store (made once per process).

    Raises:
        NoStore: no store is named by the launcher's variables, or none answers within
            ``timeout_s``.
    """
    host, port, serve, whose = _address(rank, environ)
    return _joined(host, port, serve, whose, job_id(environ), rank.rank, rank.world_size,
                   timeout_s)


def connect_nodes(endpoint: str, node_rank: int, nnodes: int,
                  timeout_s: float = CONNECT_S) -> JobStore:
    """The store where the nsbridge processes that start a job's ranks on ``nnodes``
    machines (one each, ``--nnodes``) meet: the one on node 0 serves it at the rendezvous
    endpoint's host, port + 1 (torchrun's rendezvous takes the port itself); a member is a
    machine, by its node rank.

    Raises:
        NoStore: the endpoint is not HOST:PORT, or no store answers within ``timeout_s``.
    """
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise NoStore(f"the rendezvous endpoint {endpoint!r} is not HOST:PORT")
    return _joined(host, int(port) + 1, node_rank == 0, "served by node 0's nsbridge",
                   f"nodes-{host}-{port}", node_rank, nnodes, timeout_s)


def _joined(host: str, port: int, serve: bool, whose: str, job: str, member: int,
            members: int, timeout_s: float) -> JobStore:
    """A connection to the store at ``host:port`` (served from here when ``serve``), under
    the prefix of ``job``; one per process and job."""
    key = f"{job}@{host}:{port}"
    if key in _connected:
        return _connected[key]
    try:
        from torch.distributed import PrefixStore, TCPStore
        store = TCPStore(host, port, world_size=None, is_master=serve,
                         timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    except Exception as exc:   # torch raises DistNetworkError / RuntimeError
        raise NoStore(f"the job's store at {host}:{port} ({whose}) did not answer within "
                      f"{timeout_s:.0f} s: {str(exc).splitlines()[0] if str(exc) else exc}") \
            from None
    joined = JobStore(PrefixStore(f"nsbridge/{job}/", store), member, members,
                      f"{host}:{port} ({whose})")
    _connected[key] = joined
    return joined


def _address(rank: RankEnv, environ: Mapping[str, str]) -> tuple[str, int, bool, str]:
    """(host, port, whether this process serves it, whose store it is)."""
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and addr and port:
        return addr, int(port), False, "torchrun's agent store"
    own = environ.get(PORT_ENV)
    if addr and (own or port):
        try:
            number = int(own) if own else int(cast(str, port)) + 1
        except ValueError:
            raise NoStore(f"{PORT_ENV}={own!r} / MASTER_PORT={port!r} is not a port "
                          "number") from None
        return addr, number, rank.rank == 0, "served by rank 0's nsbridge"
    raise NoStore(f"the {rank.launcher} launcher set no MASTER_ADDR (and MASTER_PORT or "
                  f"{PORT_ENV}) for nsbridge to meet the other ranks at")


def _record(raw: bytes, kind: type[RecordT]) -> Optional[RecordT]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return None if S.record_problem(value, S.shape_for(kind)) else cast(RecordT, value)
