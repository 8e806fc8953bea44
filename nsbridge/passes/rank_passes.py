"""The timeline and deep passes of a distributed run, from the process that drives them.

``launcher`` given: this process starts every local rank through torch.distributed.run
(``python -m nsbridge.passes.rank_tools SPEC``) and merges once they end. ``rank`` given:
a launcher started one nsbridge per rank; rank 0 decides and tells the others
(rank_tools.tell_ranks), every rank runs its share, rank 0 merges. Either way the merged
PassOutput is returned to the caller that adds it to the run. Ranks other than 0 call
``follow`` instead.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from .. import progress
from ..collect._process import run_passthrough
from ..distributed.ranks import RankEnv
from ..errors import DeepError, ScriptError
from ..model.deep_plan import choose, describe, plan as make_plan
from ..model.rank_plan import COMMUNICATION_OP, pick_ranks, refuse_communication_ops
from ..profiles import Profile
from ..run import PassOutput, Run
from ..rundir import write_json
from .rank_tools import map_pass, pass_spec, reduce_outputs, tell_ranks, wait_for_word, wait_outputs

WAIT_S = 600.0   # how long the merging process waits for the ranks' outputs (default)


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
        return None, list(launcher)
    world = (run.report.get("distributed") or {}).get("world_size")
    raise ScriptError(f"The run {run.dir} has {world} ranks, started by a launcher: run this "
                      "command under the same launcher (srun nsbridge ..., torchrun -m nsbridge "
                      "...) so every rank takes part, or triage with --nproc-per-node.")


def timeline_on_ranks(run: Run, *, profile: Profile, timeout: Optional[float],
                      rank: Optional[RankEnv], launcher: Sequence[str],
                      environ: Mapping[str, str] = os.environ) -> PassOutput:
    """nsys on every rank the torch.profiler pass profiled."""
    dist = run.report["distributed"]
    ranks = list(dist.get("profiled") or [])
    spec = _spec(run, timeout, profile.source, ranks)
    reasons = {r: "profiled by the torch.profiler pass" for r in ranks}
    return _drive("timeline", run, spec, rank, launcher, reasons, dist.get("shown_rank"),
                  timeout, environ)


def deep_on_ranks(run: Run, *, kernels: Sequence[str], top: Optional[int], profile: Profile,
                  ranks: Optional[Sequence[int]], timeout: Optional[float],
                  rank: Optional[RankEnv], launcher: Sequence[str],
                  on_plan: Optional[Callable[[str], None]] = None,
                  environ: Mapping[str, str] = os.environ) -> PassOutput:
    """ncu on the ranks the planner picks (or ``ranks``); the others run unprofiled."""
    report, deep = run.report, profile.deep
    dist = report["distributed"]
    try:
        refuse_communication_ops(kernels)
        compute_ops = [op for op in report.get("ops", [])
                       if not COMMUNICATION_OP.search(op["name"])]
        chosen = choose(compute_ops if not kernels else report.get("ops", []), kernels=kernels,
                        top=top, min_kernel_us=deep.min_kernel_us)
        picks = pick_ranks(dist, ranks)
    except DeepError as exc:
        if rank is not None:
            stop_ranks(run.dir, "deep", f"rank 0 could not plan it: {exc}")
        raise
    torch_pass = next((p for p in run.manifest.get("passes", [])
                       if p["name"].startswith("torch.profiler")), {})
    the_plan = make_plan(chosen, report.get("ops", []), (report.get("steps") or {}).get(
        "count", 1), deep, torch_pass.get("wall_s"))
    the_plan["ranks"] = picks
    if on_plan is not None:
        others = int(dist.get("world_size") or 0) - len(picks)
        on_plan("\n".join([describe(the_plan), *(f"  rank {p['rank']}: {p['reason']}"
                                                 for p in picks)]
                          + ([f"  the other {others} rank(s) run the script unprofiled"]
                             if others > 0 else [])))
    spec = _spec(run, timeout or deep.timeout_s, profile.source, [p["rank"] for p in picks],
                 plan=the_plan, verdict=(report.get("verdict") or {}).get("label"),
                 op_shapes={op["name"]: op.get("shapes") or [] for op in report.get("ops", [])})
    shown = dist.get("shown_rank")
    if shown not in spec["ranks"]:
        shown = max(picks, key=lambda p: p["reason"].startswith("the slowest"))["rank"]
    return _drive("deep", run, spec, rank, launcher, {p["rank"]: p["reason"] for p in picks},
                  shown, timeout, environ)


def stop_ranks(run_dir: Path, kind: str, why: str) -> None:
    """Rank 0: the ``kind`` pass will not run (the others stop waiting for it)."""
    tell_ranks(run_dir, kind, False, why=why)


def follow(kind: str, run_dir: Path, rank: RankEnv, timeout: Optional[float],
           environ: Mapping[str, str] = os.environ) -> int:
    """A rank other than 0: run its share of the ``kind`` pass when rank 0 says so; the
    exit status (1 when rank 0 called the pass off)."""
    word = wait_for_word(run_dir, kind, timeout or WAIT_S, since=_STARTED)
    if not word["go"]:
        print(f"nsbridge: rank {rank.rank}: no {kind} pass: {word['why']}", file=sys.stderr)
        return 1
    return map_pass(kind, run_dir, rank.rank, word["spec"], environ)


_STARTED = time.time()   # words from rank 0 older than this nsbridge are an earlier launch's


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
                     profile_source=profile_source, ranks=ranks, **extra)


def _drive(kind: str, run: Run, spec: dict[str, Any], rank: Optional[RankEnv],
           launcher: Sequence[str], reasons: Mapping[int, str], shown: Optional[int],
           timeout: Optional[float], environ: Mapping[str, str]) -> PassOutput:
    tool = "Nsight Systems" if kind == "timeline" else "Nsight Compute"
    if not spec["ranks"]:
        raise DeepError(f"No rank to run {tool} on: the torch.profiler pass profiled none.")
    since = time.time()
    label = ", ".join(str(r) for r in spec["ranks"])
    if rank is None:
        spec_path = run.dir / f"{kind}-ranks-spec.json"
        write_json(spec_path, {**spec, "kind": kind, "run_dir": str(run.dir.resolve())})
        argv = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m",
                "nsbridge.passes.rank_tools", str(spec_path.resolve())]
        with progress.step(f"running the ranks, {tool} on rank(s) {label}", script_output=True):
            run_passthrough(argv, cwd=Path(spec["cwd"]),
                            env={**environ, "PYTHONUNBUFFERED": "1"}, timeout=timeout)
    else:
        if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            spec["env"] = fresh_store_env()
        tell_ranks(run.dir, kind, True, spec)
        with progress.step(f"running this rank (rank 0); {tool} on rank(s) {label}",
                           script_output=True):
            map_pass(kind, run.dir, 0, spec, environ)
    with progress.step(f"merging the ranks' {tool} results"):
        outputs = wait_outputs(kind, run.dir, spec["ranks"], timeout or WAIT_S, since)
        hosts = {r["rank"]: r.get("host") for r in run.report["distributed"]["ranks"]}
        return reduce_outputs(kind, outputs, shown if shown is not None else spec["ranks"][0],
                              reasons, hosts, timeout or WAIT_S)
