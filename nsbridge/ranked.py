"""The commands on a distributed job's ranks: triage every rank (one run directory, a
folder per rank, merged from the ranks' summaries), then the nsys and ncu passes on them;
`timeline`/`deep --run` on such a run; `analyze` of its folder."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from . import progress
from .collect.ncu import find_ncu
from .distributed.ranks import detect as detect_rank, job_id
from .model.deep_plan import check_ops
from .passes.ncu_pass import require_gpu
from .passes.rank_passes import deep_on_ranks, driver, follow, tell_stop, timeline_on_ranks
from .passes.ranks_pass import missing_ranks, profile_ranks, read_summaries, reduce, wait_for
from .profiles import Profile
from .pipeline import Given, run_passes
from .result import RunResult, follower_result, result_of
from .rundir import new_run_dir
from .run import Run

WAIT_S = 600.0   # how long rank 0 waits for the other ranks' summaries (default)


def triage_ranks(target: str, args: list[str], *, module: bool, profile: Profile,
                  out: Optional[Union[str, Path]], timeout: Optional[float], cwd: Path,
                  rank: Any, ranks: Optional[list[int]], launcher: list[str], world: int,
                  label: str, environ: Mapping[str, str]) -> RunResult:
    """Every rank profiled into its own folder of one run directory, then merged: by this
    process after torch.distributed.run returns (``launcher``), or, when a launcher started
    one nsbridge per rank, by rank 0 once every rank's summary is there."""
    if launcher:
        run = Run.create(out=Path(out) if out else None, label=label, command="triage",
                         target=target, args=args, profile=profile, cwd=cwd, module=module)
        run.manifest["launcher"] = launcher   # `timeline`/`deep --run` start the ranks alike
        code = profile_ranks(run.dir, target=target, args=args, module=module,
                             profile=profile, cwd=cwd, timeout=timeout, ranks=ranks,
                             launcher=launcher, environ=environ)
        summaries = read_summaries(run.dir)
        if world:   # one node: every rank wrote here (several nodes: only this node's)
            summaries += missing_ranks(summaries, world, run.dir)
    else:
        run_dir = new_run_dir(Path(out) if out else None, f"{job_id(environ)}-{label}",
                              shared=True)
        started = time.time()
        code = profile_ranks(run_dir, target=target, args=args, module=module,
                             profile=profile, cwd=cwd, timeout=timeout, ranks=ranks,
                             environ=environ)
        if rank.rank != 0:
            return follower_result(run_dir, rank, code, "triage", " ".join([target, *args]))
        with progress.step(f"waiting for the other {rank.world_size - 1} rank(s)"):
            # stopped (timeout, signal): a short wait; summaries older than this launch
            # (an earlier run into the same --out) never count
            summaries = wait_for(run_dir, rank.world_size,
                                 (timeout or WAIT_S) if code == 0 else 10.0, since=started)
        run = Run.create(out=run_dir, label=label, command="triage", target=target,
                         args=args, profile=profile, cwd=cwd, module=module, shared=True)
    with progress.step("merging the ranks"):
        output, analysis = reduce(run.dir, summaries, profile, " ".join([target, *args]))
    if analysis is not None:
        output.frames["analysis"] = analysis
    return result_of(run_passes(run, [Given(output)]), output.exit_code or code)


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
        run.save()
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


def analyze_ranks(source: Path, prof: Profile, out: Optional[Union[str, Path]]) -> RunResult:
    """A distributed run's rank summaries merged again (one rank's trace loaded)."""
    summaries = read_summaries(source)
    summaries += missing_ranks(summaries, max(s.get("world_size") or 0 for s in summaries),
                               source)
    output, analysis = reduce(source, summaries, prof, str(source), command="analyze")
    if output.core["files"].get("trace"):
        output.core["files"]["trace_input"] = str((source / output.core["files"]["trace"])
                                                  .resolve())
        output.core["files"]["trace"] = None
    output.core["files"]["key_averages"] = None
    run = Run.create(out=Path(out) if out else None, label=f"analyze-{source.name}",
                     command="analyze", target=str(source), args=[], profile=prof,
                     cwd=Path.cwd())
    if analysis is not None:
        output.frames["analysis"] = analysis
    return result_of(run_passes(run, [Given(output)]), 0)
