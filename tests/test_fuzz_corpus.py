"""The fuzzers' finds, replayed: every input in tests/data/fuzz/corpus.json once crashed
nsbridge (a traceback, an abort, or a silently wrong reading) and now gives nsbridge's own
one-paragraph error naming what is wrong. Each entry is the damage done to a real file,
so the corpus stays small; torch-trace finds are replayed by test_fuzz_traces."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import nsbridge
from nsbridge.errors import NcuFormatError, ProfileError, RunDirError
from nsbridge.profiles import load_profile

from conftest import DATA, ROOT, TORCH_DATA
from test_fuzz_reports import damage

CORPUS = json.loads((DATA / "fuzz" / "corpus.json").read_text(encoding="utf-8"))
SHARED = ROOT.parent / "shared" / "fixtures"


def _cases(kind: str) -> list[Any]:
    return [pytest.param(case, id=case["name"]) for case in CORPUS[kind]["cases"]]


def _one_paragraph(message: str, pattern: str) -> None:
    assert re.search(pattern, message), message
    assert "\n" not in message and "Traceback" not in message


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "run"
    nsbridge.analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz"], out=out)
    return out


@pytest.mark.parametrize("case", _cases("report"))
def test_damaged_reports_are_refused_naming_the_field(real_run: Path, tmp_path: Path,
                                                      case: dict[str, Any]) -> None:
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    report = json.loads((run / "report.json").read_text())
    (run / "report.json").write_text(json.dumps(damage(report, case["damage"])))
    with pytest.raises(RunDirError) as refused:
        nsbridge.load(run)
    _one_paragraph(str(refused.value), case["error"])


@pytest.mark.parametrize("case", _cases("profile"))
def test_damaged_profiles_are_refused_naming_the_key(tmp_path: Path,
                                                     case: dict[str, Any]) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(case["text"], encoding="utf-8")
    with pytest.raises(ProfileError) as refused:
        load_profile(str(path))
    _one_paragraph(str(refused.value), case["error"])


@pytest.mark.slow      # an .ncu-rep is read in a child process
@pytest.mark.skipif(importlib.util.find_spec("ncu_report") is None,
                    reason="the ncu-report package is not installed")
@pytest.mark.parametrize("case", _cases("ncu_rep"))
def test_damaged_ncu_reports_are_errors_about_the_file(tmp_path: Path,
                                                       case: dict[str, Any]) -> None:
    source = SHARED / case["file"]
    if not source.is_file():
        pytest.skip(f"{case['file']} is not in ../shared/fixtures")
    data = bytearray(source.read_bytes())
    if "insert_at" in case:
        start = case["copy_from"]
        data[case["insert_at"]:case["insert_at"]] = data[start:start + case["length"]]
    else:
        data = data[: int(len(data) * case["keep_fraction"])]
    path = tmp_path / "damaged.ncu-rep"
    path.write_bytes(bytes(data))
    with pytest.raises(NcuFormatError) as refused:
        nsbridge.analyze([path], out=tmp_path / "run")
    _one_paragraph(str(refused.value), case["error"])
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "failed" and report["error"]["type"] == "NcuFormatError"
