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
``rank`` given: a launcher started one nsbridge per rank; rank 0 plans and tells the others
through the mailbox (job.mailbox), every rank runs its share, rank 0 merges; whatever stops
rank 0 before it said "go" (a plan that fails, an earlier pass that failed: ``skip``) tells
the others to stop, so a failed pass never leaves ranks waiting in a rendezvous for a rank
that will not come. Ranks other than 0 call ``follow`` instead.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Protocol, Sequence, cast

from .. import progress
from .. import schema as S
from ..collect._process import run_passthrough
from ..errors import LaunchError
from ..job.identity import RankEnv, detect as detect_rank, job_id, rank_dir_name
from ..job.mailbox import (RankPlan, acknowledge, pass_spec, retire_word, spec_path,
                           tell_ranks, wait_for_word, wait_outputs)
from ..model.ranks.cross_rank import tool_rank_row
from ..pipeline import run_passes
from ..result import RunResult, follower_result, result_of
from ..run import PassOutput, Run, output_op_columns
from ..rundir import write_json
from ..contract.report import Error, Files, Recommendation
from ..schema.records import Output, PassRank, PassSpec
from .launch import check_one_node, fresh_store_env
from .share import map_pass

PASS_WAIT_S = 600.0  # how long ranks wait for rank 0's word on a pass, beyond --timeout;
                     # a pass's time limit without --timeout (plus GRACE_S)
GRACE_S = 120.0     # how long the ranks may take to write their outputs after their timeout
ACK_S = 30.0        # how long rank 0 waits for the other ranks to acknowledge a stop
_STARTED = time.time()   # rank 0's words older than this (less WORD_SLACK_S) are stale
WORD_SLACK_S = 300.0     # start skew between ranks, and coarse file times on shared disks


class RankShare(Protocol):
    """How a tool pass runs on a job's ranks (passes.nsys_pass.TimelineOnRanks, ...)."""

    @property
    def kind(self) -> str:
        """Its name between rank 0 and the ranks (job.mailbox)."""

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
    profile_source: str
    rank: Optional[RankEnv]
    launcher: Sequence[str]
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    @property
    def name(self) -> str:
        return self.share.tool

    def check(self, run: Optional[Run]) -> None:
        """What the share asks of the run, then its tool on this process."""
        self.share.check(run, self.environ)

    def plan(self, run: Run) -> tuple[PassSpec, RankPlan]:
        """The ranks planned (when that fails, the pipeline calls ``skip``)."""
        planned = self.share.plan_ranks(run)
        return _spec(run, planned.timeout, self.profile_source, planned.ranks,
                     **planned.extra), planned

    def run(self, run: Run, plan: tuple[PassSpec, RankPlan]) -> PassOutput:
        spec, planned = plan
        return _drive(self.share, run, spec, planned, self.rank, self.launcher, self.environ)

    def skip(self, run: Run, why: str) -> None:
        """The pass will not run: ranks waiting for rank 0's word stop waiting."""
        if self.rank is not None:
            tell_stop(run.dir, self.share.kind, f"rank 0: {why}", self.rank, self.environ)


def follow(kind: str, run_dir: Path, rank: RankEnv, timeout: Optional[float],
           environ: Mapping[str, str] = os.environ) -> int:
    """A rank other than 0: run its share of the ``kind`` pass when rank 0 says so; the
    exit status (1 when rank 0 called the pass off or said nothing)."""
    word = wait_for_word(run_dir, kind, PASS_WAIT_S + (timeout or 0.0), job=job_id(environ),
                         since=_STARTED - WORD_SLACK_S)
    spec = word.get("spec") if word["go"] else None
    if spec is None:
        why = word.get("why") if not word["go"] else "rank 0's word to run it holds no spec"
        print(f"nsbridge: rank {rank.rank}: no {kind} pass: {why}", file=sys.stderr)
    if word.get("nonce"):   # said after the message: rank 0 (and the launcher) may end now
        acknowledge(run_dir, kind, word["nonce"], rank.rank, rank.world_size)
    if spec is None:
        return 1
    return map_pass(kind, run_dir, rank.rank, spec, environ)


def tell_stop(run_dir: Path, kind: str, why: str, rank: RankEnv,
              environ: Mapping[str, str] = os.environ) -> None:
    """Rank 0: the ``kind`` pass will not run. The other ranks stop waiting for it; once
    they have read that (or after ACK_S), the word is removed."""
    nonce = tell_ranks(run_dir, kind, False, job=job_id(environ), why=why)
    retire_word(run_dir, kind, nonce, range(1, rank.world_size), ACK_S)


def _spec(run: Run, timeout: Optional[float], profile_source: str, ranks: Sequence[int],
          **extra: Any) -> PassSpec:
    manifest = run.manifest
    return pass_spec(target=manifest["target"], args=manifest.get("args") or [],
                     module=bool(manifest.get("module")),
                     cwd=Path(manifest.get("cwd") or Path.cwd()), timeout=timeout,
                     profile_source=str(Path(profile_source).resolve()), ranks=ranks,
                     pass_id=uuid.uuid4().hex, extra=extra)


def _drive(share: RankShare, run: Run, spec: PassSpec, planned: RankPlan,
           rank: Optional[RankEnv], launcher: Sequence[str],
           environ: Mapping[str, str]) -> PassOutput:
    """Run every rank's share, merge. Under a launcher, rank 0 lets its word go once every
    rank's output is in."""
    kind = share.kind
    label = ", ".join(str(r) for r in spec["ranks"])
    limit = (spec["timeout"] or PASS_WAIT_S) + GRACE_S
    if rank is None:
        spec_file = spec_path(run.dir, kind)
        write_json(spec_file, {**spec, "kind": kind, "run_dir": str(run.dir.resolve())})
        argv = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m",
                "nsbridge.distributed.share", str(spec_file.resolve())]
        with progress.step(f"running the ranks, {share.title} on rank(s) {label}",
                           script_output=True):
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
        with progress.step(f"running this rank (rank 0); {share.title} on rank(s) {label}",
                           script_output=True):
            map_pass(kind, run.dir, 0, spec, environ)
        with progress.step(f"waiting for the ranks' {share.title} results"):
            outputs = wait_outputs(kind, run.dir, spec["ranks"], limit, spec["pass_id"])
        missing = f"none within {limit:.0f} s (the rank died or still runs)"
        retire_word(run.dir, kind, nonce, range(1, rank.world_size), 0.0)
    ranks = (run.report.get(S.DISTRIBUTED_SECTION) or {}).get("ranks") or []
    hosts = {number: r.get("host") for r in ranks if (number := r.get("rank")) is not None}
    shown = planned.shown if planned.shown is not None else spec["ranks"][0]
    return reduce_outputs(share, outputs, shown, planned.reasons, hosts, missing)


def reduce_outputs(share: RankShare, outputs: Mapping[int, Optional[Output]],
                   shown: int, reasons: Mapping[int, str], hosts: Mapping[int, Any],
                   missing: str) -> PassOutput:
    """One PassOutput: the shown rank's, its files named by rank folder, and the section's
    ``ranks`` rows (every rank's status and headline numbers). A rank's section counts
    even when its script failed; ``missing`` says why a rank has no output."""
    rows = [tool_rank_row(share.tool, rank, out, numbers=share.rank_numbers,
                          reason=reasons.get(rank), host=hosts.get(rank),
                          folder=rank_dir_name(rank), missing=missing)
            for rank, out in sorted(outputs.items())]
    lines: list[PassRank] = [
        {"rank": row["rank"], "host": row.get("host"), "status": row["status"],
         "exit_code": given["exit_code"] if (given := outputs.get(row["rank"])) else None,
         "error": row.get("error")} for row in rows]
    good = {rank: out for rank, out in outputs.items() if out and out.get("section")}
    # the cause first: a rank that failed on its own, before one the launcher ended
    # because another had failed (SIGTERM) or one that never answered
    consequence = {rank for rank, out in outputs.items() if out is None
                   or (out.get("error") or {}).get("type") == "Stopped"}
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


def on_ranks(share: RankShare, the_run: Run, *, profile_source: str,
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
    return result_of(run_passes(the_run, [OnRanks(share, profile_source, rank, launcher,
                                                  environ)]))
