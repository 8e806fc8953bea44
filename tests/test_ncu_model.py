"""ncu metrics -> ops, findings and the merged op report, on real H200 Nsight Compute output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsbridge.api import analyze
from nsbridge.errors import DeepError
from nsbridge.model.nsight.deep_plan import check_ops, choose, plan
from nsbridge.model.nsight.ncu import kernel_table, launch_op, op_summary, resolve
from nsbridge.parse.ncu import read_ncu
from nsbridge.profiles import load_profile

from conftest import DATA, TORCH_DATA

NCU = DATA / "ncu"
DEEP = load_profile("deep").deep


def _summary(name: str, op: str) -> dict:
    data = read_ncu(NCU / name)
    kernels, _ = kernel_table(data.launches, data.metrics, DEEP.quantities)
    kernels["op"], kernels["attribution"] = op, "nvtx"     # these GEMMs ran without NVTX
    return op_summary(kernels)[op]


def test_bf16_gemm_is_on_tensor_cores() -> None:
    s = _summary("matmul_bf16_full.raw.csv", "aten::mm")
    assert s["tensor_pct"] == pytest.approx(95.31, abs=0.01)      # ncu's own number
    assert s["tensor_path"] == "Hopper warp-group MMA (wgmma)"
    assert s["tensor_bf16_pct"] == pytest.approx(90.49, abs=0.01)
    assert [f["id"] for f in s["findings"]] == ["tensor-cores", "roofline", "compute-bound",
                                                "low-occupancy"]
    low = next(f for f in s["findings"] if f["id"] == "low-occupancy")
    assert low["fix"].startswith("none needed while the Tensor Cores stay busy")
    assert s["occupancy_limiter"] == "registers, shared memory"


def test_fp32_gemm_is_eligible_but_not_on_tensor_cores() -> None:
    s = _summary("matmul_fp32_full.raw.csv", "aten::mm")
    finding = next(f for f in s["findings"] if f["id"] == "no-tensor-cores")
    assert finding["title"] == "matmul eligible for Tensor Cores but not on them"
    assert "fp32 without TF32" in finding["detail"]
    assert s["fma_pct"] > 80 and s["tensor_pct"] < 0.001
    assert s["duration_ns"] == pytest.approx(3486880)


def test_missing_metric_is_missing_not_zero() -> None:
    s = _summary("matmul_fp32_full.raw.csv", "aten::mm")
    assert s["tensor_fp16_pct"] is None                           # not in this capture
    assert s["tensor_imma_pct"] == 0.0                            # collected, and zero
    assert s["flop_fp64"] == 0.0                                  # counters present: no DFMA
    # --set full gives FLOPs as a rate: the total is the rate times the kernel's time
    assert s["flop_fp32"] == pytest.approx(s["flop_per_s"] * s["duration_ns"] / 1e9)


def test_candidates_follow_the_compute_capability() -> None:
    hopper_only = ["sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active @cc==9.0"]
    assert resolve(hopper_only, 9.0) == [[(1.0, hopper_only[0].split()[0])]]
    assert resolve(hopper_only, 8.0) == []
    assert resolve(["2*a.sum + b.sum"], 8.0) == [[(2.0, "a.sum"), (1.0, "b.sum")]]


def test_cnn_kernels_reach_their_ops_through_the_nvtx_stack() -> None:
    data = read_ncu(NCU / "train_cnn_nvtx_sections.raw.csv")
    kernels, _ = kernel_table(data.launches, data.metrics, DEEP.quantities)
    assert (kernels["attribution"] == "nvtx").all() and len(kernels) == 39
    # an independent reading of the same column: the last quoted entry's range name
    for ident, op in zip(data.launches.itertuples(), kernels["op"]):
        assert op == ident.nvtx[-1][1]
    first = kernels.iloc[0]
    assert (first["op"], first["module"], first["step"]) == ("aten::relu", "model.features.4",
                                                             "step 4")
    ops = op_summary(kernels)
    assert ops["aten::addmm"]["launches"] == 4
    assert sum(s["launches"] for s in ops.values()) == 39


def test_kernels_outside_the_chosen_ops_are_never_attributed_to_them() -> None:
    data = read_ncu(NCU / "train_cnn_nvtx_sections.raw.csv")
    kernels, _ = kernel_table(data.launches, data.metrics, DEEP.quantities,
                              targets=[{"op": "aten::addmm"}])
    assert set(kernels.loc[kernels["attribution"] == "nvtx", "op"]) == {"aten::addmm"}
    assert (kernels["attribution"] == "outside_filter").sum() == 35
    assert set(op_summary(kernels)) == {"aten::addmm"}


def test_launch_op_reads_pytorch_emit_nvtx_ranges_too() -> None:
    where = launch_op((("", "aten::linear, seq = 3"), ("", "aten::addmm, op_id = 9")))
    assert where["op"] == "aten::addmm"


def test_fixture_backed_run_shows_ncu_in_the_op_rows(tmp_path: Path) -> None:
    """The H200 CNN triage trace plus ncu's CSV of the same example: one op report."""
    analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz",
                      NCU / "train_cnn_nvtx_sections.raw.csv"], out=tmp_path / "r")
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    rows = {op["name"]: op for op in report["ops"]}
    conv = rows["aten::convolution_backward"]
    assert conv["device_self_us"] > 0 and conv["ncu"]["launches"] == 6       # side by side
    assert conv["ncu"]["tensor_path"] == "HMMA"
    assert rows["aten::addmm"]["ncu"]["findings"][0]["id"] == "no-tensor-cores"   # first
    assert report["ncu"]["launches"] == 39 and report["ncu"]["attribution"] == {"nvtx": 39}
    assert "flop_fp32" in report["ncu"]["missing_quantities"]
    assert "tensor-cores" in [r["id"] for r in report["recommendations"]]
    md = (tmp_path / "r" / "report.md").read_text()
    html = (tmp_path / "r" / "report.html").read_text()
    for text in (md, html):
        assert "ncu tensor %" in text and "Kernels (Nsight Compute)" in text
        assert "matmul eligible for Tensor Cores but not on them" in text
    assert "ncu, ops.ncu" in report["sources"]


def test_ops_only_ncu_saw_join_the_table(tmp_path: Path) -> None:
    result = analyze([NCU / "train_cnn_nvtx_sections.raw.csv"], out=tmp_path / "r")
    names = [op["name"] for op in result.report["ops"]]
    assert "aten::convolution_backward" in names and result.report["ops"][0]["calls"] is None


def test_unknown_op_gets_a_did_you_mean() -> None:
    with pytest.raises(DeepError, match=r"did you mean 'aten::addmm'"):
        check_ops(["aten::adddmm"], ["aten::addmm", "aten::mm", "aten::add"])


def _ops() -> list[dict]:
    return [{"name": "aten::mm", "device_self_us": 300.0,
             "kernels": [{"name": "gemm", "calls": 6, "device_us": 300.0}]},
            {"name": "aten::fill_", "device_self_us": 90.0,
             "kernels": [{"name": "fill", "calls": 90, "device_us": 90.0}]},
            {"name": "aten::add", "device_self_us": 60.0,
             "kernels": [{"name": "add", "calls": 3, "device_us": 60.0}]},
            {"name": "aten::copy_", "device_self_us": 50.0, "kernels": []}]


def test_top_skips_ops_whose_kernels_are_too_short_and_says_why() -> None:
    chosen = choose(_ops(), top=2, min_kernel_us=2.0)
    assert [c["op"] for c in chosen] == ["aten::mm", "aten::add"]
    assert chosen[0]["reason"].startswith("#1 by device time: 0.300 ms (60% of GPU time)")


def test_plan_skips_warm_up_steps_and_bounds_launches_per_op() -> None:
    chosen = choose(_ops(), top=2, min_kernel_us=2.0)
    p = plan(chosen, _ops(), steps=3, deep=DEEP, script_s=10.0)
    assert (p["launch_skip"], p["launch_count"]) == (6, 3)   # (2 + 1) per step; 2 steps skipped
    assert p["estimate_s"] > 15 and p["launch_counts_known"]


def test_a_nested_op_is_profiled_in_the_range_that_encloses_it(tmp_path: Path) -> None:
    """aten::cudnn_convolution has no NVTX range of its own (nsbridge's dispatch mode sees
    aten::convolution): the plan names the enclosing ranges, and the launches there are
    the convolution's own kernels, while the bias add in the same range belongs to no
    planned op. The H200 trace and the ncu capture are of the same CNN example."""
    analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz"], out=tmp_path / "r")
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    conv = next(op for op in report["ops"] if op["name"] == "aten::cudnn_convolution")
    assert conv["kernels"][0]["within"][:2] == ["aten::_convolution", "aten::convolution"]
    the_plan = plan(choose(report["ops"], kernels=["aten::cudnn_convolution", "aten::addmm"]),
                    report["ops"], report["steps"]["count"], DEEP, None)
    rows = {row["op"]: row for row in the_plan["ops"]}
    assert "aten::convolution" in rows["aten::cudnn_convolution"]["ranges"]
    assert rows["aten::addmm"]["ranges"][:2] == ["aten::addmm", "aten::linear"]
    own = sum(row["launches_per_step"] for row in the_plan["ops"])
    assert the_plan["launch_count"] > round(own), "the bias adds in the same range are counted"

    data = read_ncu(NCU / "train_cnn_nvtx_sections.raw.csv")
    kernels, _ = kernel_table(data.launches, data.metrics, DEEP.quantities,
                              targets=the_plan["ops"])
    in_conv = kernels[kernels["nvtx_range"] == "aten::convolution"]
    mine = in_conv[in_conv["attribution"] == "nvtx"]
    assert set(mine["op"]) == {"aten::cudnn_convolution"} and len(mine) == 3
    assert {k.split("<")[0] for k in mine["kernel"]} >= {
        "void engines_precompiled::nchwToNhwcKernel"}
    bias = in_conv[in_conv["attribution"] == "outside_filter"]
    assert len(bias) == 1 and "elementwise_kernel" in bias["kernel"].iloc[0]
    assert op_summary(kernels)["aten::cudnn_convolution"]["launches"] == 3
