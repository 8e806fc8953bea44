"""One JSON document per command, for scripts and agents (``--format json``): what ran, how
it ended and what that exit code means, where the files are, and the headline of the
report (verdict and its confidence, top ops, sync points, recommendations with their
evidence), or the error with its kind and message. Its schema is answer.schema.json
(versioned by ``ANSWER_VERSION``); every figure is report.json's own, never recomputed."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from .. import schema as S
from ..errors import NsbridgeError
from ..schema.exit_codes import EXIT_CODES
from ..contract.report import Report, Steps

ANSWER_VERSION = 1
TOP_OPS = 10          # rows of each list in the headline; the files hold every row
TOP_SYNCS = 10


def schema() -> dict[str, Any]:
    """The JSON Schema every answer validates against (shipped with the package)."""
    text = files("nsbridge.agent").joinpath("answer.schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


SCRIPTS_OWN = next(row.meaning for row in EXIT_CODES if row.code == "the script's own")


def exit_meaning(code: int, script_failed: bool = False) -> str:
    """What an exit code means (schema/exit_codes.py's table); a script's own code
    (``script_failed``: the script failed, so a 1 is its own, not nsbridge's) and a
    signal's are said as such."""
    if script_failed and 0 < code <= 128:
        return SCRIPTS_OWN
    for row in EXIT_CODES:
        if row.code == str(code):
            return row.meaning
    if code > 128:
        return f"the script's process was killed by signal {code - 128}"
    return SCRIPTS_OWN


def run_answer(command: str, result: Any, top: int = TOP_OPS) -> dict[str, Any]:
    """The answer for a command that produced a run (``result``: a RunResult)."""
    report = result.report
    error = report.get("error") or {}
    script_failed = report.get("status") == "failed" and not error.get("pass")  # not a tool's
    return {**_head(command, str(report.get("status")), result.exit_code, script_failed),
            "run_dir": str(Path(result.run_dir).resolve()),
            "files": _files(Path(result.run_dir).resolve(), report),
            "headline": headline(report, top),
            "failure": result.failure,
            "error": None}


def error_answer(command: str, exc: BaseException) -> dict[str, Any]:
    """The answer for a command that could not do its job: the error's kind (its class in
    nsbridge.errors), its one-paragraph message (what happened and what to do)."""
    code = exc.exit_code if isinstance(exc, NsbridgeError) else 3
    return {**_head(command, "error", code), "run_dir": None, "files": {}, "headline": None,
            "failure": None,
            "error": {"kind": type(exc).__name__, "message": str(exc),
                      "bug": not isinstance(exc, NsbridgeError)}}


def doctor_answer(checks: list[Any]) -> dict[str, Any]:
    """`nsbridge doctor`'s checks, each with its level, detail and fix."""
    failed = any(c.level == "FAIL" for c in checks)
    return {**_head("doctor", "failed" if failed else "ok", 1 if failed else 0),
            "checks": [{"name": c.name, "level": c.level, "detail": c.detail, "fix": c.fix}
                       for c in checks]}


def comparison_answer(command: str, result: dict[str, Any], code: int) -> dict[str, Any]:
    """`diff`/`gate`: the comparison as `--format json` has always printed it, with the
    answer's head in front (``exit_code``: after --inconclusive's mapping)."""
    return {**result, **_head(command, str(result.get("outcome")), code)}


def headline(report: Report, top: int = TOP_OPS) -> dict[str, Any]:
    """What a reader looks at first, as report.json holds it."""
    verdict = report.get("verdict")
    ranked_by = report.get("ranked_by") or "cpu_self_us"
    steps: Steps = report.get("steps") or {"count": 0}
    return {
        "verdict": None if not verdict else {
            k: verdict.get(k) for k in ("label", "confidence", "evidence", "cannot_conclude",
                                        "alternatives", "settle", "contention")},
        "window": report.get("window"),
        "step_ms": (steps.get("spread") or None),
        "gpu_step_ms": (steps.get("gpu_done") or None),
        "ranked_by": ranked_by,
        "top_ops": [{"name": op["name"], "calls": op.get("calls"), ranked_by: op.get(ranked_by),
                     "self_pct": op.get("self_pct"), "spread_pct": op.get("spread_pct"),
                     "device_self_us": op.get("device_self_us")}
                    for op in (report.get("ops") or [])[:top]],
        "sync_points": [{k: p.get(k) for k in ("kind", "file", "line", "function", "op",
                                               "per_step", "placement", "host_ms",
                                               "gpu_idle_ms")}
                        for p in (report.get("sync_points") or [])[:TOP_SYNCS]],
        "recommendations": [{k: r.get(k) for k in ("id", "title", "why", "fix", "impact",
                                                   "addresses_verdict", "url")}
                            for r in report.get("recommendations") or []],
        "passes": [key for key in ("timeline", "ncu", "distributed") if report.get(key)],
        "notes": list(report.get("notes") or [])[:10],
    }


def _head(command: str, status: str, code: int, script_failed: bool = False) -> dict[str, Any]:
    return {"nsbridge_answer": ANSWER_VERSION, "command": command, "status": status,
            "exit_code": code, "exit_meaning": exit_meaning(code, script_failed)}


def _files(run_dir: Path, report: Report) -> dict[str, str]:
    found = {"report_json": S.REPORT_JSON, "report_md": S.REPORT_MD,
             "report_html": S.REPORT_HTML, "ops_csv": S.OPS_CSV, "manifest": S.MANIFEST_JSON}
    named = {k: v for k, v in (report.get("files") or {}).items() if isinstance(v, str)}
    return {k: str(run_dir / v) for k, v in {**found, **named}.items()
            if (run_dir / v).exists()}


def dumps(answer: dict[str, Any]) -> str:
    """The answer as printed: one JSON document, NaN written as null."""
    return json.dumps(_finite(answer), indent=1, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
