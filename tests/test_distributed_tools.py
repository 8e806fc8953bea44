"""The timeline (nsys) and deep (ncu) passes on several ranks: the rank planner, the merge of
the ranks' outputs, and the passes run end to end on a two-rank gloo job (real nsys; a fake
ncu and nvidia-smi at the process boundary, whose report is a real H200 raw-page CSV)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsbridge.api import load
from nsbridge.errors import DeepError, LaunchError
from nsbridge.model.ranks.rank_plan import pick_ranks, refuse_communication_ops
from nsbridge.distributed.fan_out import reduce_outputs
from nsbridge.distributed.share import main as rank_main, map_pass
from nsbridge.job.identity import RankEnv
from nsbridge.job.mailbox import pass_spec
from nsbridge.schema.records import Mark, Word
from nsbridge.passes.nsys_pass import TimelineOnRanks

from conftest import ROOT, fake_ncu_env, flat

DDP = str(ROOT / "examples" / "train_ddp.py")


def _dist(work: dict[int, float], straggler: int | None = None) -> dict:
    return {"world_size": len(work), "straggler": {"metric": "work_ms_per_step",
                                                   "rank": straggler},
            "ranks": [{"rank": r, "status": "ok", "profiled": True, "step_ms": 50.0,
                       "work_ms_per_step": w} for r, w in work.items()]}


def test_planner_picks_the_slowest_and_the_median_rank_with_reasons() -> None:
    work = {0: 10.0, 1: 11.0, 2: 9.0, 3: 30.0, 4: 10.5, 5: 12.0, 6: 9.5, 7: 10.2}
    picks = pick_ranks(_dist(work, straggler=3))
    # by work: 9, 9.5, 10, 10.2 | 10.5, 11, 12, 30 -> the lower median is rank 7 (10.2 ms)
    assert [p["rank"] for p in picks] == [3, 7]
    reasons = {p["rank"]: p["reason"] for p in picks}
    assert {p["rank"]: p["role"] for p in picks} == {3: "slowest", 7: "median"}
    assert reasons[3].startswith("the slowest rank: works outside collectives 30.00 ms")
    assert "the straggler" in reasons[3] and "(of 8 ranks)" in reasons[3]
    assert reasons[7].startswith("the median rank: works outside collectives 10.20 ms")


def test_planner_without_collectives_uses_step_time_and_skips_failed_ranks() -> None:
    dist = {"ranks": [{"rank": 0, "status": "ok", "profiled": True, "step_ms": 40.0},
                      {"rank": 1, "status": "failed", "profiled": True, "step_ms": 99.0},
                      {"rank": 2, "status": "ok", "profiled": True, "step_ms": 45.0}],
            "straggler": None}
    picks = pick_ranks(dist)
    assert [p["rank"] for p in picks] == [0, 2]
    assert "takes per step 45.00 ms" in picks[1]["reason"]
    assert pick_ranks(dist, asked=[1]) == [{"rank": 1, "role": "asked",
                                            "reason": "asked for with --ranks"}]
    with pytest.raises(DeepError, match="--ranks 7: the run has ranks 0, 1, 2 only"):
        pick_ranks(dist, asked=[7])
    with pytest.raises(DeepError, match="No rank of this run was profiled"):
        pick_ranks({"ranks": [{**dist["ranks"][1]}]})


def test_one_rank_is_both_slowest_and_median() -> None:
    assert [p["rank"] for p in pick_ranks(_dist({4: 12.0}))] == [4]


def test_communication_ops_are_refused_with_the_reason() -> None:
    refuse_communication_ops(["aten::addmm", "aten::nccl_like_name"])
    with pytest.raises(DeepError, match="nccl:all_reduce, c10d::allreduce_: communication ops"):
        refuse_communication_ops(["aten::mm", "nccl:all_reduce", "c10d::allreduce_"])


def _timeline_output(ranges: int) -> dict:
    section = {"nsbridge_ranges": ranges, "kernels": 3, "gpu_busy_pct": 50.0, "sync_calls": 1,
               "ops": [{"op": "aten::mm", "kernel_us": 30.0},
                       {"op": "nccl:all_reduce", "kernel_us": 12.5}],
               "files": {"nsys_rep": "timeline.nsys-rep", "sqlite": "timeline.sqlite"}}
    return {"name": "nsys", "manifest": {"wall_s": 2.0}, "status": "ok", "exit_code": 0,
            "error": None, "core": None, "section": ["timeline", section], "op_key": "nsys",
            "op_columns": {"aten::mm": {"kernels": 3}}, "notes": [], "sources": {"s": "x"},
            "recommendations": [], "files": {}}


def test_merge_shows_one_rank_lists_all_and_names_the_failed_and_the_hung() -> None:
    failed = {**_timeline_output(0), "status": "failed", "exit_code": 124, "section": None,
              "error": {"type": "ToolFailedError", "message": "nsys left no report"}}
    merged = reduce_outputs(TimelineOnRanks(), {0: _timeline_output(10), 1: _timeline_output(12),
                                         2: failed, 3: None},
                            shown=1, reasons={}, hosts={0: "a", 1: "a", 2: "b", 3: "b"},
                            missing={3: "none within 30 s"})
    name, section = merged.section
    assert name == "timeline" and section["shown_rank"] == 1
    assert section["nsbridge_ranges"] == 12                           # rank 1's own section
    assert section["files"]["nsys_rep"] == "rank-01/timeline.nsys-rep"
    rows = {r["rank"]: r for r in section["ranks"]}
    assert rows[0]["files"]["sqlite"] == "rank-00/timeline.sqlite"
    assert rows[0]["kernel_us"] == 42.5 and rows[0]["comm_kernel_us"] == 12.5
    assert rows[2]["status"] == "failed" and rows[2]["error"] == "nsys left no report"
    assert rows[3]["status"] == "hung" and rows[3]["error"] == "no nsys output: none within 30 s"
    assert merged.status == "failed" and merged.error["rank"] == 2
    assert merged.exit_code == 124                                    # the rank's own status
    assert merged.error["message"] == "rank 2 (nsys): nsys left no report"
    assert "rank 3 (nsys): no nsys output: none within 30 s" in merged.notes
    assert merged.op_columns == {"aten::mm": {"kernels": 3}}
    # the manifest says how each rank ended; its numbers are in the report only
    assert merged.manifest["wall_s"] == 2.0 and merged.manifest["ranks"] == [
        {"rank": 0, "host": "a", "status": "ok", "exit_code": 0, "error": None},
        {"rank": 1, "host": "a", "status": "ok", "exit_code": 0, "error": None},
        {"rank": 2, "host": "b", "status": "failed", "exit_code": 124,
         "error": "nsys left no report"},
        {"rank": 3, "host": "b", "status": "hung", "exit_code": None,
         "error": "no nsys output: none within 30 s"}]
    # the shown rank has no section: another rank's timeline is shown instead
    fallback = reduce_outputs(TimelineOnRanks(), {0: _timeline_output(10), 2: failed}, shown=2,
                              reasons={}, hosts={}, missing={})
    assert fallback.section[1]["shown_rank"] == 0
    # a rank whose script failed still measured something: its section counts
    script_failed = {**_timeline_output(7), "status": "failed", "exit_code": 1}
    kept = reduce_outputs(TimelineOnRanks(), {0: script_failed}, shown=0, reasons={}, hosts={},
                          missing={})
    assert kept.section[1]["nsbridge_ranges"] == 7 and kept.status == "failed"


def _rank(rank: int, world: int = 3) -> RankEnv:
    return RankEnv(rank=rank, local_rank=rank, world_size=world, launcher="slurm", host="h")


def _job(port: int, job: str = "7") -> dict[str, str]:
    """An srun step's variables, the script's rendezvous at ``port`` - 1."""
    return {"SLURM_JOB_ID": job, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port - 1)}


def test_ranks_hear_only_their_jobs_word_and_rank_0_names_those_that_never_marked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a real TCPStore that rank 0's nsbridge serves (srun: MASTER_PORT + 1): the
    others block on rank 0's word, a malformed word is no word, another job's word is never
    heard, and a rank that never marks its share done is named when the time is up."""
    import socket

    from nsbridge.job import store as job_store

    monkeypatch.setattr(job_store, "_connected", {})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lead = job_store.connect(_rank(0), _job(port))        # serves the store
    assert "served by rank 0" in lead.where
    monkeypatch.setattr(job_store, "_connected", {})
    one = job_store.connect(_rank(1), _job(port), timeout_s=10)
    monkeypatch.setattr(job_store, "_connected", {})
    other_job = job_store.connect(_rank(1), _job(port, job="8"), timeout_s=10)
    spec = pass_spec(target="train.py", args=[], module=False, cwd=Path("."), timeout=None,
                     profile_source="default", ranks=[1], pass_id="p1")
    lead.say("deep/word", {"pass": "deep", "go": True, "spec": {"ranks": [1], "pass_id": "p0"}})
    assert one.hear("deep/word", Word, 1.0) is None          # no script: no rank can run it
    started = time.monotonic()
    assert one.hear("timeline/word", Word, 0.5) is None      # nothing said: waits, then none
    assert 0.4 < time.monotonic() - started < 5
    lead.say("deep/word", {"pass": "deep", "go": True, "spec": spec})
    assert one.hear("deep/word", Word, 1.0)["spec"]["pass_id"] == "p1"
    assert other_job.hear("deep/word", Word, 0.5) is None   # another job's prefix
    one.mark("deep/done", {"pass_id": "p1", "exit_code": 0})
    started = time.monotonic()
    marks = lead.gather("deep/done", [1, 2], Mark, 1.0)
    assert marks == {1: {"pass_id": "p1", "exit_code": 0}, 2: None}    # rank 2 never came
    assert time.monotonic() - started < 5
    assert lead.gather("deep/done", [1], Mark, 30.0) == {1: {"pass_id": "p1", "exit_code": 0}}


def test_no_store_is_a_clear_error_for_a_pass_on_the_ranks() -> None:
    from nsbridge.distributed.fan_out import job_store

    with pytest.raises(LaunchError, match="set no MASTER_ADDR.*nsbridge analyze RUN_DIR"):
        job_store(_rank(1), {"SLURM_JOB_ID": "9"})


def test_a_rank_refuses_a_spec_file_it_cannot_run_with_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_file = tmp_path / "spec.json"
    spec = pass_spec(target="train.py", args=[], module=False, cwd=tmp_path, timeout=None,
                     profile_source="default", ranks=[0], pass_id="p1")
    for written, reason in (({"ranks": [0], "pass_id": "p1"}, "target is missing"),
                            ({**spec, "kind": "perf", "run_dir": str(tmp_path)},
                             "names no pass nsbridge runs on ranks"),
                            ({**spec, "kind": "timeline"}, "or no run directory")):
        spec_file.write_text(json.dumps(written))
        assert rank_main(str(spec_file)) == 1
        said = capsys.readouterr().err
        assert said.startswith("nsbridge: ") and reason in said and "Traceback" not in said


@pytest.mark.slow      # runs the script
def test_a_rank_whose_tool_cannot_start_still_runs_the_script(tmp_path: Path) -> None:
    """Its peers wait for it in collectives: it runs the script alone and says why."""
    script = tmp_path / "job.py"
    script.write_text("import pathlib, sys\npathlib.Path(sys.argv[1]).write_text('ran')\n")
    spec = pass_spec(target=str(script), args=[str(tmp_path / "marker")], module=False,
                     cwd=tmp_path, timeout=60, profile_source="default", ranks=[0],
                     pass_id="p9")
    env = {**os.environ, "NSBRIDGE_NSYS": str(tmp_path / "no-nsys")}
    assert map_pass("timeline", tmp_path, 0, spec, env) == 1
    assert (tmp_path / "marker").read_text() == "ran"
    out = json.loads((tmp_path / "rank-00" / "timeline-pass.json").read_text())
    assert out["pass_id"] == "p9" and out["status"] == "failed" and out["section"] is None
    assert out["error"]["message"].startswith("rank 0 ran the script without nsys: "
                                              "NSBRIDGE_NSYS=")


# --- end to end: two gloo ranks on CPU --------------------------------------------------------

def _nsys_or_skip() -> None:
    from nsbridge.collect.nsys import find_nsys
    from nsbridge.errors import ToolNotFoundError

    try:
        find_nsys()
    except ToolNotFoundError:
        pytest.skip("nsys is not installed (.ci/install-nsys.sh installs it)")


def _run(args: list[str], cwd: Path, env: dict | None = None, launcher: bool = False,
         nproc: int = 2):
    prefix = ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "-m", "nsbridge"] if launcher else [sys.executable, "-m", "nsbridge"])
    return subprocess.run([*prefix, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                            "NSBRIDGE_EXAMPLE_SLOW_RANK": "1", **(env or {})})


@pytest.fixture(scope="module")
def nsys_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`triage --nproc-per-node 2 --nsys` of the DDP example with a planted slow rank 1."""
    _nsys_or_skip()
    tmp = tmp_path_factory.mktemp("ranks")
    proc = _run(["triage", "--nproc-per-node", "2", "--nsys", "--timeout", "300", "--out",
                 str(tmp / "run"), DDP], cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "run"


def _errors(stderr: str) -> str:
    """Each rank's error lines (the first rank to fail says why; torchrun then stops the
    others, whose errors come last), then the end of the output."""
    said = [line for line in stderr.splitlines() if "nsbridge: error" in line
            or line.startswith(("Traceback", "  File", "[rank"))]
    return "\n".join(said[-60:]) + "\n...\n" + stderr[-3000:]


def _nsbridge_ranges(sqlite: Path) -> int:
    """nsbridge's ranges in one export, counted with SQL (independent of nsbridge's reader)."""
    with sqlite3.connect(sqlite) as db:
        domain = db.execute("SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND "
                            "text = 'nsbridge'").fetchone()[0]
        return db.execute("SELECT COUNT(*) FROM NVTX_EVENTS WHERE domainId = ? AND "
                          "eventType IN (59, 60)", (domain,)).fetchone()[0]


@pytest.mark.slow
def test_nsys_runs_on_every_rank_into_its_folder_and_merges(nsys_ranks: Path) -> None:
    report = json.loads((nsys_ranks / "report.json").read_text())
    timeline = report["timeline"]
    assert timeline["shown_rank"] == report["distributed"]["shown_rank"] == 1   # the straggler
    assert timeline["files"]["nsys_rep"] == "rank-01/timeline.nsys-rep"
    rows = {r["rank"]: r for r in timeline["ranks"]}
    assert sorted(rows) == [0, 1] and all(r["status"] == "ok" for r in rows.values())
    for rank, row in rows.items():
        folder = nsys_ranks / f"rank-{rank:02d}"
        assert (folder / "timeline.nsys-rep").is_file()
        emitted = json.loads((folder / "nvtx-child.json").read_text())["nvtx"]["total"]
        assert row["nsbridge_ranges"] == emitted == _nsbridge_ranges(folder / "timeline.sqlite")
    assert timeline["nsbridge_ranges"] == rows[1]["nsbridge_ranges"]
    ops = {op["name"]: op for op in report["ops"]}
    assert ops["aten::addmm"]["nsys"]["ranges"] > 0        # rank 1's join, in the op rows
    passes = json.loads((nsys_ranks / "manifest.json").read_text())["passes"]
    assert [p["name"] for p in passes] == ["torch.profiler (ranks)", "nsys"]
    assert [r["rank"] for r in passes[-1]["ranks"]] == [0, 1]
    assert "Per rank (the tables above are rank 1's)" in (nsys_ranks / "report.md").read_text()
    assert "rank-00/timeline.nsys-rep" in (nsys_ranks / "report.html").read_text()
    per_rank = load(nsys_ranks).timeline_ranks                # the same rows as DataFrames
    assert list(per_rank["rank"]) == [0, 1]
    assert list(per_rank["nsbridge_ranges"]) == [rows[0]["nsbridge_ranges"],
                                                 rows[1]["nsbridge_ranges"]]


@pytest.mark.slow
def test_nsys_per_rank_under_torchrun(tmp_path: Path) -> None:
    _nsys_or_skip()
    proc = _run(["-q", "triage", "--nsys", "--timeout", "300", "--out", str(tmp_path / "run"),
                 DDP, "--", "--steps", "8"], cwd=tmp_path, launcher=True)
    assert proc.returncode == 0, _errors(proc.stderr)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert [r["rank"] for r in report["timeline"]["ranks"]] == [0, 1]
    assert all((tmp_path / "run" / f"rank-0{r}" / "timeline.nsys-rep").is_file() for r in (0, 1))
    # the ranks met in torchrun's store: no word or acknowledgement files in the folder
    assert not list((tmp_path / "run").rglob("*ack*")) and not list(
        (tmp_path / "run").glob("ranks-next*"))


@pytest.fixture
def fake_ncu(tmp_path: Path) -> dict:
    return fake_ncu_env(tmp_path)


@pytest.fixture
def ranked_run(nsys_ranks: Path, tmp_path: Path) -> Path:
    """A copy of the two-rank run (triage and nsys passes done), for a deep pass to add to."""
    run = tmp_path / "run"
    shutil.copytree(nsys_ranks, run)
    return run


def _trusted(run: Path) -> list[str]:
    """--trust for the folders a copied run's script lies in (the example, the triage's)."""
    return ["--trust", str(ROOT / "examples"), "--trust",
            json.loads((run / "manifest.json").read_text())["cwd"]]


def _profiled(env: dict) -> list[list[str]]:
    log = Path(env["FAKE_NCU_LOG"])
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [c for c in calls if "--nvtx" in c]


@pytest.mark.slow
def test_deep_on_the_planned_ranks_of_an_earlier_run(ranked_run: Path, tmp_path: Path,
                                                     fake_ncu: dict) -> None:
    run = ranked_run
    proc = _run(["deep", *_trusted(run), "--run", str(run), "--kernel", "aten::relu", "--timeout",
                 "300"],
                cwd=tmp_path, env=fake_ncu)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = proc.stderr[proc.stderr.index("Deep pass plan"):]
    assert plan.index("rank 1: the slowest rank") < plan.index("Nsight Compute on rank(s) 0, 1")
    assert "rank 0: the median rank" in plan
    calls = _profiled(fake_ncu)
    assert len(calls) == 2                                  # one ncu per rank, each its own
    assert sorted(c[c.index("--export") + 1] for c in calls) == [
        str((run / f"rank-0{r}" / "deep").resolve()) for r in (0, 1)]
    assert all("nsbridge@aten::relu]" in c for c in calls)
    report = json.loads((run / "report.json").read_text())
    ncu = report["ncu"]
    assert ncu["shown_rank"] == 1 and [p["rank"] for p in ncu["plan"]["ranks"]] == [0, 1]
    rows = {r["rank"]: r for r in ncu["ranks"]}
    # the CSV holds three aten::relu launches: every rank's row and the op row count them
    assert rows[0]["ops"]["aten::relu"] == rows[1]["ops"]["aten::relu"]
    relu = next(op for op in report["ops"] if op["name"] == "aten::relu")
    assert relu["ncu"]["launches"] == 3 and relu["nsys"] is not None   # both passes, one row
    assert rows[1]["files"]["ncu_rep"] == "rank-01/deep.ncu-rep"
    frame = load(run).ncu_ranks
    assert list(frame["rank"]) == [0, 1]
    assert list(frame["aten::relu.sm_pct"]) == [rows[0]["ops"]["aten::relu"]["sm_pct"]] * 2
    assert [p["name"] for p in json.loads((run / "manifest.json").read_text())["passes"]] == [
        "torch.profiler (ranks)", "nsys", "ncu"]


@pytest.mark.slow
def test_deep_under_torchrun_on_asked_ranks_others_run_plain(ranked_run: Path, tmp_path: Path,
                                                             fake_ncu: dict) -> None:
    run = ranked_run
    proc = _run(["deep", *_trusted(run), "--run-dir", str(run), "--kernel", "aten::relu",
                 "--ranks", "1"],
                cwd=tmp_path, env=fake_ncu, launcher=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(_profiled(fake_ncu)) == 1
    assert not (run / "rank-00" / "deep.ncu-rep").exists()
    assert (run / "rank-01" / "deep.ncu-rep").is_file()
    report = json.loads((run / "report.json").read_text())
    assert [(r["rank"], r["reason"]) for r in report["ncu"]["ranks"]] == [
        (1, "asked for with --ranks")]
    assert "rank 0 writes the merged report" in flat(proc.stdout)          # rank 1's own summary


@pytest.mark.slow
def test_communication_op_refused_and_the_other_rank_is_told(ranked_run: Path, tmp_path: Path,
                                                             fake_ncu: dict) -> None:
    run = ranked_run
    before = json.loads((run / "report.json").read_text())
    proc = _run(["deep", *_trusted(run), "--run-dir", str(run), "--kernel", "c10d::allreduce_"],
                cwd=tmp_path, env=fake_ncu, launcher=True)
    assert proc.returncode != 0
    assert "communication ops' kernels (NCCL) wait for every other rank" in proc.stderr
    assert ("rank 1: no deep pass: rank 0: the ncu pass cannot start here: "
            "c10d::allreduce_") in proc.stderr
    assert not (run / "ranks-next.json").exists()
    # as on one process: the run keeps all it had, with a note of the pass that did not run
    after = json.loads((run / "report.json").read_text())
    assert _profiled(fake_ncu) == [] and after["ops"] == before["ops"] and not after.get("ncu")
    assert [n for n in after["notes"] if n not in before["notes"]] == [
        next(n for n in after["notes"] if n.startswith("the ncu pass did not run: "))]


@pytest.mark.slow
def test_a_rank_whose_ncu_fails_is_named_and_the_other_kept(ranked_run: Path, tmp_path: Path,
                                                            fake_ncu: dict) -> None:
    run = ranked_run
    proc = _run(["deep", *_trusted(run), "--run", str(run), "--kernel", "aten::relu"], cwd=tmp_path,
                env={**fake_ncu, "FAKE_NCU_MODE": "fail"})
    assert proc.returncode != 0
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "failed" and report["error"]["type"] == "RankFailed"
    # whichever rank fails first is named; torchrun then ends the other (its ncu, too)
    assert report["error"]["message"].startswith(f"rank {report['error']['rank']} (ncu): ncu "
                                                 "failed with exit status")
    # the other rank failed too, or torchrun ended it first (before or after its nsbridge
    # could write an output): either way it is named with what happened
    notes = sorted(n for n in report["notes"] if n.startswith("rank "))
    assert [n[:13] for n in notes] == ["rank 0 (ncu):", "rank 1 (ncu):"]
    assert all(n[14:].startswith(("ncu failed", "stopped by SIGTERM (the launcher ended",
                                  "no ncu output: the rank ended without it")) for n in notes), notes
    assert "ncu" not in report                              # nothing measured, nothing shown
    ranks = json.loads((run / "manifest.json").read_text())["passes"][-1]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["status"] in ("failed", "hung") for r in ranks), ranks
    assert report["timeline"]["ranks"]                      # the earlier passes are kept
    assert f"rank {report['error']['rank']} (ncu): ncu failed" in proc.stderr


@pytest.mark.slow
def test_a_ranked_triage_with_nsys_and_deep_is_one_pipeline_writing_each_file_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the nsys and ncu passes on the ranks reopened the saved run from disk,
    added their outputs in a loop of their own and saved it again. One pipeline now, with
    one process's failure rules: the deep pass, which a CPU run cannot plan (no kernels),
    leaves a note and the run whole."""
    from nsbridge import api
    from nsbridge.errors import DeepError
    from nsbridge.run import Run
    from test_pipeline import _count_writes

    _nsys_or_skip()
    written = _count_writes(monkeypatch)
    opened: list[Path] = []
    real_open = Run.open
    monkeypatch.setattr(Run, "open", classmethod(lambda cls, p: opened.append(p) or
                                                 real_open.__func__(cls, p)))
    env = {**fake_ncu_env(tmp_path), "NSBRIDGE_EXAMPLE_SLOW_RANK": "1"}
    with pytest.raises(DeepError, match="No op of the run has kernels"):
        api.triage(DDP, nproc_per_node=2, nsys=True, deep_top=1, timeout=300,
                   out=tmp_path / "run", environ=env, cwd=tmp_path)
    assert opened == []
    for name in ("report.json", "report.md", "report.html", "ops.csv"):
        assert written[name] == 1, (name, written)
    assert written["manifest.json"] == 2      # "running" at the start, then the whole run
    run = load(tmp_path / "run")
    assert [p["name"] for p in run.manifest["passes"]] == ["torch.profiler (ranks)", "nsys"]
    assert [r["rank"] for r in run.report["timeline"]["ranks"]] == [0, 1]
    assert any(n.startswith("the ncu pass did not run: No op of the run has kernels")
               for n in run.report["notes"])


@pytest.mark.slow
def test_an_op_the_ranked_run_lacks_is_told_before_a_missing_gpu(ranked_run: Path,
                                                                  tmp_path: Path) -> None:
    """As on one process: the typo first (with what was meant), not "no GPU"."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}      # no GPU, no ncu
    proc = _run(["deep", *_trusted(ranked_run), "--run", str(ranked_run), "--kernel",
                 "aten::reluu"],
                cwd=tmp_path,
                env=env)
    assert proc.returncode != 0
    assert "The run has no op 'aten::reluu' (did you mean 'aten::relu'" in proc.stderr


def test_a_ranks_nsys_output_carries_its_per_op_numbers_once() -> None:
    """A rank's output for rank 0: the timeline section's ops rows hold the per-op columns,
    so they are written once and read back the same (a real nsys export joined)."""
    from nsbridge.model.device.timeline import join
    from nsbridge.parse.nsys_sqlite import read_nsys_sqlite
    from nsbridge.passes.nsys_pass import _output, timeline_section
    from nsbridge.run import output_op_columns, output_record

    joined = join(read_nsys_sqlite(ROOT / "tests" / "data" / "nsys" /
                                   "nsbridge_sync_bound_h100_nsys2025.3.sqlite"))
    section = timeline_section(joined, {"emitted": 0, "recorded": 0, "warning": None}, {})
    output = _output(section, joined, {"wall_s": 1.0}, "ok", 0, None, [])
    assert len(output.op_columns) > 3
    record = json.loads(json.dumps(output_record(output)))
    assert "op_columns" not in record
    assert output_op_columns(record) == json.loads(json.dumps(output.op_columns))
    merged = reduce_outputs(TimelineOnRanks(), {0: {**record, "pass_id": "p"}}, shown=0,
                            reasons={}, hosts={0: "a"}, missing={})
    assert merged.op_columns == output_op_columns(record)
    old_style = {**record, "op_columns": {"aten::mm": {"kernels": 3}}}   # written in full
    assert output_op_columns(old_style) == {"aten::mm": {"kernels": 3}}


@pytest.mark.slow
def test_eight_ranks_under_torchrun_meet_in_its_store_and_a_killed_rank_is_named(
        tmp_path: Path) -> None:
    """A real 8-rank gloo DDP job, one nsbridge per rank started by torchrun: triage with
    the timeline pass, the ranks meeting in torchrun's store (no file in the run folder
    carries a word); then the timeline pass again with rank 3 killed (SIGKILL) half-way:
    it is named as the cause, every rank has its row, and the triage's results are kept."""
    _nsys_or_skip()
    run = tmp_path / "run"
    proc = _run(["-q", "triage", "--nsys", "--timeout", "300", "--out", str(run), DDP, "--",
                 "--steps", "6", "--batch-size", "16"], cwd=tmp_path, launcher=True, nproc=8)
    assert proc.returncode == 0, _errors(proc.stderr)
    report = json.loads((run / "report.json").read_text())
    assert [r["rank"] for r in report["distributed"]["ranks"]] == list(range(8))
    assert [r["rank"] for r in report["timeline"]["ranks"]] == list(range(8))
    assert all(r["status"] == "ok" for r in report["timeline"]["ranks"])
    assert not list(run.rglob("*ack*")) and not list(run.glob("ranks-next*"))
    killed = _run(["-q", "timeline", "--trust", str(ROOT / "examples"), "--run-dir", str(run),
                   "--timeout", "300"], cwd=tmp_path,
                  launcher=True, nproc=8, env={"NSBRIDGE_EXAMPLE_KILL_RANK": "3"})
    assert killed.returncode != 0
    after = json.loads((run / "report.json").read_text())
    assert after["error"]["type"] == "RankFailed" and after["error"]["rank"] == 3, after["error"]
    assert "status 137" in after["error"]["message"]                # SIGKILL, named
    rows = after["timeline"]["ranks"]
    assert [r["rank"] for r in rows] == list(range(8)) and rows[3]["status"] == "failed"
    assert after["distributed"] == report["distributed"]          # the triage's merge kept
    assert (run / "rank-05" / "timeline.nsys-rep").is_file()      # and the first pass's files


@pytest.mark.slow
def test_two_machines_started_by_nsbridge_run_the_timeline_pass_on_every_rank(
        tmp_path: Path) -> None:
    """`triage --nsys --nnodes 2` as on two machines (two nsbridge processes here, each
    starting its machine's rank through torch.distributed.run): node 0 makes the run, the
    other node follows its word in the store they meet at, and the report has both ranks'
    torch.profiler and nsys numbers."""
    _nsys_or_skip()
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = tmp_path / "run"
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "nsbridge", "-q", "triage", "--nsys", "--nproc-per-node", "1",
         "--nnodes", "2", "--node-rank", str(node), "--rdzv-endpoint", f"127.0.0.1:{port}",
         "--timeout", "300", "--out", str(run), DDP, "--", "--steps", "6"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}) for node in (1, 0)]   # node 1 first
    said = [node.communicate(timeout=600) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], _errors(said[0][1] + said[1][1])
    report = json.loads((run / "report.json").read_text())
    assert [r["rank"] for r in report["distributed"]["ranks"]] == [0, 1]
    assert [(r["rank"], r["status"]) for r in report["timeline"]["ranks"]] == [(0, "ok"), (1, "ok")]
    assert all((run / f"rank-0{r}" / "timeline.nsys-rep").is_file() for r in (0, 1))
    assert "node 1 of 2" in said[0][0]                     # the follower says where it wrote


def test_passes_on_several_machines_need_a_fixed_count_an_endpoint_and_a_shared_out() -> None:
    from nsbridge.distributed.nodes import join_nodes

    base = {"nproc_per_node": 2, "nnodes": "2", "node_rank": 0,
            "rdzv_endpoint": "127.0.0.1:29400"}
    assert join_nodes({**base, "nnodes": "1"}, "out") is None          # one machine
    with pytest.raises(LaunchError, match="a fixed number of machines"):
        join_nodes({**base, "nnodes": "1:4"}, "out")
    for missing in ({"rdzv_endpoint": None}, {"node_rank": None}):
        with pytest.raises(LaunchError, match="--rdzv-endpoint HOST:PORT, --node-rank and --out"):
            join_nodes({**base, **missing}, "out")
    with pytest.raises(LaunchError, match="--out"):
        join_nodes(base, None)
