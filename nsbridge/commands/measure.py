"""A script's profiled processes into one triage run directory: the torch.profiler pass,
then whatever passes follow it, with the threads and environment recorded for a rerun.
`triage` runs this on one machine; each process of the gate is one of these."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from ..collect.source import git_state, recorded_env
from ..schema.records import RunSource
from ..collect.torch_profiler import with_threads
from ..passes.torch_pass import TorchProfilerPass
from ..pipeline import Pass, preflight, run_passes
from ..profiles import Profile
from ..result import RunResult, result_of
from ..run import Run
from ..script_check import Script

ProfileArg = Union[str, Profile]
# the passes after torch.profiler, given the environment the script runs in
Following = Callable[[Mapping[str, str]], Sequence[Pass]]


def rerun_source(script: Script, threads: Optional[int],
                 environ: Mapping[str, str]) -> RunSource:
    """What a rerun of the run needs besides the script: threads, checked variables, git."""
    return {"threads": threads, "env": recorded_env(environ), "git": git_state(script.cwd)}


def profiled(script: Script, profile: Profile, *, out: Optional[Path],
             timeout: Optional[float], threads: Optional[int], environ: Mapping[str, str],
             runs: int = 1, window: str = "steps",
             following: Following = lambda _: ()) -> RunResult:
    """``script`` under torch.profiler (``runs`` processes pooled; ``threads``: torch's
    intra-op threads), then the ``following`` passes, into a new triage run directory
    (``out``, or one under nsbridge-runs/). Every pass's tool is checked before the script
    starts (pipeline.preflight)."""
    source = rerun_source(script, threads, environ)
    environ = with_threads(environ, threads)
    passes: list[Pass] = [TorchProfilerPass(script, profile, timeout=timeout, environ=environ,
                                            runs=runs, window=window, threads=threads)]
    passes += following(environ)
    preflight(passes)   # fail before the script runs, not after
    run = Run.for_script(script, command="triage", profile=profile, out=out, source=source)
    return result_of(run_passes(run, passes))
