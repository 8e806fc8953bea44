"""One rank's share of a pass: the script run again on this rank, under nsys (timeline) or
ncu (deep) when the spec chose the rank, else alone so the others' collectives still meet.

Each rank's tool is its own process tree, so ncu never serialises one rank's NCCL kernels
behind another's. The rank writes what its pass found next to its files
(rank-NN/timeline-pass.json, deep-pass.json; distributed.mailbox), where the fan-out reads
it. ``python -m nsbridge.distributed.share SPEC.json`` is what torch.distributed.run starts
on every rank when nsbridge launches the ranks itself (distributed.fan_out).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Optional

from ..collect._process import run_passthrough
from ..errors import Stopped, stop_on_sigterm
from ..collect.ncu import find_ncu
from ..collect.nsys import find_nsys
from ..errors import NsbridgeError
from ..passes.ncu_pass import capture_deep, require_gpu
from ..passes.nsys_pass import capture_timeline
from ..profiles import load_profile
from ..run import PassOutput
from ..rundir import write_json
from .identity import RankEnv, detect, rank_dir_name
from .mailbox import OUTPUT

NAMES = {"timeline": "nsys", "deep": "ncu"}   # the tool of each kind of pass


def map_pass(kind: str, run_dir: Path, rank: int, spec: Mapping[str, Any],
             environ: Mapping[str, str] = os.environ) -> int:
    """This rank's share of the ``kind`` pass ("timeline" or "deep"), described by
    ``spec`` (see mailbox.pass_spec): under the tool when the rank is in spec["ranks"], else
    the script alone. A chosen rank always writes its output, and runs the script alone
    when its tool cannot start, so the other ranks' collectives still meet. Returns the
    exit status."""
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
        _check_tool(kind, environ)
    except NsbridgeError as exc:   # the script has not run yet: run it for the others' sake
        output = _failed(kind, exc, f"rank {rank} ran the script without {NAMES[kind]}: ")
        run_passthrough(argv, cwd=cwd, env=environ, timeout=timeout)
    common = dict(target=spec["target"], args=spec["args"], module=spec["module"], cwd=cwd,
                  timeout=timeout, environ=environ)
    try:
        if output is None and kind == "timeline":
            output, _ = capture_timeline(folder, profile=profile, **common)
        elif output is None:
            output = capture_deep(folder, plan=spec["plan"], deep=profile.deep,
                                  verdict=spec.get("verdict"), op_shapes=spec["op_shapes"],
                                  **common)
    except BaseException as exc:   # whatever it was, rank 0 hears of it
        output = _failed(kind, exc)
        if not isinstance(exc, Exception):
            raise
    finally:
        if output is not None:
            write_json(folder / OUTPUT[kind], {**asdict(output), "pass_id": spec["pass_id"]})
    return output.exit_code


def _check_tool(kind: str, environ: Mapping[str, str]) -> None:
    """Raise the tool's own error when it cannot start on this rank."""
    if kind == "timeline":
        find_nsys(environ)
    else:
        require_gpu(environ)
        find_ncu(environ)


def _failed(kind: str, exc: BaseException, prefix: str = "") -> PassOutput:
    interrupted = isinstance(exc, KeyboardInterrupt)
    code = 130 if interrupted else 143 if isinstance(exc, Stopped) else 1
    message = str(exc) or type(exc).__name__
    if isinstance(exc, Stopped):
        message = ("stopped by SIGTERM (the launcher ended this rank, as torchrun does once "
                   "another rank has failed)")
    elif interrupted:
        message = "interrupted (Ctrl-C)"
    if kind == "deep" and "(stopped by --timeout)" in message:
        message += (" On several ranks the usual cause is a rank waiting in a collective for "
                    "a peer that ncu's kernel replay holds up: raise --timeout (and the "
                    "process group's timeout), or profile fewer launches (deep.max_launches).")
    return PassOutput(name=NAMES[kind], manifest={}, status="failed", exit_code=code,
                      error={"type": type(exc).__name__, "message": prefix + message})


def main(spec_path: str) -> int:
    """A rank started by torch.distributed.run: its share of the pass in the spec. SIGTERM
    (torchrun ending the job) and Ctrl-C end the rank's tool and script before it exits."""
    stop_on_sigterm()
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    rank: Optional[RankEnv] = detect()
    try:
        return map_pass(spec["kind"], Path(spec["run_dir"]), rank.rank if rank else 0, spec)
    except Stopped:
        return 143
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
