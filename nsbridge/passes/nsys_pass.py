"""The Nsight Systems pass: the script under nsys with NVTX op ranges, or exports read."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, cast

from .. import progress
from .. import schema as S
from ..collect.nsys import export_sqlite, find_nsys, nvtx_fix, run_nsys_pass
from ..guard.confine import readable
from ..errors import LaunchError
from ..job.mailbox import RankPlan
from ..model.ranks.collectives import COMMUNICATION_OP
from ..model.device.timeline import Timeline, join, window_to_steps
from ..parse.nsys_sqlite import read_nsys_sqlite
from ..profiles import Profile
from ..report.document.build import clean
from ..run import PassOutput, Run, section_op_columns
from ..rundir import load_record
from ..script_check import Script
from ..contract.report import Error, Files, TimelineNvtx, TimelineOp, TimelineRankNumbers
from ..contract.report import Timeline as TimelineSection
from ..schema.records import ManifestPass, Output
from .outcome import pass_status


@dataclass(frozen=True)
class TimelinePass:
    """The script (the run's own, unless ``script``) under Nsight Systems with NVTX op
    ranges; kernels joined to ops over the run's measured steps."""

    profile: Profile
    script: Optional[Script] = None
    timeout: Optional[float] = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    threads: Optional[int] = None     # torch's intra-op threads (triage --threads)
    name: str = "nsys"

    def check(self, run: Optional[Run]) -> None:
        """nsys, before anything runs (ToolNotFoundError says how to install it)."""
        find_nsys(self.environ)

    def plan(self, run: Run) -> Script:
        return self.script or run.script()

    def run(self, run: Run, plan: Script) -> PassOutput:
        s = plan
        output, joined = capture_timeline(run.dir, target=s.target, args=s.args,
                                          module=s.module, profile=self.profile, cwd=s.cwd,
                                          timeout=self.timeout, environ=self.environ,
                                          threads=self.threads)
        output.frames["timeline"] = joined.ops
        return output


@dataclass(frozen=True)
class NsysExportsPass:
    """nsys exports captured elsewhere (analyze), joined like the timeline pass's own."""

    files: Sequence[Path]
    profile: Profile
    window: str = "steps"
    name: str = "nsys"
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def plan(self, run: Run) -> None:
        return None

    def run(self, run: Run, plan: None) -> PassOutput:
        output, joined = timeline_from_exports(self.files, self.profile, run.dir, self.window,
                                               environ=self.environ)
        output.frames["timeline"] = joined.ops
        return output


@dataclass(frozen=True)
class TimelineOnRanks:
    """The nsys pass on a job's ranks, as distributed.fan_out.OnRanks drives it: nsys on
    every rank the torch.profiler pass profiled (the others run the script alone)."""

    timeout: Optional[float] = None
    kind: str = "timeline"           # its name between rank 0 and the ranks (job.mailbox)
    tool: str = "nsys"               # the pass's name in manifest.json and its op column
    title: str = "Nsight Systems"
    shows: str = "timeline"          # what the shown rank's output is in the report

    def plan_ranks(self, run: Run) -> RankPlan:
        """Rank 0, before any rank runs it.

        Raises:
            LaunchError: no rank was profiled, so there is no window to join to.
        """
        dist = run.report.get(S.DISTRIBUTED_SECTION) or {}
        ranks = list(dist.get("profiled") or [])
        if not ranks:
            raise LaunchError("No rank to run Nsight Systems on: the torch.profiler pass "
                              "measured no step on any rank.")
        return RankPlan(ranks=ranks, reasons={r: "profiled by the torch.profiler pass"
                                              for r in ranks},
                        shown=dist.get("shown_rank"), timeout=self.timeout)

    def check(self, run: Optional[Run], environ: Mapping[str, str]) -> None:
        """On rank 0 before anything runs: nsys's own error when it is missing."""
        self.check_tool(environ)

    @staticmethod
    def check_tool(environ: Mapping[str, str]) -> None:
        """On a chosen rank, before its script runs: nsys's own error when it is missing."""
        find_nsys(environ)

    @staticmethod
    def capture(folder: Path, spec: S.PassSpec, profile: Profile,
                **script: Any) -> PassOutput:
        """A chosen rank's share: the script under nsys into its folder."""
        return capture_timeline(folder, profile=profile, **script)[0]

    @staticmethod
    def rank_numbers(section: Mapping[str, Any], output: Output,
                     folder: str) -> TimelineRankNumbers:
        """A rank's headline numbers in the section's ``ranks`` rows."""
        ops = section.get("ops") or []
        return {"gpu_busy_pct": section.get("gpu_busy_pct"), "kernels": section.get("kernels"),
                "copies": section.get("copies"), "memsets": section.get("memsets"),
                "nsbridge_ranges": section.get("nsbridge_ranges"),
                "sync_calls": section.get("sync_calls"), "sync_us": section.get("sync_us"),
                "kernel_us": round(sum(op.get("kernel_us") or 0.0 for op in ops), 3),
                "comm_kernel_us": round(sum(op.get("kernel_us") or 0.0 for op in ops
                                            if COMMUNICATION_OP.search(str(op.get("op")))), 3),
                "files": {k: f"{folder}/{v}" for k, v in (section.get("files") or {}).items()}}

    @staticmethod
    def failure_hint(message: str) -> str:
        return ""


def capture_timeline(run_dir: Path, *, target: str, args: Sequence[str], module: bool,
                     profile: Profile, cwd: Path, timeout: Optional[float],
                     environ: Mapping[str, str] = os.environ,
                     threads: Optional[int] = None) -> tuple[PassOutput, Timeline]:
    """Run the target under nsys into ``run_dir`` (``threads``: torch's intra-op
    threads); join kernels to ops.

    Raises:
        ToolNotFoundError (no nsys, with how to install it), ToolFailedError (nsys's own
        error lines and its log), NsysExportError.
    """
    with progress.step(f"running {target} under Nsight Systems (capture, import, export)",
                       script_output=True):
        nsys_pass = run_nsys_pass(target=target, is_module=module, args=args,
                                  trace=profile.timeline.trace, run_dir=run_dir, cwd=cwd,
                                  timeout=timeout, environ=environ, threads=threads)
    capture = nsys_pass.capture
    status, exit_code, error = pass_status(capture.outcome, nsys_pass.child)
    with progress.step("joining kernels to ops in the nsys export"):
        export = read_nsys_sqlite(nsys_pass.sqlite)
        joined = _join_window(export, measured_steps(run_dir, profile),
                              profile.timeline.top_gaps)
    child = nsys_pass.child
    emitted = ((child.get("nvtx") or {}).get("total", 0)) if child else 0
    check = nvtx_check(emitted, joined.summary.get("nsbridge_ranges") or 0, nsys_pass.version)
    section = timeline_section(joined, check, {"nsys_rep": capture.report.name,
                                               "sqlite": nsys_pass.sqlite.name,
                                               "log": nsys_pass.log.name})
    manifest: ManifestPass = {
        "wall_s": capture.outcome.wall_s, "nsys_version": nsys_pass.version,
        "nsys": nsys_pass.install.path, "nsys_found_by": nsys_pass.install.found_by,
        "qdstrm_imported_with": capture.imported_with, "argv": capture.argv}
    child_env = child.get("env") if child else None
    if child_env:
        manifest["environment"] = child_env
    return _output(section, joined, manifest, status, exit_code, error,
                   export.notes + ([warning] if (warning := check.get("warning")) else [])), joined


def timeline_from_exports(files: Sequence[Path], profile: Profile, run_dir: Path,
                          window: str = "steps", *,
                          environ: Mapping[str, str] = os.environ) -> tuple[PassOutput, Timeline]:
    """Join the first nsys export given (a .nsys-rep is exported into ``run_dir``), over
    the profile's measured steps when it has nsbridge's step ranges (``window="trace"``:
    the whole capture)."""
    source = files[0]
    sqlite = source
    if source.suffix != ".sqlite":
        with progress.step(f"exporting {source.name} to SQLite"):
            sqlite = export_sqlite(find_nsys(environ).path, source, run_dir / "nsys-export.log",
                                   run_dir / f"{source.stem}.sqlite", environ=environ)
    with progress.step(f"joining kernels to ops in {sqlite.name}"):
        steps = measured_steps(None, profile) if window == "steps" else []
        export = read_nsys_sqlite(sqlite)
        joined = _join_window(export, steps, profile.timeline.top_gaps)
    nvtx: TimelineNvtx = {"emitted": None, "recorded": joined.summary.get("nsbridge_ranges"),
                          "warning": None}
    section = timeline_section(joined, nvtx, {"input": str(source), "sqlite": str(sqlite)})
    if len(files) > 1:
        section["note"] = f"{len(files)} nsys files given; the timeline shows {source.name}"
    return _output(section, joined, {"inputs": [str(f) for f in files]}, "ok", 0, None,
                   export.notes), joined


def measured_steps(run_dir: Optional[Path], profile: Profile) -> list[int]:
    """Indices of the steps the torch.profiler pass measured (its child.json in
    ``run_dir``), else those the profile's schedule measures: nsbridge's NVTX ``step N``
    range N is the same step."""
    child = run_dir / S.CHILD_JSON if run_dir is not None else None
    if child is not None and child.is_file():
        steps = load_record(readable(child), S.ChildRecord).get("steps") or []
        active = [int(s["index"]) for s in steps if s.get("phase") == "active"]
        if active:   # the first window only (repeat > 1 saves more): the one analysed
            run = [active[0]]
            for index in active[1:]:
                if index != run[-1] + 1:
                    break
                run.append(index)
            return run
    s = profile.schedule
    first = max(s.skip_first, 1) + s.wait + s.warmup
    return list(range(first, first + s.active))


def _join_window(export: Any, steps: list[int], top_gaps: int) -> Timeline:
    """The join over the measured steps (or the whole capture), saying which."""
    cut, window = window_to_steps(export, steps)
    joined = join(cut, top_gaps)
    joined.summary["window"] = window
    joined.summary["nsbridge_ranges"] = int(   # in the whole capture: the NVTX check's count
        (export.ranges["domain"] == S.NVTX_DOMAIN).to_numpy().sum())
    return joined


def nvtx_check(emitted: int, recorded: int, nsys_version: Optional[str]) -> TimelineNvtx:
    """Compare NVTX ranges nsbridge pushed with those in the export; warn with the cause."""
    check: TimelineNvtx = {"emitted": emitted, "recorded": recorded, "warning": None}
    if emitted and recorded < 0.5 * emitted:
        try:
            from importlib.metadata import version

            nvtx_version = version("nvtx")
        except Exception:
            nvtx_version = "unknown"
        check["warning"] = (
            f"nsys recorded {recorded} of the {emitted} NVTX ranges nsbridge emitted, so ops "
            f"cannot be joined. Likely cause: the nvtx package ({nvtx_version}) is newer than "
            f"this nsys ({nsys_version or 'unknown'}) records. Fix: {nvtx_fix()}.")
    return check


def timeline_section(timeline: Timeline, nvtx: TimelineNvtx, files: Files) -> TimelineSection:
    """report["timeline"]: the nsys view (docs/reference/report-json.md)."""
    ops = cast(list[TimelineOp], timeline.ops.to_dict("records"))
    return clean(TimelineSection(**timeline.summary, nvtx=nvtx, files=files, ops=ops,
                                 idle_gaps=timeline.gaps))


def _output(section: TimelineSection, joined: Timeline, manifest: ManifestPass, status: str,
            exit_code: int, error: Optional[Error], notes: list[str]) -> PassOutput:
    columns = section_op_columns(("timeline", section))
    source = (f"Nsight Systems {section.get('nsys_version') or ''} export: NVTX op ranges, "
              "kernels, copies and memsets joined to ops by correlationId and the innermost "
              "op range on the launching thread")
    return PassOutput(name="nsys", manifest=manifest, status=status, exit_code=exit_code,
                      error=error, section=("timeline", section), op_key="nsys",
                      op_columns=columns, notes=notes,
                      sources={"timeline, ops.nsys": source})
