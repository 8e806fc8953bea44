"""The fan-out: a pass (timeline: nsys, deep: ncu) run on chosen ranks of a distributed
run, then reduced to one PassOutput, from the process that drives it; and the commands that
use it (``on_ranks``: `timeline`/`deep --run` on a run of several ranks;
``tool_passes_on_ranks``: `triage --nsys/--deep` after a distributed triage).

Map: every rank runs the script again, its share of the pass (distributed.share): nsys on
the ranks the torch.profiler pass profiled, ncu on the ranks the deep plan chose
(model.rank_plan), the script alone on the others, so collectives still meet. The deep plan
never includes communication ops, whose kernels would wait for peers that are not replaying
them.

Reduce (``reduce_outputs``): the shown rank's output (the rank whose ops the report shows:
the straggler, else the slowest; for the deep pass the slowest rank the plan chose) goes
into the report as a single run's would, and the section gets one row per rank under
``ranks``.

``launcher`` given: this process starts every local rank through torch.distributed.run
(``python -m nsbridge.distributed.share SPEC``) and merges once it returns (one node only).
``rank`` given: a launcher started one nsbridge per rank; rank 0 plans and tells the others
through the mailbox (distributed.mailbox), every rank runs its share, rank 0 merges;
whatever stops rank 0 before it said "go" tells the others to stop, so a failed pass never
leaves ranks waiting in a rendezvous for a rank that will not come. Ranks other than 0 call
``follow`` instead.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from .. import progress
from .. import schema as S
from ..collect._process import run_passthrough
from ..collect.ncu import find_ncu
from ..errors import LaunchError
from ..model.collectives import COMMUNICATION_OP
from ..model.cross_rank import tool_rank_row
from ..model.deep_plan import check_ops, describe, plan_for_run
from ..model.rank_plan import pick_ranks, refuse_communication_ops
from ..passes.ncu_pass import require_gpu
from ..pipeline import Given, run_passes, save
from ..profiles import Profile
from ..result import RunResult, follower_result, result_of
from ..run import PassOutput, Run
from ..rundir import write_json
from .identity import RankEnv, detect as detect_rank, job_id, rank_dir_name
from .launch import check_one_node, fresh_store_env
from .mailbox import (acknowledge, pass_spec, retire_word, spec_path, tell_ranks,
                      wait_for_word, wait_outputs)
from .share import NAMES, map_pass

PASS_WAIT_S = 600.0  # how long ranks wait for rank 0's word on a pass, beyond --timeout;
                     # a pass's time limit without --timeout (plus GRACE_S)
GRACE_S = 120.0     # how long the ranks may take to write their outputs after their timeout
ACK_S = 30.0        # how long rank 0 waits for the other ranks to acknowledge a stop
_STARTED = time.time()   # rank 0's words older than this (less WORD_SLACK_S) are stale
WORD_SLACK_S = 300.0     # start skew between ranks, and coarse file times on shared disks

Planner = Callable[[], tuple[dict[str, Any], dict[int, str], Optional[int]]]


def is_ranked(run: Run) -> bool:
    """A run of several ranks (a distributed triage)."""
    return bool((run.report.get(S.DISTRIBUTED_SECTION) or {}).get("ranks"))


def driver(run: Run, rank: Optional[RankEnv]) -> tuple[Optional[RankEnv], list[str]]:
    """How to drive a pass on a ranked run: (this rank, []) under a launcher, else (None,
    the torch.distributed.run options the triage used).

    Raises:
        LaunchError: neither (the ranks were started by a launcher nsbridge cannot repeat).
    """
    if rank is not None:
        return rank, []
    launcher = run.manifest.get("launcher")
    if launcher:
        check_one_node(launcher)
        return None, list(launcher)
    world = (run.report.get(S.DISTRIBUTED_SECTION) or {}).get("world_size")
    raise LaunchError(f"The run {run.dir} has {world} ranks, started by a launcher: run this "
                      "command under the same launcher (srun nsbridge ..., torchrun -m nsbridge "
                      "...) so every rank takes part, or triage with --nproc-per-node.")


def timeline_on_ranks(run: Run, *, profile: Profile, timeout: Optional[float],
                      rank: Optional[RankEnv], launcher: Sequence[str],
                      environ: Mapping[str, str] = os.environ) -> PassOutput:
    """nsys on every rank the torch.profiler pass profiled."""
    def plan() -> tuple[dict[str, Any], dict[int, str], Optional[int]]:
        dist = run.report[S.DISTRIBUTED_SECTION]
        ranks = list(dist.get("profiled") or [])
        if not ranks:
            raise LaunchError("No rank to run Nsight Systems on: the torch.profiler pass "
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
        dist = report[S.DISTRIBUTED_SECTION]
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
    word = wait_for_word(run_dir, kind, PASS_WAIT_S + (timeout or 0.0), job=job_id(environ),
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
    limit = (spec["timeout"] or PASS_WAIT_S) + GRACE_S
    if rank is None:
        spec_file = spec_path(run.dir, kind)
        write_json(spec_file, {**spec, "kind": kind, "run_dir": str(run.dir.resolve())})
        argv = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m",
                "nsbridge.distributed.share", str(spec_file.resolve())]
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
    hosts = {r["rank"]: r.get("host") for r in run.report[S.DISTRIBUTED_SECTION]["ranks"]}
    return reduce_outputs(kind, outputs, shown if shown is not None else spec["ranks"][0],
                          reasons, hosts, missing)


def reduce_outputs(kind: str, outputs: Mapping[int, Optional[dict[str, Any]]],
                   shown: int, reasons: Mapping[int, str], hosts: Mapping[int, Any],
                   missing: str) -> PassOutput:
    """One PassOutput: the shown rank's, its files named by rank folder, and the section's
    ``ranks`` rows (every rank's status and headline numbers). A rank's section counts
    even when its script failed; ``missing`` says why a rank has no output."""
    rows = [tool_rank_row(kind, NAMES[kind], rank, out, reason=reasons.get(rank),
                          host=hosts.get(rank), folder=rank_dir_name(rank), missing=missing)
            for rank, out in sorted(outputs.items())]
    good = {rank: out for rank, out in outputs.items() if out and out.get("section")}
    # the cause first: a rank that failed on its own, before one the launcher ended
    # because another had failed (SIGTERM) or one that never answered
    consequence = {rank for rank, out in outputs.items() if out is None
                   or (out.get("error") or {}).get("type") == "Stopped"}
    failed = sorted((row for row in rows if row["status"] != "ok"),
                    key=lambda row: (row["rank"] in consequence, row["rank"]))
    cause = outputs.get(failed[0]["rank"]) if failed else None
    exit_code = (cause or {}).get("exit_code") or next(
        (out["exit_code"] for out in outputs.values() if out and out.get("exit_code")),
        1 if failed else 0)
    lead = shown if shown in good else next(iter(sorted(good)), None)
    errors = [f"rank {row['rank']} ({NAMES[kind]}): {row['error']}" for row in failed]
    error = {"type": "RankFailed", "rank": failed[0]["rank"], "message": errors[0]} \
        if failed else None
    if lead is None:   # no section: nothing was measured; the ranks' errors say why
        return PassOutput(name=NAMES[kind], manifest={"ranks": rows}, status="failed",
                          exit_code=exit_code, error=error, notes=errors)
    data = _prefixed(good[lead], rank_dir_name(lead))
    section_name, section = data["section"]
    section = {**section, "ranks": rows, "shown_rank": lead}
    notes = list(data["notes"]) + errors + [
        f"{NAMES[kind]} ran on ranks {', '.join(str(r) for r in sorted(outputs))}: the "
        f"{'timeline' if kind == 'timeline' else 'Nsight Compute section'} and ops[].{NAMES[kind]}"
        f" are rank {lead}'s; every rank's numbers are under {section_name}.ranks"]
    return PassOutput(name=data["name"], manifest={**data["manifest"], "ranks": rows},
                      status="ok" if not failed else "failed", exit_code=exit_code,
                      error=error, section=(section_name, section), op_key=data["op_key"],
                      op_columns=data["op_columns"], notes=notes, sources=data["sources"],
                      recommendations=data["recommendations"], files=data["files"])


def _prefixed(out: dict[str, Any], folder: str) -> dict[str, Any]:
    """The output with its file names relative to the run directory."""
    name, section = out["section"]
    section = dict(section)
    if isinstance(section.get("files"), dict):
        section["files"] = {k: f"{folder}/{v}" for k, v in section["files"].items()}
    if section.get("file"):
        section["file"] = f"{folder}/{section['file']}"
    return {**out, "section": (name, section),
            "files": {k: f"{folder}/{v}" for k, v in (out.get("files") or {}).items()}}


def tool_passes_on_ranks(result: RunResult, *, rank: Any, launcher: list[str], nsys: bool,
                          deep_top: Optional[int], profile: Profile, deep_profile: Profile,
                          deep_ranks: Optional[list[int]], timeout: Optional[float],
                          on_plan: Optional[Callable[[str], None]],
                          environ: Mapping[str, str]) -> RunResult:
    """After a distributed triage: the nsys and ncu passes on the ranks (rank 0 or the
    launching process merges; other ranks run their share when rank 0 says so)."""
    kinds = [k for k, wanted in (("timeline", nsys), ("deep", deep_top is not None)) if wanted]
    if rank is not None and rank.rank != 0:
        for kind in kinds:
            if result.exit_code == 0:
                result.exit_code = follow(kind, result.run_dir, rank, timeout, environ)
        return result
    if not kinds:
        return result
    run = Run.open(result.run_dir)
    try:
        for kind in kinds:
            if result.exit_code != 0:
                if rank is not None:
                    tell_stop(result.run_dir, kind, f"an earlier pass ended with exit status "
                              f"{result.exit_code}", rank, environ)
                continue
            if kind == "timeline":
                output = timeline_on_ranks(run, profile=profile, timeout=timeout, rank=rank,
                                           launcher=launcher, environ=environ)
            else:
                output = deep_on_ranks(run, kernels=(), top=deep_top or None,
                                       profile=deep_profile, ranks=deep_ranks, timeout=timeout,
                                       rank=rank, launcher=launcher, on_plan=on_plan,
                                       environ=environ)
            run.add(output)
            result = result_of(run, output.exit_code)
    finally:
        save(run)
    return result


def on_ranks(kind: str, the_run: Run, *, profile: Profile, timeout: Optional[float],
              kernels: Sequence[str] = (), top: Optional[int] = None,
              ranks: Optional[Sequence[int]] = None,
              on_plan: Optional[Callable[[str], None]] = None,
              environ: Mapping[str, str] = os.environ) -> RunResult:
    """`timeline --run` / `deep --run` on a run of several ranks."""
    rank, launcher = driver(the_run, detect_rank(environ))
    if kind == "deep":
        if kernels:
            check_ops(kernels, the_run.op_names)
        require_gpu(environ)
        find_ncu(environ)
    if rank is not None and rank.rank != 0:   # rank 0 writes the merged report
        return follower_result(the_run.dir, rank,
                               follow(kind, the_run.dir, rank, timeout, environ), kind,
                               the_run.report.get("target", ""))
    if kind == "timeline":
        output = timeline_on_ranks(the_run, profile=profile, timeout=timeout, rank=rank,
                                   launcher=launcher, environ=environ)
    else:
        output = deep_on_ranks(the_run, kernels=kernels, top=top, profile=profile, ranks=ranks,
                               timeout=timeout, rank=rank, launcher=launcher, on_plan=on_plan,
                               environ=environ)
    return result_of(run_passes(the_run, [Given(output)]), output.exit_code)
