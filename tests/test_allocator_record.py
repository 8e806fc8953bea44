"""The allocator's record on a GPU run (_bootstrap.allocator), with torch's CUDA entry
points replaced at the process boundary (this machine has no GPU): the observer writes the
snapshot at the first out-of-memory only, the history is asked for with Python stacks and
bounded, its snapshot is written at the end; a run's report reads the out-of-memory
snapshot before the others."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from nsbridge import schema as S
from nsbridge._bootstrap.allocator import HISTORY_ENTRIES, AllocatorRecord
from nsbridge.passes.torch_pass import _memory_snapshot
from snapshot_builder import Plan

MIB = 2 ** 20


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {"history": [], "observers": [], "snapshots": 0}

    def snapshot() -> dict[str, Any]:
        seen["snapshots"] += 1
        return Plan(oom_mib=20, free_pieces=40).build()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda **kw: seen["history"].append(kw))
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", snapshot)
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer",
                        seen["observers"].append, raising=False)
    return seen


def test_the_first_out_of_memory_is_written_and_the_history_at_the_end(
        tmp_path: Path, fake_cuda: dict[str, Any]) -> None:
    record = AllocatorRecord(tmp_path, history=True)
    record.start()
    assert fake_cuda["history"] == [{"max_entries": HISTORY_ENTRIES, "stacks": "python"}]
    (observer,) = fake_cuda["observers"]
    observer(0, 20 * MIB, 400 * MIB, 3 * MIB)
    observer(0, 40 * MIB, 400 * MIB, 3 * MIB)       # a later one, while handling the first
    assert fake_cuda["snapshots"] == 1
    record.finish()
    assert fake_cuda["history"][-1] == {"enabled": None}
    assert record.written == [S.OOM_SNAPSHOT, S.ALLOCATOR_SNAPSHOT]
    data = pickle.loads((tmp_path / S.OOM_SNAPSHOT).read_bytes())
    assert data == Plan(oom_mib=20, free_pieces=40).build()


def test_without_the_history_only_the_observer_is_armed(tmp_path: Path,
                                                       fake_cuda: dict[str, Any]) -> None:
    record = AllocatorRecord(tmp_path, history=False)
    record.start()
    record.finish()
    assert fake_cuda["history"] == [] and len(fake_cuda["observers"]) == 1
    assert not list(tmp_path.iterdir())


def test_a_torch_without_the_observer_says_so_and_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delattr(torch._C, "_cuda_attach_out_of_memory_observer", raising=False)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: None)
    record = AllocatorRecord(tmp_path, history=True)
    record.start()
    record.finish()
    assert "the allocator's record is off on this torch" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_run_reads_its_out_of_memory_snapshot_first(tmp_path: Path) -> None:
    (tmp_path / S.MEMORY_SNAPSHOT).write_bytes(pickle.dumps(Plan().build()))
    (tmp_path / S.OOM_SNAPSHOT).write_bytes(pickle.dumps(Plan(oom_mib=20,
                                                              free_pieces=40).build()))
    notes: list[str] = []
    snapshot, name = _memory_snapshot(tmp_path, notes)
    assert name == S.OOM_SNAPSHOT and snapshot["oom"]["request_mib"] == 20.0 and not notes
    (tmp_path / S.OOM_SNAPSHOT).write_bytes(b"damaged")
    snapshot, name = _memory_snapshot(tmp_path, notes)
    assert name == S.MEMORY_SNAPSHOT and snapshot["oom"] is None
    assert notes and notes[0].startswith("the memory snapshot oom-snapshot.pickle could not")
