"""The shape of report.json: each field nsbridge's readers use (``load``'s frames, ``diff``,
``gate``), what it must be, and the check that names the first field that is not. A
report.json is untrusted input: a file edited by hand, cut off, or written by another
version; every reader checks it here before using a field.

Numbers must be finite, 0 or more, and below ``HUGE`` (a 401-digit integer is not a
time); a list is a list (never null where a reader iterates it).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, NamedTuple, Optional

from . import columns as S
from .report import (MEMORY_SECTION, NCU_SECTION, OP_GROUPS_SECTION, SCHEMA_VERSION,
                     TIMELINE_SECTION)

__all__ = ["HUGE", "REPORT_SHAPE", "STATUS_SHAPE", "Misshapen", "describe", "misshapen",
           "report_problem"]

HUGE = 1e18   # above any count, byte size or microsecond total a run can hold


class Misshapen(Exception):
    """A field a reader uses is missing or of the wrong type."""


class _Atom(NamedTuple):
    """A leaf of the shape: what it must be, and the test."""

    what: str
    test: Callable[[Any], bool]


class _Required(NamedTuple):
    """A field that must be present (not missing, not null)."""

    shape: Any


def _is_number(value: Any) -> bool:
    """A finite number of 0 or more, below HUGE (an int too long for a float is not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value) and 0 <= value < HUGE
    except OverflowError:
        return False


def _is_signed(value: Any) -> bool:
    return _is_number(abs(value)) if isinstance(value, (int, float)) else False


_ANY = _Atom("anything", lambda v: True)
_TEXT = _Atom("a string", lambda v: isinstance(v, str))
_NAME = _Atom("a non-empty string", lambda v: isinstance(v, str) and bool(v))
_FLAG = _Atom("true or false", lambda v: isinstance(v, bool))
_NUMBER = _Atom("a number of 0 or more", _is_number)
_POSITIVE = _Atom("a number above 0", lambda v: _is_number(v) and v > 0)
_SIGNED = _Atom("a finite number", _is_signed)
_RANKING = _Atom('"cpu_self_us" or "device_self_us"',
                 lambda v: v in (S.RANKED_BY_HOST, S.RANKED_BY_DEVICE))

# The fields the readers use (report.frames for load, model.comparing.diff,
# report.render.diff_render) and what each must be: a dict is an object with those keys, a one-item list a list of such
# items, an atom a leaf; every field may be missing or null unless _Required.
_OP = {S.NAME: _Required(_NAME), S.CALLS: _NUMBER, S.CPU_SELF_US: _NUMBER,
       S.CPU_TOTAL_US: _NUMBER, S.DEVICE_SELF_US: _NUMBER, S.DEVICE_TOTAL_US: _NUMBER,
       S.MEM_MIB: _SIGNED, S.MEM_NET_MIB: _SIGNED, S.SELF_PCT: _NUMBER,
       S.SHAPES: [_ANY], S.PER_STEP_US: [_NUMBER],
       S.KERNELS: [{"name": _Required(_TEXT)}], S.COPIES: [{"name": _Required(_TEXT)}],
       S.SHAPE_WORK: [{"shape": _Required(_TEXT), "calls": _Required(_NUMBER),
                       "us": _Required(_NUMBER)}]}
_STEPS = {"count": _Required(_NUMBER),
          "per_step": [{"wall_ms": _Required(_POSITIVE), "run": _NUMBER, "cpu_ms": _NUMBER,
                        "wait_ms": _NUMBER, "probe_ms": _NUMBER, "gpu_done_ms": _NUMBER}],
          "unprofiled_ms": [_POSITIVE], "unprofiled_runs": [_NUMBER],
          "unprofiled_wait_ms": [_NUMBER]}
_MACHINE = {"cores": {"usable": _NUMBER, "logical": _NUMBER},
            "threads": {"intra_op": _NUMBER, "inter_op": _NUMBER},
            "load": {"before": [_NUMBER], "after": [_NUMBER]}, "steal_share": _NUMBER,
            "measured_steps": {"wait_ms_per_step": _NUMBER, "wait_share": _NUMBER,
                               "cpu_per_wall": _NUMBER, "nivcsw_per_step": _NUMBER},
            "cgroup_throttling": {"throttled": _NUMBER}, "contention": {"contended": _FLAG},
            "gpu": [{"index": _Required(_ANY), "throttle_reasons": [_TEXT],
                     "other_processes": [_ANY]}]}
_LIST = _Atom("a list", lambda v: isinstance(v, list))   # of values a frame converts
_ROWS: list[Any] = [{}]    # a list of objects: the rows of one of load's frames
_PASS_RANKS: list[Any] = [{"ops": {}}]   # a pass run on several ranks: per rank, its ops' numbers
STATUS_SHAPE = {"status": _Required(_TEXT), "error": {}}
REPORT_SHAPE = {**STATUS_SHAPE, "target": _Required(_TEXT), "ranked_by": _RANKING,
                "ops": _Required([_OP]), "steps": _STEPS,
                "window": {"kind": _TEXT, "seconds": _NUMBER},
                "verdict": {"label": _Required(_TEXT), "evidence": [_ANY],
                            "alternatives": [{"label": _TEXT, "why": _TEXT}],
                            "cannot_conclude": [_ANY], "settle": [_ANY]},
                "environment": {"torch": _TEXT, "gpus": [_ANY]},
                "machine": _MACHINE,
                "sync_points": _Required([{"kind": _Required(_TEXT), "file": _TEXT,
                                           "op": _TEXT, "line": _ANY, "count": _NUMBER}]),
                "device": {"work": _ROWS, "idle_gaps": _ROWS},
                OP_GROUPS_SECTION: {"by_shape": _ROWS, "by_source": _ROWS},
                MEMORY_SECTION: {"points": {"t_ms": _LIST, "allocated_mib": _LIST,
                                            "reserved_mib": _LIST}},
                TIMELINE_SECTION: {"ops": _ROWS, "idle_gaps": _ROWS, "ranks": _PASS_RANKS},
                NCU_SECTION: {"kernels": _ROWS, "ranks": _PASS_RANKS}}
# a run that did not finish: whatever it holds has its shape, nothing is required
PARTIAL_SHAPE = {key: (value.shape if isinstance(value, _Required) else value)
                 for key, value in REPORT_SHAPE.items() if key != "status"}


def misshapen(report: dict[str, Any], shape: dict[str, Any]) -> Optional[str]:
    """The first field of ``report`` that does not have ``shape``, as 'FIELD is X, not Y';
    None when all do."""
    try:
        conform(report, shape, "")
    except Misshapen as bad:
        return str(bad)
    return None


def conform(value: Any, shape: Any, field: str) -> None:
    """Raise Misshapen naming ``field`` where ``value`` is not of ``shape``."""
    if isinstance(shape, _Required):
        if value is None:
            raise Misshapen(f"{field} is missing")
        shape = shape.shape
    if value is None:
        return
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise Misshapen(f"{field} is {describe(value)}, not an object")
        for key, inner in shape.items():
            conform(value.get(key), inner, f"{field}.{key}" if field else key)
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise Misshapen(f"{field} is {describe(value)}, not a list")
        for i, item in enumerate(value):
            conform(item, _Required(shape[0]), f"{field}[{i}]")
    elif not shape.test(value):
        raise Misshapen(f"{field} is {describe(value)}, not {shape.what}")


def describe(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def report_problem(report: Any, schema_version: int = SCHEMA_VERSION) -> Optional[str]:
    """Why ``report`` is not a report.json this nsbridge reads, naming the first field that
    is wrong ('ops[3].calls is "x", not a number of 0 or more'); None when it is one. A run
    that did not finish need only have its status right."""
    if not isinstance(report, dict):
        return f"it is {describe(report)}, not an object"
    version = report.get("schema_version")
    if version != schema_version or isinstance(version, bool):
        had = "no schema_version" if version is None else f"schema_version {describe(version)}"
        return f"it has {had}; this nsbridge reads schema_version {schema_version}"
    return misshapen(report, STATUS_SHAPE) or misshapen(
        report, REPORT_SHAPE if report.get("status") == "ok" else PARTIAL_SHAPE)
