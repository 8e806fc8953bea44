"""Can two runs be compared at all? Checked before any number is.

Two levels. ``refusal`` names what diff will not compare at all, whatever the flags
(commands.diff raises it as DiffRefusedError, exit 5): a report of another schema version
or shape (every field diff reads is checked, with its type, before any is used); a run that did not finish
cleanly (any status but ``ok``: failed, timeout, interrupted, terminated, no-trace, or still
``running`` / cut off); one with nothing measured (no ops, no op time, no steps); a window
without steps (totals over windows that need not hold the same work); one measured on the
device while the other was not; and runs of different targets (scripts), unless ``allow``
has ``target``.

``problems`` names the differences that make an answer inconclusive: arguments, torch
version, device model, torch thread count or usable cores, real differences a user may
want to compare across (``allow`` names the kinds to accept). For reports that did not go
through ``refusal`` it also repeats its run and target checks, so that ``model.comparing.diff.compare``
never calls such runs fine. Contended runs are not a problem here: the comparison widens
its noise for them and says so (model.comparing.diff).
"""

from __future__ import annotations

import shlex
from pathlib import PurePath
from typing import Any, Iterable, NamedTuple, Optional

from ... import schema as S
from ...contract.check import shape_problem, status_problem
from ...contract.comparison import Blocker
from ...schema.shape import describe
from ...contract.report import Report, as_report

ALLOWABLE = ("target", "args", "torch", "gpu", "threads", "cores")
SIDES = ("base", "new")


class _Problem(NamedTuple):
    """What is wrong with one run, and what to do about it (``{side}``, ``{account}``:
    the side's name and where its own account is)."""

    text: str
    fix: str


def refusal(a: Any, b: Any, *, labels: tuple[str, str], schema_version: int,
            allow: Iterable[str] = ()) -> Optional[str]:
    """One paragraph on why base ``a`` and new ``b`` cannot be compared (``labels``: where
    each was read from), or None when they can; ``schema_version`` is the one nsbridge
    writes."""
    found = [(side, label, p) for side, label, report in zip(SIDES, labels, (a, b))
             if (p := _unusable(report, schema_version))]
    if found:
        fixes = [_fix(p.fix, side, label) for side, label, p in found]
        return refused([(f"the {side} run ({label})", p.text) for side, label, p in found],
                       list(dict.fromkeys(fixes)))   # a fix both sides need is said once
    pair = _timed_apart(a, b) or (None if "target" in set(allow) else _other_target(a, b))
    if pair is None:
        return None
    return refused([(f"the base run ({labels[0]}) and the new run ({labels[1]})", pair.text)],
                   [pair.fix])


def refused(what: list[tuple[str, str]], fixes: list[str]) -> str:
    """The refusal paragraph: each (run, what is wrong with it), then what to do."""
    wrong = "; and ".join(f"{who} {text}" for who, text in what)
    return f"diff refused, nothing was compared: {wrong}. " + " ".join(fixes)


def no_report(side: str, label: str) -> str:
    """The refusal of a run directory without a readable report.json."""
    return refused([(f"the {side} run ({label})", "has no readable report.json: the run is "
                     "still being written, or was cut off before it wrote one")],
                   [f"Wait for it to finish, or rerun the {side} side."])


def problems(a: Report, b: Report,
             allow: Iterable[str] = ()) -> list[Blocker]:
    """[{kind, text}] of what makes A and B not comparable (``allow``ed kinds left out)."""
    found: list[Blocker] = [{"kind": "status", "text": f"{which} {p.text}"}
             for which, report in (("base run A", a), ("new run B", b))
             if (p := _unfinished(report))]
    if found:
        return found
    allowed = set(allow)
    for kind, pair in (("device", _timed_apart(a, b)), ("target", _other_target(a, b))):
        if pair is not None and kind not in allowed:
            found.append({"kind": kind, "text": f"the runs {pair.text}"})
    _, args_a = _split(a.get("target"))
    _, args_b = _split(b.get("target"))
    checks = [("args", args_a, args_b, "the script ran with different arguments"),
              ("torch", _env(a, "torch"), _env(b, "torch"), "different torch versions"),
              ("gpu", _env(a, "gpus"), _env(b, "gpus"), "different GPUs"),
              ("threads", _threads(a), _threads(b), "torch used different intra-op thread "
                                                   "counts"),
              ("cores", _cores(a), _cores(b), "different numbers of usable cores")]
    for kind, va, vb, what in checks:
        if kind not in allowed and va is not None and vb is not None and va != vb:
            found.append({"kind": kind, "text": f"{what} ({_show(va)} vs {_show(vb)})"})
    return found


def _unusable(report: Any, schema_version: int) -> Optional[_Problem]:
    """Why one run cannot be compared with any other, or None."""
    again = "Make the {side} run again with this nsbridge."
    if not isinstance(report, dict):
        return _Problem(f"has a report.json of another shape: it is {describe(report)}, "
                        "not an object", again)
    version = report.get("schema_version")
    if version != schema_version or isinstance(version, bool):
        had = ("no schema_version" if version is None
               else f"schema_version {describe(version)}")
        return _Problem(f"has a report.json with {had}; this nsbridge reads schema_version "
                        f"{schema_version}", "Make both runs with the same nsbridge version.")
    bad = status_problem(report)
    if not bad:
        stopped = _stopped(as_report(report))
        if stopped:
            return stopped             # a run that stopped early need not have the rest
        bad = shape_problem(report) or _mismatched(as_report(report))
    if bad:
        return _Problem(f"has a report.json of another shape: {bad}", again)
    return _empty(as_report(report))


def _unfinished(report: Report) -> Optional[_Problem]:
    """Why a run's numbers are not a measurement of its script, or None."""
    return _stopped(report) or _empty(report)


def _stopped(report: Report) -> Optional[_Problem]:
    """Why a run did not finish cleanly (any status but ok), or None."""
    status = report.get("status")
    if status == "running":
        return _Problem("is still running, or was cut off before it finished (status "
                        "'running')", "Wait for it to finish, or rerun the {side} side.")
    if status != "ok":
        err = report.get("error") or {}
        detail = f": {err.get('type')}: {err.get('message')}" if err.get("type") else ""
        return _Problem(f"did not finish cleanly (status '{status}'{detail})",
                        "Rerun the {side} side; its own error is in {account}.")
    return None


def _empty(report: Report) -> Optional[_Problem]:
    """Why a finished run has nothing to compare, or None."""
    key = report.get("ranked_by")
    if not report.get("ops"):
        return _Problem("has no ops to compare: nothing was measured",
                        "Rerun the {side} side; {account} says what it recorded.")
    if key is None:
        return _Problem("has no torch.profiler op times (ranked_by is null: a run of the "
                        "timeline or deep pass alone)", "Compare runs of nsbridge triage, or "
                        "of nsbridge analyze on torch.profiler traces.")
    if not any(op.get(key) for op in report["ops"]):
        return _Problem(f"measured no time in any op (every {key} is 0 or null)",
                        "Rerun the {side} side; {account} says what it recorded.")
    steps = report.get("steps")
    if not (steps and steps.get("count")):
        return _Problem("has no measured steps", "Rerun the {side} side with steps to "
                        "measure (a profile with schedule.active: 10).")
    window = report.get("window") or {}
    if window.get("kind") == "trace":
        return _Problem(f"has no training steps: its figures are totals over a "
                        f"{window.get('seconds') or 0:.2f} s window, and two windows do not hold "
                        "the same work", "Mark steps with nsbridge.step(), or compare "
                        "--window steps reports.")
    return None


def _timed_apart(a: Report, b: Report) -> Optional[_Problem]:
    """Why two runs' op times are different quantities, or None."""
    if (a.get("ranked_by") == S.DEVICE_SELF_US) == (b.get("ranked_by") == S.DEVICE_SELF_US):
        return None
    return _Problem("were timed differently: one measured GPU time and the other did not, so "
                    "their op times are different quantities", "Compare two runs made on the "
                    "same kind of machine (both with a GPU, or both without).")


def _other_target(a: Report, b: Report) -> Optional[_Problem]:
    """Why two runs profiled different scripts, or None."""
    script_a, script_b = (_split(r.get("target"))[0] for r in (a, b))
    if script_a is None or script_b is None or PurePath(script_a) == PurePath(script_b):
        return None
    return _Problem(f"profiled different targets ({script_a} vs {script_b})",
                    "If you mean to compare different scripts, pass --allow-different-target.")


def _fix(text: str, side: str, label: str) -> str:
    path = PurePath(label)
    account = path.with_name(S.REPORT_MD) if path.suffix == ".json" else path / S.REPORT_MD
    return text.format(side=side, account=account)


def _mismatched(report: Report) -> Optional[str]:
    """Lists diff pairs up whose lengths differ, as 'FIELD has N entries for M ...'; None
    when they match."""
    steps = report.get("steps")
    if not steps:
        return None
    runs, walls = steps.get("unprofiled_runs"), steps.get("unprofiled_ms") or []
    if runs and len(runs) != len(walls):
        return (f"steps.unprofiled_runs has {len(runs)} entries for {len(walls)} "
                "steps.unprofiled_ms")
    return None


# --- the comparable facts ----------------------------------------------------------------


def _split(target: Optional[str]) -> tuple[Optional[str], Optional[tuple[str, ...]]]:
    if not target:
        return None, None
    try:
        parts = shlex.split(target)
    except ValueError:
        parts = target.split()
    return (parts[0], tuple(parts[1:])) if parts else (None, None)


def _env(report: Report, key: str) -> Any:
    value = (report.get("environment") or {}).get(key)
    return tuple(value) if isinstance(value, list) else value


def _threads(report: Report) -> Optional[float]:
    return ((report.get("machine") or {}).get("threads") or {}).get("intra_op")


def _cores(report: Report) -> Optional[float]:
    return ((report.get("machine") or {}).get("cores") or {}).get("usable")


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(map(str, value)) or "(none)"
    return str(value)
