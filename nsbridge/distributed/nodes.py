"""A job whose ranks nsbridge starts on several machines (``--nnodes N --node-rank R
--rdzv-endpoint HOST:PORT``, as torchrun takes them): one nsbridge per machine, each
starting its machine's ranks through torch.distributed.run. Node 0's makes the run
directory, plans every pass and merges; each other node's hears node 0's word in the store
they meet at (job.store.connect_nodes), starts its ranks for each pass and marks it done
there (``follow_nodes``). Node 0 blocks until every node has (``Nodes.wait``), naming a
machine whose mark did not come in time. The run directory is one folder every machine
writes into: ``--out`` on a shared file system.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .. import progress
from ..collect._process import run_passthrough
from ..errors import LaunchError
from ..job.identity import RankEnv
from ..job.mailbox import spec_path
from ..job.store import CONNECT_S, JobStore, NoStore, connect_nodes
from ..profiles import Profile
from ..result import RunResult, follower_result
from ..schema.records import Mark, RunAt, Word
from .launch import one_node, profile_ranks

RUN_KEY = "run"   # node 0's RunAt


@dataclass(frozen=True)
class Nodes:
    """This machine's place among the machines nsbridge starts a job's ranks on."""

    store: JobStore
    nnodes: int
    nproc: int

    @property
    def node(self) -> int:
        return self.store.rank

    @property
    def world(self) -> int:
        """Ranks in the job: every machine starts ``nproc``."""
        return self.nnodes * self.nproc

    def wait(self, what: str, timeout_s: float) -> list[int]:
        """Block until every other machine has marked ``what``; the nodes whose mark did
        not come within ``timeout_s``."""
        marks = self.store.gather(what, range(1, self.nnodes), Mark, timeout_s)
        return [node for node, mark in marks.items() if mark is None]

    def late_note(self, late: Sequence[int], what: str, timeout_s: float) -> list[str]:
        """The note naming the machines that did not mark ``what`` in time."""
        if not late:
            return []
        return [f"node(s) {', '.join(map(str, late))} did not mark {what} done in the job's "
                f"store within {timeout_s:.0f} s (the machine's nsbridge died, hung or still "
                "runs): their ranks are reported with what they left in the run directory"]


def join_nodes(launcher: Mapping[str, Any], out: Optional[Any]) -> Optional[Nodes]:
    """This machine's Nodes when ``launcher`` (triage's torch.distributed.run options)
    spans several machines; None on one.

    Raises:
        LaunchError: elastic --nnodes, no --rdzv-endpoint / --node-rank / --out, or the
            machines cannot meet.
    """
    nnodes = launcher.get("nnodes")
    if one_node(nnodes):
        return None
    endpoint, node_rank = launcher.get("rdzv_endpoint"), launcher.get("node_rank")
    if not str(nnodes).isdigit():
        raise LaunchError(f"--nnodes {nnodes}: nsbridge's passes on several machines need a "
                          "fixed number of machines (N, not MIN:MAX).")
    if not endpoint or node_rank is None or out is None:
        raise LaunchError("On several machines nsbridge needs --rdzv-endpoint HOST:PORT, "
                          "--node-rank and --out (a folder every machine sees, on a shared "
                          "file system), the same on every machine but --node-rank.")
    try:
        store = connect_nodes(str(endpoint), int(node_rank), int(str(nnodes)))
    except NoStore as exc:
        raise LaunchError(f"The machines of this job cannot meet: {exc}. Node 0's nsbridge "
                          "serves a store on the rendezvous endpoint's host at its port + 1: "
                          "start node 0 too, and let the others reach that port.") from None
    return Nodes(store, int(str(nnodes)), int(launcher["nproc_per_node"]))


def follow_nodes(nodes: Nodes, *, target: str, args: list[str], module: bool,
                 profile: Profile, cwd: Path, timeout: Optional[float],
                 ranks: Optional[list[int]], launcher: Sequence[str], kinds: Sequence[str],
                 environ: Mapping[str, str]) -> RunResult:
    """A machine other than node 0: its ranks profiled into node 0's run directory, then
    its ranks' share of each later pass (``kinds``) when node 0 says so."""
    from .fan_out import GRACE_S, PASS_WAIT_S, word_key

    store = nodes.store
    at = store.hear(RUN_KEY, RunAt, CONNECT_S + (timeout or 0.0))
    if at is None:
        raise LaunchError(f"Node 0 did not say within {CONNECT_S + (timeout or 0.0):.0f} s "
                          f"where the run directory is (store at {store.where}): start "
                          "nsbridge on node 0 with the same options.")
    run_dir = Path(at["run_dir"])
    code = profile_ranks(run_dir, target=target, args=args, module=module, profile=profile,
                         cwd=cwd, timeout=timeout, ranks=ranks, launcher=launcher,
                         environ=environ)
    store.mark("summary", {"exit_code": code})
    for kind in kinds:
        wait = PASS_WAIT_S + (timeout or 0.0)
        word = store.hear(word_key(kind), Word, wait)
        store.mark(f"{kind}/read", {})
        spec = word.get("spec") if word and word["go"] else None
        if spec is None:
            why = (word.get("why") if word else None) or f"node 0 did not say within {wait:.0f} s"
            print(f"nsbridge: node {nodes.node}: no {kind} pass: {why}", file=sys.stderr)
            break
        outcome = start_share(kind, run_dir, launcher, Path(spec["cwd"]), environ,
                              (spec["timeout"] or PASS_WAIT_S) + GRACE_S,
                              f"running this machine's ranks, {kind} pass")
        code = 124 if outcome.timed_out else outcome.returncode
        store.mark(f"{kind}/done", {"pass_id": spec["pass_id"], "exit_code": code})
    node = RankEnv(rank=nodes.node, local_rank=0, world_size=nodes.nnodes,
                   launcher="nsbridge", host=socket.gethostname())
    result = follower_result(run_dir, node, code, "triage", " ".join([target, *args]))
    result.report["notes"] = [f"node {nodes.node} of {nodes.nnodes} on {node.host}: its ranks' "
                              f"files are in their folders of {run_dir}; node 0 writes the "
                              "merged report there"]
    return result


def start_share(kind: str, run_dir: Path, launcher: Sequence[str], cwd: Path,
                environ: Mapping[str, str], limit: float, what: str) -> Any:
    """This machine's ranks' share of the ``kind`` pass, through torch.distributed.run and
    the spec node 0 (or this process) wrote in the run directory (``what``: the progress
    line); how torch.distributed.run ended (collect._process's outcome)."""
    argv = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m",
            "nsbridge.distributed.share", str(spec_path(run_dir, kind).resolve())]
    with progress.step(what, script_output=True):
        return run_passthrough(argv, cwd=cwd, env={**environ, "PYTHONUNBUFFERED": "1"},
                               timeout=limit)
