"""A report dict as DataFrames: what `nsbridge.load(run_dir)` and a RunResult expose."""

from __future__ import annotations

import html
from typing import Any, Optional

import pandas as pd

from .. import schema as S
from .escape import terminal
from .wording import shown_verdict, trouble_lines, verdict_title


def ops(report: dict[str, Any]) -> pd.DataFrame:
    """One row per op: torch.profiler's columns and ``spread_pct`` (half the 95% interval of
    its time per step, percent), then each other pass's scalars as ``KEY_name`` columns
    (``nsys_*``, ``ncu_*``; lists such as ncu findings stay in the report)."""
    rows = []
    for op in report.get("ops", []):
        row = {c: op.get(c) for c in S.OP_COLUMNS}
        row[S.SPREAD_PCT] = op.get(S.SPREAD_PCT)
        for key, values in op.items():    # each other pass's numbers: nsys, ncu, ...
            if key in S.OP_COLUMNS or not isinstance(values, dict):
                continue
            for name, value in values.items():
                if not isinstance(value, (list, dict)):
                    row[f"{key}_{name}"] = value
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else S.OP_COLUMNS)


def kernels(report: dict[str, Any]) -> pd.DataFrame:
    """One row per (kernel, copy or memset name, op) in the measured window: op (None when
    no op launched it), kind (kernel, memcpy, memset), name, calls, device_us, bytes, and
    attribution: how it was tied to its op (external_id, launch_containment), or why not
    (outside_ops: launched between ops; launched_before_window: queued before the window
    opened); via (cuda_graph: run by a CUDA graph replay) and source (a torch.compile
    Triton kernel's generated file), None when the trace does not say. Every kernel of the
    window is here, attributed or not."""
    columns = ["op", "kind", "name", "calls", "device_us", "bytes", "attribution", "via",
               "source"]
    work = (report.get("device") or {}).get("work")
    if work is not None:
        return pd.DataFrame([{c: w.get(c) for c in columns} for w in work], columns=columns)
    rows = [{"op": op["name"], "kind": "kernel", "name": k["name"], "calls": k["calls"],
             "device_us": k["device_us"], "bytes": None, "attribution": None,
             "via": k.get("via"), "source": k.get("source")}
            for op in report.get("ops", []) for k in op.get("kernels") or []]
    rows += [{"op": op["name"], "kind": c["kind"], "name": c["name"], "calls": c["calls"],
              "device_us": c["device_us"], "bytes": c.get("bytes"), "attribution": None,
              "via": None, "source": None}
             for op in report.get("ops", []) for c in op.get("copies") or []]
    return pd.DataFrame(rows, columns=columns)


def steps(report: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame((report.get("steps") or {}).get("per_step") or [])


def sync_points(report: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(report.get("sync_points") or [])


def gaps(report: dict[str, Any]) -> pd.DataFrame:
    """GPU idle gaps from the torch trace (empty without a device)."""
    return pd.DataFrame((report.get("device") or {}).get("idle_gaps") or [])


def timeline_ops(report: dict[str, Any]) -> Optional[pd.DataFrame]:
    timeline = report.get("timeline")
    return pd.DataFrame(timeline["ops"]) if timeline else None


def timeline_gaps(report: dict[str, Any]) -> Optional[pd.DataFrame]:
    timeline = report.get("timeline")
    return pd.DataFrame(timeline["idle_gaps"]) if timeline else None


def ncu_kernels(report: dict[str, Any]) -> Optional[pd.DataFrame]:
    ncu = report.get("ncu")
    return pd.DataFrame(ncu["kernels"]) if ncu else None


def pass_ranks(report: dict[str, Any], section: str) -> Optional[pd.DataFrame]:
    """One row per rank of a pass run on several ranks (``section``: "timeline" or "ncu";
    ncu's per-op numbers flattened to ``OP.metric`` columns); None without one."""
    rows = (report.get(section) or {}).get("ranks")
    if not rows:
        return None
    flat = []
    for row in rows:
        out = {k: v for k, v in row.items() if k not in ("ops", "files", "attribution")}
        for op, numbers in (row.get("ops") or {}).items():
            out.update({f"{op}.{k}": v for k, v in numbers.items()})
        flat.append(out)
    return pd.DataFrame(flat)


def summary_html(report: dict[str, Any], run_dir: str, top: int = 10) -> str:
    """A notebook cell's view: status, error, verdict, evidence and the top ops (every
    string escaped, control characters shown as escapes)."""
    e = lambda s: html.escape(terminal(s))  # noqa: E731
    parts = [f"<div><b>nsbridge {e(report.get('command'))}</b>: <code>{e(report.get('target'))}"
             f"</code> [{e(report.get('status'))}] in <code>{e(run_dir)}</code>"]
    parts += [f"<p>{e(line)}</p>" for line in trouble_lines(report)]
    verdict = shown_verdict(report)
    if verdict:
        parts.append(f"<p>{e(verdict_title(report))}: <b>{e(verdict['label'])}</b></p><ul>"
                     + "".join(f"<li>{e(x)}</li>" for x in verdict.get("evidence", [])) + "</ul>")
    table = ops(report).head(top)
    if not table.empty:
        table = table.assign(name=table["name"].map(terminal))
        cols = [c for c in (S.NAME, S.CALLS, S.CPU_SELF_US, S.DEVICE_SELF_US, S.SELF_PCT)
                if c in table]
        parts.append(table[cols].to_html(index=False, escape=True, na_rep="-"))
    return "".join(parts) + "</div>"
