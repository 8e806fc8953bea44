"""report.json: the contract other commands and users read (documented in docs/reference/report-json.md)."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, cast

import pandas as pd

from ... import schema as S
from ...model.device import tensor_cores
from ...model.analysis import TraceAnalysis, mean_step
from ...model.stats import mean_half_widths_pct, summary
from ...schema.records import ChildStep
from ...contract.report import (Environment, Error, Files, Machine, Memory, Op, Overhead,
                                Report, Steps, StepsPerStep, TensorCoreMark, as_report,
                                empty_report)

SCHEMA_VERSION = S.SCHEMA_VERSION   # re-exported: diff and the readers check it
# statuses of a run stopped from outside: what it measured before it stopped still stands
STOPPED = {"timeout": "stopped by --timeout", "interrupted": "interrupted (Ctrl-C)",
           "terminated": "stopped by SIGTERM"}


def build_report(*, command: str, target: str, status: str, analysis: Optional[TraceAnalysis],
                 step_source: Optional[str], overhead: Optional[Overhead],
                 files: Files, notes: list[str], has_memory: bool,
                 error: Optional[Error] = None, version: str = "",
                 machine: Optional[Machine] = None,
                 child_steps: Optional[Sequence[ChildStep]] = None,
                 environment: Optional[Environment] = None) -> Report:
    """Assemble the report dict. Device fields are None (null), never 0, without a device;
    ``verdict`` is None and ``recommendations`` empty when nothing was measured
    (``measured_anything``) or the run concludes nothing (``conclusive``).

    ``machine``: model.judging.contention.machine_facts; ``child_steps``: every step the profiled
    process timed (its unprofiled ones give ``steps.unprofiled``). The whole is checked
    against the report's types where it is written (run.Run.write_records)."""
    report = empty_report(command=command, target=target, version=version, status=status)
    report.update({"error": error, "overhead": overhead, "machine": machine,
                   "environment": environment, "files": files, "notes": list(notes)})
    if analysis is None:
        return cleaned(report)
    has_device = analysis.has_device
    report["verdict"] = analysis.verdict
    report["window"] = analysis.window
    report["ranked_by"] = S.RANKED_BY_DEVICE if has_device else S.RANKED_BY_HOST
    report["ops"] = _with_spread(_op_rows(analysis.ops), _runs(analysis.steps))
    marks = _tensor_core_marks(report["ops"], analysis,
                               dict((environment or {}).get("math") or {}))
    if marks:
        report[S.TENSOR_CORES_SECTION] = tensor_cores.summary(marks)
    bare_ms, bare_runs, bare_wait = _unprofiled(child_steps)
    per_step = _with_clock(_numbered(_step_rows(analysis.steps.round(3))), child_steps)
    steps: Steps = {
        "detected_by": step_source or _step_source(analysis.steps),
        "count": int(len(analysis.steps)),
        "per_step": per_step,
        "mean": mean_step(analysis.steps),
        "spread": summary(analysis.steps["wall_ms"], _runs(analysis.steps)),
        "unprofiled": summary(bare_ms, bare_runs),
        "unprofiled_ms": bare_ms,
        "unprofiled_runs": bare_runs,
        "unprofiled_wait_ms": bare_wait,
    }
    if "gpu_done_ms" in analysis.steps:
        done = analysis.steps["gpu_done_ms"].dropna()
        steps["gpu_done"] = summary(done.tolist(), _runs(analysis.steps.loc[done.index]))
    report["steps"] = steps
    report["device"] = analysis.device if has_device else None
    if analysis.memory:
        report[S.MEMORY_SECTION] = _renumbered(analysis.memory, analysis.steps, per_step)
    if analysis.op_groups and (analysis.op_groups["by_shape"] or analysis.op_groups["by_source"]):
        report[S.OP_GROUPS_SECTION] = analysis.op_groups
    report["sync_points"] = analysis.sync_points
    report["recommendations"] = analysis.recommendations
    report["collectives"] = analysis.collectives
    report["sources"] = _sources(has_device, has_memory, step_source is not None,
                                 overhead is not None)
    if not (measured_anything(report) and conclusive(report)):
        report["verdict"], report["recommendations"] = None, []
    return cleaned(report)


def cleaned(report: Report) -> Report:
    """The report as written: NaN as null, numpy numbers as Python's, floats rounded
    (clean)."""
    return as_report(clean(report))


def _tensor_core_marks(ops: list[Op], analysis: TraceAnalysis,
                       settings: dict[str, Any]) -> dict[str, TensorCoreMark]:
    """Mark each matmul, convolution and attention op (``ops[].tensor_cores``, set here)
    with its Tensor Core eligibility, once per chain of calls: on a GPU run the ops that
    launched kernels themselves, on a CPU run those that did most of their work
    themselves (a wrapper such as aten::linear or aten::conv2d is marked through the op
    it calls); returns the marks by op."""
    marks = {}
    for op in ops:
        wrapper = (not op.get(S.KERNELS) if analysis.has_device      # its children launch
                   else (op.get(S.CPU_SELF_US) or 0) < 0.5 * (op.get(S.CPU_TOTAL_US) or 0))
        if not tensor_cores.is_tensor_core_op(op[S.NAME]) or wrapper:
            continue
        found = tensor_cores.mark(op, analysis.input_types.get(op[S.NAME]), settings,
                                  analysis.has_device)
        if found is not None:
            op[S.TENSOR_CORES_SECTION] = marks[op[S.NAME]] = found
    return marks


def conclusive(report: Report) -> bool:
    """Whether a report's verdict and recommendations stand: the run ended ok, or was
    stopped from outside (``STOPPED``) after at least one complete measured step (a
    partial run). A run that failed, recorded no trace, or was stopped before its first
    measured step concludes nothing; its figures are only what was kept."""
    status = report.get("status")
    return status == "ok" or (status in STOPPED and measured_steps(report) > 0)


def measured_anything(report: Report) -> bool:
    """Whether the report's window holds an op or any GPU work (a trace of kernels alone
    still shows how busy the device was)."""
    return bool(report.get("ops") or (report.get("device") or {}).get("work"))


def measured_steps(report: Report) -> int:
    """The complete steps the report's window holds (0 for a window without steps)."""
    window = report.get("window") or {}
    return int(window.get("steps") or 0) if window.get("kind") == "steps" else 0


def _with_spread(ops: list[Op], groups: Optional[list[Any]]) -> list[Op]:
    """Each op with ``spread_pct``: half the 95% interval of its time per step, in percent
    of it (None when the steps do not line up, or fewer than two)."""
    width = max((len(op.get(S.PER_STEP_US) or []) for op in ops), default=0)
    aligned = [op for op in ops if len(op.get(S.PER_STEP_US) or []) == width]
    spreads = dict(zip((op["name"] for op in aligned), mean_half_widths_pct(
        [op.get(S.PER_STEP_US) or [] for op in aligned], groups if groups and len(groups) == width
        else None)))
    return [{**op, S.SPREAD_PCT: spreads.get(op[S.NAME])} for op in ops]


def _with_clock(per_step: list[StepsPerStep],
                child_steps: Optional[Sequence[ChildStep]]) -> list[StepsPerStep]:
    """Each measured step with the profiled process's own clock of it: ``cpu_ms`` (CPU
    time of all its threads), ``wait_ms`` (time its threads waited for a CPU) and, where the
    profile asked for it, ``probe_ms`` (the speed probe run as it began), when the
    process timed exactly these steps (its measured steps, in order); ``step`` is then the
    process's number of it, the one nsbridge's NVTX ``step N`` ranges, the nsys and ncu
    passes and child.json use (torch's ProfilerStep#N counts from another start)."""
    measured = [s for s in child_steps or [] if s.get("phase") == "active"]
    if len(measured) != len(per_step):
        return per_step
    clocked = []
    for step, clock in zip(per_step, measured):
        row: StepsPerStep = {**step, "cpu_ms": clock.get("cpu_ms"),
                             "wait_ms": clock.get("wait_ms")}
        row["step"] = clock.get("index", step["step"]) if step.get("step") is not None else None
        if "probe_ms" in clock:
            row["probe_ms"] = clock["probe_ms"]
        clocked.append(row)
    return clocked


def _renumbered(memory: Memory, steps: pd.DataFrame,
                per_step: list[StepsPerStep]) -> Memory:
    """The memory section with its peak's step in the report's numbering (per_step)."""
    numbers = dict(zip(steps["step"].tolist(), (s["step"] for s in per_step)))
    peak = memory.get("peak_step")
    return {**memory, "peak_step": numbers.get(peak, peak)} if peak is not None else memory


def _unprofiled(child_steps: Optional[Sequence[ChildStep]]
                ) -> tuple[list[float], list[int], list[Optional[float]]]:
    """Wall times of the steps the profiler did not record, the run of each, and the time
    the process's threads waited for a CPU in each."""
    bare = [s for s in child_steps or [] if s.get("phase") == "unprofiled"]
    return ([s["wall_ms"] for s in bare], [int(s.get("run", 1)) for s in bare],
            [s.get("wait_ms") for s in bare])


def _numbered(per_step: list[StepsPerStep]) -> list[StepsPerStep]:
    """The steps as the report shows them: a window without steps is one row whose
    ``step`` is null (the analysis numbers it -1 internally; no step has that number)."""
    return [{**row, "step": None} if (row.get("step") or 0) < 0 else row for row in per_step]


def _runs(steps: pd.DataFrame) -> Optional[list[Any]]:
    return steps["run"].tolist() if "run" in steps else None


def _step_source(steps: pd.DataFrame) -> str:
    if len(steps) == 1 and int(steps["step"].iloc[0]) < 0:
        return "none (whole recording as one step)"
    return "ProfilerStep ranges in the trace"


def _sources(has_device: bool, has_memory: bool, in_process: bool,
             has_overhead: bool) -> dict[str, str]:
    trace = "torch.profiler trace"
    return {
        "ops.calls, ops.cpu_self_us, ops.cpu_total_us, ops.shapes": f"{trace} (CPU activity)",
        "ops.device_self_us, ops.device_total_us, ops.kernels, device": (
            f"{trace} (CUDA activity via CUPTI), kernels linked to ops by External id or "
            "launch containment" if has_device else "not measured: no GPU activity in the trace"),
        "ops.mem_mib, ops.mem_net_mib": (
            f"{trace} memory events (profile_memory): mem_mib is gross (allocated inside the op "
            "itself, any device), mem_net_mib is net (allocated minus freed during the op and "
            "all it calls, on the run's device: torch's CUDA Mem / CPU Mem)" if has_memory
            else "not recorded (profile_memory off)"),
        "steps": f"{trace} (ProfilerStep and DataLoader/Optimizer/autograd ranges)",
        "sync_points": (
            f"{trace}: the runtime's blocking calls in the measured steps (nsbridge's own "
            "window-closing sync left out), tied to file:line by nsbridge's sync-site ranges "
            "or the trace's stacks; GPU idle after each until the next GPU activity"
            + ("; whole-run counts from nsbridge's in-process call-site records" if in_process
               else "") if has_device else
            "nsbridge in-process call-site records of the script's own .item()/.cpu()/... "
            "calls (whole run; on a GPU each would wait for the device)" if in_process else
            "none: in a CPU-only trace nothing waits for a device"),
        "overhead": ("nsbridge step timer in the profiled process (profiled vs unprofiled "
                     "steps)" if has_overhead else "not measured (analyze reads finished traces)"),
        "machine": ("/proc and cgroup counters read by nsbridge around the run, the profiled "
                    "process's own per-step CPU time, run-queue wait (/proc/<tid>/schedstat) "
                    "and context switches, NVML on a GPU" if in_process
                    else "not measured (analyze reads finished traces)"),
    }


def _op_rows(ops: pd.DataFrame) -> list[Op]:
    """The analysis's op table as ops[] rows (its columns are schema.OP_COLUMNS)."""
    return cast(list[Op], ops.to_dict("records"))


def _step_rows(steps: pd.DataFrame) -> list[StepsPerStep]:
    """The analysis's step table as steps.per_step rows (its columns, StepsPerStep's)."""
    return cast(list[StepsPerStep], steps.to_dict("records"))


def clean(value: Any) -> Any:
    """NaN -> None, numpy scalars -> Python, floats rounded to 3 decimals."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:   # most of a report
        return value
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 3)
    return value
