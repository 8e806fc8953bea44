"""A run: one directory, its manifest and its report, filled by passes.

Each pass (torch.profiler, nsys, ncu; see ``nsbridge.passes`` and ``nsbridge.pipeline``)
returns a ``PassOutput``: its manifest entry, its report section and its per-op columns.
``Run.add`` appends the entry, stores the section and merges the per-op columns into
``ops[]`` by op name, in memory. The Run renders nothing: the pipeline writes every file
once, at the end (pipeline.save), through the Run's whole-or-nothing writers. Until then
the directory holds manifest.json with status ``running`` (and this process's pid), so a
reader can tell a run still being written from one cut off. ``ops[]`` is the union of the
ops any pass saw: a row torch.profiler did not see still carries the other passes' numbers.
A new pass adds its own key; the others are untouched.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union, cast

from . import __version__
from . import schema as S
from .guard.confine import readable
from .errors import RunDirError, ScriptError
from .profiles import Profile
from .report.document.build import clean, conclusive
from .rundir import json_text, new_run_dir, read_run, write_atomic, write_json
from .contract.check import held_to_types, report_problem
from .contract.report import (Error, Files, Op, Recommendation, Report, as_document, as_report,
                              empty_report)
from .script_check import Script
from .schema.records import Manifest, ManifestPass, RunSource

MERGE_LIMIT = 64 * 1024 * 1024   # traces of more JSON than this (inflated) are not merged
SAVE_STEP = "save"               # the manifest's entry for writing the run's files, when it failed
FileData = Union[str, bytes, Mapping[str, object]]   # a file's text, bytes, or a record (JSON)


def json_size(path: Path) -> int:
    """Bytes of JSON in a trace file: a gzip file's inflated size as its trailer gives it
    (modulo 4 GiB; a trailer smaller than the compressed file says it wrapped), else the
    file's size."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        if fh.read(2) != b"\x1f\x8b" or size < 18:
            return size
        fh.seek(-4, os.SEEK_END)
        inflated = int.from_bytes(fh.read(4), "little")
    return inflated if inflated >= size else max(size, 1 << 32)


@dataclass
class PassOutput:
    """What one pass contributes to a run."""

    name: str                                   # "torch.profiler", "nsys", "ncu"
    manifest: ManifestPass                      # its entry in manifest["passes"]
    status: str = "ok"
    exit_code: int = 0
    error: Optional[Error] = None
    core: Optional[Report] = None               # top-level report keys (torch.profiler)
    section: Optional[tuple[str, Mapping[str, Any]]] = None   # ("timeline", {...})
    op_key: Optional[str] = None                # "nsys" or "ncu"
    op_columns: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    recommendations: list[Recommendation] = field(default_factory=list)
    files: Files = field(default_factory=dict)
    # in-memory results for the caller (RunResult): "analysis" (TraceAnalysis), "timeline"
    frames: dict[str, Any] = field(default_factory=dict)


def section_op_columns(section: Optional[tuple[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """A pass's per-op columns as its section's ``ops`` rows give them (nsys: one row per
    op name, ``op`` its key); {} for a section without such rows."""
    rows = section[1].get("ops") if section else None
    if not isinstance(rows, list):
        return {}
    return {row["op"]: {k: v for k, v in row.items() if k != "op"}
            for row in rows if isinstance(row, dict) and isinstance(row.get("op"), str)}


def output_record(output: PassOutput) -> dict[str, Any]:
    """A pass's output as a rank writes it for rank 0: JSON-able, without the in-memory
    frames, and with per-op columns its section's rows already hold written once (read
    back by ``output_op_columns``)."""
    record = {f.name: getattr(output, f.name) for f in fields(output) if f.name != "frames"}
    if output.op_columns and output.op_columns == section_op_columns(output.section):
        del record["op_columns"]
    return record


def output_op_columns(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The per-op columns of a written output (``output_record``)."""
    if "op_columns" in record:
        return record["op_columns"] or {}
    section = record.get("section")   # [name, section] as read back, or a tuple
    return section_op_columns((section[0], section[1]) if isinstance(section, (list, tuple))
                              and len(section) == 2 and isinstance(section[1], dict) else None)


class Run:
    """A run directory with its manifest and report; passes are added one by one."""

    def __init__(self, path: Path, manifest: Manifest, report: Report) -> None:
        self.dir = path
        self.manifest = manifest
        self.report = report
        self.frames: dict[str, Any] = {}   # the passes' in-memory results (PassOutput.frames)

    @classmethod
    def create(cls, *, out: Optional[Path], label: str, command: str, target: str,
               args: list[str], profile: Profile, cwd: Path, module: bool = False,
               shared: bool = False, source: Optional[RunSource] = None) -> "Run":
        """A new run directory with its manifest and an empty report written (``shared``:
        the directory of a distributed job's ranks, which may exist already; ``source``:
        what a rerun needs besides the script, e.g. threads, env, git)."""
        manifest: Manifest = {
            "nsbridge_version": __version__, "command": command, "argv": sys.argv,
            "target": target, "module": module, "args": args, "cwd": str(cwd),
            "profile": profile.to_dict(), "host": socket.gethostname(),
            "platform": platform.platform(), "python": platform.python_version(),
            "started_at": _now(), "status": "running", "pid": os.getpid(), "passes": []}
        if source:
            manifest.update(source)
        report = empty_report(command=command, target=" ".join([target, *args]),
                                version=__version__)
        return cls(new_run_dir(out, label, shared=shared, manifest=manifest), manifest, report)

    @classmethod
    def for_script(cls, script: Script, *, command: str, profile: Profile,
                   out: Optional[Path], source: Optional[RunSource] = None) -> "Run":
        """A new run directory for ``script`` under ``command``, named after it (a triage
        as the script, another command with its name in front)."""
        label = script.label if command == "triage" else f"{command}-{script.label}"
        return cls.create(out=out, label=label, command=command, target=script.target,
                          args=script.args, profile=profile, cwd=script.cwd,
                          module=script.module, source=source)

    @classmethod
    def open(cls, path: Path) -> "Run":
        """An earlier run, to read or add a pass to.

        Raises:
            RunDirError: not a directory nsbridge wrote, incomplete, or still running (or
                cut off while running): see rundir.read_run.
        """
        path = Path(path)
        manifest, report = read_run(path, report_problem)
        return cls(path, manifest, as_report(report))

    def add(self, output: PassOutput) -> None:
        """Record a pass: manifest entry, status, section, per-op columns (in memory)."""
        entry: ManifestPass = {"name": output.name, "status": output.status,
                               "exit_code": output.exit_code}
        entry.update(output.manifest)
        self.manifest["passes"].append(entry)
        report = as_document(self.report)   # sections merged by name
        if output.core is not None:
            kept = {k: v for k, v in report.items() if k not in S.REPORT_KEYS and v}
            report.update({k: v for k, v in output.core.items()
                           if k not in S.ACCUMULATED_KEYS})
            report.update(kept)
        if output.section is not None:
            report[output.section[0]] = output.section[1]
        if output.op_key is not None:
            report["ops"] = merge_ops(report.get("ops", []), output.op_key, output.op_columns)
        core = as_document(output.core) if output.core is not None else {}
        report["notes"] = [*report.get("notes", []), *output.notes, *core.get("notes", [])]
        report["files"] = {**report.get("files", {}), **core.get("files", {}), **output.files}
        report["sources"] = {**report.get("sources", {}), **core.get("sources", {}),
                             **output.sources}
        if output.recommendations:
            report["recommendations"] = rank(report.get("recommendations", [])
                                             + output.recommendations)
        if report["status"] in ("running", "ok") and output.status != "ok":
            report["status"], report["error"] = output.status, output.error
        elif report["status"] == "running":
            report["status"] = output.status
        self.manifest["status"] = report["status"]
        self.manifest["finished_at"] = _now()
        if output.core is not None and (environment := output.manifest.get("environment")):
            self.manifest["environment"] = environment
        self.frames.update(output.frames)

    def fail(self, name: str, exc: BaseException) -> None:
        """Record a pass that raised (a tool missing or failing): the run failed there."""
        error: Error = {"type": type(exc).__name__, "message": str(exc), "pass": name}
        self.manifest["passes"].append({"name": name, "status": "failed", "exit_code": 1,
                                        "error": error})
        if self.report["status"] in ("running", "ok"):
            self.report["status"], self.report["error"] = "failed", error
        self.manifest["status"] = self.report["status"]
        self.manifest["finished_at"] = _now()

    def close(self) -> Optional[Path]:
        """Close the report before its files are written: a run no pass finished is
        failed, a run that concludes nothing keeps no verdict or recommendations (a later
        pass may have failed), values are made JSON-safe. Returns the torch trace to
        annotate into merged.json.gz, or None (none, or too big: a note says so)."""
        if self.report["status"] == S.RUNNING:   # no pass said how it went
            self.report["status"] = self.manifest["status"] = S.FAILED
        if not conclusive(self.report):
            self.report["verdict"], self.report["recommendations"] = None, []
        files = self.report["files"] = self.report.get("files") or {}
        trace = readable(self.dir / str(files.get("trace") or files.get("trace_input") or "-"))
        size = json_size(trace) if trace.is_file() else None
        merge = size is not None and size <= MERGE_LIMIT
        if merge:
            files["merged_trace"] = S.MERGED_TRACE
        elif size is not None:
            self.report["notes"] = [*(self.report.get("notes") or []), (
                f"no merged.json.gz: the trace is {size >> 20} MiB of JSON, more than "
                "nsbridge loads whole to annotate it")]
        self.report = clean(self.report)
        return trace if merge else None

    def write_records(self) -> None:
        """manifest.json and report.json, each whole or not at all.

        Raises:
            RunDirError: a file cannot be written (the run is then marked failed).
        """
        held_to_types(self.report, Report, "report.json")
        self.write_files([(S.MANIFEST_JSON, self.manifest),
                          (S.REPORT_JSON, as_document(self.report))])

    def write_files(self, files: Iterable[tuple[str, FileData]]) -> None:
        """Write each (name, data) of ``files`` as the run's file ``name``, in order, whole
        or not at all (rundir.write_atomic): text, bytes, or a record written as JSON; a
        failure marks the run failed (_guarded) and stops there.

        Raises:
            RunDirError: a write failed.
        """
        for name, data in files:
            self._guarded(name, data)

    def _guarded(self, name: str, data: FileData) -> None:
        """Write the run's file ``name``; when that fails (a full disk, an I/O error), mark
        the run failed with that error in report.json and manifest.json where they can
        still be written, and raise.

        Raises:
            RunDirError: the write failed; its message names the file and the reason.
        """
        try:
            write_atomic(self.dir / name, data if isinstance(data, (str, bytes))
                         else json_text(data))
        except RunDirError as exc:
            error: Error = {"type": "WriteError", "message": str(exc)}
            self.report["status"], self.report["error"] = "failed", error
            self.manifest["status"], self.manifest["error"] = "failed", error
            if not any(p.get("name") == SAVE_STEP for p in self.manifest["passes"]):
                self.manifest["passes"].append({"name": SAVE_STEP, "status": "failed",
                                                "exit_code": 1, "error": error})
            # the manifest first: it is small, and read_run trusts its failure over a
            # report.json left from before that cannot be rewritten
            for record_name, record in ((S.MANIFEST_JSON, self.manifest),
                                        (S.REPORT_JSON, as_document(self.report))):
                try:
                    write_json(self.dir / record_name, record)
                except RunDirError:
                    pass    # nowhere left to write: the message below still says why
            raise

    def script(self) -> Script:
        """The script this run profiled.

        Raises:
            ScriptError: the run was made by ``analyze`` and has no script.
        """
        if self.manifest.get("command") == "analyze":
            raise ScriptError(f"The run {self.dir} was made by `analyze` and has no script to "
                              "run; give the script too (nsbridge timeline script.py, "
                              "nsbridge deep --kernel OP script.py).")
        return Script(target=self.manifest["target"], args=list(self.manifest.get("args") or []),
                      module=bool(self.manifest.get("module")),
                      cwd=Path(self.manifest.get("cwd") or Path.cwd()))

    @property
    def op_names(self) -> list[str]:
        return [op["name"] for op in self.report.get("ops", [])]


def is_ranked(report: Report) -> bool:
    """A run of several ranks: its report's distributed section lists them."""
    return bool((report.get(S.DISTRIBUTED_SECTION) or {}).get("ranks"))


def merge_ops(rows: list[Op], key: str,
              columns: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """ops[] with ``key`` set on every row from ``columns`` (None where the pass did not
    see the op); ops only that pass saw are appended with torch's fields null."""
    merged = [{**row, key: columns.get(row["name"])} for row in rows]
    known = {row["name"] for row in rows}
    for name, cols in columns.items():
        if name not in known:
            row: dict[str, Any] = {col: None for col in S.OP_COLUMNS}
            row.update({S.NAME: name, **{c: [] for c in S.OP_LIST_COLUMNS},
                        **{k: None for k in S.OP_PASS_KEYS}})
            row[key] = cols
            merged.append(row)
    return merged


def rank(recommendations: list[Recommendation]) -> list[Recommendation]:
    """Those addressing the verdict first, then by impact; one per id (the stronger)."""
    best: dict[Optional[str], Recommendation] = {}
    for rec in recommendations:
        old = best.get(rec.get("id"))
        if old is None or (rec.get("impact") or 0.0) > (old.get("impact") or 0.0):
            best[rec.get("id")] = rec
    return sorted(best.values(), key=lambda r: (not r.get("addresses_verdict"),
                                                -(r.get("impact") or 0.0)))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
