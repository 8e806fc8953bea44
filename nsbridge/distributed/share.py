"""One rank's share of a pass: the script run again on this rank, under the pass's tool when
the spec chose the rank, else alone so the others' collectives still meet.

Each rank's tool is its own process tree, so ncu never serialises one rank's NCCL kernels
behind another's. The rank writes what its pass found next to its files
(rank-NN/KIND-pass.json; job.mailbox), where the fan-out reads it. ``python -m
nsbridge.distributed.share SPEC.json`` is what torch.distributed.run starts on every rank
when nsbridge launches the ranks itself (distributed.fan_out). What the tool is and how it
captures is the pass's own (``SHARES``: its rank share, by the kind the spec names).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from .. import schema as S
from ..collect._process import run_passthrough
from ..errors import NsbridgeError, RunDirError, Stopped, stop_on_sigterm
from ..job.identity import RankEnv, detect, rank_dir_name
from ..job.mailbox import output_name
from ..passes.ncu_pass import DeepOnRanks
from ..passes.nsys_pass import TimelineOnRanks
from ..profiles import load_profile
from ..run import PassOutput, output_record
from ..rundir import load_record, write_json

# the passes that run on a job's ranks, by the kind their spec names
SHARES: dict[str, Any] = {TimelineOnRanks.kind: TimelineOnRanks, DeepOnRanks.kind: DeepOnRanks}


def map_pass(kind: str, run_dir: Path, rank: int, spec: S.PassSpec,
             environ: Mapping[str, str] = os.environ) -> int:
    """This rank's share of the ``kind`` pass, described by ``spec`` (see
    mailbox.pass_spec): under the tool when the rank is in spec["ranks"], else the script
    alone. A chosen rank always writes its output, and runs the script alone when its tool
    cannot start, so the other ranks' collectives still meet. Returns the exit status."""
    share = SHARES[kind]
    folder = run_dir / rank_dir_name(rank)
    folder.mkdir(exist_ok=True)
    cwd, timeout = Path(spec["cwd"]), spec.get("timeout")
    environ = {**environ, **(spec.get("env") or {})}
    argv = ([sys.executable, "-m", spec["target"]] if spec["module"]
            else [sys.executable, spec["target"]]) + list(spec["args"])
    if rank not in spec["ranks"]:
        return run_passthrough(argv, cwd=cwd, env=environ, timeout=timeout).returncode
    output: Optional[PassOutput] = None
    try:
        profile = load_profile(spec["profile"])
        share.check_tool(environ)
    except NsbridgeError as exc:   # the script has not run yet: run it for the others' sake
        output = _failed(share, exc, f"rank {rank} ran the script without {share.tool}: ")
        run_passthrough(argv, cwd=cwd, env=environ, timeout=timeout)
    try:
        if output is None:
            output = share.capture(folder, spec, profile, target=spec["target"],
                                   args=spec["args"], module=spec["module"], cwd=cwd,
                                   timeout=timeout, environ=environ)
    except BaseException as exc:   # whatever it was, rank 0 hears of it
        output = _failed(share, exc)
        if not isinstance(exc, Exception):
            raise
    finally:
        if output is not None:
            write_json(folder / output_name(kind), {**output_record(output),
                                                    "pass_id": spec["pass_id"]})
    return output.exit_code


def _failed(share: Any, exc: BaseException, prefix: str = "") -> PassOutput:
    interrupted = isinstance(exc, KeyboardInterrupt)
    code = S.INTERRUPTED if interrupted else S.TERMINATED if isinstance(exc, Stopped) else 1
    message = str(exc) or type(exc).__name__
    if isinstance(exc, Stopped):
        message = ("stopped by SIGTERM (the launcher ended this rank, as torchrun does once "
                   "another rank has failed)")
    elif interrupted:
        message = "interrupted (Ctrl-C)"
    return PassOutput(name=share.tool, manifest={}, status="failed", exit_code=code,
                      error={"type": type(exc).__name__,
                             "message": prefix + message + share.failure_hint(message)})


def main(spec_path: str) -> int:
    """A rank started by torch.distributed.run: its share of the pass in the spec. SIGTERM
    (torchrun ending the job) and Ctrl-C end the rank's tool and script before it exits."""
    stop_on_sigterm()
    try:
        spec = load_record(Path(spec_path), S.PassSpec)
    except RunDirError as exc:
        print(f"nsbridge: {exc}", file=sys.stderr)
        return 1
    kind, run_dir = spec.get("kind"), spec.get("run_dir")
    if kind not in SHARES or not run_dir:
        print(f"nsbridge: {spec_path} names no pass nsbridge runs on ranks, or no run "
              "directory: it was edited or written by another version", file=sys.stderr)
        return 1
    rank: Optional[RankEnv] = detect()
    try:
        return map_pass(str(kind), Path(run_dir), rank.rank if rank else 0, spec)
    except Stopped:
        return S.TERMINATED
    except KeyboardInterrupt:
        return S.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
