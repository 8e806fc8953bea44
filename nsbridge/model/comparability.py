"""Can two runs be compared at all? Checked before any number is.

Each check yields a problem with a ``kind``. Two kinds can never be waved through: a run
that did not finish cleanly (failed, stopped, still running or cut off, no steps or no
ops, a window without steps: totals over windows that need not hold the same work) and
one measured on the device while the other was not. The others (a different
script, arguments, torch version, device model, torch thread count or usable cores) are
real differences a user may want to compare across: ``allow`` names the kinds to accept.
Contended runs are not a problem here: the comparison widens its noise for them and says
so (model.diff).
"""

from __future__ import annotations

import shlex
from typing import Any, Iterable, Optional

ALLOWABLE = ("target", "args", "torch", "gpu", "threads", "cores")


def problems(a: dict[str, Any], b: dict[str, Any],
             allow: Iterable[str] = ()) -> list[dict[str, str]]:
    """[{kind, text}] of what makes A and B not comparable (``allow``ed kinds left out)."""
    found = [*_finished(a, "base run A"), *_finished(b, "new run B")]
    if found:
        return found
    allowed = set(allow)
    if (a.get("ranked_by") == "device_self_us") != (b.get("ranked_by") == "device_self_us"):
        found.append({"kind": "device", "text": "one run measured GPU time and the other did "
                      "not: their op times are different quantities"})
    script_a, args_a = _split(a.get("target"))
    script_b, args_b = _split(b.get("target"))
    checks = [("target", script_a, script_b, "they ran different scripts"),
              ("args", args_a, args_b, "the script ran with different arguments"),
              ("torch", _env(a, "torch"), _env(b, "torch"), "different torch versions"),
              ("gpu", _env(a, "gpus"), _env(b, "gpus"), "different GPUs"),
              ("threads", _threads(a), _threads(b), "torch used different intra-op thread "
                                                   "counts"),
              ("cores", _cores(a), _cores(b), "different numbers of usable cores")]
    for kind, va, vb, what in checks:
        if kind not in allowed and va is not None and vb is not None and va != vb:
            found.append({"kind": kind, "text": f"{what} ({_show(va)} vs {_show(vb)})"})
    return found


def _finished(report: dict[str, Any], which: str) -> list[dict[str, str]]:
    status = report.get("status")
    if status == "running":
        return [{"kind": "status", "text": f"{which} is still running or was cut off before "
                 "it finished (status 'running')"}]
    if status != "ok":
        err = report.get("error") or {}
        detail = f": {err.get('type')}: {err.get('message')}" if err.get("type") else ""
        return [{"kind": "status", "text": f"{which} did not finish cleanly (status "
                 f"'{status}'{detail})"}]
    if not report.get("ops"):
        return [{"kind": "status", "text": f"{which} has no ops to compare"}]
    if not (report.get("steps") or {}).get("count"):
        return [{"kind": "status", "text": f"{which} has no measured steps"}]
    window = report.get("window") or {}
    if window.get("kind") == "trace":
        return [{"kind": "status", "text": f"{which} has no training steps: its figures are "
                 f"totals over a {window.get('seconds', 0):.2f} s window, and two windows do "
                 "not hold the same work (mark steps with nsbridge.step(), or compare "
                 "--window steps reports)"}]
    return []


def _split(target: Optional[str]) -> tuple[Optional[str], Optional[tuple[str, ...]]]:
    if not target:
        return None, None
    try:
        parts = shlex.split(target)
    except ValueError:
        parts = target.split()
    return (parts[0], tuple(parts[1:])) if parts else (None, None)


def _env(report: dict[str, Any], key: str) -> Any:
    value = (report.get("environment") or {}).get(key)
    return tuple(value) if isinstance(value, list) else value


def _threads(report: dict[str, Any]) -> Optional[int]:
    return ((report.get("machine") or {}).get("threads") or {}).get("intra_op")


def _cores(report: dict[str, Any]) -> Optional[int]:
    return ((report.get("machine") or {}).get("cores") or {}).get("usable")


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(map(str, value)) or "(none)"
    return str(value)
