"""Nsight Compute readers on every real ncu file in the fixtures, checked against ncu itself.

Independent checks: the same report printed with auto-scaled and with base units must give
the same numbers after normalisation; a `.ncu-rep` read through NVIDIA's `ncu_report`
must give the numbers ncu printed in its CSV export of that report.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nsbridge.errors import NcuFormatError, TraceNotFoundError
from nsbridge.parse.ncu import number, parse_nvtx
from nsbridge.passes.ncu_pass import read_ncu_file
from nsbridge.parse.ncu_units import normalise

from conftest import DATA, ROOT

SHARED = ROOT.parent / "shared" / "fixtures"
NCU_FILES = sorted([*SHARED.glob("real/**/*.ncu-rep"), *SHARED.glob("gpu-h200/ncu/*"),
                    *SHARED.glob("real/derived-local/ncu-*/*.csv"),
                    *SHARED.glob("real/llm-perf-opt/kernel_*/ncu*.csv"),
                    *SHARED.glob("real/nsightful/*.csv")]) if SHARED.is_dir() else []
needs_shared = pytest.mark.skipif(not NCU_FILES, reason="../shared/fixtures is not beside the repo")


def _value(data, launch: int, metric: str) -> float:
    rows = data.metrics[(data.metrics["launch"] == launch) & (data.metrics["metric"] == metric)]
    assert len(rows), (metric, data.path.name)
    return float(rows["value"].iloc[0])


@pytest.mark.parametrize("unit, expected", [
    ("msecond", ("ns", 1e6)), ("us", ("ns", 1e3)), ("nsecond", ("ns", 1.0)),
    ("Mbyte", ("byte", 1e6)), ("Kbyte/block", ("byte/block", 1e3)),
    ("Gbyte/second", ("byte/s", 1e9)), ("Tbyte/s", ("byte/s", 1e12)),
    ("cycle/usecond", ("cycle/s", 1e6)), ("cycle/nsecond", ("cycle/s", 1e9)),
    ("Ghz", ("hz", 1e9)), ("%/Kbyte", ("%/byte", 1e-3)), ("register/thread", ("register/thread", 1.0)),
    ("inst", ("inst", 1.0)), ("%", ("%", 1.0)), ("", ("", 1.0))])
def test_units_normalise(unit: str, expected: tuple) -> None:
    got = normalise(unit)
    assert got.known and got.unit == expected[0] and got.factor == pytest.approx(expected[1])


def test_unknown_units_are_kept_and_flagged() -> None:
    got = normalise("furlong/fortnight")
    assert (got.unit, got.factor, got.known) == ("furlong/fortnight", 1.0, False)


def test_numbers_with_separators_and_missing_values() -> None:
    assert number('21,058,944') == 21058944 and number("4,963,609,951.19") == 4963609951.19
    assert math.isnan(number("n/a")) and math.isnan(number("nan")) and math.isnan(number(""))


def test_nvtx_stack_keeps_op_names_with_colons() -> None:
    cell = ('1421  "nsbridge:step 4:none:none:RGB:0xff:REGISTERED:step 4"  '
            '"nsbridge:aten::relu:none:none:RGB:0xff:REGISTERED:aten::relu" ')
    assert parse_nvtx(cell) == (("nsbridge", "step 4"), ("nsbridge", "aten::relu"))
    assert parse_nvtx("") == ()


@needs_shared
@pytest.mark.parametrize("path", [   # an .ncu-rep is read in a child process: slow
    pytest.param(p, marks=pytest.mark.slow) if p.suffix == ".ncu-rep" else p
    for p in NCU_FILES], ids=lambda p: str(p.relative_to(SHARED)))
def test_every_real_ncu_file_reads(path: Path) -> None:
    if path.suffix == ".ncu-rep":
        pytest.importorskip("ncu_report")
    data = read_ncu_file(path)
    assert len(data.launches) >= 1 and not data.metrics.empty
    assert data.launches["launch"].is_unique
    durations = data.metrics[data.metrics["metric"] == "gpu__time_duration.sum"]
    if "RooflineChart" not in path.name:
        assert len(durations) and (durations["unit"] == "ns").all(), path.name
        assert (durations["value"].dropna() > 0).all()


@needs_shared
def test_auto_scaled_and_base_units_agree() -> None:
    folder = SHARED / "real" / "derived-local" / "ncu-2022.3-import"
    for scaled, base in (("MW_Baseline_raw.csv", "MW_Baseline_raw_base-units.csv"),
                         ("MW_Baseline_details.csv", "MW_Baseline_details_base-units.csv")):
        a, b = read_ncu_file(folder / scaled), read_ncu_file(folder / base)
        merged = a.metrics.merge(b.metrics, on=["launch", "metric", "section"],
                                 suffixes=("_a", "_b"))
        numeric = merged.dropna(subset=["value_a", "value_b"])
        assert len(numeric) > 100
        assert (numeric["unit_a"] == numeric["unit_b"]).all()
        # auto-scaled values are printed with 2 (details) or 6 (raw) decimals in their scaled
        # unit, so a few tiny
        # ones lose digits; a wrong unit factor would break nearly all
        close = [math.isclose(x, y, rel_tol=5e-3, abs_tol=0.006)
                 for x, y in zip(numeric["value_a"], numeric["value_b"])]
        assert sum(close) / len(close) > 0.995, numeric[[not c for c in close]].head()


@pytest.mark.slow      # an .ncu-rep is read in a child process
@needs_shared
@pytest.mark.parametrize("report, export", [
    ("gpu-h200/ncu/matmul_bf16_full.ncu-rep", "gpu-h200/ncu/matmul_bf16_full.raw.csv"),
    ("real/ncar-gpu-workshop/MW_Baseline.ncu-rep",
     "real/derived-local/ncu-2022.3-import/MW_Baseline_raw_base-units.csv")])
def test_report_reader_equals_ncus_own_export(report: str, export: str) -> None:
    pytest.importorskip("ncu_report")
    rep, csv = read_ncu_file(SHARED / report), read_ncu_file(SHARED / export)
    assert len(rep.launches) == len(csv.launches)
    for metric in ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                   "launch__registers_per_thread", "dram__bytes_read.sum"):
        for launch in csv.launches["launch"]:
            assert _value(rep, launch, metric) == pytest.approx(_value(csv, launch, metric),
                                                                rel=1e-3), (metric, launch)


def test_h200_cnn_csv_gives_every_launch_its_nvtx_stack() -> None:
    data = read_ncu_file(DATA / "ncu" / "train_cnn_nvtx_sections.raw.csv")
    assert len(data.launches) == 39
    stacks = data.launches["nvtx"]
    assert all(s and s[-1][1].startswith("aten::") for s in stacks)   # the op is innermost
    # forward launches sit under the main thread's step range; backward ones run on the
    # autograd thread, whose stack starts at a module's backward range
    assert sum(s[0] == ("nsbridge", "step 4") for s in stacks) == 18
    assert all(s[0][1].endswith("[backward]") or s[0] == ("nsbridge", "step 4")
               or s[0][1].startswith("aten::") for s in stacks)
    assert stacks.iloc[0] == (("nsbridge", "step 4"), ("nsbridge", "model"),
                              ("nsbridge", "model.features"), ("nsbridge", "model.features.4"),
                              ("nsbridge", "aten::relu"))


def test_not_an_ncu_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("name,value\na,1\n")
    with pytest.raises(NcuFormatError, match="not an Nsight Compute CSV export"):
        read_ncu_file(bad)
    with pytest.raises(TraceNotFoundError):
        read_ncu_file(tmp_path / "missing.ncu-rep")
