"""Several ranks: launched through torch.distributed.run, or under a launcher; per-rank
folders, summaries merged into the cross-rank report, a planted straggler named."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from nsbridge.api import analyze
from nsbridge.job.identity import detect, job_id
from nsbridge.model.ranks.cross_rank import cross_rank

from conftest import ROOT, TORCH_DATA, first_fix, flat

DDP = str(ROOT / "examples" / "train_ddp.py")


def _nsbridge(*args: str, cwd: Path, env: dict | None = None, launcher: bool = False):
    prefix = ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m",
               "nsbridge"] if launcher else [sys.executable, "-m", "nsbridge"])
    return subprocess.run([*prefix, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def _check_straggler_run(run: Path) -> dict:
    report = json.loads((run / "report.json").read_text())
    for rank in ("rank-00", "rank-01"):
        for name in ("trace.json.gz", "child.json", "summary.json"):
            assert (run / rank / name).is_file(), (rank, name)
    dist = report["distributed"]
    assert [r["rank"] for r in dist["ranks"]] == [0, 1]
    assert all(r["step_ms"] > 0 and r["status"] == "ok" for r in dist["ranks"])
    reduces = [c for c in dist["collectives"] if c["kind"] == "all_reduce"]
    assert sorted(c["rank"] for c in reduces) == [0, 1]
    assert all(c["count"] > 0 and c["bytes"] > 0 and c["time_us"] > 0 for c in reduces)
    assert dist["straggler"]["verdict"] == "straggler" and dist["straggler"]["rank"] == 1
    assert first_fix(report) == "straggler"
    manifest = json.loads((run / "manifest.json").read_text())
    ranks = manifest["passes"][-1]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["host"] for r in ranks)
    return report


@pytest.mark.slow
def test_nproc_per_node_names_a_planted_straggler(tmp_path: Path) -> None:
    proc = _nsbridge("triage", "--nproc-per-node", "2", "--timeout", "120", "--out",
                     str(tmp_path / "run"), DDP, cwd=tmp_path,
                     env={"NSBRIDGE_EXAMPLE_SLOW_RANK": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "STRAGGLER: rank 1" in proc.stdout
    _check_straggler_run(tmp_path / "run")
    # merged again later from the summaries alone
    again = analyze([tmp_path / "run"], out=tmp_path / "again").report
    assert again["distributed"]["straggler"]["rank"] == 1


@pytest.mark.slow
def test_fsdp2_on_gloo_counts_the_scripts_collectives_once(tmp_path: Path) -> None:
    """FSDP2 on 2 gloo ranks: per step 9 all-gathers (4 blocks and the root before forward,
    the 4 blocks again before backward: the root's parameters stay gathered) and 5
    reduce-scatters, as the script makes them, no all-reduce (gloo runs each
    reduce-scatter as one); no gloo range among the ops; the wait for the reduce-scatters
    inside loss.backward() is backward, not other."""
    proc = _nsbridge("-q", "triage", "--nproc-per-node", "2", "--timeout", "300", "--out",
                     str(tmp_path / "run"), str(ROOT / "examples" / "train_fsdp2.py"),
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    per_rank = {(c["rank"], c["kind"]): c["per_step"]
                for c in report["distributed"]["collectives"]}
    assert per_rank == {(r, k): n for r in (0, 1)
                        for k, n in (("all_gather", 9.0), ("reduce_scatter", 5.0))}
    assert not [op["name"] for op in report["ops"] if op["name"].startswith("gloo:")]
    shares = report["steps"]["mean"]["shares"]
    assert shares["backward"] > shares["other"] and shares["other"] < 0.1, shares
    assert report["steps"]["detected_by"] == "optimizer"
    for row in report["distributed"]["ranks"]:
        assert row["collective_ms_per_step"] + row["work_ms_per_step"] == \
            pytest.approx(row["step_ms"], abs=0.002)


@pytest.mark.slow
def test_started_under_torchrun_gives_the_same_report(tmp_path: Path) -> None:
    proc = _nsbridge("-q", "triage", "--timeout", "120", "--out", str(tmp_path / "run"), DDP,
                     cwd=tmp_path, env={"NSBRIDGE_EXAMPLE_SLOW_RANK": "1"}, launcher=True)
    assert proc.returncode == 0, proc.stderr
    assert "rank 0 writes the merged report" in flat(proc.stdout)      # rank 1's own line
    _check_straggler_run(tmp_path / "run")


@pytest.mark.slow
def test_a_failing_rank_is_named_and_the_others_kept(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for step in range(8):\n"
        "    if dist.get_rank() == 1 and step == 5:\n"
        "        raise RuntimeError('rank one broke')\n"
        "    m(torch.randn(2, 4)).sum().backward(); opt.step()\n"
        "dist.destroy_process_group()\n")
    proc = _nsbridge("triage", "--nproc-per-node", "2", "--timeout", "120", "--out",
                     str(tmp_path / "run"), str(script), cwd=tmp_path)
    assert proc.returncode != 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    failed = {f["rank"]: f for f in report["distributed"]["failed"]}
    assert (failed[1]["error"]["type"], failed[1]["error"]["message"]) == (
        "RuntimeError", "rank one broke")
    assert (failed[1]["error"]["file"], failed[1]["error"]["line"]) == (str(script), 7)
    assert (tmp_path / "run" / "rank-00" / "child.json").is_file()
    # the run's error names a rank that failed, with its status, here and on stderr
    error = report["error"]
    assert error["type"] == "RankFailed" and error["rank"] in failed, error
    named = f"rank {error['rank']} ended with status {failed[error['rank']]['status']}"
    assert error["message"].startswith(named), error
    assert f"nsbridge: error: {named}" in proc.stderr
    # rank 1's crash makes rank 0 fail too ("Connection closed by peer"), later: the
    # run's error names rank 1, the cause, as torchrun does
    assert error["rank"] == 1, error
    assert list(failed)[0] == 1


def test_the_first_rank_to_fail_is_named_before_its_consequences() -> None:
    def summary(rank: int, status: str, at: Any) -> dict[str, Any]:
        return {"rank": rank, "status": status, "exit_code": 1, "profiled": False,
                "step_ms": [], "error": {"type": "RuntimeError", "message": "x", "at": at}}
    failed = cross_rank([summary(0, "failed", 20.0), summary(1, "terminated", 5.0),
                         summary(2, "failed", 10.0), summary(3, "failed", None),
                         summary(4, "ok", None)])["failed"]
    assert [f["rank"] for f in failed] == [2, 0, 3, 1]


@pytest.mark.slow
def test_ranks_option_profiles_only_those(tmp_path: Path) -> None:
    proc = _nsbridge("-q", "triage", "--nproc-per-node", "2", "--ranks", "1", "--timeout",
                     "120", "--out", str(tmp_path / "run"), DDP, "--", "--steps", "8",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "run" / "rank-00" / "trace.json.gz").exists()
    assert (tmp_path / "run" / "rank-01" / "trace.json.gz").is_file()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["distributed"]["profiled"] == [1]


@pytest.mark.slow      # analyze reads the ranks on worker processes
def test_two_rank_fixture_folder_gives_the_cross_rank_report(tmp_path: Path) -> None:
    report = analyze([TORCH_DATA / "two_ranks"], out=tmp_path / "r").report
    dist = report["distributed"]
    assert [r["rank"] for r in dist["ranks"]] == [0, 1] and dist["step"]["median_ms"] > 0
    kinds = {(c["rank"], c["kind"]) for c in dist["collectives"]}
    assert {(0, "all_reduce"), (1, "all_reduce"), (0, "all_to_all")} <= kinds
    assert all(r["comm_overlap_pct"] is not None for r in dist["ranks"])   # NCCL on GPUs
    assert dist["straggler"]["verdict"] == "balanced"
    assert "## Ranks" in (tmp_path / "r" / "report.md").read_text()


def test_rank_detection() -> None:
    """Which rank a process is, from its launcher's environment (torchrun, SLURM)."""
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) is None   # an sbatch script
    rank = detect({"SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_STEP_NUM_TASKS": "4"})
    assert (rank.rank, rank.world_size, rank.launcher) == (2, 4, "slurm")
    rank = detect({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert (rank.rank, rank.local_rank, rank.dir_name) == (1, 1, "rank-01")
    assert detect({"RANK": "0", "WORLD_SIZE": "1"}) is None
    assert job_id({"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3"}) == "77-3"
    assert job_id({"MASTER_PORT": "29500"}) == "port29500"


def _summary(rank: int, slow: float = 0.0) -> dict:
    ops = [{"name": f"aten::op{i}", "calls": 10, "cpu_self_us": 100.0 + i + slow * (i == 0),
            "device_self_us": None} for i in range(300)]
    return {"rank": rank, "host": f"node{rank // 8}", "world_size": 64, "status": "ok",
            "exit_code": 0, "profiled": True, "step_ms": [50.0 + slow / 1e3] * 3,
            "verdict": "cpu-bound", "has_device": False, "device_busy_pct": None, "comm": None,
            "collectives": [{"kind": "all_reduce", "count": 3, "bytes": 3 << 20,
                             "time_us": 30000.0 - 3 * slow, "per_step": 1.0,
                             "time_per_step_us": 10000.0 - slow, "source": "backend ranges"}],
            "ops": ops}


def test_64_rank_summaries_merge_in_little_memory() -> None:
    summaries = [_summary(r, slow=20000.0 if r == 37 else 0.0) for r in range(64)]
    tracemalloc.start()
    cross = cross_rank(summaries)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * 2**20, peak
    assert len(cross["ranks"]) == 64 and cross["straggler"]["rank"] == 37
    assert cross["skew"][0]["op"] == "aten::op0" and cross["skew"][0]["max_rank"] == 37


def _rank(rank: int, steps: list[float], collective: list[float], ops: dict[str, float],
          sum_of_collectives: float = 0.0) -> dict:
    return {"rank": rank, "host": "h", "world_size": 2, "status": "ok", "exit_code": 0,
            "profiled": True, "step_ms": steps, "collective_ms": collective,
            "verdict": "cpu-bound", "has_device": False, "device_busy_pct": None, "comm": None,
            "collectives": [{"kind": "all_reduce", "count": 3, "bytes": None,
                             "time_us": sum_of_collectives, "per_step": 1.0,
                             "time_per_step_us": sum_of_collectives / 3,
                             "source": "backend ranges"}],
            "ops": [{"name": n, "calls": 3, "cpu_self_us": v, "device_self_us": None}
                    for n, v in ops.items()]}


def test_a_small_excess_is_not_a_straggler_and_collectives_never_exceed_the_step() -> None:
    """The unplanted DDP example: 0.36 ms in a 2.16 ms step, and overlapping collectives
    whose durations sum to more than the step."""
    ops = {"aten::mm": 900.0, "aten::addmm": 600.0}
    cross = cross_rank([
        _rank(0, [2.2, 2.1, 2.2], [1.0, 0.9, 1.0], ops, sum_of_collectives=44730.0),
        _rank(1, [2.1, 2.2, 2.1], [0.6, 0.7, 0.5], {**ops, "aten::mm": 1050.0})])
    assert all(r["collective_ms_per_step"] <= r["step_ms"] for r in cross["ranks"])
    straggler = cross["straggler"]
    assert straggler["verdict"] == "balanced" and straggler["rank"] is None
    assert "below the 1 ms per step" in straggler["evidence"][-1]


def test_an_excess_that_does_not_hold_across_steps_is_not_a_straggler() -> None:
    cross = cross_rank([_rank(0, [20.0] * 4, [10.0, 10.0, 10.0, 10.0], {}),
                        _rank(1, [20.0] * 4, [7.0, 7.0, 7.0, 15.0], {})])   # one odd step
    assert cross["straggler"]["verdict"] == "balanced"
    assert "not steady across the measured steps" in cross["straggler"]["evidence"][-1]


def test_a_straggler_whose_excess_is_outside_any_op_is_told_so() -> None:
    ops = {"aten::mm": 900.0, "aten::addmm": 600.0}
    cross = cross_rank([_rank(0, [24.2, 24.3, 24.1], [21.0, 20.9, 21.1], ops),
                        _rank(1, [24.1, 24.2, 24.0], [0.5, 0.6, 0.5], {**ops, "aten::mm": 990.0})])
    straggler = cross["straggler"]
    assert straggler["verdict"] == "straggler" and straggler["rank"] == 1
    low, high = straggler["excess_ci_ms"]
    assert 19.0 < low <= high < 21.5
    assert any("lies outside any op torch.profiler recorded" in e for e in straggler["evidence"])
    assert not any("aten::mm +" in e for e in straggler["evidence"])   # 0.03 ms: not named


def test_a_rank_that_waited_for_a_cpu_is_no_straggler() -> None:
    """Two ranks beside busy processes on one host, nothing planted (seen: a false
    straggler in 2 of 6 runs, the flagged rank having waited 10-15 ms more per step for a
    CPU): the work outside collectives is judged without each rank's CPU wait, which the
    evidence says; a real excess beyond its wait is still a straggler, with no advice to
    compare its host when every rank shares it."""
    steps = [60.0, 61.0, 59.0, 60.5, 60.0, 59.5, 60.2, 60.1]
    quick = _rank(0, steps, [40.0] * 8, {})
    waited = {**_rank(1, steps, [28.0] * 8, {}), "wait_ms": [12.0, 11.5, 12.5, 12.0, 11.8,
                                                              12.2, 12.1, 11.9]}
    cross = cross_rank([{**quick, "wait_ms": [0.2] * 8}, waited])
    straggler = cross["straggler"]
    assert straggler["verdict"] == "balanced", straggler["evidence"]
    assert "not counting the 12.00 ms per step its training loop waited for a CPU" in \
        straggler["evidence"][0]
    slow = {**waited, "collective_ms": [8.0] * 8}          # 20 ms more work beyond its wait
    judged = cross_rank([{**quick, "wait_ms": [0.2] * 8}, slow])
    called = judged["straggler"]
    assert called["verdict"] == "straggler" and called["rank"] == 1
    # one number, one place: the sentence's work is the Ranks table's, less the wait it names
    row = next(r for r in judged["ranks"] if r["rank"] == 1)
    wait = statistics.median(slow["wait_ms"])
    assert (f"works outside collectives {row['work_ms_per_step'] - wait:.2f} ms per step "
            f"(not counting the {wait:.2f} ms") in called["evidence"][0]
    assert "host" not in called["recommendation"]["fix"]
    elsewhere = cross_rank([{**quick, "wait_ms": [0.2] * 8, "host": "other"}, slow])
    assert "its host" in elsewhere["straggler"]["recommendation"]["fix"]


def test_an_excess_too_unsteady_for_the_steps_measured_says_how_many_would_decide() -> None:
    """A 30 ms plant in a 137 ms step measured over 3 noisy steps: Student's t over the
    steps (not a bootstrap of 3, which gave little more than their range) leaves it
    undecided, and the evidence names the measured steps that would decide it."""
    base = _rank(0, [137.0, 140.0, 135.0], [80.0, 70.0, 95.0], {})
    slow = _rank(1, [137.0, 140.0, 135.0], [40.0, 55.0, 52.0], {})
    straggler = cross_rank([base, slow])["straggler"]
    assert straggler["verdict"] == "balanced"
    low, high = straggler["excess_ci_ms"]
    assert low < 13.7 < high                     # 10% of the step: the floor, in the interval
    last = straggler["evidence"][-1]
    assert "not steady across the measured steps" in last
    assert "measured steps at this spread would decide it (nsbridge triage --steps " in last


def test_a_ranks_columns_add_up_to_its_step() -> None:
    """The Ranks table read step 5.73 ms against collectives 4.33 + work 1.71 (medians of
    each column): the work is the rest of the median step."""
    cross = cross_rank([_rank(0, [5.0, 5.8, 6.3], [4.6, 3.0, 4.33], {}),
                        _rank(1, [7.8, 7.7, 7.9], [2.6, 2.7, 2.5], {})])
    for row in cross["ranks"]:
        assert row["collective_ms_per_step"] + row["work_ms_per_step"] == \
            pytest.approx(row["step_ms"])


@pytest.mark.parametrize("stopped_first", [True, False])
def test_the_rank_that_failed_on_its_own_is_named_not_the_one_torchrun_ended(
        stopped_first: bool) -> None:
    """torchrun ends the other ranks (SIGTERM) once one fails: whichever writes first, the
    run's error names the rank that failed on its own, with its exit status."""
    from nsbridge.distributed.fan_out import reduce_outputs
    from nsbridge.passes.ncu_pass import DeepOnRanks
    from nsbridge.profiles import load_profile

    stopped = {"status": "failed", "exit_code": 143, "manifest": {},
               "error": {"type": "Stopped", "message": "stopped by SIGTERM (the launcher "
                         "ended this rank, as torchrun does once another rank has failed)"}}
    crashed = {"status": "failed", "exit_code": 1, "manifest": {},
               "error": {"type": "ToolFailedError", "message": "ncu failed with exit status 9"}}
    outputs = {0: stopped, 1: crashed} if stopped_first else {0: crashed, 1: stopped}
    output = reduce_outputs(DeepOnRanks(load_profile("deep").deep), outputs, 0, {}, {}, {})
    cause = 1 if stopped_first else 0
    assert output.error == {"type": "RankFailed", "rank": cause,
                            "message": f"rank {cause} (ncu): ncu failed with exit status 9"}
    assert output.exit_code == 1 and output.notes[0].startswith(f"rank {cause} (ncu): ncu")


def test_a_job_of_thousands_of_ranks_reads_as_its_distribution() -> None:
    """4,096 ranks: the table holds the slowest and fastest ranks and the straggler, not a
    row per rank; the step and each collective read as quantiles over the ranks with the
    slowest named (one line per kind was 68,557 characters); report.json keeps them all."""
    from nsbridge.report import frames
    from nsbridge.report.views.ranks_view import distributed_lines, rank_rows

    summaries = [_summary(r, slow=20000.0 if r == 3001 else 0.0) for r in range(4096)]
    for s in summaries:
        s["step_ms"] = [50.0 + (s["rank"] % 7) * 0.1] * 3
    cross = cross_rank(summaries)
    rows = rank_rows(cross)
    assert len(cross["ranks"]) == 4096 and len(rows) <= 10
    assert "3001" in [row[0] for row in rows]                      # the straggler
    assert [row[0] for row in rows] == sorted((row[0] for row in rows), key=int)
    lines = distributed_lines(cross)
    assert max(len(line) for line in lines if not line.startswith("STRAGGLER")) < 200
    table = next(line for line in lines if line.startswith("table:"))
    assert table.startswith(f"table: {len(rows)} of 4096 ranks") and "(min / p10 / median" in table
    reduce = next(line for line in lines if line.startswith("all_reduce:"))
    assert "over 4096 ranks; slowest rank " in reduce
    every = frames.ranks({"distributed": cross})          # load(): every rank
    assert every is not None and len(every) == 4096
    few = cross_rank(summaries[:16])                   # up to 16 ranks: every rank, by name
    assert len(rank_rows(few)) == 16 and "rank 15 " in next(
        line for line in distributed_lines(few) if line.startswith("all_reduce:"))


def test_a_4096_rank_report_md_is_short_and_narrow_and_ranks_csv_has_every_rank(
        tmp_path: Path) -> None:
    """`analyze` of a job's 4,096 rank summaries: report.md under 300 lines, none wider
    than 200 characters (its prose is wrapped: a Markdown soft break renders the same),
    and ranks.csv one row per rank with load()'s values."""
    import csv

    from nsbridge.job.identity import rank_dir_name
    from nsbridge.report import frames
    from nsbridge.rundir import write_json

    job = tmp_path / "job"
    for rank in range(4096):
        summary = _summary(rank, slow=8000.0 if rank == 3001 else 0.0)
        summary.update(world_size=4096, ops=summary["ops"][:5])
        summary["step_ms"] = [s + (rank % 7) * 0.1 for s in summary["step_ms"]]
        (job / rank_dir_name(rank)).mkdir(parents=True)
        write_json(job / rank_dir_name(rank) / "summary.json", summary)
    result = analyze([job], out=tmp_path / "run")
    md = (tmp_path / "run" / "report.md").read_text(encoding="utf-8").splitlines()
    assert len(md) < 300 and max(map(len, md)) <= 200, max(md, key=len)
    assert any("3001" in line for line in md)          # the straggler is named
    with (tmp_path / "run" / "ranks.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    every = frames.ranks(result.report)
    assert len(rows) == len(every) == 4096
    assert rows[3001]["rank"] == "3001" and float(rows[3001]["step_ms"]) == every.loc[3001, "step_ms"]
    heat = result.report["distributed"]["heat"]          # report.html's heat map: 64 columns
    assert len(heat["ranks"]) == 64 and heat["ranks"][46] == [2944, 3007]
    row = heat["max_us"][heat["ops"].index("aten::op0")]
    assert max(range(64), key=row.__getitem__) == 46     # rank 3001's run of 64 ranks


@pytest.mark.slow
def test_ranks_with_no_store_to_meet_at_profile_alone_and_say_how_to_merge(
        tmp_path: Path) -> None:
    """An srun step that sets no MASTER_ADDR: nsbridge cannot reach a store. Rank 0's
    triage profiles its rank and says the merge is `nsbridge analyze` after the step; a
    pass on the ranks is refused before any script runs, with what to set."""
    script = tmp_path / "one.py"
    script.write_text("import torch\nfor _ in range(4):\n    torch.ones(64, 64) @ torch.ones(64, 64)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK",
                                                                      "WORLD_SIZE", "TORCHELASTIC"))}
    env.update(SLURM_JOB_ID="77", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_STEP_NUM_TASKS="2",
               PYTHONUNBUFFERED="1")

    def nsbridge(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nsbridge", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    alone = nsbridge("-q", "triage", "--out", str(tmp_path / "run"), str(script))
    assert alone.returncode == 0, alone.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    note = next(n for n in report["notes"] if n.startswith("this report is rank 0's alone"))
    assert "set no MASTER_ADDR" in note and f"nsbridge analyze {tmp_path / 'run'}" in note
    refused = nsbridge("triage", "--nsys", "--out", str(tmp_path / "run2"), str(script))
    assert refused.returncode != 0 and "needs the job's store" in refused.stderr
    assert "MASTER_PORT" in refused.stderr and not (tmp_path / "run2" / "rank-00").exists()
