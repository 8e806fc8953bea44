"""The live GPU record's comparisons table: nsbridge's numbers against the tools' own.

    python bench/gpu_record/compare.py FOLDER [--out comparisons.md] [--json rows.json]
                                             [--steps-tsv steps.tsv] [--check]

FOLDER is what bench/gpu_record.sh left: its $OUT as the device tool brings it back
(record.tar.gz and captures.tar.gz are unpacked into a temporary folder; steps.tsv beside
them) or its work folder. Runs on a CPU; reads files only (nsbridge.analyze on .sqlite
exports, torch traces and ncu CSV pages, all in this process). The layout it reads:

    runs/<run>/            nsbridge run directories: report.json, key_averages.txt (torch's
                           own table of the same profiler session), timeline.sqlite (after
                           `timeline --run`), deep.raw.csv (the deep pass's ncu raw page)
    nsys/<run>_*.csv       `nsys stats --report cuda_gpu_kern_sum --format csv` of runs/<run>
    oracle/<m>.trace.json.gz, oracle/<m>.key_averages.csv   oracle.py's own profiler session
    ncu/<case>.raw.csv     `ncu --import <case>.ncu-rep --csv --page raw` (--set full captures)
    gates/<name>/gate.json `nsbridge gate`'s answers: same, bf16, extra

Each check is one row: what, where, nsbridge's number, the tool's own, the deviation, the
tolerance and the verdict: ok, FAIL, check (a number to look at, no pass/fail rule), or
missing: the input and the step that makes it. Tolerances: kernel totals and per-op times
within 1 % (or the printed table's precision), calls and verdicts equal.
Exit 0; with --check, 1 when a row says FAIL.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sqlite3
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

TOL_PCT = 1.0            # kernel totals, per-op times, roofline numbers
TENSOR_ON_PCT = 1.0      # the tensor pipe busy at least this share of peak: on Tensor Cores
UTIL_POINTS = 1.0        # roof share against ncu's own pipe/DRAM utilisation, in points
ATTRIBUTED_PCT = 99.0    # kernel time tied to an op, for "kernels attributed"
TRIAGE_RUNS = {"cnn": "cnn_triage", "bert": "bert_triage", "compile": "compile_triage",
               "cudagraph": "cudagraph_triage"}
DEEP_RUNS = ("cnn", "bert")
TIMELINES = {"cnn": ("cnn_timeline", "cnn_nsys_stats"),
             "cudagraph": ("cudagraph_triage", "cudagraph_nsys_stats")}
ORACLES = {"cnn": "oracle_cnn", "bert": "oracle_bert"}
NCU_CASES = {"conv": "ncu_conv", "attention": "ncu_attention"}
GATES = {"same": "gate_same", "bf16": "gate_bf16", "extra": "gate_extra"}
ATTRIBUTION_RUNS = ("compile", "cudagraph")
VERDICT_ORDER = ("FAIL", "missing", "check", "ok", "n/a", "skipped")


@dataclass
class Row:
    check: str
    where: str
    ours: str = ""
    theirs: str = ""
    deviation: str = ""
    tolerance: str = ""
    verdict: str = ""
    details: list[str] = field(default_factory=list)


# -- inputs -----------------------------------------------------------------------------

def read_steps(path: Optional[Path]) -> dict[str, str]:
    """steps.tsv as {step: status} (empty when there is none)."""
    if path is None or not path.is_file():
        return {}
    out = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if row.get("step"):
                out[row["step"]] = row.get("status") or ""
    return out


@dataclass
class Record:
    root: Path
    steps: dict[str, str]

    def missing(self, check: str, where: str, what: str, step: str) -> Row:
        status = self.steps.get(step)
        said = f"step {step}: {status}" if status else f"step {step} not in steps.tsv"
        verdict = "skipped" if status and status.startswith("skipped") else "missing"
        return Row(check, where, verdict=f"{verdict}: {what} ({said})")


def unpacked(folder: Path, scratch: Path) -> Path:
    """The folder to read: FOLDER itself, or its tarballs unpacked into ``scratch``."""
    tars = [folder / name for name in ("record.tar.gz", "captures.tar.gz")
            if (folder / name).is_file()]
    if not tars:
        return folder
    for path in tars:
        with tarfile.open(path) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(scratch, filter="data")
            else:                                    # no filters: check the names first
                for member in tar.getmembers():
                    target = (scratch / member.name).resolve()
                    if not (member.isfile() or member.isdir()) or \
                            scratch.resolve() not in (target, *target.parents):
                        raise ValueError(f"{path}: refusing to unpack {member.name!r}")
                tar.extractall(scratch)
    return scratch


# -- number helpers ---------------------------------------------------------------------

def dev_pct(ours: float, theirs: float) -> float:
    """|ours - theirs| as a percent of theirs (0 when both are 0)."""
    if theirs == 0:
        return 0.0 if ours == 0 else math.inf
    return 100.0 * abs(ours - theirs) / abs(theirs)


def _analyze(paths: Sequence[Path], **kwargs: Any) -> dict[str, Any]:
    """nsbridge.analyze's report of files, in a scratch run directory."""
    import nsbridge

    with tempfile.TemporaryDirectory(prefix="gpu-record-") as tmp:
        return dict(nsbridge.analyze(list(paths), out=Path(tmp) / "run", **kwargs).report)


# -- key_averages: torch's own table ----------------------------------------------------

_UNITS_US = {"us": 1.0, "ms": 1e3, "s": 1e6}
_DEVICE_SELF = ("Self CUDA", "Self Device", "Self XPU")
_DEVICE_TOTAL = ("CUDA total", "Device total", "XPU total")


def read_key_averages_txt(path: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """torch's printed key_averages table as {op: {column: (value, resolution)}}, times in
    µs (resolution: half the last printed digit). Cells are split on two or more spaces
    (names hold single ones). Left out: names torch cut ('...'), ProfilerStep*, and rows
    without CPU time (the device-side copies of annotations)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    split = lambda line: re.split(r"\s{2,}", line.strip())  # noqa: E731
    header = split(lines[1])
    table: dict[str, dict[str, tuple[float, float]]] = {}
    for line in lines[3:]:
        if line.startswith("-"):
            break
        cells = split(line)
        if len(cells) != len(header):
            continue
        row = dict(zip(header, cells))
        name = row.pop("Name")
        values = {k: _cell(v) for k, v in row.items()}
        parsed = {k: v for k, v in values.items() if v is not None}
        total = parsed.get("CPU total", (0.0, 0.0))[0]
        if name.endswith("...") or name == "ProfilerStep*" or total == 0:
            continue
        table[name] = parsed
    return table


def _cell(text: str) -> Optional[tuple[float, float]]:
    match = re.fullmatch(r"(-?[\d.]+)\s*(us|ms|s)?", text.strip())
    if not match:
        return None
    decimals = len(match[1].split(".")[1]) if "." in match[1] else 0
    scale = _UNITS_US.get(match[2] or "", 1.0)
    return float(match[1]) * scale, 0.5 * 10 ** -decimals * scale


def read_key_averages_csv(path: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """oracle.py's CSV as the same {op: {column: (value, resolution)}} (exact floats)."""
    names = {"calls": "# of Calls", "cpu_self_us": "Self CPU", "cpu_total_us": "CPU total",
             "device_self_us": "Self CUDA", "device_total_us": "CUDA total"}
    table: dict[str, dict[str, tuple[float, float]]] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            values = {names[k]: (float(row[k] or 0), 1e-6) for k in names}
            if row["name"] == "ProfilerStep*" or values["CPU total"][0] == 0:
                continue
            table[row["name"]] = values
    return table


def per_op_rows(where: str, ops: list[dict[str, Any]],
                table: dict[str, dict[str, tuple[float, float]]]) -> list[Row]:
    """Calls equal, and device self/total time (CPU self/total on a run without device
    columns) within 1 % or the table's precision, for every op both name."""
    ours = {op["name"]: op for op in ops}
    both = sorted(set(ours) & set(table))
    if not both:
        return [Row("per-op numbers vs key_averages", where,
                     verdict="FAIL: no op in both nsbridge's report and torch's table")]
    sample = table[both[0]]
    self_col = next((c for c in _DEVICE_SELF if c in sample), None)
    total_col = next((c for c in _DEVICE_TOTAL if c in sample), None)
    device = self_col is not None and any(table[o][self_col][0] > 0 for o in both)
    pairs = [("device self time", "device_self_us", self_col),
             ("device total time", "device_total_us", total_col)] if device else \
        [("CPU self time", "cpu_self_us", "Self CPU"), ("CPU total time", "cpu_total_us",
                                                          "CPU total")]
    rows = []
    bad = [f"{o}: {ours[o]['calls']} vs {table[o]['# of Calls'][0]:g}" for o in both
           if "# of Calls" in table[o] and ours[o].get("calls") != table[o]["# of Calls"][0]]
    rows.append(Row("per-op calls vs key_averages", where, f"{len(both)} ops",
                    f"{len(both)} ops", f"{len(bad)} differ", "equal",
                    "FAIL" if bad else "ok", bad))
    for label, key, column in pairs:
        worst, worst_op, bad = 0.0, "", []
        for op in both:
            theirs, resolution = table[op][str(column)]
            mine = float(ours[op].get(key) or 0.0)
            pct = dev_pct(mine, theirs)
            if abs(mine - theirs) <= resolution + 1e-9:
                pct = 0.0 if pct > TOL_PCT else pct     # equal to the printed precision
            if pct > worst:
                worst, worst_op = pct, op
            if pct > TOL_PCT:
                bad.append(f"{op}: nsbridge {mine:.3f} µs, torch {theirs:.3f} µs "
                           f"({pct:.2f} %)")
        total_ours = sum(float(ours[o].get(key) or 0.0) for o in both)
        total_theirs = sum(table[o][str(column)][0] for o in both)
        rows.append(Row(f"per-op {label} vs key_averages", where,
                        f"{total_ours:.1f} µs over {len(both)} ops",
                        f"{total_theirs:.1f} µs", f"max {worst:.2f} %"
                        + (f" ({worst_op})" if worst_op else ""), f"{TOL_PCT:g} % per op",
                        "FAIL" if bad else "ok", bad))
    return rows


def key_averages_checks(rec: Record) -> list[Row]:
    rows: list[Row] = []
    for run, step in TRIAGE_RUNS.items():
        folder = rec.root / "runs" / run
        table, report = folder / "key_averages.txt", folder / "report.json"
        if not (table.is_file() and report.is_file()):
            what = f"runs/{run}/{'report.json' if table.is_file() else 'key_averages.txt'}"
            rows.append(rec.missing("per-op numbers vs key_averages", f"runs/{run}", what, step))
            continue
        ops = json.loads(report.read_text(encoding="utf-8")).get("ops") or []
        rows += per_op_rows(f"runs/{run}", ops, read_key_averages_txt(table))
    for model, step in ORACLES.items():
        trace = rec.root / "oracle" / f"{model}.trace.json.gz"
        table_csv = rec.root / "oracle" / f"{model}.key_averages.csv"
        if not (trace.is_file() and table_csv.is_file()):
            rows.append(rec.missing("per-op numbers vs key_averages", f"oracle/{model}",
                                    f"oracle/{model}.trace.json.gz and .key_averages.csv",
                                    step))
            continue
        ops = _analyze([trace], jobs=1).get("ops") or []
        rows += per_op_rows(f"oracle/{model}", ops, read_key_averages_csv(table_csv))
    return rows


# -- nsys: kernel totals against `nsys stats` and the export itself ---------------------

def kern_sum_csv(path: Path) -> tuple[int, float]:
    """(kernel instances, total ns) of `nsys stats`' cuda_gpu_kern_sum (or gpukernsum) CSV;
    (0, 0) for the empty file nsys writes when the capture holds no kernel."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if "Total Time" in line), None)
    count, total = 0, 0.0
    if start is None:
        return count, total
    for row in csv.DictReader(lines[start:]):
        count += int(float(row["Instances"].replace(",", "")))
        total += float(row["Total Time (ns)"].replace(",", ""))
    return count, total


def kernels_in_sqlite(path: Path) -> tuple[int, float]:
    """(kernels, total ns) straight from the export's CUPTI_ACTIVITY_KIND_KERNEL table
    ((0, 0) when the export has none: a capture without GPU work)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = "
                           "'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone():
            return 0, 0.0
        count, total = con.execute(
            'SELECT COUNT(*), COALESCE(SUM("end" - "start"), 0) '
            "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    return int(count), float(total)


def nsbridge_kernel_totals(sqlite: Path) -> tuple[dict[str, Any], float]:
    """nsbridge's timeline over the whole capture, and its kernel time (ns): the ops', the
    kernels launched outside op ranges (CUDA graph replays) and those whose launch is not
    in the capture."""
    timeline = _analyze([sqlite], window="trace").get("timeline") or {}
    kernel_us = sum(float(op.get("kernel_us") or 0.0) for op in timeline.get("ops") or [])
    kernel_us += float((timeline.get("no_launch") or {}).get("kernel_us") or 0.0)
    kernel_us += float((timeline.get("outside_ops") or {}).get("kernel_us") or 0.0)
    return timeline, kernel_us * 1e3


def nsys_checks(rec: Record) -> list[Row]:
    rows: list[Row] = []
    for run, (capture_step, stats_step) in TIMELINES.items():
        where = f"runs/{run}"
        sqlites = sorted((rec.root / "runs" / run).glob("*.sqlite"))
        if not sqlites:
            rows.append(rec.missing("kernel totals vs nsys stats cuda_gpu_kern_sum", where,
                                    f"runs/{run}/*.sqlite", capture_step))
            continue
        try:
            rows += _nsys_rows(rec, run, sqlites[0], stats_step)
        except Exception as exc:        # noqa: BLE001 - a damaged input is a row, not a crash
            rows.append(Row("kernel totals vs nsys stats cuda_gpu_kern_sum", where,
                            verdict=f"FAIL: {exc!r}"))
    return rows


def _nsys_rows(rec: Record, run: str, sqlite: Path, stats_step: str) -> list[Row]:
    """nsbridge's kernel count and time over the whole capture against `nsys stats` and the
    export's own kernel table, and the share of kernels joined to an op."""
    where = f"runs/{run}"
    timeline, ours_ns = nsbridge_kernel_totals(sqlite)
    attribution = timeline.get("attribution") or {}
    count = int(timeline.get("kernels") or 0)
    outside = timeline.get("outside_ops") or {}
    note = [f"{outside['kernels']} kernels ({outside['kernel_us']:.1f} µs) launched outside "
            "op ranges (CUDA graph replays, user code between ops)"] \
        if outside.get("kernels") else []
    rows: list[Row] = []
    stats = sorted((rec.root / "nsys").glob(f"{run}_*kern*sum*.csv"))
    if stats:
        n, total = kern_sum_csv(stats[0])
        rows.append(_total_row("kernel count vs nsys stats", f"{where} ({stats[0].name})",
                               count, n, "", exact=True))
        rows.append(_total_row("kernel time total vs nsys stats cuda_gpu_kern_sum",
                               f"{where} ({stats[0].name})", ours_ns / 1e3, total / 1e3,
                               " µs", details=note))
    else:
        rows.append(rec.missing("kernel totals vs nsys stats cuda_gpu_kern_sum", where,
                                f"nsys/{run}_cuda_gpu_kern_sum.csv", stats_step))
    n, total = kernels_in_sqlite(sqlite)
    rows.append(_total_row("kernel time total vs the export's kernel table",
                           f"{where} ({sqlite.name})", ours_ns / 1e3, total / 1e3, " µs",
                           details=note))
    joined = sum(int((attribution.get(rule) or {}).get("kernels") or 0)
                 for rule in ("nvtx_push_pop", "graph_node_capture"))
    share = 100.0 * joined / count if count else 0.0
    rules = ", ".join(f"{rule}: {c.get('kernels', 0)}" for rule, c in attribution.items())
    rows.append(Row("kernels joined to ops (nsys: NVTX ranges, graph node captures)", where,
                    f"{joined} of {count} ({share:.1f} %)", "", "", f">= {ATTRIBUTED_PCT:g} %",
                    "ok" if count and share >= ATTRIBUTED_PCT else
                    ("n/a: no kernel in the capture" if not count else "check"),
                    [f"attribution rules: {rules}"] if rules else []))
    return rows


def _total_row(check: str, where: str, ours: float, theirs: float, unit: str, *,
               exact: bool = False, details: Optional[list[str]] = None) -> Row:
    pct = dev_pct(ours, theirs)
    ok = ours == theirs if exact else pct <= TOL_PCT
    return Row(check, where, f"{ours:,.3f}{unit}".replace(".000", "") if not exact
               else f"{ours:,.0f}", f"{theirs:,.3f}{unit}".replace(".000", "") if not exact
               else f"{theirs:,.0f}", f"{pct:.3f} %", "equal" if exact else f"{TOL_PCT:g} %",
               "ok" if ok else "FAIL", list(details or []))


# -- ncu: Tensor Core verdicts and the roofline by hand ---------------------------------

_PREFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "P": 1e15}
_TIME_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "second": 1.0}
_WORDS = ("byte", "sector", "inst", "cycle", "warp", "thread", "block", "request", "hz",
          "register", "op", "flop")


def unit_scale(unit: str) -> Optional[float]:
    """The factor that turns a value ncu printed in ``unit`` into base units: bytes, 1/s,
    counts, seconds ('Gbyte/s' 1e9, 'Ghz' 1e9, 'Kbyte/cycle' 1e3, 'us' 1e-6, 'sector/ns'
    1e9); None for a unit this does not know."""
    unit = unit.strip()
    if unit in ("", "%"):
        return 1.0
    num, _, den = unit.partition("/")
    top, bottom = _one_unit(num), _one_unit(den) if den else 1.0
    if top is None or bottom is None:
        return None
    return top / bottom


def _one_unit(text: str) -> Optional[float]:
    if text in _TIME_S:
        return _TIME_S[text]
    for word in _WORDS:
        if text.lower().endswith(word):
            prefix = text[: len(text) - len(word)]
            if prefix == "":
                return 1.0
            return _PREFIX.get(prefix) or _PREFIX.get(prefix.upper()) if len(prefix) == 1 \
                else None
    return None


def read_raw_page(path: Path) -> list[dict[str, Any]]:
    """ncu's raw CSV page read by hand (csv module, ncu's printed units): one dict per
    launch with ``_id``, ``_kernel`` and every numeric metric in base units."""
    rows = list(csv.reader(path.open(newline="", encoding="utf-8")))
    if len(rows) < 3:
        return []
    header, units = rows[0], rows[1]
    launches = []
    for values in rows[2:]:
        out: dict[str, Any] = {"_id": values[0] if values else "",
                               "_kernel": values[header.index("Kernel Name")]
                               if "Kernel Name" in header else ""}
        for name, unit, value in zip(header, units, values):
            scale = unit_scale(unit)
            if scale is None:
                continue
            try:
                out[name] = float(value.replace(",", "")) * scale
            except ValueError:
                pass
        launches.append(out)
    return launches


_TENSOR_PIPE = re.compile(r"^sm__(pipe_tensor|inst_executed_pipe_tensor)\w*\.avg\."
                          r"pct_of_peak_sustained_(active|elapsed)$")
_TENSOR_PATH = re.compile(r"^sm__ops_path_tensor_(?P<path>\w+?)\.sum\.per_second$")
_CUDA_CORE = {"fp64": ("dfma", 2.0, ("dadd", "dmul"), 1.0),
              "fp32": ("ffma", 2.0, ("fadd", "fmul"), 1.0),
              "fp16": ("hfma", 4.0, ("hadd", "hmul"), 2.0)}


def tensor_pipe_pct(launch: dict[str, Any]) -> Optional[float]:
    """The busiest tensor-pipe counter of a launch (% of peak), None when it has none."""
    values = [v for k, v in launch.items() if _TENSOR_PIPE.match(k)]
    return max(values) if values else None


def hand_roofline(c: dict[str, Any]) -> dict[str, Any]:
    """A launch's roofline from its raw metrics, the way ncu's roofline sections define it:
    FLOP/s per precision (an FMA is 2 FLOPs, HFMA2 4), the busiest one's peak, DRAM
    bytes/s and peak, intensity, ridge, the binding roof and the share of it achieved."""
    clock, sm_clock = c.get("smsp__cycles_elapsed.avg.per_second"), \
        c.get("sm__cycles_elapsed.avg.per_second")
    flops: dict[str, tuple[float, Optional[float]]] = {}
    for precision, (fma, k_fma, others, k_other) in _CUDA_CORE.items():
        rate = c.get(f"smsp__sass_thread_inst_executed_op_{fma}_pred_on.sum.per_cycle_elapsed")
        if rate is None or clock is None:
            continue
        per_cycle = k_fma * rate + k_other * sum(
            c.get(f"smsp__sass_thread_inst_executed_op_{o}_pred_on.sum.per_cycle_elapsed") or 0.0
            for o in others)
        peak = c.get(f"sm__sass_thread_inst_executed_op_{fma}_pred_on.sum.peak_sustained")
        flops[precision] = (per_cycle * clock,
                            k_fma * peak * sm_clock if peak and sm_clock else None)
    paths = [(m["path"], v) for k, v in c.items() if (m := _TENSOR_PATH.match(k))
             and "sparsity_on" not in k and v > 0]
    specific = [p for p in paths if p[0].startswith("op_")] or paths
    if specific:
        path, achieved = max(specific, key=lambda p: p[1])
        src, op = re.search(r"src_([a-z0-9]+)", path), re.match(r"op_([a-z]+)_", path)
        label = "tensor " + (src[1] if src else path) + (f" ({op[1]})" if op else "")
        flops[label] = (achieved, c.get(f"sm__ops_path_tensor_{path}.sum.peak_sustained_elapsed"
                                        ".per_second"))
    out: dict[str, Any] = {"precision": None, "flop_per_s": None, "flop_peak_per_s": None}
    if flops:
        best = max(flops, key=lambda k: flops[k][0])
        out.update(precision=best if flops[best][0] > 0 else None, flop_per_s=flops[best][0],
                   flop_peak_per_s=flops[best][1] if flops[best][0] > 0 else None)
    dram = c.get("dram__bytes.sum.per_second")
    dram_peak_cycle, dram_clock = c.get("dram__bytes.sum.peak_sustained"), \
        c.get("dram__cycles_elapsed.avg.per_second")
    out["dram_bytes_per_s"] = dram
    out["dram_peak_bytes_per_s"] = dram_peak_cycle * dram_clock \
        if dram_peak_cycle is not None and dram_clock is not None else None
    flop, peak, dram_peak = out["flop_per_s"], out["flop_peak_per_s"], out["dram_peak_bytes_per_s"]
    out["intensity"] = flop / dram if flop is not None and dram else None
    out["roof"] = out["roof_pct"] = None
    if peak and dram_peak and out["intensity"] and flop:
        memory_roof = out["intensity"] * dram_peak
        out["roof"] = "compute" if peak <= memory_roof else "memory"
        out["roof_pct"] = 100.0 * flop / min(peak, memory_roof)
    return out


def _verdict_of_family(family: dict[str, Any]) -> str:
    ids = {f.get("id") for f in family.get("findings") or []}
    if "tensor-cores" in ids:
        return "on"
    if "no-tensor-cores" in ids or family.get("tensor_pct") is not None:
        return "off"
    return "unknown"


def ncu_rows(where: str, csv_path: Path, roof_util: bool) -> list[Row]:
    """Tensor Core verdict per kernel family against the tensor-pipe counters, and each
    launch's roofline against the hand computation (and, with ``roof_util``, the roof share
    against ncu's own pipe or DRAM utilisation)."""
    from nsbridge.model.nsight.ncu import kernel_family

    launches = {str(c["_id"]): c for c in read_raw_page(csv_path)}
    if not launches:
        return [Row("Tensor Core verdict vs tensor-pipe counters", where,
                    verdict=f"FAIL: {csv_path.name} holds no launch")]
    ncu = _analyze([csv_path]).get("ncu") or {}
    kernels = ncu.get("kernels") or []
    rows: list[Row] = []

    agree, bad, judged = 0, [], 0
    for family in ncu.get("families") or []:
        members = [launches.get(str(k["launch"])) for k in kernels
                   if kernel_family(str(k["kernel"])) == family["kernel"]]
        pcts = [(tensor_pipe_pct(m), float(m.get("gpu__time_duration.sum") or 0.0))
                for m in members if m is not None]
        known = [(p, d) for p, d in pcts if p is not None]
        ours = _verdict_of_family(family)
        if not known:
            theirs = "unknown"
        else:
            weight = sum(d for _, d in known)
            mean = sum(p * d for p, d in known) / weight if weight else \
                sum(p for p, _ in known) / len(known)
            theirs = "on" if mean >= TENSOR_ON_PCT else "off"
        judged += 1
        if ours == theirs:
            agree += 1
        else:
            bad.append(f"{family['kernel'][:80]}: nsbridge says {ours}, the tensor-pipe "
                       f"counters say {theirs}")
    ons = sum(1 for f in ncu.get("families") or [] if _verdict_of_family(f) == "on")
    rows.append(Row("Tensor Core verdict vs tensor-pipe counters", where,
                    f"{ons} of {judged} families on Tensor Cores",
                    f"{agree} of {judged} agree", f"{len(bad)} differ",
                    f"equal (on: pipe >= {TENSOR_ON_PCT:g} % of peak)",
                    "FAIL" if bad or not judged else "ok", bad))

    worst, worst_what, bad, compared, util = 0.0, "", [], 0, []
    for k in kernels:
        raw = launches.get(str(k["launch"]))
        if raw is None or k.get("roof_pct") is None:
            continue
        hand = hand_roofline(raw)
        compared += 1
        if hand["roof"] != k.get("roof") or hand["precision"] != k.get("precision"):
            bad.append(f"launch {k['launch']} {str(k['kernel'])[:60]}: roof/precision "
                       f"{k.get('roof')}/{k.get('precision')} vs by hand "
                       f"{hand['roof']}/{hand['precision']}")
        for key in ("flop_per_s", "dram_bytes_per_s", "intensity", "roof_pct"):
            if k.get(key) is None or hand.get(key) is None:
                bad.append(f"launch {k['launch']}: {key} nsbridge {k.get(key)}, by hand "
                           f"{hand.get(key)}")
                continue
            pct = dev_pct(float(k[key]), float(hand[key]))
            if pct > worst:
                worst, worst_what = pct, f"{key}, launch {k['launch']}"
            if pct > TOL_PCT:
                bad.append(f"launch {k['launch']} {key}: nsbridge {k[key]:.6g}, by hand "
                           f"{hand[key]:.6g} ({pct:.2f} %)")
        own = _own_utilisation(raw, hand)
        if roof_util and own is not None:
            util.append((k, hand["roof_pct"], own))
    if compared:
        rows.append(Row("roofline vs hand computation from ncu raw metrics", where,
                        f"{compared} launches", "by hand (csv + ncu's units)",
                        f"max {worst:.3f} %" + (f" ({worst_what})" if worst_what else ""),
                        f"{TOL_PCT:g} %", "FAIL" if bad else "ok", bad))
    else:
        rows.append(Row("roofline vs hand computation from ncu raw metrics", where,
                        verdict="n/a: no launch with roofline metrics (capture without "
                                "the roofline section)"))
    for k, share, (metric, value) in util:
        off = abs(share - value)
        rows.append(Row("roof share vs ncu's own utilisation", f"{where} launch {k['launch']}",
                        f"{share:.2f} % of the {k.get('roof')} roof", f"{value:.2f} % ({metric})",
                        f"{off:.2f} points", f"{UTIL_POINTS:g} point",
                        "ok" if off <= UTIL_POINTS else "check",
                        [f"{str(k['kernel'])[:100]}: precision {k.get('precision')}"]))
    return rows


def _own_utilisation(raw: dict[str, Any], hand: dict[str, Any]) -> Optional[tuple[str, float]]:
    """ncu's own utilisation of what binds: the tensor pipe (tensor precisions), the FMA
    pipe (CUDA-core FLOPs) or DRAM throughput (memory roof), elapsed cycles."""
    if hand["roof"] == "memory":
        names = ["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                 "dram__throughput.avg.pct_of_peak_sustained_elapsed"]
    elif str(hand["precision"]).startswith("tensor"):
        names = ["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"]
    elif hand["roof"] == "compute":
        names = ["sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed"]
    else:
        return None
    for name in names:
        if raw.get(name) is not None:
            return name, float(raw[name])
    return None


def ncu_checks(rec: Record) -> list[Row]:
    rows: list[Row] = []
    for case, step in NCU_CASES.items():
        path = rec.root / "ncu" / f"{case}.raw.csv"
        if not path.is_file():
            rows.append(rec.missing("Tensor Core verdict and roofline (--set full)",
                                    f"ncu/{case}", f"ncu/{case}.raw.csv", step))
            continue
        rows += ncu_rows(f"ncu/{case}", path, roof_util=True)
    for run in DEEP_RUNS:
        for path in sorted((rec.root / "runs" / run).glob("*.raw.csv")):
            rows += ncu_rows(f"runs/{run}/{path.name}", path, roof_util=False)
    return rows


def deep_plan_checks(rec: Record) -> list[Row]:
    """Every planned op of the deep pass profiled, with its kernels listed."""
    rows: list[Row] = []
    for run in DEEP_RUNS:
        report_path = rec.root / "runs" / run / "report.json"
        check = "deep pass: planned ops profiled"
        if not report_path.is_file():
            rows.append(rec.missing(check, f"runs/{run}", f"runs/{run}/report.json",
                                    TRIAGE_RUNS[run]))
            continue
        ncu = json.loads(report_path.read_text(encoding="utf-8")).get("ncu")
        if not ncu:
            rows.append(Row(check, f"runs/{run}", verdict="n/a: the run has no deep pass "
                                                          "(a CPU run, or the pass failed)"))
            continue
        planned = [p["op"] for p in (ncu.get("plan") or {}).get("ops") or []]
        seen: dict[str, dict[str, int]] = {}
        for k in ncu.get("kernels") or []:
            if k.get("attribution") == "nvtx" and k.get("op"):
                names = seen.setdefault(str(k["op"]), {})
                names[str(k["kernel"])] = names.get(str(k["kernel"]), 0) + 1
        done = [op for op in planned if op in seen]
        details = [f"{op}: " + ("; ".join(f"{n}x {name[:70]}" for name, n in
                                          sorted(seen[op].items(), key=lambda x: -x[1]))
                                if op in seen else "NO KERNEL PROFILED") for op in planned]
        rows.append(Row(check, f"runs/{run}", f"{len(done)} of {len(planned)}",
                        f"{len(planned)} planned", "", "all",
                        "ok" if planned and len(done) == len(planned) else "FAIL", details))
    return rows


# -- gates, torch.compile and CUDA graphs -----------------------------------------------

def gate_checks(rec: Record) -> list[Row]:
    expect = {"same": "pass (unchanged code)", "bf16": "the float32 -> bfloat16 switch named",
              "extra": "regression (the planted kernel)"}
    rows: list[Row] = []
    for name, step in GATES.items():
        path = rec.root / "gates" / name / "gate.json"
        check = f"gate on GPU: {name}"
        if not path.is_file():
            rows.append(rec.missing(check, f"gates/{name}", f"gates/{name}/gate.json", step))
            continue
        gate = json.loads(path.read_text(encoding="utf-8"))
        outcome = str(gate.get("outcome"))
        regressions = gate.get("regressions") or []
        named = [f"{r.get('what')} ({r.get('basis')}): {r.get('detail')}" for r in regressions]
        if name == "same":
            verdict = {"pass": "ok", "inconclusive": "check"}.get(outcome, "FAIL")
            ours = outcome
        elif name == "bf16":
            dtype = [r for r in gate.get("ops") or []
                     if r.get("basis") == "dtype" and "bfloat16" in str(r.get("work"))]
            named = [f"{r.get('op')}: {r.get('status')}, {r.get('work')}" for r in dtype]
            ours = f"{outcome}; {len(dtype)} ops named as now in bfloat16"
            verdict = "ok" if dtype else "FAIL"
        else:
            ours = f"{outcome}; " + ", ".join(str(r.get("what")) for r in regressions)
            verdict = "ok" if outcome == "regression" else "FAIL"
        rows.append(Row(check, f"gates/{name}", ours, expect[name], "", "", verdict,
                        named + [f"exit code {gate.get('exit_code')}"]))
    return rows


def attribution_checks(rec: Record) -> list[Row]:
    """Kernel time tied to an op in the torch.compile and CUDA-graph runs."""
    import nsbridge

    rows: list[Row] = []
    for run in ATTRIBUTION_RUNS:
        folder = rec.root / "runs" / run
        check = f"{run}: kernel time attributed to ops"
        if not (folder / "report.json").is_file():
            rows.append(rec.missing(check, f"runs/{run}", f"runs/{run}/report.json",
                                    TRIAGE_RUNS[run]))
            continue
        frame = nsbridge.load(folder).kernels
        kernels = frame[frame["kind"] == "kernel"]
        total = float(kernels["device_us"].sum())
        if not total:
            rows.append(Row(check, f"runs/{run}", verdict="n/a: no kernel in the window "
                                                          "(a CPU run)"))
            continue
        tied = kernels["attribution"].isin(["external_id", "launch_containment"])
        graph = int((kernels["via"] == "cuda_graph").sum())
        if run == "cudagraph":
            # graph.replay() is no op: torch.profiler ties a replay's kernels to the
            # cudaGraphLaunch alone, so the check is that they are all named as replayed
            check = f"{run}: kernel time named as CUDA graph replays"
            tied = kernels["via"] == "cuda_graph"
        share = 100.0 * float(kernels.loc[tied, "device_us"].sum()) / total
        triton = int((kernels["source"].notna()
                      | kernels["name"].str.contains("triton", na=False)).sum())
        by_rule = kernels.groupby("attribution")["device_us"].sum().round(3).to_dict()
        rows.append(Row(check, f"runs/{run}", f"{share:.1f} % of {total:.1f} µs", "",
                        "", f">= {ATTRIBUTED_PCT:g} %",
                        "ok" if share >= ATTRIBUTED_PCT else "check",
                        [f"kernel µs by rule: {by_rule}", f"{graph} kernel rows via cuda_graph",
                         f"{triton} Triton kernel rows (source file or name)"]))
    return rows


# -- the table ----------------------------------------------------------------------------

CHECKS: list[Callable[[Record], list[Row]]] = [
    nsys_checks, key_averages_checks, deep_plan_checks, ncu_checks, attribution_checks,
    gate_checks]


def compare(folder: Path, steps_tsv: Optional[Path] = None) -> list[Row]:
    """Every comparison the record allows, in the issue's order."""
    with tempfile.TemporaryDirectory(prefix="gpu-record-in-") as scratch:
        root = unpacked(folder, Path(scratch))
        rec = Record(root, read_steps(steps_tsv or folder / "steps.tsv"))
        rows: list[Row] = []
        for check in CHECKS:
            try:
                rows += check(rec)
            except Exception as exc:        # noqa: BLE001 - one broken input, not the table
                rows.append(Row(check.__name__, str(folder), verdict=f"FAIL: {exc!r}"))
        return rows


def _cell_text(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(rows: Sequence[Row], folder: Path, steps: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        key = row.verdict.split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    said = ", ".join(f"{counts[k]} {k}" for k in VERDICT_ORDER if k in counts)
    step_counts: dict[str, int] = {}
    for status in steps.values():
        key = status.split(":")[0].split(" (")[0]
        step_counts[key] = step_counts.get(key, 0) + 1
    lines = ["# GPU record: comparisons", "",
             f"Input: `{folder}`. Rows: {said or 'none'}."
             + (" Steps (steps.tsv): " + ", ".join(f"{v} {k}" for k, v in step_counts.items())
                + "." if steps else ""), "",
             "| check | where | nsbridge | tool's own | deviation | tolerance | verdict |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell_text(c) for c in (
            row.check, row.where, row.ours, row.theirs, row.deviation, row.tolerance,
            row.verdict)) + " |")
    detailed = [row for row in rows if row.details]
    if detailed:
        lines += ["", "## Details", ""]
        for row in detailed:
            lines.append(f"- **{row.check}** ({row.where}):")
            lines += [f"  - {_cell_text(d)}" for d in row.details[:40]]
            if len(row.details) > 40:
                lines.append(f"  - ... {len(row.details) - 40} more")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, help="write the markdown here (else stdout)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--steps-tsv", type=Path, help="steps.tsv (default: FOLDER/steps.tsv)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a row says FAIL")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    rows = compare(args.folder, args.steps_tsv)
    text = render(rows, args.folder, read_steps(args.steps_tsv or args.folder / "steps.tsv"))
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1), encoding="utf-8")
    return 1 if args.check and any(r.verdict.startswith("FAIL") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
