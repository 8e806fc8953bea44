"""`timeline`: a script under Nsight Systems, into a new run or an earlier one (its ranks
too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from ..collect.torch_profiler import with_threads
from ..passes.nsys_pass import TimelineOnRanks, TimelinePass
from ..pipeline import preflight, run_passes
from ..profiles import as_profile, with_overrides
from ..result import RunResult, result_of
from ..run import Run, is_ranked
from ..rundir import check_dir_name
from .measure import ProfileArg
from .runs import recorded_profile, run_for


def timeline(target: Optional[str], args: Sequence[str] = (), *, module: bool = False,
             profile: Optional[ProfileArg] = None, out: Optional[Union[str, Path]] = None,
             run: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
             cwd: Optional[Union[str, Path]] = None, threads: Optional[int] = None,
             trust: Optional[Sequence[Union[str, Path]]] = None,
             on_plan: Optional[Callable[[str], None]] = None, top: Optional[int] = None,
             environ: Mapping[str, str] = os.environ) -> RunResult:
    """Run the script under Nsight Systems with NVTX op ranges and join kernels to ops
    (``threads``: torch's intra-op threads in the process, as triage --threads; ``top``:
    op rows in a new run's summaries, its profile's ``analysis.top_ops``).

    With ``run``: add the timeline to that run (its script and arguments are reused when
    ``target`` is None, only when they lie in ``trust``, as for ``deep``, with the threads,
    the checked variables and the profile the run recorded, unless ``threads`` or
    ``profile`` are given; ``on_plan`` receives what will run); otherwise a new run
    directory (``profile`` None: the default profile).

    Raises:
        ScriptError: the script or module cannot be found or compiled.
        RunDirError: ``run`` is not a usable run directory, or one cannot be made.
        ProfileError: the profile is not valid.
        ToolNotFoundError: no nsys (with how to install it).
        ToolFailedError: nsys failed (its own error lines and its log).
        NsysExportError: the capture cannot be exported.
        UntrustedRunError: ``run``'s manifest names a script or folder outside ``trust``,
            or a variable it may not set.
    """
    from .trust import rerun_plan, trusted_folders

    if out:     # before nsys is looked for or the script starts, as triage checks it
        check_dir_name(Path(out))
    if run is not None and target is None:
        earlier = Run.open(Path(run))
        rerun = rerun_plan(str(earlier.dir), earlier.manifest, trusted_folders(trust),
                           environ, threads)
        prof = as_profile(profile) if profile is not None else recorded_profile(earlier)
        if on_plan is not None:
            on_plan(f"timeline: {rerun.plan}; profile {prof.name}")
        if is_ranked(earlier.report):
            from ..distributed.fan_out import on_ranks

            return on_ranks(TimelineOnRanks(timeout=timeout), earlier,
                            profile=prof, timeout=timeout,
                            environ=rerun.environ)
        return result_of(run_passes(earlier, [TimelinePass(
            prof, timeout=timeout, environ=rerun.environ, threads=rerun.threads)]))
    prof = with_overrides(as_profile(profile if profile is not None else "default"), top=top)
    if run is None:   # a new run: nothing is left behind when nsys is missing
        preflight([TimelinePass(prof, environ=environ)])
    the_run, script = run_for(run, target, args, module, cwd, prof, "timeline", out)
    return result_of(run_passes(the_run, [TimelinePass(prof, script=script, timeout=timeout,
                                                       environ=with_threads(environ, threads),
                                                       threads=threads)]))
