"""The Nsight Compute pass: the chosen ops' kernels under ncu, or ncu files read."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, cast

import pandas as pd

from .. import progress
from .. import schema as S
from ..collect.ncu import (capture, export_raw_csv, find_ncu, gpu_names, ncu_version,
                           profile_argv)
from ..collect.ncu_report import extract_report
from ..collect.torch_profiler import bootstrap_argv
from ..errors import DeepError, NcuFormatError, ToolNotFoundError
from ..job.mailbox import RankPlan
from ..model.ranks.collectives import COMMUNICATION_OP
from ..model.nsight.deep_plan import check_ops, describe, plan_for_run
from ..model.ranks.rank_plan import pick_ranks, refuse_communication_ops
from ..model.nsight.ncu import (ROOFLINE_COLUMNS, family_summary, kernel_table, metric_names,
                         op_summary)
from ..model.judging.rules import MATMUL_OP
from ..model.nsight.ncu_findings import Finding, Summary
from ..parse.ncu import NcuData, read_ncu, report_data
from ..profiles import Deep
from ..report.document.build import clean
from ..rundir import free_stem
from ..run import PassOutput, Run, output_op_columns
from ..script_check import Script
from ..contract.report import (Files, NcuPlan, NcuPlannedOp, NcuRankNumbers, NcuRankOp,
                               Recommendation, Report, verdict_label)
from ..schema.records import ManifestPass, Output

KERNEL_COLUMNS = ["launch", "kernel", "op", "nvtx_range", "module", "step", "attribution", "duration_ns",
                  "sm_pct", "memory_pct", "achieved_occupancy_pct", "tensor_pct", "l2_hit_pct",
                  *ROOFLINE_COLUMNS]
# per kernel family in the ncu section (the roofline numbers and findings ride along)
FAMILY_COLUMNS = ["kernel", "kernels", "ops", "launches", "duration_ns", "sm_pct",
                  "memory_pct", "dram_pct", "achieved_occupancy_pct",
                  "theoretical_occupancy_pct", "occupancy_limiter", "registers_per_thread",
                  "tensor_pct", "tensor_path", "fma_pct", "l2_hit_pct", "bound", "flops",
                  "precision", "flop_per_s", "flop_peak_per_s", "dram_bytes_per_s",
                  "dram_peak_bytes_per_s", "l2_bytes_per_s", "l2_peak_bytes_per_s",
                  "intensity", "ridge", "roof", "roof_pct", "findings"]
SOURCE = ("Nsight Compute {version}: kernels of the chosen ops (NVTX filter on nsbridge's op "
          "ranges), per-op values duration-weighted over their launches")


def require_gpu(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The GPUs present; DeepError when there is none (checked before ncu is looked up)."""
    gpus = gpu_names(environ)
    if not gpus:
        raise DeepError("The deep pass needs an NVIDIA GPU: Nsight Compute replays kernels on "
                        "the device, and `nvidia-smi -L` lists none here. Run it on a GPU "
                        "machine; triage and timeline work without one, and `nsbridge analyze "
                        "x.ncu-rep` reads reports captured elsewhere.")
    return gpus


@dataclass(frozen=True)
class DeepPass:
    """Nsight Compute on the kernels of chosen ops (``kernels``, else the ``top`` ops by
    device time), planned from the run's report, on the run's script (unless ``script``)."""

    deep: Deep
    kernels: Sequence[str] = ()
    top: Optional[int] = None
    script: Optional[Script] = None
    timeout: Optional[float] = None
    on_plan: Optional[Callable[[str], None]] = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    name: str = "ncu"

    def check(self, run: Optional[Run]) -> None:
        """The ops asked for (in ``run``, when there is one yet), a GPU and ncu, before
        anything runs.

        Raises:
            DeepError (an op the run does not have, no GPU), ToolNotFoundError (no ncu).
        """
        if run is not None and self.kernels:
            check_ops(self.kernels, run.op_names)
        require_gpu(self.environ)
        find_ncu(self.environ)

    def plan(self, run: Run) -> tuple[NcuPlan, Script]:
        """(the plan, the script): the launches chosen (``check`` checked the ops).

        Raises:
            DeepError, ScriptError: no op to profile, no script.
        """
        if run.manifest.get("command") == "analyze" and self.script is None:
            raise DeepError(f"The run {run.dir} was made by `analyze` and has no script to "
                            "run under ncu. Give the script: nsbridge deep --kernel OP "
                            "script.py.")
        the_plan = plan_for_run(run.report, run.manifest, self.deep, kernels=self.kernels,
                                top=self.top)
        if self.on_plan is not None:
            self.on_plan(describe(the_plan))
        return the_plan, self.script or run.script()

    def run(self, run: Run, plan: tuple[NcuPlan, Script]) -> PassOutput:
        the_plan, s = plan
        report = run.report
        return capture_deep(run.dir, plan=the_plan, target=s.target, args=s.args,
                            module=s.module, deep=self.deep, cwd=s.cwd, timeout=self.timeout,
                            verdict=verdict_label(report),
                            op_shapes=op_shapes(report), environ=self.environ)


@dataclass(frozen=True)
class NcuFilesPass:
    """Nsight Compute reports or CSV exports captured elsewhere (analyze)."""

    files: Sequence[Path]
    deep: Deep
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    name: str = "ncu"

    def plan(self, run: Run) -> None:
        return None

    def run(self, run: Run, plan: None) -> PassOutput:
        return ncu_from_files(self.files, self.deep,
                              verdict_label(run.report),
                              op_shapes(run.report), run_dir=run.dir, environ=self.environ)


@dataclass(frozen=True)
class DeepOnRanks:
    """The ncu pass on a job's ranks, as distributed.fan_out.OnRanks drives it: ncu on the
    ranks the planner picks (the slowest and the median, model.ranks.rank_plan) or on ``ranks``,
    never on communication ops (their kernels would wait for peers that are not replaying
    them); the others run the script alone."""

    deep: Deep
    kernels: Sequence[str] = ()
    top: Optional[int] = None
    ranks: Optional[Sequence[int]] = None
    timeout: Optional[float] = None
    on_plan: Optional[Callable[[str], None]] = None
    kind: str = "deep"               # its name between rank 0 and the ranks (job.mailbox)
    tool: str = "ncu"                # the pass's name in manifest.json and its op column
    title: str = "Nsight Compute"
    shows: str = "Nsight Compute section"

    def plan_ranks(self, run: Run) -> RankPlan:
        """Rank 0, before any rank runs it; the plan is told through ``on_plan``.

        Raises:
            DeepError: nothing to profile, a rank the job lacks.
        """
        report = run.report
        dist = report.get(S.DISTRIBUTED_SECTION) or {}
        compute_ops = [op for op in report.get("ops", [])
                       if not COMMUNICATION_OP.search(op["name"])]
        plan = plan_for_run(report, run.manifest, self.deep, kernels=self.kernels,
                            top=self.top, candidates=None if self.kernels else compute_ops)
        picks = pick_ranks(dist, self.ranks)
        plan["ranks"] = picks
        if self.on_plan is not None:
            others = int(dist.get("world_size") or 0) - len(picks)
            self.on_plan("\n".join(
                [describe(plan), *(f"  rank {p['rank']}: {p['reason']}" for p in picks)]
                + ([f"  the other {others} rank(s) run the script unprofiled"]
                   if others > 0 else [])))
        chosen = [p["rank"] for p in picks]
        shown = dist.get("shown_rank")
        if shown not in chosen:
            shown = next((p["rank"] for p in picks if p["role"] == "slowest"), chosen[0])
        return RankPlan(ranks=chosen, reasons={p["rank"]: p.get("reason") or "" for p in picks},
                        shown=shown, timeout=self.timeout or self.deep.timeout_s,
                        extra={"plan": plan, "op_shapes": op_shapes(report),
                               "verdict": verdict_label(report)})

    def check(self, run: Optional[Run], environ: Mapping[str, str]) -> None:
        """On rank 0 before anything runs: no communication op and, given the run, only
        ops it has; then the GPU and ncu, in their own words.

        Raises:
            DeepError (a communication op, an op the run lacks, no GPU), ToolNotFoundError.
        """
        refuse_communication_ops(self.kernels)
        if run is not None and self.kernels:
            check_ops(self.kernels, run.op_names)
        self.check_tool(environ)

    @staticmethod
    def check_tool(environ: Mapping[str, str]) -> None:
        """On a chosen rank, before its script runs: no GPU or no ncu, in their own words."""
        require_gpu(environ)
        find_ncu(environ)

    @staticmethod
    def capture(folder: Path, spec: S.PassSpec, profile: Any, **script: Any) -> PassOutput:
        """A chosen rank's share: the script under ncu, filtered to the plan's ops."""
        return capture_deep(folder, plan=cast(NcuPlan, spec.get("plan") or {}),
                            deep=profile.deep, verdict=spec.get("verdict"),
                            op_shapes=spec.get("op_shapes") or {}, **script)

    @staticmethod
    def rank_numbers(section: Mapping[str, Any], output: Output,
                     folder: str) -> NcuRankNumbers:
        """A rank's headline numbers in the section's ``ranks`` rows."""
        keys = ("duration_ns", "sm_pct", "memory_pct", "achieved_occupancy_pct", "tensor_pct",
                "bound")
        return {"launches": section.get("launches"), "attribution": section.get("attribution"),
                "files": {k: [f"{folder}/{n}" for n in v] if isinstance(v, list)
                          else f"{folder}/{v}" for k, v in (output.get("files") or {}).items()},
                "ops": {op: cast(NcuRankOp, {k: cols.get(k) for k in keys})
                        for op, cols in output_op_columns(output).items()}}

    @staticmethod
    def failure_hint(message: str) -> str:
        """What to do when a rank's ncu ran out of time."""
        if "(stopped by --timeout)" not in message:
            return ""
        return (" On several ranks the usual cause is a rank waiting in a collective for a "
                "peer that ncu's kernel replay holds up: raise --timeout (and the process "
                "group's timeout), or profile fewer launches (deep.max_launches).")


def op_shapes(report: Report) -> dict[str, list[str]]:
    """Each op's recorded input shapes (for the Tensor Core findings)."""
    return {op["name"]: op.get("shapes") or [] for op in report.get("ops", [])}


def capture_deep(run_dir: Path, *, plan: NcuPlan, target: str, args: Sequence[str],
                 module: bool, deep: Deep, cwd: Path, timeout: Optional[float],
                 verdict: Optional[str], op_shapes: Mapping[str, list[str]],
                 environ: Mapping[str, str] = os.environ) -> PassOutput:
    """Run the target under ncu with the plan's filter and counts; parse and model. The
    caller has checked for a GPU (require_gpu) before running anything.

    Raises:
        DeepError (counters not permitted, no kernel matched), ToolNotFoundError
        (no ncu), ToolFailedError (ncu failed or timed out; log kept).
    """
    ncu = find_ncu(environ)
    version = ncu_version(ncu, environ)
    child_argv = bootstrap_argv(run_dir, S.NCU_CHILD_CONFIG, target=target,
                                is_module=module, args=args,
                                extra={"pass": "nvtx", "record": S.NCU_CHILD_JSON})
    runs = ncu_runs(plan)
    parts, reports, logs, walls, argvs = [], [], [], [], []
    for number, window in enumerate(runs, 1):
        stem = free_stem(run_dir, "deep", (".ncu-rep",))
        report = (run_dir / f"{stem}.ncu-rep").resolve()
        argv = profile_argv(ncu, ops=window.ranges, launch_skip=window.launch_skip,
                            launch_count=window.launch_count, sections=deep.sections,
                            metrics=[*metric_names(deep.quantities), *deep.metrics],
                            replay_mode=deep.replay_mode, clock_control=deep.clock_control,
                            cache_control=deep.cache_control, output=report.with_suffix(""),
                            child_argv=child_argv)
        which = f" for {window.ops[0]} ({number} of {len(runs)})" if len(runs) > 1 else ""
        with progress.step(f"running {target} under Nsight Compute{which} "
                           f"({window.launch_count} launches to replay)", script_output=True):
            result = capture(argv, report=report, cwd=cwd, env=environ,
                             timeout=timeout or deep.timeout_s,
                             log=run_dir / f"{stem}.ncu.log", ops=window.ranges)
        with progress.step(f"reading {report.name}"):
            parts.append(read_given_ncu(result.report, run_dir, environ)[0])
        reports.append(report.name)
        logs.append(result.log.name)
        walls.append(result.outcome.wall_s)
        argvs.append(result.argv)
    one = len(runs) == 1
    manifest: ManifestPass = {"wall_s": round(sum(walls), 3), "ncu_version": version,
                              "ncu": ncu, "argv": argvs[0] if one else argvs}
    return ncu_output(concat_ncu(parts), deep, targets=plan.get("ops") or [], plan=plan,
                      version=version,
                      verdict=verdict, op_shapes=op_shapes, manifest=manifest,
                      files={"ncu_rep": reports[0] if one else reports,
                             "ncu_log": logs[0] if one else logs})


def ncu_from_files(files: Sequence[Path], deep: Deep, verdict: Optional[str],
                   op_shapes: Mapping[str, list[str]], *, run_dir: Path,
                   environ: Mapping[str, str] = os.environ) -> PassOutput:
    """ncu reports or CSV exports captured elsewhere (the first one given).

    Raises:
        NcuFormatError, TraceNotFoundError, ToolNotFoundError (a .ncu-rep with neither the
        ncu-report package nor ncu to export it), ToolFailedError (ncu could not export it).
    """
    read = [read_given_ncu(path, run_dir, environ) for path in files]
    notes = [f"{path.name} was read through `ncu --import` (no ncu-report package here, or "
             f"one that cannot read it): its raw page is {exported}"
             for path, (_, exported) in zip(files, read) if exported]
    exports = [exported for _, exported in read if exported]
    return ncu_output(concat_ncu([data for data, _ in read]), deep, targets=None, plan=None,
                      version=None, verdict=verdict, op_shapes=op_shapes,
                      manifest={"inputs": [str(f) for f in files]},
                      files={"ncu_input": str(files[0]) if len(files) == 1
                             else [str(f) for f in files],
                             **({"ncu_export": exports[0] if len(exports) == 1 else exports}
                                if exports else {})}, notes=notes)


def concat_ncu(parts: Sequence[NcuData]) -> NcuData:
    """Several ncu files as one: their launches numbered on, one after the other (the
    file names joined)."""
    if len(parts) == 1:
        return parts[0]
    launches, metrics, offset = [], [], 0
    for part in parts:
        launches.append(part.launches.assign(launch=part.launches["launch"] + offset))
        metrics.append(part.metrics.assign(launch=part.metrics["launch"] + offset))
        offset += int(part.launches["launch"].max()) + 1 if len(part.launches) else 0
    sources = sorted({part.source for part in parts})
    return NcuData(path=Path(", ".join(part.path.name for part in parts)),
                   source="+".join(sources), launches=pd.concat(launches, ignore_index=True),
                   metrics=pd.concat(metrics, ignore_index=True),
                   notes=[note for part in parts for note in part.notes])


def read_ncu_file(path: Path) -> NcuData:
    """A ``.ncu-rep`` (through NVIDIA's reader, in a child process) or an ncu CSV export.

    Raises:
        TraceNotFoundError, ToolNotFoundError (a .ncu-rep without ncu-report),
        NcuFormatError.
    """
    if path.suffix == ".ncu-rep":
        return report_data(path, extract_report(path))
    return read_ncu(path)


def read_given_ncu(path: Path, run_dir: Path,
                   environ: Mapping[str, str]) -> tuple[NcuData, Optional[str]]:
    """An ncu file given to analyze, and the name of the raw-page CSV written into
    ``run_dir`` when a .ncu-rep had to be exported by ``ncu --import`` (the ncu-report
    package missing or older than the report).

    Raises:
        ToolNotFoundError: a .ncu-rep with neither the package nor ncu (the message names
            both ways). NcuFormatError, TraceNotFoundError, ToolFailedError.
    """
    try:
        return read_ncu_file(path), None
    except (ToolNotFoundError, NcuFormatError) as unread:
        if path.suffix != ".ncu-rep":
            raise
        try:
            ncu = find_ncu(environ)
        except ToolNotFoundError:
            raise unread from None
    export = export_raw_csv(ncu, path, run_dir / f"{path.stem}.raw.csv", environ)
    return read_ncu(export), export.name


class NcuRun(NamedTuple):
    """One ncu run of a plan: the ops it is for, the NVTX ranges it filters on, the
    matching launches it skips and those it profiles."""

    ops: list[str]
    ranges: list[str]
    launch_skip: int
    launch_count: int


def ncu_runs(plan: NcuPlan) -> list[NcuRun]:
    """The plan's ncu runs: its captures, or (a plan without them) one run for all its ops."""
    names = [row["op"] for row in plan.get("ops") or []]
    captures = plan.get("captures") or [{"ops": names, "ranges": names,
                                         "launch_skip": plan.get("launch_skip"),
                                         "launch_count": plan.get("launch_count")}]
    return [NcuRun(c.get("ops") or [], c.get("ranges") or [], int(c.get("launch_skip") or 0),
                   int(c.get("launch_count") or 1)) for c in captures]


def ncu_output(data: NcuData, deep: Deep, *, targets: Optional[Sequence[NcuPlannedOp]],
               plan: Optional[NcuPlan], version: Optional[str], verdict: Optional[str],
               op_shapes: Mapping[str, list[str]], manifest: ManifestPass,
               files: Files, notes: Sequence[str] = ()) -> PassOutput:
    """The ncu section, ops[].ncu columns and recommendations from parsed ncu data."""
    if data.launches.empty:
        raise NcuFormatError(f"{data.path} holds no profiled kernel launch.")
    kernels, missing = kernel_table(data.launches, data.metrics, deep.quantities, targets)
    per_op = op_summary(kernels, op_shapes)
    attribution = {k: int(v) for k, v in kernels["attribution"].value_counts().items()}
    table = kernels[[c for c in KERNEL_COLUMNS if c in kernels]]
    families = [{k: f.get(k) for k in FAMILY_COLUMNS} for f in family_summary(kernels)]
    section = clean({
        "plan": plan, "ncu_version": version, "source": data.source, "file": data.path.name,
        "launches": int(len(kernels)), "attribution": attribution,
        "missing_quantities": missing, "families": families,
        "kernels": table.to_dict("records"), "notes": list(data.notes)})
    extra_notes = list(notes)
    if attribution.get("no_nvtx"):
        extra_notes.append(f"{attribution['no_nvtx']} ncu launch(es) carry no NVTX op range "
                           "(captured without --nvtx or outside op ranges): listed in the ncu "
                           "kernel table, not attributed to any op")
    if attribution.get("outside_filter"):
        extra_notes.append(f"{attribution['outside_filter']} ncu launch(es) ran outside the "
                           "chosen ops (in another op's range, or in a range enclosing a chosen "
                           "op but not among its kernels) and are not counted for them")
    return PassOutput(name="ncu", manifest=manifest, section=("ncu", section), op_key="ncu",
                      op_columns=clean(per_op), notes=extra_notes,
                      sources={"ncu, ops.ncu": SOURCE.format(version=version or "")},
                      recommendations=recommend(per_op or _by_family(families), kernels,
                                                verdict), files=files)


def _by_family(families: Sequence[Summary]) -> dict[str, Summary]:
    """Kernel families keyed by name, for recommendations when no launch has an op."""
    return {f"kernel {f['kernel']}": f for f in families}


def recommend(per_op: Mapping[str, Summary], kernels: pd.DataFrame,
              verdict: Optional[str]) -> list[Recommendation]:
    """Recommendations from the findings of each op (or, in a capture without ops, each
    kernel family), each naming it and its numbers."""
    total = sum(s.get("duration_ns") or 0.0 for s in per_op.values())
    out: list[Recommendation] = []
    for op, s in per_op.items():
        share = (s.get("duration_ns") or 0.0) / total if total else 0.0
        for finding in s["findings"]:
            made = _rec_for(op, finding, s)
            if made is not None:
                rec, weight = made
                out.append({**rec, "impact": round(min(max(share * weight, 0.0), 1.0), 3),
                            "addresses_verdict": verdict == "gpu-bound", "source": "ncu"})
    return out


def _rec_for(op: str, finding: Finding, s: Summary) -> Optional[tuple[Recommendation, float]]:
    """The recommendation one finding makes, and its worth (its impact is the op's share
    of the GPU time times that)."""
    rec: Recommendation
    if finding["id"] == "no-tensor-cores":
        rec = {"id": "tensor-cores", "title": "Put the matmuls on Tensor Cores",
               "why": f"{op}: {finding['detail']} (ncu)",
               "fix": finding.get("fix") or "torch.set_float32_matmul_precision('high') "
                      "(TF32) or torch.autocast('cuda', dtype=torch.bfloat16)",
               "url": "https://pytorch.org/docs/stable/notes/cuda.html"
                      "#tensorfloat-32-tf32-on-ampere-and-later-devices"}
        return rec, 0.6
    if finding["id"] == "low-occupancy" and s.get("bound") == "latency":
        rec = {"id": "occupancy", "title": "Give the GPU more parallel work",
               "why": f"{op}: {finding['detail']}, latency-bound (ncu)",
               "fix": "raise the batch size, or torch.compile(mode='max-autotune') to pick "
                      "kernels with other tile sizes and fewer registers",
               "url": "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html"
                      "#occupancy"}
        return rec, 0.3
    if finding["id"] == "memory-bound" and not MATMUL_OP.match(op):
        rec = {"id": "fuse-memory-bound", "title": "Fuse memory-bound ops",
               "why": f"{op}: {finding['detail']} (ncu)",
               "fix": "torch.compile(model) fuses elementwise and reduction ops so data makes "
                      "one trip through DRAM",
               "url": "https://pytorch.org/docs/stable/torch.compiler.html"}
        return rec, 0.4
    return None
