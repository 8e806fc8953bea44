"""The check of a report.json against its declared types (contract.report): the first
field that is wrong, in words ('ops[3].calls is "x", not a number of 0 or more'). A
report.json is untrusted input (edited by hand, cut off, written by another version), and
every reader (``load``, ``diff``, ``gate``, ``analyze RUN_DIR``, the agent) checks it here
before using a field.

``undeclared_keys`` is the other direction, for nsbridge's own reports and answers: the
keys a report (or a comparison, contract.comparison) holds that the types do not declare
(a field added in one place only); ``held_to_types`` raises on either, where the test
suite asks for it (``STRICT_REPORTS``).
"""

from __future__ import annotations

import os
import re
import typing
from typing import Any, Mapping, Optional

import msgspec

from ..schema.report import OK, SCHEMA_VERSION
from ..schema.shape import describe
from .introspect import bare, expected, hints, is_typed_dict, member
from .report import FINISHED_KEYS, Report, ReportStatus

__all__ = ["STRICT_REPORTS", "held_to_types", "report_problem", "shape_problem",
           "status_problem", "typed_problem", "undeclared_keys", "undeclared_problem"]

# set in the environment to a process id, every report.json that process writes, and every
# comparison it answers, is checked against its types first, undeclared keys included: how
# the test suite holds what it runs in its own process to the types (processes it starts
# inherit it and are not held)
STRICT_REPORTS = "NSBRIDGE_STRICT_REPORTS"


_AT = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def report_problem(report: Any, schema_version: int = SCHEMA_VERSION) -> Optional[str]:
    """Why ``report`` is not a report.json this nsbridge reads, naming the first field that
    is wrong; None when it is one. A run that did not finish need have only what it holds
    right."""
    if not isinstance(report, dict):
        return f"it is {describe(report)}, not an object"
    version = report.get("schema_version")
    if version != schema_version or isinstance(version, bool):
        had = "no schema_version" if version is None else f"schema_version {describe(version)}"
        return f"it has {had}; this nsbridge reads schema_version {schema_version}"
    return status_problem(report) or shape_problem(report)


def status_problem(report: Mapping[str, Any]) -> Optional[str]:
    """The first of ``status`` and ``error`` that is wrong, or None."""
    return _problem(report, ReportStatus)


def shape_problem(report: Mapping[str, Any]) -> Optional[str]:
    """The first field of ``report`` not of its declared type, or a key a finished report
    lacks; None when all are right."""
    problem = _problem(report, Report)
    if problem or report.get("status") != OK:
        return problem
    return next((f"{key} is missing" for key in FINISHED_KEYS if report.get(key) is None), None)


def typed_problem(value: Any, declared: Any) -> Optional[str]:
    """Why ``value`` is not of the TypedDict ``declared`` (the first wrong field, in
    words), or None."""
    if not isinstance(value, dict):
        return f"it is {describe(value)}, not an object"
    return _problem(value, declared)


def _problem(value: Mapping[str, Any], declared: Any) -> Optional[str]:
    try:
        msgspec.convert(value, declared)
    except msgspec.ValidationError as error:
        return _in_words(str(error), value, declared)
    return None


def _in_words(message: str, report: Mapping[str, Any], declared: Any) -> str:
    """msgspec's 'Expected `float`, got `str` - at `$.ops[3].calls`' as 'ops[3].calls is
    "x", not a number'."""
    at = _AT.search(message)
    path = at.group("path") if at else ""
    what = message[:at.start()] if at else message
    missing = re.match(r"Object missing required field `(.+)`", what)
    if missing:
        path = f"{path}.{missing.group(1)}"
    field = path.lstrip(".") or "the report"
    value, kind = _follow(report, declared, path)
    if missing or value is None:
        return f"{field} is missing"
    return f"{field} is {describe(value)}, not {expected(kind)}"


def _follow(value: Any, kind: Any, path: str) -> tuple[Any, Any]:
    """The value at ``path`` in ``value``, and its declared type in ``kind``."""
    for key, index in _PART.findall(path):
        kind = member(bare(kind), key or None)
        try:
            value = value[int(index)] if index else value.get(key)
        except (AttributeError, IndexError, KeyError, TypeError):
            value = None
    return value, kind


def undeclared_problem(report: Mapping[str, Any]) -> Optional[str]:
    """Why ``report``, about to be written, does not match contract.report: a field of the
    wrong type or a key they do not declare; None when it matches."""
    extra = undeclared_keys(report)
    return report_problem(report) or (
        f"{', '.join(extra[:5])} not declared in nsbridge/contract/report.py" if extra else None)


def undeclared_keys(value: Mapping[str, Any], declared: Any = Report) -> list[str]:
    """The paths of keys in ``value`` that its ``declared`` type (a report by default) does
    not declare ('timeline.ranks[0].nvtx'), first seen first."""
    found: list[str] = []
    _undeclared(value, declared, "", found)
    return found


def held_to_types(value: Mapping[str, Any], declared: Any, what: str,
                  copied: tuple[str, ...] = ()) -> None:
    """In a process the test suite holds to the types (``STRICT_REPORTS``): raise when
    ``value`` has a field of another type than ``declared`` says, or a key it does not
    declare; ``copied``: top-level keys whose values are copied from a report.json read
    back (a report is refused keys it does not declare where it is written, not where it is
    read). Elsewhere nothing is checked.

    Raises:
        AssertionError: ``value`` does not match (a key added in one place only).
    """
    if os.environ.get(STRICT_REPORTS) != str(os.getpid()):
        return
    problem = (report_problem(value) if declared is Report else _problem(value, declared))
    extra = [path for path in undeclared_keys(value, declared)
             if path.split(".")[0].split("[")[0] not in copied]
    if problem or extra:
        raise AssertionError(f"{what} does not match its types: "
                             f"{problem or ', '.join(extra[:5]) + ' not declared'}")


def _undeclared(value: Any, kind: Any, path: str, found: list[str]) -> None:
    kind = bare(kind)
    if isinstance(value, dict) and is_typed_dict(kind):
        declared = hints(kind)
        for key, inner in value.items():
            where = f"{path}.{key}" if path else key
            if key not in declared:
                found.append(where)
            else:
                _undeclared(inner, declared[key], where, found)
    elif isinstance(value, list) and typing.get_origin(kind) is list:
        for i, item in enumerate(value):
            _undeclared(item, typing.get_args(kind)[0], f"{path}[{i}]", found)
