"""The shapes of the records nsbridge writes and reads back: a run's manifest.json, a
profiled process's child.json, a rank's summary.json and the job mailbox's files (a gate's
gate.json is checked against its types, contract.comparison). Each is untrusted when read back (edited by hand, damaged, written by another
version, planted in a folder): the one reader of each checks it here, with schema.shape's
checker, and refuses it naming the file and the first field that is wrong.

Numbers are finite and bounded (shape.HUGE); ranks and world sizes are whole numbers
below ``MAX_RANKS``; file names a record points to are bare names in its own folder.
"""

from __future__ import annotations

from typing import Any, Optional

from .shape import _ANY, _FLAG, _NUMBER, _SIGNED, _TEXT, _Atom, _Required, misshapen

__all__ = ["ACK_SHAPE", "CHILD_SHAPE", "MANIFEST_SHAPE", "MAX_RANKS", "OUTPUT_SHAPE",
           "SUMMARY_SHAPE", "WORD_SHAPE", "record_problem"]

MAX_RANKS = 1 << 20   # more ranks than any job runs: a world_size above it is refused


def _whole(low: int, high: int) -> _Atom:
    """A whole number from ``low`` to ``high``."""
    return _Atom(f"a whole number from {low} to {high}",
                 lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high)


def _is_file_name(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= 255 and value not in (".", "..")
            and not any(c in value for c in "/\\\0"))


_RANK = _whole(0, MAX_RANKS - 1)
_WORLD = _whole(1, MAX_RANKS)
_EXIT = _whole(-(1 << 31), (1 << 31) - 1)
_FILE = _Atom("a file name in the record's folder", _is_file_name)
_STRINGS = [_TEXT]
_VARIABLES = _Atom("an object of strings", lambda v: isinstance(v, dict) and all(
    isinstance(k, str) and isinstance(x, str) for k, x in v.items()))
_ERROR = {"type": _TEXT, "message": _TEXT, "at": _SIGNED, "rank": _RANK}
# the profiled process's environment (child.json's env; a manifest's environment)
_ENV = {"python": _TEXT, "torch": _TEXT, "cuda": _TEXT, "cuda_available": _FLAG,
        "host": _TEXT, "platform": _TEXT, "gpus": [_ANY],
        "math": {"matmul_allow_tf32": _FLAG, "cudnn_allow_tf32": _FLAG,
                 "float32_matmul_precision": _TEXT}}

# manifest.json: what `analyze RUN`, `deep --run`, `timeline --run`, `gate` and `load` use
_PASS = {"name": _TEXT, "status": _TEXT, "exit_code": _EXIT, "wall_s": _NUMBER,
         "runs": _NUMBER, "steps_seen": _NUMBER, "machine": {}, "environment": _ENV,
         "error": _ERROR}
MANIFEST_SHAPE = {"command": _Required(_TEXT), "status": _Required(_TEXT),
                  "target": _Required(_TEXT), "args": _STRINGS, "module": _FLAG, "cwd": _TEXT,
                  "argv": _STRINGS, "threads": _whole(1, 1 << 16), "env": _VARIABLES,
                  "git": {"commit": _TEXT},
                  "profile": {}, "host": _TEXT, "pid": _EXIT, "launcher": _STRINGS,
                  "passes": [_PASS], "error": _ERROR, "environment": _ENV}

# child.json (and its nsys/ncu siblings): the profiled process's record
_STEP = {"index": _Required(_SIGNED), "wall_ms": _Required(_NUMBER), "cpu_ms": _NUMBER,
         "wait_ms": _NUMBER, "nivcsw": _NUMBER, "phase": _Required(_TEXT), "compile_ms": _NUMBER,
         "probe_ms": _NUMBER}
_SYNC = {"kind": _Required(_TEXT), "op": _TEXT, "device": _Required(_TEXT),
         "file": _Required(_TEXT), "line": _Required(_SIGNED), "function": _TEXT, "code": _TEXT,
         "library": _FLAG, "via": _TEXT, "count": _Required(_NUMBER),
         "cost_ms": _Required(_NUMBER), "steps": _Required(_NUMBER), "first_step": _SIGNED,
         "last_step": _SIGNED, "max_in_one_step": _NUMBER}
_PROCESS = {"threads": {"intra_op": _NUMBER, "inter_op": _NUMBER, "env": {}}, "load_at_start": [_NUMBER], "load_at_end": [_NUMBER],
            "run_wait_measured": _FLAG, "gpu": _ANY}
_WINDOW = {"kind": _TEXT, "stopped_by": _TEXT, "seconds": _NUMBER, "grew_mib": _NUMBER,
           "wait_for_step_s": _NUMBER, "after_steps": _NUMBER, "budget_error": _TEXT}
CHILD_SHAPE = {"status": _Required(_TEXT), "exit_code": _Required(_EXIT), "error": _ERROR,
               "step_source": _TEXT, "step_count": _NUMBER, "mode": _TEXT,
               "steps": [_STEP], "steps_seen": _NUMBER,
               "steps_sampling": {"exact": _Required(_NUMBER), "later": _Required(_NUMBER),
                                  "sampled": _Required(_NUMBER)},
               "traces": [_FILE], "table": _FILE, "schedule_note": _TEXT, "use_cuda": _FLAG,
               "syncs": [_SYNC], "machine": _PROCESS, "window": _WINDOW,
               "compile_wait_s": _NUMBER, "env": _ENV, "wall_s": _NUMBER,
               "nvtx": {"total": _NUMBER}}

# rank-NN/summary.json: what the cross-rank merge (model.ranks.cross_rank) uses
_COLLECTIVE = {"kind": _TEXT, "count": _NUMBER, "bytes": _NUMBER,
               "time_us": _Required(_NUMBER), "per_step": _NUMBER,
               "time_per_step_us": _NUMBER, "source": _TEXT}
_RANK_OP = {"name": _Required(_TEXT), "calls": _NUMBER, "cpu_self_us": _NUMBER,
            "device_self_us": _NUMBER}
SUMMARY_SHAPE = {"rank": _Required(_RANK), "world_size": _Required(_WORLD),
                 "status": _Required(_TEXT), "exit_code": _Required(_EXIT), "error": _ERROR,
                 "host": _TEXT, "profiled": _FLAG, "trace": _FILE,
                 "step_ms": [_NUMBER], "collective_ms": [_NUMBER], "verdict": _TEXT,
                 "numbers": {"device_busy_pct": _NUMBER}, "has_device": _FLAG,
                 "device_busy_pct": _NUMBER,
                 "comm": {"comm_us": _NUMBER, "overlap_pct": _NUMBER},
                 "collectives": [_COLLECTIVE], "ops": [_RANK_OP]}

# the job mailbox: rank 0's word (ranks-next.json) and a rank's output of a pass
WORD_SHAPE = {"pass": _Required(_TEXT), "go": _Required(_FLAG), "job": _TEXT,
              "nonce": _TEXT, "spec": {"ranks": [_RANK], "pass_id": _TEXT}, "why": _TEXT}
_SECTION = _Atom("a [name, object] pair", lambda v: isinstance(v, list) and len(v) == 2
                  and isinstance(v[0], str) and isinstance(v[1], dict))
OUTPUT_SHAPE = {"pass_id": _Required(_TEXT), "name": _Required(_TEXT),
                "status": _Required(_TEXT), "exit_code": _Required(_EXIT), "error": _ERROR,
                "manifest": {"wall_s": _NUMBER}, "core": {}, "section": _SECTION,
                "op_key": _TEXT, "op_columns": {}, "notes": _STRINGS, "sources": {},
                "recommendations": [{}], "files": {}}
ACK_SHAPE = {"nonce": _Required(_TEXT)}

def record_problem(record: Any, shape: dict[str, Any]) -> Optional[str]:
    """Why ``record`` does not have ``shape``, naming the first field that is wrong
    ('world_size is 10000000, not a whole number from 1 to 1048576'); None when it has."""
    if not isinstance(record, dict):
        return "it is not a JSON object"
    return misshapen(record, shape)
