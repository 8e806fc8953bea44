"""The timeline and deep passes of a distributed run, from the process that drives them.

``launcher`` given: this process starts every local rank through torch.distributed.run
(``python -m nsbridge.passes.rank_tools SPEC``) and merges once it returns (one node only).
``rank`` given: a launcher started one nsbridge per rank; rank 0 plans and tells the others
(rank_tools.tell_ranks), every rank runs its share, rank 0 merges; whatever stops rank 0
before it said "go" tells the others to stop. Either way the merged PassOutput is returned
to the caller that adds it to the run. Ranks other than 0 call ``follow`` instead.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from .. import progress
from ..collect._process import run_passthrough
from ..distributed.ranks import RankEnv, job_id
from ..errors import DeepError, ScriptError
from ..model.deep_plan import describe, plan_for_run
from ..model.collectives import COMMUNICATION_OP
from ..model.rank_plan import pick_ranks, refuse_communication_ops
from ..profiles import Profile
from ..run import PassOutput, Run
from ..rundir import write_json
from .rank_tools import (acknowledge, map_pass, pass_spec, reduce_outputs, retire_word,
                         tell_ranks, wait_for_word, wait_outputs)

WAIT_S = 600.0      # coordination: how long ranks wait for rank 0's word, beyond --timeout
GRACE_S = 120.0     # how long the ranks may take to write their outputs after their timeout
ACK_S = 30.0        # how long rank 0 waits for the other ranks to acknowledge a stop
_STARTED = time.time()   # rank 0's words older than this (less WORD_SLACK_S) are stale
WORD_SLACK_S = 300.0     # start skew between ranks, and coarse file times on shared disks

Planner = Callable[[], tuple[dict[str, Any], dict[int, str], Optional[int]]]


def is_ranked(run: Run) -> bool:
    """A run of several ranks (a distributed triage)."""
    return bool((run.report.get("distributed") or {}).get("ranks"))


def driver(run: Run, rank: Optional[RankEnv]) -> tuple[Optional[RankEnv], list[str]]:
    """How to drive a pass on a ranked run: (this rank, []) under a launcher, else (None,
    the torch.distributed.run options the triage used).

    Raises:
        ScriptError: neither (the ranks were started by a launcher nsbridge cannot repeat).
    """
    if rank is not None:
        return rank, []
    launcher = run.manifest.get("launcher")
    if launcher:
        check_one_node(launcher)
        return None, list(launcher)
    world = (run.report.get("distributed") or {}).get("world_size")
    raise ScriptError(f"The run {run.dir} has {world} ranks, started by a launcher: run this "
                      "command under the same launcher (srun nsbridge ..., torchrun -m nsbridge "
                      "...) so every rank takes part, or triage with --nproc-per-node.")


def check_one_node(launcher: Sequence[str]) -> None:
    """ScriptError for torch.distributed.run options spanning several machines: each
    machine's nsbridge would plan and merge on its own."""
    nnodes = launcher[launcher.index("--nnodes") + 1] if "--nnodes" in launcher else "1"
    if str(nnodes).split(":")[-1] != "1":
        raise ScriptError("The timeline and deep passes on several machines need one nsbridge "
                          "per rank, started by the launcher: srun nsbridge triage --nsys ..., "
                          "or torchrun ... -m nsbridge triage --nsys ... on every machine.")


def timeline_on_ranks(run: Run, *, profile: Profile, timeout: Optional[float],
                      rank: Optional[RankEnv], launcher: Sequence[str],
                      environ: Mapping[str, str] = os.environ) -> PassOutput:
    """nsys on every rank the torch.profiler pass profiled."""
    def plan() -> tuple[dict[str, Any], dict[int, str], Optional[int]]:
        dist = run.report["distributed"]
        ranks = list(dist.get("profiled") or [])
        if not ranks:
            raise DeepError("No rank to run Nsight Systems on: the torch.profiler pass "
                            "measured no step on any rank.")
        return (_spec(run, timeout, profile.source, ranks),
                {r: "profiled by the torch.profiler pass" for r in ranks},
                dist.get("shown_rank"))
    return _drive("timeline", run, plan, rank, launcher, environ)


def deep_on_ranks(run: Run, *, kernels: Sequence[str], top: Optional[int], profile: Profile,
                  ranks: Optional[Sequence[int]], timeout: Optional[float],
                  rank: Optional[RankEnv], launcher: Sequence[str],
                  on_plan: Optional[Callable[[str], None]] = None,
                  environ: Mapping[str, str] = os.environ) -> PassOutput:
    """ncu on the ranks the planner picks (or ``ranks``); the others run unprofiled."""
    def plan() -> tuple[dict[str, Any], dict[int, str], Optional[int]]:
        report, deep = run.report, profile.deep
        dist = report["distributed"]
        refuse_communication_ops(kernels)
        compute_ops = [op for op in report.get("ops", [])
                       if not COMMUNICATION_OP.search(op["name"])]
        the_plan = plan_for_run(report, run.manifest, deep, kernels=kernels, top=top,
                                candidates=None if kernels else compute_ops)
        picks = pick_ranks(dist, ranks)
        the_plan["ranks"] = picks
        if on_plan is not None:
            others = int(dist.get("world_size") or 0) - len(picks)
            on_plan("\n".join([describe(the_plan), *(f"  rank {p['rank']}: {p['reason']}"
                                                     for p in picks)]
                              + ([f"  the other {others} rank(s) run the script unprofiled"]
                                 if others > 0 else [])))
        spec = _spec(run, timeout or deep.timeout_s, profile.source,
                     [p["rank"] for p in picks], plan=the_plan,
                     verdict=(report.get("verdict") or {}).get("label"),
                     op_shapes={op["name"]: op.get("shapes") or [] for op in report.get("ops", [])})
        shown = dist.get("shown_rank")
        if shown not in spec["ranks"]:
            shown = next((p["rank"] for p in picks if p["role"] == "slowest"), picks[0]["rank"])
        return spec, {p["rank"]: p["reason"] for p in picks}, shown
    return _drive("deep", run, plan, rank, launcher, environ)


def follow(kind: str, run_dir: Path, rank: RankEnv, timeout: Optional[float],
           environ: Mapping[str, str] = os.environ) -> int:
    """A rank other than 0: run its share of the ``kind`` pass when rank 0 says so; the
    exit status (1 when rank 0 called the pass off or said nothing)."""
    word = wait_for_word(run_dir, kind, WAIT_S + (timeout or 0.0), job=job_id(environ),
                         since=_STARTED - WORD_SLACK_S)
    if not word["go"]:
        print(f"nsbridge: rank {rank.rank}: no {kind} pass: {word['why']}", file=sys.stderr)
    if word.get("nonce"):   # said after the message: rank 0 (and the launcher) may end now
        acknowledge(run_dir, kind, word["nonce"], rank.rank, rank.world_size)
    if not word["go"]:
        return 1
    return map_pass(kind, run_dir, rank.rank, word["spec"], environ)


def tell_stop(run_dir: Path, kind: str, why: str, rank: RankEnv,
              environ: Mapping[str, str] = os.environ) -> None:
    """Rank 0: the ``kind`` pass will not run. The other ranks stop waiting for it; once
    they have read that (or after ACK_S), the word is removed."""
    nonce = tell_ranks(run_dir, kind, False, job=job_id(environ), why=why)
    retire_word(run_dir, kind, nonce, range(1, rank.world_size), ACK_S)


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


def _spec(run: Run, timeout: Optional[float], profile_source: str, ranks: Sequence[int],
          **extra: Any) -> dict[str, Any]:
    manifest = run.manifest
    return pass_spec(target=manifest["target"], args=manifest.get("args", []),
                     module=bool(manifest.get("module")),
                     cwd=Path(manifest.get("cwd") or Path.cwd()), timeout=timeout,
                     profile_source=str(Path(profile_source).resolve()), ranks=ranks,
                     pass_id=uuid.uuid4().hex, **extra)


def _drive(kind: str, run: Run, plan: Planner, rank: Optional[RankEnv],
           launcher: Sequence[str], environ: Mapping[str, str]) -> PassOutput:
    """Plan, run every rank's share, merge. Under a launcher, rank 0 tells the others to
    stop when planning fails, and lets its word go once every rank's output is in."""
    tool = "Nsight Systems" if kind == "timeline" else "Nsight Compute"
    try:
        spec, reasons, shown = plan()
    except BaseException as exc:
        if rank is not None:
            tell_stop(run.dir, kind, f"rank 0 could not plan it: {exc}", rank, environ)
        raise
    label = ", ".join(str(r) for r in spec["ranks"])
    limit = (spec["timeout"] or WAIT_S) + GRACE_S
    if rank is None:
        spec_path = run.dir / f"{kind}-ranks-spec.json"
        write_json(spec_path, {**spec, "kind": kind, "run_dir": str(run.dir.resolve())})
        argv = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m",
                "nsbridge.passes.rank_tools", str(spec_path.resolve())]
        with progress.step(f"running the ranks, {tool} on rank(s) {label}", script_output=True):
            outcome = run_passthrough(argv, cwd=Path(spec["cwd"]),
                                      env={**environ, "PYTHONUNBUFFERED": "1"}, timeout=limit)
        # torch.distributed.run has returned: every local rank has written all it will
        missing = ("torch.distributed.run was stopped" if outcome.timed_out or
                   outcome.interrupted or outcome.terminated else "the rank ended without it")
        outputs = wait_outputs(kind, run.dir, spec["ranks"], 0.0, spec["pass_id"])
    else:
        if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            spec["env"] = fresh_store_env()
        nonce = tell_ranks(run.dir, kind, True, job=job_id(environ), spec=spec)
        with progress.step(f"running this rank (rank 0); {tool} on rank(s) {label}",
                           script_output=True):
            map_pass(kind, run.dir, 0, spec, environ)
        with progress.step(f"waiting for the ranks' {tool} results"):
            outputs = wait_outputs(kind, run.dir, spec["ranks"], limit, spec["pass_id"])
        missing = f"none within {limit:.0f} s (the rank died or still runs)"
        retire_word(run.dir, kind, nonce, range(1, rank.world_size), 0.0)
    hosts = {r["rank"]: r.get("host") for r in run.report["distributed"]["ranks"]}
    return reduce_outputs(kind, outputs, shown if shown is not None else spec["ranks"][0],
                          reasons, hosts, missing)
