"""Nsight Compute CSV exports are untrusted input: real exports (raw and details pages)
mutated at random (seeded) give a report or nsbridge's own error through `nsbridge analyze`,
never a traceback; a value that loses its unit is left out with a note, never shown
unconverted. Fast tier a few hundred cases, slow tier hundreds more, `make fuzz` thousands
(tests/sweeps.py)."""

from __future__ import annotations

import csv
import random
import re
import shutil
from pathlib import Path

import pytest

import nsbridge
from nsbridge.errors import NsbridgeError

from conftest import DATA, ROOT, analyzed_or_refused
from sweeps import fast_share, seeded, slow_share

SOURCES = sorted((DATA / "ncu").glob("*.raw.csv")) + sorted(
    (ROOT.parent / "shared" / "fixtures" / "gpu-h200" / "ncu").glob("*.details.csv"))
ODD = ["x", "1.5", "", "n/a", "1e400", "-5", "nan", '"', "1,2,3", "\x00", "ID"]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _cell(rng: random.Random, line: str) -> str:
    cells = line.rstrip("\n").split(",")
    cells[rng.randrange(len(cells))] = rng.choice(ODD)
    return ",".join(cells) + "\n"


def mutate(text: str, rng: random.Random) -> tuple[str, str]:
    lines = _lines(text)
    if len(lines) < 3 or len(text) < 2:     # mutated away already: add a line to work on
        lines = lines + ["\n", "\n"]
        text = "".join(lines)
    kind = rng.choice(["cell", "cell", "id", "units", "shuffle", "cat", "bom", "short",
                       "truncate", "drop-column", "blank"])
    i = rng.randrange(1, len(lines))
    if kind == "cell":
        lines[i] = _cell(rng, lines[i])
    elif kind == "id":
        rest = lines[i][lines[i].index(","):] if "," in lines[i] else "\n"
        lines[i] = '"' + rng.choice(ODD) + '"' + rest
    elif kind == "units":
        lines[1] = ",".join(lines[1].split(",")[: rng.randrange(1, 20)]) + "\n"
    elif kind == "shuffle":
        head = lines[0].rstrip("\n").split(",")
        rng.shuffle(head)
        lines[0] = ",".join(head) + "\n"
    elif kind == "cat":
        lines = lines + lines
    elif kind == "bom":
        lines[0] = "\ufeff" + lines[0]
    elif kind == "short":
        lines[i] = ",".join(lines[i].split(",")[: rng.randrange(1, 8)]) + "\n"
    elif kind == "truncate":
        return text[: rng.randrange(len(text))], kind
    elif kind == "drop-column":
        col = rng.randrange(1, 12)
        lines = [",".join(c for j, c in enumerate(line.rstrip("\n").split(",")) if j != col)
                 + "\n" for line in lines]
    elif kind == "blank":
        lines[i] = "\n"
    return "".join(lines), kind


def _check(tmp: Path, case: int) -> None:
    rng = random.Random(case)
    source = SOURCES[case % len(SOURCES)]
    text, what = source.read_text(encoding="utf-8"), []
    for _ in range(rng.randint(1, 3)):
        text, kind = mutate(text, rng)
        what.append(kind)
    path = tmp / f"case{case}{''.join(source.suffixes)}"
    path.write_text(text, encoding="utf-8")
    analyzed_or_refused(path, tmp / f"run{case}", f"case {case} ({source.name}: {what})")


def test_a_units_row_cut_short_leaves_its_metrics_out_with_a_note(tmp_path: Path) -> None:
    """Regression (fuzzing): values whose unit is missing were shown unconverted
    ('3.487e-06 ms'); now they are left out and the note says which."""
    source = DATA / "ncu" / "matmul_fp32_full.raw.csv"
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = ",".join(lines[1].split(",")[:12]) + "\n"
    (tmp_path / "cut.raw.csv").write_text("".join(lines), encoding="utf-8")
    report = nsbridge.analyze([tmp_path / "cut.raw.csv"], out=tmp_path / "run").report
    assert any("the units row stops before" in n for n in report["ncu"]["notes"])
    md = (tmp_path / "run" / "report.md").read_text()
    assert "e-0" not in md.split("## Kernels")[-1].split("\n## ")[0]
    without = "".join(lines[:1] + lines[2:])          # no units row at all: refused
    (tmp_path / "nounits.raw.csv").write_text(without, encoding="utf-8")
    with pytest.raises(NsbridgeError, match="no units row"):
        nsbridge.analyze([tmp_path / "nounits.raw.csv"], out=tmp_path / "run2")


@pytest.mark.skipif(not SOURCES, reason="no ncu CSV to mutate")
@pytest.mark.parametrize("block", range(4))
def test_mutated_ncu_csvs_give_a_report_or_a_clear_error(tmp_path: Path, block: int) -> None:
    for case in range(block * 60, block * 60 + 60):
        _check(tmp_path, case)


@pytest.mark.slow
@pytest.mark.skipif(not SOURCES, reason="no ncu CSV to mutate")
def test_thousands_of_mutated_ncu_csvs(tmp_path: Path) -> None:
    for case in seeded(1000, 2000):
        _check(tmp_path, case)


SWEEP_STRIDE = 29   # the fast tier's share of the sweep
# what a cell of each JSON type reads as in a CSV, and numbers no metric holds
SWEEP_VALUES = [*ODD, "[1, [2]]", "true"]
SWEEP_SOURCES = ["matmul_bf16_full.raw.csv",          # Hopper, every roofline metric
                 "train_cnn_nvtx_sections.raw.csv"]   # NVTX ranges, section metrics


def read_columns(header: list[str]) -> list[str]:
    """The columns of a raw page nsbridge reads: the launch's identity (every column not
    named like a metric) and each metric a built-in profile's quantities or the roofline
    (model/nsight/roofline.py) name."""
    from nsbridge.model.nsight import roofline

    texts = [p.read_text() for p in ROOT.joinpath("profiles").glob("*.yaml")]
    texts.append(Path(roofline.__file__).read_text())
    names = {m for text in texts for m in re.findall(r"[a-z0-9]+__[\w.{}]+", text)}
    names |= {name.format(op) for name in names if "{}" in name
              for fma, _, pair, _ in roofline.CUDA_CORE.values() for op in (fma, *pair)}
    return [h for h in header if "__" not in h or h in names
            or roofline._TENSOR_PATH.match(h)]


def _sweep() -> list[tuple[Path, int, str, bool]]:
    """(raw page, column, value, in every row) for each SWEEP_VALUES value in each column
    read, in the first launch's row or in all."""
    cases = []
    for source in (DATA / "ncu" / name for name in SWEEP_SOURCES):
        header = next(csv.reader(source.open(encoding="utf-8")))
        columns = [header.index(name) for name in read_columns(header)]
        cases += [(source, column, value, every) for column in columns
                  for value in SWEEP_VALUES for every in (False, True)]
    return cases


def _swept(tmp: Path, case: tuple[Path, int, str, bool]) -> None:
    source, column, value, every = case
    rows = list(csv.reader(source.open(encoding="utf-8")))
    for row in rows[2:] if every else rows[2:3]:     # under the header and the units row
        row[column] = value
    path = tmp / source.name
    with path.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(rows)
    where = "every launch" if every else "one launch"
    analyzed_or_refused(path, tmp / "run",
                        f"{source.name}: {rows[0][column]} = {value!r} in {where}")
    shutil.rmtree(tmp / "run", ignore_errors=True)


def test_every_read_column_with_a_wrong_type(tmp_path: Path) -> None:
    """Every SWEEP_STRIDE-th case of the sweep."""
    cases = _sweep()
    assert len(cases) >= 3000
    for case in fast_share(cases, SWEEP_STRIDE):
        _swept(tmp_path, case)


def _column_and_value(case: tuple[Path, int, str, bool]) -> tuple[str, str]:
    source, column, value, _ = case
    return next(csv.reader(source.open(encoding="utf-8")))[column], value


@pytest.mark.slow
def test_every_read_column_with_every_wrong_type(tmp_path: Path) -> None:
    """One source and placement of each column and value the fast tier left (tests/sweeps.py)."""
    for case in slow_share(_sweep(), SWEEP_STRIDE, _column_and_value):
        _swept(tmp_path, case)
