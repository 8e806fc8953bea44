"""The fan-out: a pass run on chosen ranks of a distributed job and reduced to one
PassOutput, as one more pass of the pipeline (``OnRanks``), and `timeline`/`deep --run` on
a run of several ranks (``on_ranks``).

Each tool pass says how it runs on ranks (its rank share: passes.nsys_pass.TimelineOnRanks,
passes.ncu_pass.DeepOnRanks): which ranks and why, what every rank needs, how a chosen rank
captures, and its headline numbers per rank. Nothing here depends on which pass it is.

Map: every rank runs the script again, its share of the pass (distributed.share): the tool
on the ranks the plan chose, the script alone on the others, so collectives still meet.

Reduce (``reduce_outputs``): the shown rank's output (the rank whose ops the report shows:
the straggler, else the slowest, or the one the plan names) goes into the report as a
single run's would, and the section gets one row per rank under ``ranks``.

``launcher`` given: this process starts every local rank through torch.distributed.run
(``python -m nsbridge.distributed.share SPEC``) and merges once it returns (one node only).
``rank`` given: a launcher started one nsbridge per rank; rank 0 plans and says so in the
job's store (job.store), every rank runs its share and marks it done there, rank 0 blocks
until every chosen rank has (a rank whose mark has not come when the pass's time limit
passes is named as dead or hung) and merges; whatever stops rank 0 before it said "go" (a
plan that fails, an earlier pass that failed: ``skip``) tells the others to stop, so a
failed pass never leaves ranks waiting in a rendezvous for a rank that will not come.
Ranks other than 0 call ``follow`` instead.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Protocol, Sequence, cast

from .. import progress
from .. import schema as S
from ..errors import LaunchError
from ..job.identity import RankEnv, detect as detect_rank, rank_dir_name
from ..job.mailbox import RankPlan, pass_spec, read_outputs, spec_path
from ..job.store import JobStore, NoStore, connect
from ..model.ranks.cross_rank import tool_rank_row
from ..pipeline import run_passes
from ..profiles import Profile, profile_yaml
from ..result import RunResult, follower_result, result_of
from ..run import PassOutput, Run, output_op_columns
from ..rundir import write_json
from ..contract.report import Error, Files, Recommendation
from ..schema.records import Mark, Output, PassRank, PassSpec, Word
from .launch import check_one_node, fresh_store_env
from .nodes import Nodes, start_share
from .share import map_pass

PASS_WAIT_S = 600.0  # how long ranks wait for rank 0's word on a pass, beyond --timeout;
                     # a pass's time limit without --timeout (plus GRACE_S)
GRACE_S = 120.0     # how long the ranks may take to write their outputs after their timeout
ACK_S = 30.0        # how long rank 0 waits for the other ranks to read a stop
PROFILE_FILE = "{kind}-profile.yaml"   # a recorded profile, for the ranks to load
# how a rank's script fails when another rank died under it (gloo, NCCL): a consequence
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "remote worker",
             "remote process exited", "NCCL communicator was aborted")


class RankShare(Protocol):
    """How a tool pass runs on a job's ranks (passes.nsys_pass.TimelineOnRanks, ...)."""

    @property
    def kind(self) -> str:
        """Its name between rank 0 and the ranks (job.mailbox, job.store)."""

    @property
    def tool(self) -> str:
        """The pass's name in manifest.json and its op column ("nsys")."""

    @property
    def title(self) -> str:
        """The tool in progress lines ("Nsight Systems")."""

    @property
    def shows(self) -> str:
        """What the shown rank's output is in the report ("timeline")."""

    def plan_ranks(self, run: Run) -> RankPlan: ...

    def check(self, run: Optional[Run], environ: Mapping[str, str]) -> None: ...

    def rank_numbers(self, section: Mapping[str, Any], output: Output,
                     folder: str) -> Mapping[str, object]: ...


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


@dataclass
class OnRanks:
    """A pass of the pipeline: ``share``'s tool on the ranks its plan picks, reduced to one
    output. ``rank``: this process's rank when a launcher started one nsbridge per rank
    (rank 0 drives), else None and ``launcher`` holds torch.distributed.run's options."""

    share: RankShare
    profile: Profile
    rank: Optional[RankEnv]
    launcher: Sequence[str]
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    nodes: Optional[Nodes] = None

    @property
    def name(self) -> str:
        return self.share.tool

    def check(self, run: Optional[Run]) -> None:
        """What the share asks of the run, its tool on this process, and, under a
        launcher, the job's store (rank 0 serves it from here when it is its own)."""
        self.share.check(run, self.environ)
        if self.rank is not None:
            job_store(self.rank, self.environ)

    def plan(self, run: Run) -> tuple[PassSpec, RankPlan]:
        """The ranks planned (when that fails, the pipeline calls ``skip``)."""
        planned = self.share.plan_ranks(run)
        return _spec(run, self.share.kind, planned.timeout, self.profile, planned.ranks,
                     **planned.extra), planned

    def run(self, run: Run, plan: tuple[PassSpec, RankPlan]) -> PassOutput:
        spec, planned = plan
        return _drive(self.share, run, spec, planned, self.rank, self.launcher, self.environ,
                      self.nodes)

    def skip(self, run: Run, why: str) -> None:
        """The pass will not run: ranks waiting for rank 0's word stop waiting."""
        if self.rank is not None:
            tell_stop(self.share.kind, f"rank 0: {why}", self.rank, self.environ)
        if self.nodes is not None:
            say_stop(self.nodes.store, self.share.kind, f"node 0: {why}")


def follow(kind: str, run_dir: Path, rank: RankEnv, timeout: Optional[float],
           environ: Mapping[str, str] = os.environ) -> int:
    """A rank other than 0: run its share of the ``kind`` pass when rank 0 says so (in the
    job's store), then mark it done; the exit status (1 when rank 0 called the pass off or
    said nothing in time)."""
    store = job_store(rank, environ)
    wait = PASS_WAIT_S + (timeout or 0.0)
    word = store.hear(word_key(kind), Word, wait) or {
        "pass": kind, "go": False, "spec": None,
        "why": f"rank 0 did not say within {wait:.0f} s whether the {kind} pass runs"}
    store.mark(f"{kind}/read", {})   # rank 0 (serving the store) may end once all have read
    spec = word.get("spec") if word["go"] else None
    if spec is None:
        why = word.get("why") if not word["go"] else "rank 0's word to run it holds no spec"
        print(f"nsbridge: rank {rank.rank}: no {kind} pass: {why}", file=sys.stderr)
        return 1
    code = map_pass(kind, run_dir, rank.rank, spec, environ)
    store.mark(f"{kind}/done", {"pass_id": spec["pass_id"], "exit_code": code})
    return code


def tell_stop(kind: str, why: str, rank: RankEnv,
              environ: Mapping[str, str] = os.environ) -> None:
    """Rank 0: the ``kind`` pass will not run. The other ranks stop waiting for it; rank 0
    waits (ACK_S at most) until they have read that, as it may serve the store."""
    say_stop(job_store(rank, environ), kind, why)


def say_stop(store: JobStore, kind: str, why: str) -> None:
    """In ``store``: the ``kind`` pass will not run (``why``); wait (ACK_S at most) until
    every other member (rank, or machine) has read it, as this one may serve the store."""
    store.say(word_key(kind), {"pass": kind, "go": False, "spec": None, "why": why})
    store.gather(f"{kind}/read", range(1, store.world_size), Mark, ACK_S)


def word_key(kind: str) -> str:
    """Rank 0's word on the ``kind`` pass, in the job's store."""
    return f"{kind}/word"


def job_store(rank: RankEnv, environ: Mapping[str, str]) -> JobStore:
    """The job's store, or a LaunchError saying why there is none and what to do.

    Raises:
        LaunchError: no store named by the launcher's variables, or none answering.
    """
    try:
        return connect(rank, environ)
    except NoStore as exc:
        raise LaunchError(
            f"The nsbridge processes of this job cannot meet: {exc}. A pass on the ranks "
            "needs the job's store: run under torchrun (its agent store), or set MASTER_ADDR "
            f"and MASTER_PORT (rank 0's nsbridge serves a store on MASTER_PORT + 1, or "
            f"NSBRIDGE_STORE_PORT) for every rank; or let nsbridge start the ranks "
            "(--nproc-per-node). Without a store, profile the ranks (srun nsbridge triage "
            "...) and merge them after the step ends: nsbridge analyze RUN_DIR.") from None


def _spec(run: Run, kind: str, timeout: Optional[float], profile: Profile,
          ranks: Sequence[int], **extra: Any) -> PassSpec:
    manifest = run.manifest
    source = Path(profile.source)
    if not source.is_file():   # one a run's manifest recorded: written out for the ranks
        source = run.dir / PROFILE_FILE.format(kind=kind)
        source.write_text(profile_yaml(profile), encoding="utf-8")
    return pass_spec(target=manifest["target"], args=manifest.get("args") or [],
                     module=bool(manifest.get("module")),
                     cwd=Path(manifest.get("cwd") or Path.cwd()), timeout=timeout,
                     profile_source=str(source.resolve()), ranks=ranks,
                     pass_id=uuid.uuid4().hex, extra=extra)


def _drive(share: RankShare, run: Run, spec: PassSpec, planned: RankPlan,
           rank: Optional[RankEnv], launcher: Sequence[str], environ: Mapping[str, str],
           nodes: Optional[Nodes] = None) -> PassOutput:
    """Run every rank's share, merge: through torch.distributed.run (on every machine of
    ``nodes`` when it spans several), or, under a launcher, as rank 0 of ranks that hear
    its word in the job's store."""
    kind = share.kind
    label = ", ".join(str(r) for r in spec["ranks"])
    limit = (spec["timeout"] or PASS_WAIT_S) + GRACE_S
    if rank is None:
        write_json(spec_path(run.dir, kind),
                   {**spec, "kind": kind, "run_dir": str(run.dir.resolve())})
        if nodes is not None:   # the other machines start their ranks with the same spec
            nodes.store.say(word_key(kind), {"pass": kind, "go": True, "spec": spec})
        outcome = start_share(kind, run.dir, launcher, Path(spec["cwd"]), environ, limit,
                              f"running the ranks, {share.title} on rank(s) {label}")
        # torch.distributed.run has returned: every local rank has written all it will
        late: list[int] = []
        if nodes is not None:
            with progress.step(f"waiting for the other machines' {share.title} results"):
                late_nodes = nodes.wait(f"{kind}/done", limit)
            late = [r for r in spec["ranks"] if r // nodes.nproc in late_nodes]
        ended = ("torch.distributed.run was stopped" if outcome.timed_out or
                 outcome.interrupted or outcome.terminated else "the rank ended without it")
    else:
        store = job_store(rank, environ)
        if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            spec["env"] = fresh_store_env()
        store.say(word_key(kind), {"pass": kind, "go": True, "spec": spec})
        with progress.step(f"running this rank (rank 0); {share.title} on rank(s) {label}",
                           script_output=True):
            map_pass(kind, run.dir, 0, spec, environ)
        with progress.step(f"waiting for the ranks' {share.title} results"):
            marks = store.gather(f"{kind}/done", range(1, rank.world_size), Mark, limit)
        late = [r for r, mark in marks.items() if mark is None]
        ended = "the rank ended without it"
    outputs = read_outputs(kind, run.dir, spec["ranks"], spec["pass_id"])
    missing = {r: (f"the rank (or its machine) had not marked the pass done in the job's "
                   f"store within {limit:.0f} s: dead, hung, or still running")
               if r in late else ended for r in spec["ranks"]}
    ranks = (run.report.get(S.DISTRIBUTED_SECTION) or {}).get("ranks") or []
    hosts = {number: r.get("host") for r in ranks if (number := r.get("rank")) is not None}
    shown = planned.shown if planned.shown is not None else spec["ranks"][0]
    return reduce_outputs(share, outputs, shown, planned.reasons, hosts, missing)


def reduce_outputs(share: RankShare, outputs: Mapping[int, Optional[Output]],
                   shown: int, reasons: Mapping[int, str], hosts: Mapping[int, Any],
                   missing: Mapping[int, str]) -> PassOutput:
    """One PassOutput: the shown rank's, its files named by rank folder, and the section's
    ``ranks`` rows (every rank's status and headline numbers). A rank's section counts
    even when its script failed; ``missing``: why each rank without an output has none."""
    rows = [tool_rank_row(share.tool, rank, out, numbers=share.rank_numbers,
                          reason=reasons.get(rank), host=hosts.get(rank),
                          folder=rank_dir_name(rank), missing=missing.get(rank, "none"))
            for rank, out in sorted(outputs.items())]
    lines: list[PassRank] = [
        {"rank": row["rank"], "host": row.get("host"), "status": row["status"],
         "exit_code": given["exit_code"] if (given := outputs.get(row["rank"])) else None,
         "error": row.get("error")} for row in rows]
    good = {rank: out for rank, out in outputs.items() if out and out.get("section")}
    # the cause first: a rank that failed on its own, before one the launcher ended
    # because another had failed (SIGTERM), one whose collectives lost a peer, or one that
    # never answered
    consequence = {rank for rank, out in outputs.items() if out is None
                   or (out.get("error") or {}).get("type") == "Stopped"
                   or any(lost in str((out.get("error") or {}).get("message"))
                          for lost in PEER_LOST)}
    failed = sorted((row for row in rows if row["status"] != "ok"),
                    key=lambda row: (row["rank"] in consequence, row["rank"]))
    cause = outputs.get(failed[0]["rank"]) if failed else None
    exit_code = (cause["exit_code"] if cause else None) or next(
        (out["exit_code"] for out in outputs.values() if out and out.get("exit_code")),
        1 if failed else 0)
    lead = shown if shown in good else next(iter(sorted(good)), None)
    errors = [f"rank {row['rank']} ({share.tool}): {row['error']}" for row in failed]
    error: Optional[Error] = {"type": "RankFailed", "rank": failed[0]["rank"],
                              "message": errors[0]} if failed else None
    if lead is None:   # no section: nothing was measured; the ranks' errors say why
        return PassOutput(name=share.tool, manifest={"ranks": lines}, status="failed",
                          exit_code=exit_code, error=error, notes=errors)
    data = _prefixed(good[lead], rank_dir_name(lead))
    pair = data.get("section")
    assert pair is not None   # a good output has its section
    section_name, section = pair
    section = {**section, "ranks": rows, "shown_rank": lead}
    notes = list(data.get("notes") or []) + errors + [
        f"{share.tool} ran on ranks {', '.join(str(r) for r in sorted(outputs))}: the "
        f"{share.shows} and ops[].{share.tool} are rank {lead}'s; every rank's numbers are "
        f"under {section_name}.ranks"]
    return PassOutput(name=data["name"], manifest={**data.get("manifest", {}), "ranks": lines},
                      status="ok" if not failed else "failed", exit_code=exit_code,
                      error=error, section=(section_name, section), op_key=data.get("op_key"),
                      op_columns=output_op_columns(data), notes=notes,
                      sources=data.get("sources") or {},
                      recommendations=cast(list[Recommendation],
                                           data.get("recommendations") or []),
                      files=cast(Files, data.get("files") or {}))


def _prefixed(out: Output, folder: str) -> Output:
    """The output with its file names relative to the run directory."""
    pair = out.get("section")
    if not pair:
        return out
    name, section = pair[0], dict(pair[1])
    if isinstance(section.get("files"), dict):
        section["files"] = {k: f"{folder}/{v}" for k, v in section["files"].items()}
    if section.get("file"):
        section["file"] = f"{folder}/{section['file']}"
    return {**out, "section": [name, section],
            "files": {k: f"{folder}/{v}" for k, v in (out.get("files") or {}).items()}}


def on_ranks(share: RankShare, the_run: Run, *, profile: Profile,
             timeout: Optional[float] = None,
             environ: Mapping[str, str] = os.environ) -> RunResult:
    """`timeline --run` / `deep --run` on a run of several ranks: rank 0 (or the process
    that launches the ranks) runs the pass through the pipeline; another rank runs its
    share when rank 0 says so."""
    rank, launcher = driver(the_run, detect_rank(environ))
    if rank is not None and rank.rank != 0:   # rank 0 writes the merged report
        return follower_result(the_run.dir, rank,
                               follow(share.kind, the_run.dir, rank, timeout, environ),
                               share.kind, the_run.report.get("target", ""))
    return result_of(run_passes(the_run, [OnRanks(share, profile, rank, launcher,
                                                  environ)]))
