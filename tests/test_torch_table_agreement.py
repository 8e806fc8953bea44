"""Real H200 runs of the bundled examples: nsbridge's numbers against torch's own table.

Each trace comes with torch's ``key_averages().table()`` from the SAME profiler session
(tests/data/torch/SOURCES.md), an oracle independent of nsbridge's trace reading.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nsbridge.api import analyze

from conftest import TORCH_DATA

H200 = TORCH_DATA / "h200"
_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}
_MEM = {"B": 1 / 2**20, "KB": 1 / 2**10, "MB": 1.0, "GB": 2**10}   # torch's units are 1024-based


def key_averages(path: Path) -> dict[str, dict[str, float]]:
    """torch's table as {op: {"Self CUDA": µs, "CUDA total": µs, "CUDA Mem": MiB, ...}}.
    Cells are separated by two or more spaces (names hold single ones). Left out: names
    torch cut ('...'), ProfilerStep*, and rows with no CPU time at all (kernels, and the
    GPU-timeline copies of annotations such as Optimizer.step#SGD.step)."""
    lines = path.read_text().splitlines()
    split = lambda line: re.split(r"\s{2,}", line.strip())  # noqa: E731
    header = split(lines[1])
    table: dict[str, dict[str, float]] = {}
    for line in lines[3:]:
        if line.startswith("-"):
            break
        cells = dict(zip(header, split(line), strict=True))
        name = cells.pop("Name")
        row = {k: _number(v) for k, v in cells.items()}
        if name.endswith("...") or name == "ProfilerStep*" or row["CPU total"] == 0:
            continue
        table[name] = row
    return table


def _number(text: str) -> float:
    match = re.fullmatch(r"(-?[\d.]+)\s*(us|ms|s|B|KB|MB|GB|%)?", text)
    assert match, text
    value, unit = float(match[1]), match[2]
    return value * (_UNITS.get(unit) or _MEM.get(unit) or 1.0)


@pytest.fixture(scope="module", params=["train_cnn", "sync_bound", "input_bound"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    name = request.param
    result = analyze([H200 / f"{name}_h200.json.gz"], out=tmp_path_factory.mktemp(name) / "r")
    return name, result.report, key_averages(H200 / f"{name}_h200.key_averages.txt")


def _close(ours: float, theirs: float, shown: str) -> bool:
    """Equal to the precision torch printed (3 decimals of µs or ms)."""
    return ours == pytest.approx(theirs, abs=1.0 if shown == "ms" else 1e-3 + 1e-6 * theirs)


def test_device_times_equal_torchs_table(run: tuple) -> None:
    name, report, table = run
    ops = {op["name"]: op for op in report["ops"]}
    both = sorted(set(ops) & set(table))
    assert len(both) >= 10, both
    for op in both:
        theirs = table[op]
        assert ops[op]["calls"] == theirs["# of Calls"], op
        assert ops[op]["device_self_us"] == pytest.approx(theirs["Self CUDA"], abs=2e-3), op
        assert ops[op]["device_total_us"] == pytest.approx(theirs["CUDA total"], abs=2e-3), op


def test_net_memory_equals_torchs_cuda_mem(run: tuple) -> None:
    name, report, table = run
    ops = {op["name"]: op for op in report["ops"]}
    for op in sorted(set(ops) & set(table)):
        # torch prints 2 decimals of KB or MB
        assert ops[op]["mem_net_mib"] == pytest.approx(table[op]["CUDA Mem"], abs=0.006), op
    assert any(ops[op]["mem_mib"] != ops[op]["mem_net_mib"] for op in ops)


def test_verdicts_hold_on_a_real_gpu(run: tuple) -> None:
    name, report, _ = run
    expected = {"train_cnn": "cpu-bound", "sync_bound": "sync-bound",
                "input_bound": "input-bound"}[name]
    assert report["verdict"]["label"] == expected, report["verdict"]


def test_sync_example_cost_has_both_halves(tmp_path: Path) -> None:
    report = analyze([H200 / "sync_bound_h200.json.gz"], out=tmp_path / "r").report
    numbers = report["verdict"]["numbers"]
    assert numbers["sync_calls_per_step"] == pytest.approx(129, abs=0.5)
    assert numbers["sync_gpu_idle_share"] > 0.5 > numbers["sync_blocked_share"] > 0.1
    evidence = " ".join(report["verdict"]["evidence"])
    assert "idle after syncs" in evidence and "blocked" in evidence
    assert report["recommendations"][0]["id"] == "remove-syncs"


NESTED = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                            torch.nn.Linear(64, 8))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
x = torch.randn(32, 64)
for _ in range(12):
    opt.zero_grad()
    y = model(x) * 0.5
    (y.pow(2).mean() + 0.1 * y.abs().mean()).backward()
    opt.step()
"""


@pytest.mark.slow
def test_calls_and_times_equal_torchs_table_where_ops_nest_in_themselves(tmp_path: Path) -> None:
    """Regression: aten::mean, aten::div, aten::div_ and aten::mul run inside an op of the
    same name (AdamW's step, a scalar mul); torch's table counts such a pair once
    (EventList._remove_dup_nodes), nsbridge counted both: 12 calls of aten::mean against
    torch's 6, its total time twice."""
    from conftest import run_nsbridge

    (tmp_path / "nested.py").write_text(NESTED)
    done = run_nsbridge("-q", "triage", "--out", str(tmp_path / "run"),
                        str(tmp_path / "nested.py"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = key_averages(tmp_path / "run" / "key_averages.txt")
    ops = {op["name"]: op for op in json.loads((tmp_path / "run" / "report.json").read_text())[
        "ops"]}
    both = sorted(set(ops) & set(table))
    assert {"aten::mean", "aten::div", "aten::mul"} <= set(both)
    for op in both:
        theirs = table[op]
        assert ops[op]["calls"] == theirs["# of Calls"], op
        assert ops[op]["cpu_total_us"] == pytest.approx(theirs["CPU total"], abs=1.0, rel=1e-4), op
        assert ops[op]["cpu_self_us"] == pytest.approx(theirs["Self CPU"], abs=1.0, rel=1e-4), op


GLOO = TORCH_DATA / "gloo"


@pytest.mark.parametrize("name, calls_per_step", [
    ("fsdp2_rank0", {"all_gather": 9.0, "reduce_scatter": 5.0}),   # 5 units, 4 + 5 gathers
    ("ddp_rank1", {"all_reduce": 1.0})])                            # one bucket a step
def test_a_gloo_rank_counts_the_scripts_collectives_and_ranks_ops_as_torch_does(
        name: str, calls_per_step: dict[str, float], tmp_path: Path) -> None:
    """Real 2-rank gloo jobs on this project's CPU machine (SOURCES.md): every collective
    counted once per call the script made (FSDP2's reduce-scatters are gloo all-reduces on
    gloo's threads: no all_reduce), gloo's worker-thread ranges no ops (torch's own table
    lists none), every op's self CPU time and calls as torch's table has them, and the wait
    for gradient synchronisation inside loss.backward() counted as backward."""
    report = analyze([GLOO / f"{name}.json.gz"], out=tmp_path / "r").report
    torch_table = key_averages(GLOO / f"{name}.key_averages.txt")
    assert {c["kind"]: c["per_step"] for c in report["collectives"]} == calls_per_step
    assert all(c["source"] == "c10d ops" and c["time_us"] > 0 for c in report["collectives"])
    ours = {op["name"]: op for op in report["ops"]}
    assert not [n for n in ours if n.startswith("gloo:")]
    assert not [n for n in torch_table if n.startswith("gloo:")]
    for op_name, row in torch_table.items():
        if op_name.startswith("nsbridge::"):
            assert op_name not in ours               # nsbridge's own ranges are no ops
            continue
        assert ours[op_name]["calls"] == row["# of Calls"], op_name
        assert ours[op_name]["cpu_self_us"] == pytest.approx(row["Self CPU"], abs=1.0), op_name
    shares = report["steps"]["mean"]["shares"]
    assert shares["backward"] > 0.5 and shares["other"] < 0.1, shares
