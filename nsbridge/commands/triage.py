"""`triage`: a script under torch.profiler, then (optionally) nsys and ncu, into one run
directory; a job of several ranks through nsbridge.distributed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from ..collect.torch_profiler import with_threads
from ..errors import LaunchError
from ..job.identity import detect as detect_rank
from ..model.analysis import check_window
from ..passes.ncu_pass import DeepPass
from ..passes.nsys_pass import TimelinePass
from ..pipeline import Pass
from ..profiles import as_profile, with_overrides
from ..result import RunResult
from ..rundir import check_dir_name
from ..script_check import checked_script
from .measure import ProfileArg, profiled, rerun_source
from .runs import out_path


def triage(target: str, args: Sequence[str] = (), *, module: bool = False,
           profile: ProfileArg = "default", out: Optional[Union[str, Path]] = None,
           timeout: Optional[float] = None, cwd: Optional[Union[str, Path]] = None,
           nsys: bool = False, deep_top: Optional[int] = None,
           deep_profile: ProfileArg = "deep", on_plan: Optional[Callable[[str], None]] = None,
           nproc_per_node: Optional[int] = None, nnodes: Optional[str] = None,
           node_rank: Optional[int] = None, rdzv_endpoint: Optional[str] = None,
           ranks: Optional[list[int]] = None, deep_ranks: Optional[list[int]] = None,
           runs: int = 1, window: str = "steps", threads: Optional[int] = None,
           steps: Optional[int] = None, top: Optional[int] = None,
           environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run a script (or ``-m`` module) under torch.profiler and analyse it (``runs`` > 1:
    that many processes, their steps pooled so intervals include the between-process
    spread; ``threads``: torch's intra-op threads in the profiled process, recorded in the
    machine facts); with ``nsys``
    also the timeline pass, with ``deep_top`` the ncu pass on that many top ops, all into
    one run directory. Several ranks (``nproc_per_node``, or started by a launcher): every
    pass on every rank (``ranks`` limits torch.profiler and nsys), ncu on ``deep_ranks``
    or on the median and the slowest rank. ``window``: ``steps`` (the measured steps) or
    ``trace`` (the whole trace as one window, totals and rates per second). ``steps``:
    how many steps to measure (the profile's ``schedule.active``; None: as the profile
    says); ``top``: op rows in the summaries (the profile's ``analysis.top_ops``).

    Returns:
        RunResult. A script that fails still returns one (status 'failed', its exit code).

    Raises:
        ValueError: an unknown ``window``, before the script runs.
        ScriptError: the script or module cannot be found or compiled.
        LaunchError: ``runs`` with a job of ranks.
        RunDirError: the run directory cannot be made or written.
        ProfileError: the profile is not valid.
        ToolNotFoundError: with ``nsys``/``deep_top``, the tool is missing (how to install it).
        ToolFailedError: the tool failed (its own error lines and its log).
        NsysExportError: with ``nsys``, the capture cannot be exported.
        DeepError: with ``deep_top``, the deep pass cannot run as asked. The tool errors
            come after the earlier passes' outputs are written.
    """
    check_window(window)
    if out:     # before git or the script starts (the ranks of a job share one --out)
        check_dir_name(Path(out))
    prof = with_overrides(as_profile(profile), steps=steps, top=top)
    script = checked_script(target, args, module, cwd)
    rank = None if nproc_per_node else detect_rank(environ)
    if runs > 1 and (nproc_per_node or rank is not None):
        raise LaunchError("--runs pools several processes of a one-process script; a job of "
                          "several ranks already measures each rank: leave --runs off.")
    if nproc_per_node or rank is not None:
        launcher = {"nproc_per_node": nproc_per_node, "nnodes": nnodes,
                    "node_rank": node_rank, "rdzv_endpoint": rdzv_endpoint}
        from ..distributed.triage import triage_job

        return triage_job(script, prof, out=out, timeout=timeout, rank=rank,
                          launcher=launcher, ranks=ranks, nsys=nsys, deep_top=deep_top,
                          deep_profile=as_profile(deep_profile), deep_ranks=deep_ranks,
                          on_plan=on_plan, source=rerun_source(script, threads, environ),
                          environ=with_threads(environ, threads))

    def following(env: Mapping[str, str]) -> list[Pass]:
        passes: list[Pass] = []
        if nsys:
            passes.append(TimelinePass(prof, timeout=timeout, environ=env, threads=threads))
        if deep_top is not None:
            passes.append(DeepPass(as_profile(deep_profile).deep, top=deep_top or None,
                                   timeout=timeout, on_plan=on_plan, environ=env))
        return passes

    return profiled(script, prof, out=out_path(out), timeout=timeout, threads=threads,
                    environ=environ, runs=runs, window=window, following=following)
