"""Where a map over many inputs runs (``map_in_order``): in this process, on local worker
processes, or on a Dask distributed cluster people already run (``--cluster ADDRESS``).
Whichever runs it, the results come back one at a time in the inputs' order, so the
reduce that reads them gives the same answer, and holds only what it chooses to keep."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

from .. import progress
from .._blas import import_numpy_on_one_thread
from ..errors import ClusterError

Item = TypeVar("Item")
Result = TypeVar("Result")
CONNECT_S = 30.0   # how long to wait for the cluster's scheduler to answer


def map_in_order(fn: Callable[..., Result], items: Sequence[Item], args: Sequence[Any] = (),
                 *, jobs: int = 1, cluster: Optional[str] = None,
                 what: str = "items") -> Iterator[Result]:
    """``fn(item, *args)`` for every item, yielded in ``items``' order: on the Dask cluster
    whose scheduler is at ``cluster`` (fn and its arguments pickled by reference: the
    workers need nsbridge, and the same paths), else on ``jobs`` local processes, else
    here. ``what`` names the items in the progress line.

    Raises:
        ClusterError: no Dask here, no scheduler at ``cluster``, or its workers lack nsbridge.
    """
    if cluster:
        yield from _on_dask(fn, items, args, cluster, what)
        return
    if jobs <= 1 or len(items) < 2:
        for item in items:
            yield fn(item, *args)
        return
    workers = min(jobs, len(items))
    with progress.step(f"{len(items)} {what} on {workers} processes"):
        with ProcessPoolExecutor(max_workers=workers, mp_context=_worker_context(),
                                 initializer=import_numpy_on_one_thread) as pool:
            yield from pool.map(fn, items, *(repeat(a) for a in args))


def _on_dask(fn: Callable[..., Result], items: Sequence[Item], args: Sequence[Any],
             address: str, what: str) -> Iterator[Result]:
    """The map on a Dask cluster: every item submitted at once, each result fetched in
    order and released at once (the cluster keeps the others until they are read)."""
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError(f"--cluster {address}: Dask's distributed package is not installed "
                           "here. Install it (pip install 'nsbridge[dask]') in this "
                           "environment and on the cluster's workers.") from None
    try:
        client = Client(address, timeout=f"{CONNECT_S:.0f}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"--cluster {address}: no Dask scheduler answered there within "
                           f"{CONNECT_S:.0f} s ({exc}). Give the scheduler's address as "
                           "dask prints it (tcp://HOST:8786), and check this machine can "
                           "reach it.") from None
    with client:
        workers = len(client.scheduler_info().get("workers") or {})
        _check_workers(client, address)
        with progress.step(f"{len(items)} {what} on the Dask cluster at {address} "
                           f"({workers} workers)"):
            futures = client.map(fn, items, *([a] * len(items) for a in args), pure=False)
            for future in futures:
                result = future.result()
                future.release()
                yield result


def _check_workers(client: Any, address: str) -> None:
    """Every worker imports this nsbridge version, or a clear error before any work."""
    from .. import __version__
    try:
        versions = client.run(_nsbridge_version)
    except (ImportError, ModuleNotFoundError) as exc:
        raise ClusterError(f"--cluster {address}: the cluster's workers cannot import nsbridge "
                           f"({exc}). Install nsbridge {__version__} in the workers' "
                           "environment.") from None
    other = {w: v for w, v in versions.items() if v != __version__}
    if other:
        worker, version = next(iter(other.items()))
        raise ClusterError(f"--cluster {address}: {len(other)} worker(s) run nsbridge "
                           f"{version} (e.g. {worker}), this is {__version__}; a map must run "
                           "the same code everywhere. Install this version on the workers.")


def _nsbridge_version() -> str:
    from .. import __version__
    return __version__


def _worker_context() -> Any:
    """How local workers start: forked from this process when it runs one thread (native
    ones counted: Linux's /proc/self/task), so they start with the analysis modules
    already imported (0.3 s each); else from a fork server, a fresh single-threaded
    process, as a fork of a process with threads (a notebook, a test runner) can deadlock
    in the child on a lock another thread held."""
    try:
        alone = len(os.listdir("/proc/self/task")) == 1
    except OSError:
        alone = False
    return multiprocessing.get_context("fork" if alone else "forkserver")
