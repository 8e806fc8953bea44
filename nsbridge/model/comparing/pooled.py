"""Several processes of the same script (``triage --runs N``) pooled into one analysis.

Between-process variance is the largest noise on a shared machine: each process lands on
its own mix of other load, caches and clocks. Pooling keeps every measured step with the
run it came from, so intervals resample runs first (model.stats):

- steps: every run's per-step breakdown, with a ``run`` column (1..N);
- ops: totals summed over all runs (so a total divided by ``steps.count`` is still the time
  per step), as are the calls and time per shape, ``per_step_us`` the runs' per-step lists end to end, aligned with the steps
  (an op a run did not have counts 0 in that run's steps);
- the window: the measured steps (or trace seconds) of every run, with ``runs``;
- the verdict: the ladder on the pooled steps and ops; the device, sync, memory and kernel
  facts are the first run's (``lead``), as are the trace, key_averages and merged trace.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pandas as pd

from ... import schema as S
from ...profiles import Analysis
from ..analysis import TraceAnalysis
from ..host.ops import merge_shape_work
from ..judging.rules import recommend
from ..judging.verdict import data_share_of, decide, qualify
from ...contract.report import Machine, Window



def pool_ops(tables: list[pd.DataFrame], steps_per_run: list[int],
             has_device: bool) -> pd.DataFrame:
    """OPS frames of several runs: totals summed, per-step lists concatenated in run order."""
    frame = pd.concat(tables, ignore_index=True)
    table = frame.groupby("name", sort=False)[S.OP_SUMMED_COLUMNS].sum(min_count=1)
    firsts = frame.groupby("name", sort=False)[["shapes", "kernels", "copies"]].first()
    work = frame.groupby("name", sort=False)[S.SHAPE_WORK].apply(merge_shape_work)
    table = table.join(firsts).join(work).reset_index()
    lists = [dict(zip(t["name"], t[S.PER_STEP_US])) for t in tables]
    table[S.PER_STEP_US] = [
        [v for run, n in zip(lists, steps_per_run) for v in (run.get(name) or [0.0] * n)]
        for name in table["name"]]
    rank_col = S.DEVICE_SELF_US if has_device else S.CPU_SELF_US
    total = table[rank_col].sum()
    table[S.SELF_PCT] = 100.0 * table[rank_col] / total if total > 0 else 0.0
    table = table.sort_values([rank_col, S.CPU_TOTAL_US], ascending=False, kind="stable")
    return table[S.OP_COLUMNS].reset_index(drop=True)


def pool_analyses(analyses: list[TraceAnalysis], thresholds: Analysis,
                  machine: Optional[Machine] = None) -> TraceAnalysis:
    """One analysis of several runs of one script (see the module docstring)."""
    lead = analyses[0]
    if len(analyses) == 1 or lead.facts is None:
        return lead
    steps = pd.concat([a.steps.assign(run=i) for i, a in enumerate(analyses, 1)],
                      ignore_index=True)
    ops = pool_ops([a.ops for a in analyses], [len(a.steps) for a in analyses],
                   lead.has_device)
    facts = lead.facts
    busy = [a.facts.busy_pct for a in analyses if a.facts and a.facts.busy_pct is not None]
    verdict = decide(breakdown=steps, busy_pct=sum(busy) / len(busy) if busy else None,
                     cost=facts.sync_cost, sync_points=lead.sync_points, ops=ops,
                     has_device=lead.has_device, kernels_per_step=facts.kernels_per_step,
                     median_kernel_us=facts.median_kernel_us, thresholds=thresholds,
                     seconds=lead.window["seconds"] if lead.window["kind"] == "trace" else None,
                     host_ops_per_step=facts.host_ops_per_step)
    contention = (machine or {}).get("contention")
    verdict = qualify(verdict, breakdown=steps, thresholds=thresholds, machine=machine)
    pooled_facts = dataclasses.replace(facts, verdict=verdict["label"], ops=ops,
                                       data_share=data_share_of(verdict),
                                       contention=contention)
    window: Window = {**lead.window, "runs": len(analyses)}
    if window.get("kind") == "trace":
        window["seconds"] = round(sum(a.window.get("seconds") or 0.0 for a in analyses), 3)
    else:
        window["steps"] = len(steps)
    return dataclasses.replace(lead, ops=ops, steps=steps, verdict=verdict, window=window,
                               recommendations=recommend(pooled_facts), facts=pooled_facts)
