"""The timeline (nsys) and deep (ncu) passes on the ranks of a distributed run.

Map: every rank runs the script again, each under its own tool, into its own folder:
nsys on the ranks the torch.profiler pass profiled, ncu on the ranks the deep plan chose
(nsbridge.model.rank_plan); the other ranks run the script unprofiled, so collectives still
meet. Each rank's tool is its own process tree, so ncu never serialises one rank's NCCL
kernels behind another's, and the deep plan never includes communication ops, whose
kernels would wait for peers that are not replaying them. The rank writes what its pass
found next to its files (rank-NN/timeline-pass.json, deep-pass.json).

Reduce: the shown rank's output (the rank whose ops the report shows: the straggler, else
the slowest; for the deep pass the slowest rank the plan chose) goes into the report as a
single run's would, and the section gets one row per rank under ``ranks``.

Two ways in, as for triage: nsbridge starts every rank through torch.distributed.run with
``python -m nsbridge.passes.rank_tools SPEC.json`` and merges once they end; or a launcher
started one nsbridge per rank, and rank 0 merges. There rank 0 also tells the other ranks
whether the next pass runs, and with which plan (``ranks-next.json``), so a failed pass
never leaves ranks waiting in a rendezvous for a rank that will not come.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..collect._process import Stopped, run_passthrough, stop_on_sigterm
from ..collect.ncu import find_ncu
from ..collect.nsys import find_nsys
from ..distributed.ranks import RankEnv, detect, rank_dir_name
from ..errors import NsbridgeError
from ..model.collectives import COMMUNICATION_OP
from ..profiles import load_profile
from ..run import PassOutput
from ..rundir import write_json
from .ncu_pass import capture_deep, require_gpu
from .nsys_pass import capture_timeline
from .ranks_pass import POLL_S

OUTPUT = {"timeline": "timeline-pass.json", "deep": "deep-pass.json"}
NAMES = {"timeline": "nsys", "deep": "ncu"}
NEXT = "ranks-next.json"
ACK = "{kind}-ack.json"


def map_pass(kind: str, run_dir: Path, rank: int, spec: Mapping[str, Any],
             environ: Mapping[str, str] = os.environ) -> int:
    """This rank's share of the ``kind`` pass ("timeline" or "deep"), described by
    ``spec`` (see ``pass_spec``): under the tool when the rank is in spec["ranks"], else
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


def pass_spec(*, target: str, args: Sequence[str], module: bool, cwd: Path,
              timeout: Optional[float], profile_source: str, ranks: Sequence[int],
              pass_id: str, plan: Optional[dict[str, Any]] = None,
              verdict: Optional[str] = None,
              op_shapes: Optional[Mapping[str, list[str]]] = None) -> dict[str, Any]:
    """What every rank needs to run its share of a pass (JSON-able); ``pass_id`` marks
    the outputs of this pass apart from an earlier one's."""
    return {"target": target, "args": list(args), "module": module, "cwd": str(cwd),
            "timeout": timeout, "profile": profile_source, "ranks": sorted(ranks),
            "pass_id": pass_id, "plan": plan, "verdict": verdict,
            "op_shapes": dict(op_shapes or {})}


def wait_outputs(kind: str, run_dir: Path, ranks: Sequence[int], timeout_s: float,
                 pass_id: str) -> dict[int, Optional[dict[str, Any]]]:
    """Each rank's output of the pass ``pass_id`` (None for a rank that wrote none within
    ``timeout_s``; 0 reads once)."""
    deadline = time.monotonic() + timeout_s
    found: dict[int, Optional[dict[str, Any]]] = {}
    while True:
        for rank in ranks:
            if found.get(rank) is None:
                out = _read(run_dir / rank_dir_name(rank) / OUTPUT[kind])
                found[rank] = out if out and out.get("pass_id") == pass_id else None
        if all(found.values()) or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_S)


def reduce_outputs(kind: str, outputs: Mapping[int, Optional[dict[str, Any]]],
                   shown: int, reasons: Mapping[int, str], hosts: Mapping[int, Any],
                   missing: str) -> PassOutput:
    """One PassOutput: the shown rank's, its files named by rank folder, and the section's
    ``ranks`` rows (every rank's status and headline numbers). A rank's section counts
    even when its script failed; ``missing`` says why a rank has no output."""
    rows = [_rank_row(kind, rank, out, reasons.get(rank), hosts.get(rank), missing)
            for rank, out in sorted(outputs.items())]
    good = {rank: out for rank, out in outputs.items() if out and out.get("section")}
    failed = [row for row in rows if row["status"] != "ok"]
    exit_code = next((out["exit_code"] for out in outputs.values()
                      if out and out.get("exit_code")), 1 if failed else 0)
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


def tell_ranks(run_dir: Path, kind: str, go: bool, *, job: str,
               spec: Optional[dict[str, Any]] = None, why: str = "") -> str:
    """Rank 0 to the others (one nsbridge per rank): run the ``kind`` pass with ``spec``,
    or stop (``why``). Returns the word's nonce, which the ranks acknowledge."""
    nonce = (spec or {}).get("pass_id") or uuid.uuid4().hex
    write_json(run_dir / NEXT, {"pass": kind, "go": go, "job": job, "nonce": nonce,
                                "spec": spec, "why": why})
    return nonce


def wait_for_word(run_dir: Path, kind: str, timeout_s: float, *, job: str,
                  since: float) -> dict[str, Any]:
    """What rank 0 said about the ``kind`` pass in this job (written after ``since``); a
    stop when it said nothing within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        word = _read(run_dir / NEXT, since)
        if word and word.get("pass") == kind and word.get("job") == job:
            return word
        time.sleep(POLL_S)
    return {"pass": kind, "go": False, "spec": None,
            "why": f"rank 0 did not say within {timeout_s:.0f} s whether the {kind} pass runs"}


def acknowledge(run_dir: Path, kind: str, nonce: str, rank: int, world_size: int) -> None:
    """``rank`` has read rank 0's word; the last rank to read it removes it."""
    folder = run_dir / rank_dir_name(rank)
    folder.mkdir(exist_ok=True)
    write_json(folder / ACK.format(kind=kind), {"nonce": nonce})
    retire_word(run_dir, kind, nonce, range(1, world_size), 0.0)


def retire_word(run_dir: Path, kind: str, nonce: str, ranks: Sequence[int],
                timeout_s: float) -> bool:
    """Remove rank 0's word once ``ranks`` acknowledged it (within ``timeout_s``), so a
    later launch into the same folder never reads it; True when removed."""
    deadline = time.monotonic() + timeout_s
    while True:
        acked = all((_read(run_dir / rank_dir_name(r) / ACK.format(kind=kind)) or {}).get(
            "nonce") == nonce for r in ranks)
        if acked:
            (run_dir / NEXT).unlink(missing_ok=True)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


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


def _rank_row(kind: str, rank: int, out: Optional[dict[str, Any]], reason: Optional[str],
              host: Any, missing: str) -> dict[str, Any]:
    row: dict[str, Any] = {"rank": rank, "host": host, "reason": reason}
    if out is None:
        return {**row, "status": "hung", "error": f"no {NAMES[kind]} output: {missing}"}
    row.update(status=out["status"], error=(out.get("error") or {}).get("message"),
               wall_s=(out.get("manifest") or {}).get("wall_s"))
    if not out.get("section"):
        return row
    section = out["section"][1]
    folder = rank_dir_name(rank)
    if kind == "timeline":
        row.update({k: section.get(k) for k in ("gpu_busy_pct", "kernels", "copies", "memsets",
                                                "nsbridge_ranges", "sync_calls", "sync_us")})
        ops = section.get("ops") or []
        row["kernel_us"] = round(sum(op.get("kernel_us") or 0.0 for op in ops), 3)
        row["comm_kernel_us"] = round(sum(op.get("kernel_us") or 0.0 for op in ops
                                          if COMMUNICATION_OP.search(str(op.get("op")))), 3)
        row["files"] = {k: f"{folder}/{v}" for k, v in (section.get("files") or {}).items()}
    else:
        row.update(launches=section.get("launches"), attribution=section.get("attribution"),
                   files={k: f"{folder}/{v}" for k, v in (out.get("files") or {}).items()})
        row["ops"] = {op: {k: cols.get(k) for k in ("duration_ns", "sm_pct", "memory_pct",
                                                    "achieved_occupancy_pct", "tensor_pct",
                                                    "bound")}
                      for op, cols in (out.get("op_columns") or {}).items()}
    return row


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


def _read(path: Path, since: float = 0.0) -> Optional[dict[str, Any]]:
    """A JSON file written after ``since`` (None: absent, older, or being written)."""
    try:
        if path.stat().st_mtime < since:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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
