"""What the ranks of a job leave in the run directory for rank 0 (or for the process that
launched them): each rank's output of a pass in its folder (``output_name``, read once
each by ``read_outputs`` when the store or the launcher says the rank is done), and the
spec of a pass handed to the ranks nsbridge starts itself through torch.distributed.run
(``spec_path``; ranks a launcher started hear it through the job's store, job.store). A
pass is named by its ``kind`` (the name its rank share gives it:
passes.nsys_pass.TimelineOnRanks, passes.ncu_pass.DeepOnRanks); nothing here depends on
which pass it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, TypeVar, cast

from .. import schema as S
from ..rundir import RECORD_LIMIT
from .identity import rank_dir_name

RecordT = TypeVar("RecordT")

OUTPUT = "{kind}-pass.json"      # a rank's output of a pass, in rank-NN/
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


def read_outputs(kind: str, run_dir: Path, ranks: Sequence[int],
                 pass_id: str) -> dict[int, Optional[S.Output]]:
    """Each rank's output of the pass ``pass_id``, read once (None for a rank that wrote
    none, or an output of another pass)."""
    found: dict[int, Optional[S.Output]] = {}
    for rank in ranks:
        out = read_json(run_dir / rank_dir_name(rank) / output_name(kind), S.Output)
        found[rank] = out if out and out.get("pass_id") == pass_id else None
    return found


def read_json(path: Path, kind: type[RecordT]) -> Optional[RecordT]:
    """A rank's file, as its declaration ``kind`` (schema.records); None when absent, too
    large, or not of that shape: the rank is then reported as having written none."""
    try:
        if path.stat().st_size > RECORD_LIMIT:
            return None
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return None if S.record_problem(value, S.shape_for(kind)) else cast(RecordT, value)
