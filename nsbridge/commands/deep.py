"""`deep`: Nsight Compute on the kernels of chosen ops, into an earlier run (its ranks
too) or after a triage of the script."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from ..collect.torch_profiler import with_threads
from ..errors import LaunchError
from ..job.identity import detect as detect_rank
from ..passes.ncu_pass import DeepOnRanks, DeepPass
from ..passes.torch_pass import TorchProfilerPass
from ..pipeline import preflight, run_passes
from ..profiles import as_profile
from ..result import RunResult, result_of
from ..run import Run, is_ranked
from ..script_check import checked_script
from .measure import ProfileArg
from .runs import latest_run, out_path


def deep(target: Optional[str] = None, args: Sequence[str] = (), *, kernels: Sequence[str] = (),
         top: Optional[int] = None, run: Optional[Union[str, Path]] = None,
         module: bool = False, profile: ProfileArg = "deep",
         out: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
         cwd: Optional[Union[str, Path]] = None, on_plan: Optional[Callable[[str], None]] = None,
         ranks: Optional[Sequence[int]] = None, threads: Optional[int] = None,
         trust: Optional[Sequence[Union[str, Path]]] = None,
         environ: Mapping[str, str] = os.environ) -> RunResult:
    """Nsight Compute on the kernels of chosen ops, merged into the run's op rows
    (``threads``: torch's intra-op threads in the process; a run's own by default).

    On a run of several ranks, every rank runs the script again (under the launcher that
    started nsbridge, or the triage's torch.distributed.run options), ncu on ``ranks`` or
    on the median and the slowest rank.

    Ops are ``kernels`` (checked against the run's op names first, with a did-you-mean) or
    the ``top`` ops by device time. The run is ``run``, else a triage of ``target`` made
    first, else the latest run under nsbridge-runs/. An earlier run's script runs again
    only when it and its folder lie in ``trust`` (None: the current directory;
    nsbridge.commands.trust), in this process's environment with the threads and the checked
    variables the run recorded (nsbridge.commands.trust.rerun_plan). ``on_plan`` receives what will
    run and the plan's text before ncu starts.

    Raises:
        DeepError: an op the run does not have, no GPU, counters not permitted, no kernel
            matched.
        ToolNotFoundError: no ncu.
        ToolFailedError: ncu failed (its log is kept).
        RunDirError: ``run`` is not a usable run directory.
        ScriptError: the script cannot be found or compiled.
        LaunchError: a script given under a launcher.
        UntrustedRunError: the run's manifest names a script or folder outside ``trust``,
            a module, or launcher options triage does not write (nothing has run).
    """
    from .trust import rerun_plan, trusted_folders

    prof = as_profile(profile)
    deep_prof = prof.deep
    if run is None and target is not None:
        if detect_rank(environ) is not None:
            raise LaunchError("Under a launcher, triage and deep run together: nsbridge triage "
                              "--deep N script.py (or triage first, then deep --run-dir DIR).")
        environ = with_threads(environ, threads)
        ncu = DeepPass(deep_prof, kernels=kernels, top=top, timeout=timeout, on_plan=on_plan,
                       environ=environ)
        preflight([ncu])
        script = checked_script(target, args, module, cwd)
        the_run = Run.for_script(script, command="triage", profile=as_profile("default"),
                                 out=out_path(out))
        return result_of(run_passes(the_run, [
            TorchProfilerPass(script, as_profile("default"), timeout=timeout, environ=environ,
                              threads=threads),
            ncu]))
    the_run = Run.open(Path(run) if run is not None else latest_run())
    if the_run.manifest.get("command") != "analyze":
        rerun = rerun_plan(str(the_run.dir), the_run.manifest, trusted_folders(trust),
                           environ, threads)
        environ = rerun.environ
        if on_plan is not None:
            on_plan(f"deep: {rerun.plan}")
    if is_ranked(the_run.report) and the_run.manifest.get("command") != "analyze":
        from ..distributed.fan_out import on_ranks

        share = DeepOnRanks(deep_prof, kernels=kernels, top=top, ranks=ranks,
                            timeout=timeout, on_plan=on_plan)
        return on_ranks(share, the_run, profile=prof,
                        timeout=timeout, environ=environ)
    return result_of(run_passes(the_run, [DeepPass(deep_prof, kernels=kernels, top=top,
                                                   timeout=timeout, on_plan=on_plan,
                                                   environ=environ)]))
