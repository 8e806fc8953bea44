"""The rank-0 <-> ranks mailbox: files in the run directory through which the processes of
one distributed job talk (stdlib and run-directory helpers only).

Rank 0 to the others (one nsbridge per rank, started by a launcher): ``ranks-next.json``
says whether the next pass runs and with which spec (``tell_ranks``); each rank reads it
(``wait_for_word``) and acknowledges it in its folder (``acknowledge``); the word is removed
once every rank has read it (``retire_word``), so a later launch into the same folder never
reads it. nsbridge starting the ranks itself (torch.distributed.run) hands them the spec in
``{kind}-ranks-spec.json`` (``spec_path``). The ranks to rank 0: each rank's output of a pass
in its folder (``output_name``, read by ``wait_outputs``); its torch.profiler summary is
job.summary's. A pass is named by its ``kind`` (the name its rank share gives it:
passes.nsys_pass.TimelineOnRanks, passes.ncu_pass.DeepOnRanks); nothing here depends on
which pass it is.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, TypeVar, cast

from .. import schema as S
from ..rundir import RECORD_LIMIT, write_json
from .identity import rank_dir_name

RecordT = TypeVar("RecordT")

POLL_S = 0.5   # how often a waiting rank looks for the others' files
OUTPUT = "{kind}-pass.json"      # a rank's output of a pass, in rank-NN/
NEXT = "ranks-next.json"         # rank 0's word, in the run directory
ACK = "{kind}-ack.json"          # a rank has read the word, in rank-NN/
SPEC = "{kind}-ranks-spec.json"  # the spec handed to ranks started by torch.distributed.run


@dataclass(frozen=True)
class RankPlan:
    """What rank 0 planned for a pass on the ranks: which ranks run the tool and why, whose
    output the report shows, the pass's time limit and what else every rank needs."""

    ranks: list[int]
    reasons: dict[int, str]
    shown: Optional[int]
    timeout: Optional[float]
    extra: dict[str, Any] = field(default_factory=dict)


def output_name(kind: str) -> str:
    """A rank's output of the ``kind`` pass, in its folder."""
    return OUTPUT.format(kind=kind)


def spec_path(run_dir: Path, kind: str) -> Path:
    """Where the spec of the ``kind`` pass is written for the ranks nsbridge starts."""
    return run_dir / SPEC.format(kind=kind)


def pass_spec(*, target: str, args: Sequence[str], module: bool, cwd: Path,
              timeout: Optional[float], profile_source: str, ranks: Sequence[int],
              pass_id: str, extra: Optional[Mapping[str, Any]] = None) -> S.PassSpec:
    """What every rank needs to run its share of a pass (JSON-able; ``extra``: the pass's
    own, e.g. the deep plan); ``pass_id`` marks the outputs of this pass apart from an
    earlier one's."""
    spec: S.PassSpec = {"target": target, "args": list(args), "module": module,
                        "cwd": str(cwd), "timeout": timeout, "profile": profile_source,
                        "ranks": sorted(ranks), "pass_id": pass_id}
    return cast(S.PassSpec, {**spec, **(extra or {})})


def wait_outputs(kind: str, run_dir: Path, ranks: Sequence[int], timeout_s: float,
                 pass_id: str) -> dict[int, Optional[S.Output]]:
    """Each rank's output of the pass ``pass_id`` (None for a rank that wrote none within
    ``timeout_s``; 0 reads once)."""
    deadline = time.monotonic() + timeout_s
    found: dict[int, Optional[S.Output]] = {}
    while True:
        for rank in ranks:
            if found.get(rank) is None:
                out = read_json(run_dir / rank_dir_name(rank) / output_name(kind), S.Output)
                found[rank] = out if out and out.get("pass_id") == pass_id else None
        if all(found.values()) or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_S)


def tell_ranks(run_dir: Path, kind: str, go: bool, *, job: str,
               spec: Optional[S.PassSpec] = None, why: str = "") -> str:
    """Rank 0 to the others (one nsbridge per rank): run the ``kind`` pass with ``spec``,
    or stop (``why``). Returns the word's nonce, which the ranks acknowledge."""
    nonce = spec["pass_id"] if spec else uuid.uuid4().hex
    write_json(run_dir / NEXT, {"pass": kind, "go": go, "job": job, "nonce": nonce,
                                "spec": spec, "why": why})
    return nonce


def wait_for_word(run_dir: Path, kind: str, timeout_s: float, *, job: str,
                  since: float) -> S.Word:
    """What rank 0 said about the ``kind`` pass in this job (written after ``since``); a
    stop when it said nothing within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        word = read_json(run_dir / NEXT, S.Word, since)
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
        acked = all((ack := read_json(run_dir / rank_dir_name(r) / ACK.format(kind=kind),
                                      S.Ack)) is not None and ack["nonce"] == nonce
                    for r in ranks)
        if acked:
            (run_dir / NEXT).unlink(missing_ok=True)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def read_json(path: Path, kind: type[RecordT], since: float = 0.0) -> Optional[RecordT]:
    """A mailbox file written after ``since``, as its declaration ``kind`` (schema.records);
    None when absent, older, too large, or not of that shape: the waiting side goes on
    waiting, within its time limit, and then reports the rank or word as missing."""
    try:
        if path.stat().st_mtime < since or path.stat().st_size > RECORD_LIMIT:
            return None
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return None if S.record_problem(value, S.shape_for(kind)) else cast(RecordT, value)
