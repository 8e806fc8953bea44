"""Edge cases found in review: plain-JSON traces, run folders given to analyze, rank
detection under SLURM, a gate that would check nothing."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from nsbridge.api import analyze, diff
from nsbridge.distributed.ranks import detect, job_id
from nsbridge.errors import DiffInputError

from conftest import TORCH_DATA

H200 = TORCH_DATA / "h200" / "train_cnn_h200.json.gz"


def test_plain_json_trace_gets_a_merged_trace(tmp_path: Path) -> None:
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(H200).read())
    result = analyze([plain], out=tmp_path / "r")
    assert (tmp_path / "r" / "merged.json.gz").is_file() and result.report["status"] == "ok"


def test_a_run_folder_is_one_trace_not_two(tmp_path: Path) -> None:
    folder = tmp_path / "earlier-run"
    folder.mkdir()
    shutil.copy(H200, folder / "trace.json.gz")
    shutil.copy(H200, folder / "merged.json.gz")        # what a run folder also holds
    report = analyze([folder], out=tmp_path / "r").report
    assert report["ranks"] == [] and "distributed" not in report


def test_rank_detection() -> None:
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) is None   # an sbatch script
    rank = detect({"SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_STEP_NUM_TASKS": "4"})
    assert (rank.rank, rank.world_size, rank.launcher) == (2, 4, "slurm")
    rank = detect({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert (rank.rank, rank.local_rank, rank.dir_name) == (1, 1, "rank-01")
    assert detect({"RANK": "0", "WORLD_SIZE": "1"}) is None
    assert job_id({"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3"}) == "77-3"
    assert job_id({"MASTER_PORT": "29500"}) == "port29500"


def test_gate_on_an_op_neither_run_has_is_refused(tmp_path: Path) -> None:
    analyze([H200], out=tmp_path / "a")
    with pytest.raises(DiffInputError, match="neither run has such an op"):
        diff(tmp_path / "a", tmp_path / "a", ops=["aten::adddmm"])
    assert diff(tmp_path / "a", tmp_path / "a", ops=["aten::addmm"])["regressions"] == []
