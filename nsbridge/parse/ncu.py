"""Nsight Compute results -> frames: `.ncu-rep` (NVIDIA's `ncu_report`) and CSV exports.

Inputs (shared/nsight.md section 1.5):

- ``.ncu-rep`` through the PyPI package ``ncu-report`` (NVIDIA's Python report interface,
  an optional dependency: ``pip install ncu-report``); no GPU and no ncu needed. The
  reader runs in a child process (``collect.ncu_report``); ``report_data`` checks its JSON.
- ``ncu --import X --csv --page raw``: one row per launch, one column per metric, a units
  row under the header (2022 and 2023+ identity columns).
- ``ncu --import X --csv --page details``: one row per (launch, section, metric) with
  display labels; the labels of the header metrics nsbridge uses are mapped back to
  metric names (LABELS), rule rows are skipped.

Both readers give an ``NcuData``:

- ``launches``: one row per profiled launch: launch (ncu's ID), kernel (name as printed),
  process_id, device, cc, block, grid, nvtx (the launching thread's push/pop stack,
  bottom first, as a tuple of (domain, range) pairs; () without NVTX).
- ``metrics``: long, one row per (launch, metric): launch, metric (ncu metric name, or the
  display label when the details page has no known name for it), section (details page
  only), value (float in base units, NaN for ``n/a``/``nan``), unit (base spelling,
  parse.ncu_units), text (the printed value when it is not a number).

Values carry thousands separators in 2024+ exports (``"21,058,944"``); they are read as
numbers. Units ncu_units does not know are kept as printed and listed in ``notes``.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import pandas as pd

from ..guard.confine import readable
from ..errors import NcuFormatError, TraceNotFoundError
from .ncu_units import normalise

LAUNCH_COLUMNS = ["launch", "kernel", "process_id", "device", "cc", "block", "grid", "nvtx"]
METRIC_COLUMNS = ["launch", "metric", "section", "value", "unit", "text"]
_NVTX_COLUMN = "thread Domain:Push/Pop_Range"
_NVTX_ENTRY = re.compile(r'"([^"]*)"')
# Domain:Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg, where Range == Msg (both may
# hold ':'); the back-reference keeps "aten::addmm" whole
_NVTX_FIELDS = re.compile(r"^(?P<domain>[^:]*):(?P<range>.*):[^:]*:[^:]*:[^:]*:[^:]*:[^:]*:(?P=range)$")
# details-page display labels (2022 and 2024+ spellings) -> metric names
LABELS = {
    "Duration": "gpu__time_duration.sum",
    "Compute (SM) Throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "Compute (SM) [%]": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "Memory Throughput": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "Memory [%]": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "DRAM Throughput": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "Achieved Occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "Theoretical Occupancy": "sm__maximum_warps_per_active_cycle_pct",
    "Registers Per Thread": "launch__registers_per_thread",
    "L1/TEX Hit Rate": "l1tex__t_sector_hit_rate.pct",
    "L2 Hit Rate": "lts__t_sector_hit_rate.pct",
    "Block Limit Registers": "launch__occupancy_limit_registers",
    "Block Limit Shared Mem": "launch__occupancy_limit_shared_mem",
    "Block Limit Warps": "launch__occupancy_limit_warps",
    "Block Limit SM": "launch__occupancy_limit_blocks",
    "Waves Per SM": "launch__waves_per_multiprocessor",
}
_SECTION_OF_LABEL = {"Memory Throughput": "GPU Speed Of Light Throughput"}


@dataclass
class NcuData:
    """Frames from one Nsight Compute report or CSV export (see the module docstring)."""

    path: Path
    source: str                       # "ncu-rep", "csv-raw" or "csv-details"
    launches: pd.DataFrame
    metrics: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def read_ncu(path: str | Path) -> NcuData:
    """Read an ncu CSV export (raw or details page).

    Raises:
        TraceNotFoundError: the file does not exist.
        NcuFormatError: not an ncu export; says what it is instead and how to export one.
    """
    path = readable(path)
    if not path.is_file():
        raise TraceNotFoundError(f"Nsight Compute file {path} does not exist.")
    if path.suffix == ".ncu-rep":
        raise NcuFormatError(f"{path} is an Nsight Compute report: read it with "
                             "collect.ncu_report.extract_report and report_data "
                             "(passes.ncu_pass.read_ncu_file does both).")
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as fh:   # BOM too
        try:
            rows = [r for r in csv.reader(_strip_chatter(fh)) if r]
        except csv.Error as exc:
            raise NcuFormatError(f"{path} is not a CSV file nsbridge can read ({exc}). Export "
                                 "it again with `ncu --import REPORT.ncu-rep --csv --page "
                                 "raw --print-units base`.") from None
    if not rows or rows[0][:1] != ["ID"]:
        raise NcuFormatError(
            f"{path} is not an Nsight Compute CSV export (its first column is not \"ID\"). "
            "Export one with `ncu --import REPORT.ncu-rep --csv --page raw --print-units base "
            "> out.csv`, or pass the .ncu-rep itself.")
    # exports joined with `cat`: each part from its header row on, read with its own header
    # (and, on the raw page, its own units row)
    starts = [i for i, row in enumerate(rows) if row[:1] == ["ID"]] + [len(rows)]
    try:
        parts = [_read_part(path, rows[i], rows[i + 1:j]) for i, j in zip(starts, starts[1:])]
    except _BadRow as bad:
        raise NcuFormatError(f"{path} is damaged: {bad}. Export it again with `ncu --import "
                             "REPORT.ncu-rep --csv --page raw --print-units base`.") from None
    return parts[0] if len(parts) == 1 else _joined(path, parts)


def _read_part(path: Path, header: list[str], body: list[list[str]]) -> NcuData:
    if "Metric Name" in header and "Metric Value" in header:
        return _read_details(path, header, body)
    return _read_raw(path, header, body)


def _joined(path: Path, parts: list[NcuData]) -> NcuData:
    """Exports joined into one file, as one: launch IDs a part repeats from an earlier one
    (each export counts from 0) renumbered to follow them, with a note.

    Raises:
        NcuFormatError: the parts are of different pages (raw and details).
    """
    if len({part.source for part in parts}) > 1:
        raise NcuFormatError(
            f"{path} joins {len(parts)} ncu exports of different pages (raw and details) "
            "into one file; nsbridge reads one page per file. Pass each export as its own "
            "file, or export them all with `--page raw`.")
    used: set[int] = set()
    renumbered = 0
    for part in parts:
        ids = set(part.launches["launch"].tolist()) | set(part.metrics["launch"].tolist())
        if ids & used:
            offset = max(used) + 1 - min(ids)
            part.launches["launch"] += offset
            part.metrics["launch"] += offset
            ids = {i + offset for i in ids}
            renumbered += 1
        used |= ids
    notes = [note for part in parts for note in part.notes]
    notes.append(f"{path.name}: {len(parts)} ncu exports joined into one file, read one "
                 "after another" + (f"; the launch IDs of {renumbered} of them renumbered to "
                                    "follow the ones before" if renumbered else ""))
    return NcuData(path=path, source=parts[0].source,
                   launches=pd.concat([p.launches for p in parts], ignore_index=True),
                   metrics=pd.concat([p.metrics for p in parts], ignore_index=True),
                   notes=list(dict.fromkeys(notes)))


class _BadRow(Exception):
    """A row of an ncu CSV that cannot be read: the message says which and why."""


def parse_nvtx(cell: str) -> tuple[tuple[str, str], ...]:
    """The push/pop stack in ncu's NVTX column: ``1421  "dom:range:...:range"  "..."``."""
    stack = []
    for entry in _NVTX_ENTRY.findall(cell or ""):
        match = _NVTX_FIELDS.match(entry)
        if match:
            stack.append((match["domain"], match["range"]))
    return tuple(stack)


def number(text: str) -> float:
    """An ncu value as a float: thousands separators removed; NaN for n/a, nan, '' and
    for a value no float holds (1e400, inf): not a measurement."""
    text = (text or "").strip().replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def _strip_chatter(lines: Iterable[str]) -> Iterable[str]:
    """Skip ``==PROF==``/``==WARNING==`` lines printed on the same stream as the CSV."""
    return (line for line in lines if not line.startswith("=="))


def _identity(header: list[str], row: list[str]) -> dict[str, Any]:
    get = dict(zip(header, row)).get
    nvtx_col = next((h for h in header if h.startswith(_NVTX_COLUMN)), None)
    ident = get("ID", "0")
    if not (ident or "").strip().isdigit():
        raise _BadRow(f"a launch ID is {ident!r}, not a number (row {row[:3]})")
    return {"launch": int(ident), "kernel": get("Kernel Name", ""),
            "process_id": get("Process ID"), "device": get("Device"), "cc": get("CC"),
            "block": get("Block Size"), "grid": get("Grid Size"),
            "nvtx": parse_nvtx(get(nvtx_col, "")) if nvtx_col else ()}


def _read_raw(path: Path, header: list[str], rows: list[list[str]]) -> NcuData:
    if rows and rows[0][0]:
        raise _BadRow("the raw page has no units row under its header, so no value's scale "
                      "is known")
    units_row, data = (rows[0], rows[1:]) if rows else ([""] * len(header), [])
    metric_cols = [i for i, h in enumerate(header) if "__" in h or h in ("inst_executed",)]
    notes: list[str] = []
    launches, values = [], []
    units = {i: normalise(units_row[i] if i < len(units_row) else "") for i in metric_cols}
    _note_unknown(notes, {header[i]: units_row[i] for i in metric_cols
                          if i < len(units_row) and not units[i].known})
    cut = [header[i] for i in metric_cols if i >= len(units_row)]
    if cut:        # a units row cut short: those values' scale is unknown
        notes.append(f"{path.name}: the units row stops before {len(cut)} metric(s), which "
                     f"are left out ({', '.join(cut[:3])}{', ...' if len(cut) > 3 else ''})")
        metric_cols = [i for i in metric_cols if i < len(units_row)]
    for row in data:
        ident = _identity(header, row)
        launches.append(ident)
        for i in metric_cols:
            text = row[i] if i < len(row) else ""
            values.append(_value(ident["launch"], header[i], None, text, units[i]))
    return NcuData(path=path, source="csv-raw", launches=_launch_frame(launches),
                   metrics=pd.DataFrame(values, columns=METRIC_COLUMNS), notes=notes)


def _read_details(path: Path, header: list[str], rows: list[list[str]]) -> NcuData:
    col = {h: i for i, h in enumerate(header)}
    needed = ("Metric Name", "Metric Unit", "Metric Value", "Section Name")
    missing = [name for name in needed if name not in col]
    if missing:
        raise _BadRow(f"the details page has no {', '.join(missing)} column")
    notes: list[str] = []
    seen: dict[int, dict[str, Any]] = {}
    values, unknown = [], {}
    short, last = 0, max(col[name] for name in needed)
    for row in rows:
        if len(row) <= last:           # cut off before the cells nsbridge reads
            short += 1
            continue
        name = row[col["Metric Name"]]
        if not name:              # a rule row: its fields are the rule's, not a metric's
            continue
        ident = _identity(header, row)
        seen.setdefault(ident["launch"], ident)
        label_unit = row[col["Metric Unit"]]
        unit = normalise(label_unit)
        if not unit.known:
            unknown[name] = label_unit
        section = row[col["Section Name"]]
        metric = LABELS.get(name, name) if _SECTION_OF_LABEL.get(name, section) == section \
            else name
        values.append(_value(ident["launch"], metric, section, row[col["Metric Value"]], unit))
    _note_unknown(notes, unknown)
    if short:
        notes.append(f"{path.name}: {short} row(s) cut off before the metric's name, unit, "
                     "value or section left out")
    return NcuData(path=path, source="csv-details",
                   launches=_launch_frame(list(seen.values())),
                   metrics=pd.DataFrame(values, columns=METRIC_COLUMNS), notes=notes)


def report_data(path: Path, extracted: dict[str, Any]) -> NcuData:
    """A ``.ncu-rep``'s launches and metrics from what ``collect.ncu_report`` extracted.

    Raises:
        NcuFormatError: no profiled launch, or a value of the wrong type (a damaged file).
    """
    try:
        data = _report_frames(path, extracted)
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
        raise NcuFormatError(f"{path} is damaged: a value in it could not be read ({exc}). "
                             "Capture or copy it again, or export it as CSV with `ncu "
                             "--import` and pass that.") from None
    if extracted.get("warning"):
        data.notes.append(f"NVIDIA's report reader warned while reading {path.name} (the file "
                          "may be damaged; values it could not parse are missing): "
                          f"{extracted['warning']}")
    return data


def _report_frames(path: Path, extracted: dict[str, Any]) -> NcuData:
    launches = [{"launch": i, "kernel": str(launch["kernel"]),
                 "process_id": launch["process_id"], "device": launch["device"],
                 "cc": launch["cc"], "block": launch["block"], "grid": launch["grid"],
                 "nvtx": tuple((str(d), str(r)) for d, r in launch["nvtx"])}
                for i, launch in enumerate(extracted["launches"])]
    if not launches:
        raise NcuFormatError(f"{path} opened as an Nsight Compute report but holds no profiled "
                             "kernel launch: it may be truncated, or written by an ncu newer "
                             "than the installed ncu-report package (pip install -U ncu-report).")
    values, notes, unknown = [], [], {}
    for launch, name, raw_unit, value in extracted["metrics"]:
        if not 0 <= int(launch) < len(launches):
            raise ValueError(f"metric {name!r} of launch {launch}, which the report lacks")
        unit = normalise(str(raw_unit))
        if not unit.known:
            unknown[name] = raw_unit
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        values.append((int(launch), str(name), None,
                       float(value) * unit.factor if is_number else math.nan, unit.unit,
                       None if is_number or value is None else str(value)))
    if extracted["cut_short"]:
        notes.append(f"{extracted['cut_short']} launch record(s) in {path.name} have no kernel "
                     "name or no metrics (the file looks cut short) and are left out")
    _note_unknown(notes, unknown)
    return NcuData(path=path, source="ncu-rep", launches=_launch_frame(launches),
                   metrics=pd.DataFrame(values, columns=METRIC_COLUMNS), notes=notes)


def _value(launch: int, metric: str, section: Optional[str], text: str,
           unit: Any) -> tuple:
    value = number(text)
    is_text = math.isnan(value) and text.strip().lower() not in ("", "n/a", "nan")
    return (launch, metric, section, value * unit.factor, unit.unit,
            text if is_text else None)


def _launch_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=LAUNCH_COLUMNS)


def _note_unknown(notes: list[str], unknown: dict[str, str]) -> None:
    if unknown:
        sample = ", ".join(f"{m} [{u}]" for m, u in list(unknown.items())[:5])
        notes.append(f"{len(unknown)} metric(s) have units nsbridge does not know and are kept "
                     f"as printed, not converted: {sample}")
