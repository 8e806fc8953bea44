"""job.trace_map's reduce on real traces: what the merging process keeps (every trace's
summary, the op tables summed, the slowest trace's analysis alone), independent of the
order the map's results were produced in and of the batches the op tables are summed in."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsbridge.job import trace_map
from nsbridge.job.trace_map import TraceDigest, digest_trace, reduce_digests
from nsbridge.model.ranks.cross_rank import combine_ops
from nsbridge.profiles import load_profile

from conftest import TORCH_DATA

RANKS = sorted((TORCH_DATA / "two_ranks").glob("*.json.gz"))


@pytest.fixture(scope="module")
def digests() -> list[TraceDigest]:
    thresholds = load_profile().analysis
    out = []
    for path in RANKS:
        digest = digest_trace(path, thresholds, "steps", alone=False)
        assert isinstance(digest, TraceDigest)
        out.append(digest)
    return out


def _as_rank(digest: TraceDigest, rank: int) -> TraceDigest:
    return TraceDigest(Path(f"{digest.path}-{rank}"), rank, [], digest.has_memory,
                       digest.analysis)


def test_the_reduce_keeps_summaries_and_the_slowest_analysis_only(digests) -> None:
    steps = [d.analysis.verdict["numbers"]["step_ms"] for d in digests]
    reduced = reduce_digests(digests)
    assert [s["rank"] for s in reduced.summaries] == [0, 1]
    assert all(s["world_size"] == 2 for s in reduced.summaries)
    assert reduced.lead is digests[steps.index(max(steps))]
    assert reduced.summaries[reduced.lead_index]["step_ms"] == [
        round(float(w), 3) for w in reduced.lead.analysis.steps["wall_ms"]]
    combined = combine_ops([d.analysis.ops for d in digests], has_device=True)
    assert reduced.ops[["name", "calls", "device_self_us"]].equals(
        combined[["name", "calls", "device_self_us"]])


def test_results_in_another_order_give_the_same_lead_and_ranks(digests) -> None:
    """Equal steps: the lowest rank leads, however the results arrived."""
    copies = [_as_rank(digests[0], rank) for rank in range(5)]
    forward, backward = reduce_digests(copies), reduce_digests(copies[::-1])
    assert forward.lead.rank == backward.lead.rank == 0
    assert [s["rank"] for s in backward.summaries] == list(range(5))


def test_op_tables_summed_in_batches_equal_one_sum(digests, monkeypatch) -> None:
    """Batches keep every shape signature until the end, so a signature outside one
    trace's top still counts with the calls of every trace."""
    copies = [_as_rank(digests[r % 2], r) for r in range(7)]
    monkeypatch.setattr(trace_map, "MERGE_EVERY", 100)
    once = reduce_digests(copies).ops
    monkeypatch.setattr(trace_map, "MERGE_EVERY", 1)
    batched = reduce_digests(copies).ops
    assert once.drop(columns=["self_pct"]).astype(str).equals(
        batched.drop(columns=["self_pct"]).astype(str))
    assert (once["self_pct"] - batched["self_pct"]).abs().max() < 1e-9


def test_a_json_file_that_is_not_a_trace_is_a_note() -> None:
    reduced = reduce_digests(["skipped x.json: JSON that is not a torch.profiler trace"])
    assert reduced.lead is None and reduced.notes and not reduced.summaries
