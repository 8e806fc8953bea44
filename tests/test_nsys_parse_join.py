"""nsys SQLite parsing (2022.4 to 2026 schemas) and the kernel -> op join on real exports."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsbridge.errors import NsysExportError, TraceNotFoundError
from nsbridge.model.device.timeline import (NO_LAUNCH, NVTX_PUSH_POP, OUTSIDE_OPS, classify_ranges,
                                     join, window_to_steps)
from nsbridge.parse.nsys_sqlite import read_nsys_sqlite

from conftest import DATA

NSYS = DATA / "nsys"
H100 = NSYS / "h100_2gpu_1s.sqlite"
T4 = NSYS / "power_iteration__baseline.sqlite"
V100 = NSYS / "MW_baseline_trimmed.sqlite"
OURS = NSYS / "nsbridge_cnn_cpu_nsys2022.4.sqlite"
OURS_GPU = NSYS / "nsbridge_sync_bound_h100_nsys2025.3.sqlite"


def _count(path: Path, sql: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchone()[0]


@pytest.mark.parametrize("path, version, schema", [
    (H100, "2026.2.1.210", "3.25.0"), (T4, "2025.3.1.90", "3.20.2"),
    (V100, "2022.4.2.1", "3.0.0"), (OURS, "2022.4.2.1", "3.0.0"),
    (OURS_GPU, "2025.3.2.0", "3.20.3")])
def test_versions_and_row_counts_across_schema_generations(path: Path, version: str,
                                                           schema: str) -> None:
    export = read_nsys_sqlite(path)
    assert (export.product_version, export.schema_version) == (version, schema)
    if "CUPTI_ACTIVITY_KIND_KERNEL" in export.tables:
        assert len(export.kernels) == _count(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
        assert export.kernels["name"].notna().all() and (export.kernels["dur"] >= 0).all()
    if "NVTX_EVENTS" in export.tables:
        expected = _count(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) "
                                "AND \"end\" IS NOT NULL")
        assert len(export.ranges) == expected


def test_runtime_names_lose_their_version_suffix() -> None:
    names = set(read_nsys_sqlite(H100).runtime["name"])
    assert "cudaLaunchKernel" in names and not any(n.endswith("_v7000") for n in names)
    driver = read_nsys_sqlite(V100).runtime
    assert set(driver.loc[driver["name"] == "cuLaunchKernel", "api"]) == {"driver"}


def test_thread_ids_are_decoded() -> None:
    ranges = read_nsys_sqlite(OURS).ranges
    gtid = ranges["global_tid"].astype("int64").to_numpy()
    assert np.array_equal((gtid >> 24) & 0xFFFFFF, ranges["pid"].astype("int64").to_numpy())
    assert np.array_equal(gtid & 0xFFFFFF, ranges["tid"].astype("int64").to_numpy())
    assert ranges["domain"].eq("nsbridge").all()


def test_h100_gemm_kernels_go_to_mm_family_ops_and_orphans_are_counted() -> None:
    timeline = join(read_nsys_sqlite(H100))
    kernels = timeline.gpu[timeline.gpu["kind"] == "kernel"]
    launched = _count(H100, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE EXISTS ("
                            "SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = "
                            "k.correlationId AND (r.globalTid & ~16777215) = k.globalPid)")
    assert (kernels["rule"] != NO_LAUNCH).sum() == launched == 1632
    assert len(kernels) == 3442  # orphans kept, not dropped
    gemm = kernels[kernels["name"].str.contains("gemm") & (kernels["rule"] == NVTX_PUSH_POP)]
    assert len(gemm) > 100
    assert set(gemm["op"]) <= {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul",
                               "aten::linear", "aten::baddbmm"}
    assert timeline.summary["attribution"][NO_LAUNCH]["kernels"] > 0
    mm = timeline.ops.set_index("op").loc["aten::mm"]
    assert mm["kernels"] > 0 and mm["gpu_us"] > 0 and mm["ranges"] > 0


_INDEPENDENT_JOIN = """
WITH gpu AS (
  SELECT 'kernels' AS kind, correlationId AS corr, globalPid AS gpid, "end" - start AS dur
    FROM CUPTI_ACTIVITY_KIND_KERNEL
  UNION ALL SELECT 'copies', correlationId, globalPid, "end" - start FROM CUPTI_ACTIVITY_KIND_MEMCPY
  UNION ALL SELECT 'memsets', correlationId, globalPid, "end" - start FROM CUPTI_ACTIVITY_KIND_MEMSET)
SELECT gpu.kind,
       (SELECT o.op FROM op_ranges o WHERE o.gtid = r.globalTid AND o.start <= r.start
           AND o."end" >= r.start ORDER BY o.start DESC LIMIT 1) AS op,
       count(*), sum(gpu.dur)
  FROM gpu JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
    ON r.correlationId = gpu.corr AND (r.globalTid & ~16777215) = gpu.gpid
 GROUP BY 1, 2
"""


def _independent_join(path: Path) -> dict:
    """(op, kind) -> (count, µs) by SQL alone: launch by correlationId, then the
    latest-starting aten:: push/pop range containing it on the launching thread."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        conn.execute("""CREATE TEMP TABLE op_ranges AS
            SELECT n.globalTid AS gtid, n.start, n."end",
                   rtrim(substr(coalesce(n.text, s.value) || ',', 1,
                                instr(coalesce(n.text, s.value) || ',', ',') - 1)) AS op
              FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
             WHERE n.eventType = 59 AND coalesce(n.text, s.value) LIKE 'aten::%'""")
        conn.execute("CREATE INDEX temp.op_ranges_at ON op_ranges (gtid, start)")
        return {(op, kind): (n, ns / 1e3) for kind, op, n, ns in
                conn.execute(_INDEPENDENT_JOIN) if op is not None}


@pytest.mark.parametrize("path", [H100, OURS_GPU])
def test_kernels_copies_and_memsets_per_op_match_an_independent_sql_join(path: Path) -> None:
    """Each op's kernels, copies and memsets apart, against a join written in SQL alone."""
    expected = _independent_join(path)
    assert expected
    ops = join(read_nsys_sqlite(path)).ops.set_index("op")
    time_of = {"kernels": "kernel_us", "copies": "copy_us", "memsets": "memset_us"}
    for (op, kind), (count, us) in expected.items():
        assert ops.loc[op, kind] == count, (op, kind)
        assert ops.loc[op, time_of[kind]] == pytest.approx(us), (op, kind)


def test_the_h100_copy_op_keeps_kernels_and_copies_apart() -> None:
    ops = join(read_nsys_sqlite(H100)).ops.set_index("op")
    # the case that was wrong: aten::copy_ is 136 kernels (0.38 ms) and 432 memcpys
    copy = ops.loc["aten::copy_"]
    assert (copy["kernels"], copy["copies"]) == (136, 432)
    assert copy["kernel_us"] == pytest.approx(379.778)
    assert copy["copy_bytes_htod"] > 0 and copy["copy_bytes_dtod"] > 0
    assert copy["gpu_us"] == pytest.approx(copy["kernel_us"] + copy["copy_us"])


def test_events_without_a_launch_are_split_by_kind() -> None:
    summary = join(read_nsys_sqlite(H100)).summary
    orphans = {kind: _count(H100, f"SELECT count(*) FROM {table} k WHERE NOT EXISTS (SELECT 1 "
                                  "FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = "
                                  "k.correlationId AND (r.globalTid & ~16777215) = k.globalPid)")
               for kind, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"),
                                   ("copies", "CUPTI_ACTIVITY_KIND_MEMCPY"))}
    assert orphans == {"kernels": 1810, "copies": 466}
    assert summary["attribution"][NO_LAUNCH] == {**orphans, "memsets": 0}
    assert summary["no_launch"]["kernels"] == 1810 and summary["no_launch"]["copy_us"] > 0
    assert (summary["kernels"], summary["copies"], summary["memsets"]) == (3442, 904, 22)


def test_library_domains_are_context_not_ops() -> None:
    timeline = join(read_nsys_sqlite(T4))
    assert timeline.summary["other_domains"] == ["CCCL"]
    assert timeline.summary["op_ranges"] == 0
    summary = timeline.summary
    assert summary["attribution"] == {OUTSIDE_OPS: {"kernels": summary["kernels"],
                                                    "copies": summary["copies"],
                                                    "memsets": summary["memsets"]}}


def test_our_cpu_export_has_forward_and_backward_ops_and_modules() -> None:
    timeline = join(read_nsys_sqlite(OURS))
    ops = set(timeline.ops["op"])
    assert {"aten::convolution", "aten::convolution_backward", "aten::addmm"} <= ops
    ranges = classify_ranges(read_nsys_sqlite(OURS).ranges)
    modules = set(ranges.loc[ranges["kind"] == "module", "name"])
    assert "model.features.0" in modules and "model.features.0 [backward]" in modules
    assert set(ranges.loc[ranges["kind"] == "step", "name"]) >= {"step 0", "step 1"}


def test_our_gpu_export_ties_every_kernel_to_an_op_and_names_the_syncs() -> None:
    """nsbridge's own NVTX ranges on a real H100 (nsys 2025.3): every kernel, copy and memset
    launched inside an op range, the .item() copies under aten::_local_scalar_dense."""
    timeline = join(read_nsys_sqlite(OURS_GPU))
    summary = timeline.summary
    kernels = _count(OURS_GPU, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert summary["kernels"] == kernels > 0
    assert summary["attribution"] == {NVTX_PUSH_POP: {"kernels": kernels,
                                                      "copies": summary["copies"],
                                                      "memsets": summary["memsets"]}}
    assert summary["nsbridge_ranges"] > summary["op_ranges"] > 0
    ops = timeline.ops.set_index("op")
    assert ops.loc["aten::_local_scalar_dense", "copies"] > 0
    assert ops.loc["aten::_local_scalar_dense", "sync_us"] > 0
    assert {"aten::addmm", "aten::mm"} <= set(ops.index)


def _ranges(*rows: tuple) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["start", "end", "name", "domain", "global_tid"])
    frame["dur"] = frame["end"] - frame["start"]
    frame["style"] = "push_pop"
    frame["pid"], frame["tid"] = 1, frame["global_tid"]
    return frame


class _Export:
    """A synthetic export (frames only) for the join's edge cases."""

    def __init__(self, ranges: pd.DataFrame, runtime: pd.DataFrame, kernels: pd.DataFrame):
        self.ranges, self.runtime, self.kernels = ranges, runtime, kernels
        empty = pd.DataFrame(columns=["start", "end", "dur", "device", "stream", "correlation",
                                      "global_pid", "bytes", "kind"])
        self.memcpy = self.memset = empty
        self.osrt = pd.DataFrame(columns=["start", "end", "dur", "global_tid", "name"])
        self.product_version, self.schema_version = "test", "0"
        self.tables = {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"}


def test_join_is_per_thread_and_innermost() -> None:
    pid = 5 << 24
    ranges = _ranges((0, 100, "model.fc", "nsbridge", pid + 1),
                     (10, 90, "aten::linear", "nsbridge", pid + 1),
                     (20, 80, "aten::addmm", "nsbridge", pid + 1),
                     (0, 100, "aten::add, op_id = 3", "", pid + 2),   # other thread, same time
                     (0, 100, "cub::Sum", "CCCL", pid + 1))
    runtime = pd.DataFrame({"start": [30, 40], "end": [35, 45], "dur": [5, 5],
                            "global_tid": [pid + 1, pid + 2], "correlation": [7, 8],
                            "name": ["cudaLaunchKernel", "cudaLaunchKernel"],
                            "api": ["runtime", "runtime"], "pid": [5, 5], "tid": [1, 2]})
    kernels = pd.DataFrame({"start": [50, 60, 70], "end": [55, 65, 75], "dur": [5, 5, 5],
                            "device": [0, 0, 0], "stream": [7, 7, 7], "correlation": [7, 8, 9],
                            "global_pid": [pid, pid, pid], "name": ["gemm", "add", "orphan"],
                            "short_name": ["gemm", "add", "orphan"]})
    timeline = join(_Export(ranges, runtime, kernels))
    by_name = timeline.gpu.set_index("name")
    assert by_name.loc["gemm", "op"] == "aten::addmm" and by_name.loc["gemm", "module"] == "model.fc"
    assert by_name.loc["add", "op"] == "aten::add"
    assert by_name.loc["orphan", "rule"] == NO_LAUNCH
    assert by_name.loc["gemm", "launch_latency"] == 20
    assert timeline.gaps[0]["dur_us"] == pytest.approx(0.005)


def test_not_sqlite_and_missing_tables(tmp_path: Path) -> None:
    bad = tmp_path / "x.sqlite"
    bad.write_text("not a database at all, just text " * 100)
    with pytest.raises(NsysExportError, match="not an SQLite database"):
        read_nsys_sqlite(bad)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT)")
        conn.execute("INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_PRODUCT_VERSION', '2021.1')")
    with pytest.raises(NsysExportError, match=r"lacks .*NVTX_EVENTS.*2021\.1"):
        read_nsys_sqlite(other)
    with pytest.raises(TraceNotFoundError):
        read_nsys_sqlite(tmp_path / "missing.sqlite")


def test_the_join_covers_the_measured_steps_like_the_torch_pass() -> None:
    """Only the GPU work launched in nsbridge's step ranges 3-5 (the default profile's
    measured steps), against SQL: launches by correlationId whose runtime call starts
    between the first of those ranges' start and the last one's end."""
    export = read_nsys_sqlite(OURS_GPU)
    cut, window = window_to_steps(export, [3, 4, 5])
    assert window["kind"] == "steps" and window["steps"] == [3, 4, 5]
    with sqlite3.connect(f"file:{OURS_GPU}?mode=ro", uri=True) as conn:
        lo, hi = conn.execute("""SELECT min(n.start), max(n."end") FROM NVTX_EVENTS n
            LEFT JOIN StringIds s ON s.id = n.textId
            WHERE coalesce(n.text, s.value) IN ('step 3', 'step 4', 'step 5')""").fetchone()
        count = lambda table: conn.execute(f"""SELECT count(*) FROM {table} k
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
             AND (r.globalTid & ~16777215) = k.globalPid
            WHERE r.start >= ? AND r.start < ?""", (lo, hi)).fetchone()[0]
        kernels, copies = count("CUPTI_ACTIVITY_KIND_KERNEL"), count("CUPTI_ACTIVITY_KIND_MEMCPY")
    assert (window["start_ns"], window["end_ns"]) == (lo, hi)
    summary = join(cut).summary
    assert (summary["kernels"], summary["copies"]) == (kernels, copies)
    assert copies == 3 * 129            # sync_bound.py: 129 .item() copies per step
    assert summary["kernels"] < join(export).summary["kernels"]
    whole, why = window_to_steps(export, [3, 4, 99])
    assert whole is export and "step 99" in why["why"]


def test_measured_steps_are_the_first_window_the_torch_pass_saved(tmp_path: Path) -> None:
    from nsbridge.passes.nsys_pass import measured_steps
    from nsbridge.profiles import load_profile

    phases = ["first", "unprofiled", "warmup", "active", "active", "active", "unprofiled",
              "warmup", "active", "active", "active"]
    (tmp_path / "child.json").write_text(json.dumps({"status": "ok", "exit_code": 0, "steps": [
        {"index": i, "phase": p, "wall_ms": 5.0} for i, p in enumerate(phases)]}))
    profile = load_profile("default")
    assert measured_steps(tmp_path, profile) == [3, 4, 5]     # repeat 2: the first window
    assert measured_steps(None, profile) == [3, 4, 5]         # the schedule's own rule


def test_an_nsys_export_alone_shows_its_ops_without_empty_torch_columns(tmp_path: Path) -> None:
    """analyze of an nsys export alone: the op table holds the nsys columns, not eleven
    torch.profiler columns of '-' under 'totals over the 0 measured steps'."""
    import nsbridge

    nsbridge.analyze([OURS_GPU], out=tmp_path / "run")
    md = (tmp_path / "run" / "report.md").read_text()
    # report.md: the Timeline section's own op table, no second table of the same rows
    assert "## Ops" not in md and "| `aten::addmm` |" in md
    assert "0 measured steps" not in md and "gross MiB" not in md
    assert "as the torch.profiler figures" not in md          # there was no such pass
    # report.html: one sortable table of every pass's columns
    page = (tmp_path / "run" / "report.html").read_text()
    section = page[page.index("<section id='ops'>"):]
    section = section[:section.index("</section>")]
    assert "Ops (no torch.profiler pass" in section
    assert "nsys kernel ms" in section and "self CPU ms" not in section
    assert "<code>aten::addmm</code>" in section


def test_a_launch_after_an_op_of_another_domain_ended_is_not_that_ops() -> None:
    """NVTX domains keep separate stacks, so nsbridge's module range may outlive a
    default-domain op range it began inside: a launch after the op ended belongs to the
    module only, never to the op that is over."""
    pid = 5 << 24
    ranges = _ranges((0, 10, "aten::mm, op_id = 1", "", pid + 1),
                     (5, 20, "model.fc", "nsbridge", pid + 1))
    runtime = pd.DataFrame({"start": [3, 15], "end": [4, 16], "dur": [1, 1],
                            "global_tid": [pid + 1, pid + 1], "correlation": [1, 2],
                            "name": ["cudaLaunchKernel"] * 2, "api": ["runtime"] * 2,
                            "pid": [5, 5], "tid": [1, 1]})
    kernels = pd.DataFrame({"start": [30, 40], "end": [35, 45], "dur": [5, 5],
                            "device": [0, 0], "stream": [7, 7], "correlation": [1, 2],
                            "global_pid": [pid, pid], "name": ["during", "after"],
                            "short_name": ["during", "after"]})
    by_name = join(_Export(ranges, runtime, kernels)).gpu.set_index("name")
    assert by_name.loc["during", "op"] == "aten::mm"
    assert pd.isna(by_name.loc["after", "op"]) and by_name.loc["after", "module"] == "model.fc"
    assert by_name.loc["after", "rule"] == OUTSIDE_OPS


def test_a_kernel_without_a_correlation_id_has_no_launch() -> None:
    """NULL correlationIds (read as -1) never pair a kernel with a runtime call that also
    lacks one: that kernel's launch is unknown, not the first such call."""
    pid = 5 << 24
    ranges = _ranges((0, 100, "aten::mm", "nsbridge", pid + 1))
    runtime = pd.DataFrame({"start": [30, 40], "end": [35, 45], "dur": [5, 5],
                            "global_tid": [pid + 1, pid + 1], "correlation": [-1, 8],
                            "name": ["cudaLaunchKernel"] * 2, "api": ["runtime"] * 2,
                            "pid": [5, 5], "tid": [1, 1]})
    kernels = pd.DataFrame({"start": [50, 60], "end": [55, 65], "dur": [5, 5],
                            "device": [0, 0], "stream": [7, 7], "correlation": [-1, 8],
                            "global_pid": [pid, pid], "name": ["unknown", "known"],
                            "short_name": ["unknown", "known"]})
    by_name = join(_Export(ranges, runtime, kernels)).gpu.set_index("name")
    assert by_name.loc["unknown", "rule"] == NO_LAUNCH
    assert by_name.loc["known", "rule"] == NVTX_PUSH_POP and by_name.loc["known", "op"] == "aten::mm"


def test_the_step_window_keeps_kernels_without_a_correlation_id_by_their_own_time() -> None:
    """window_to_steps: a kernel with no correlationId is in the window when it starts in
    it, never because some runtime call in the window also lacks an id."""
    pid = 5 << 24
    ranges = _ranges((100, 200, "step 1", "nsbridge", pid + 1))
    runtime = pd.DataFrame({"start": [150], "end": [155], "dur": [5],
                            "global_tid": [pid + 1], "correlation": [-1],
                            "name": ["cudaLaunchKernel"], "api": ["runtime"],
                            "pid": [5], "tid": [1]})
    kernels = pd.DataFrame({"start": [50, 160], "end": [55, 165], "dur": [5, 5],
                            "device": [0, 0], "stream": [7, 7], "correlation": [-1, -1],
                            "global_pid": [pid, pid], "name": ["before", "inside"],
                            "short_name": ["before", "inside"]})
    from nsbridge.parse.nsys_sqlite import NsysExport

    frames = _Export(ranges, runtime, kernels)
    export = NsysExport(path=Path("x.sqlite"), product_version="test", schema_version="0",
                        tables=frames.tables, ranges=ranges, kernels=kernels, runtime=runtime,
                        memcpy=frames.memcpy, memset=frames.memset, gpu_syncs=pd.DataFrame(),
                        osrt=frames.osrt, threads=pd.DataFrame())
    cut, window = window_to_steps(export, [1])
    assert window["kind"] == "steps"
    assert list(cut.kernels["name"]) == ["inside"]
