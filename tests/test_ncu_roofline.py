"""Every kernel gets findings and a roofline from ncu's own counters, checked against ncu.

The two `--set full` captures of one H200 GEMM each (tests/data/ncu/SOURCES.md): fp32 with
TF32 off (FFMA, no NVTX: what an engineer already has on disk) and bf16 on the Hopper
tensor path. The roofline numbers are recomputed here by hand from the raw CSV cells
(parsed with the csv module and ncu's printed units, not nsbridge's reader), and the share
of the roof equals ncu's own pipe-utilisation metric of the same launch.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsbridge.api import analyze
from nsbridge.cli import main
from nsbridge.model.nsight.ncu import kernel_family
from nsbridge.model.nsight.ncu_findings import TF32_FIX
from nsbridge.model.nsight.roofline import roofline
from nsbridge.passes.ncu_pass import read_ncu_file

from conftest import DATA

FP32 = DATA / "ncu" / "matmul_fp32_full.raw.csv"
BF16 = DATA / "ncu" / "matmul_bf16_full.raw.csv"
NVTX = DATA / "ncu" / "train_cnn_nvtx_sections.raw.csv"
UNIT = {"": 1.0, "inst/cycle": 1.0, "Ghz": 1e9, "Gbyte/s": 1e9, "Kbyte/cycle": 1e3,
        "ms": 1e6, "us": 1e3, "%": 1.0}


def _cells(path: Path) -> dict[str, float]:
    """The first launch's metrics in base units, read by hand from the raw page."""
    header, units, values = list(csv.reader(path.open()))[:3]
    out = {}
    for name, unit, value in zip(header, units, values):
        if unit in UNIT:
            try:
                out[name] = float(value.replace(",", "")) * UNIT[unit]
            except ValueError:
                pass
    return out


def _launch_values(path: Path) -> dict[str, float]:
    data = read_ncu_file(path)
    wide = data.metrics.pivot_table(index="launch", columns="metric", values="value",
                                    aggfunc="first")
    return wide.iloc[0].to_dict()


def test_fp32_roofline_equals_the_hand_computation_and_ncus_fma_pipe() -> None:
    c = _cells(FP32)
    flop_s = 2 * c["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed"] \
        * c["smsp__cycles_elapsed.avg.per_second"]
    peak = 2 * c["sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"] \
        * c["sm__cycles_elapsed.avg.per_second"]
    dram_s = c["dram__bytes.sum.per_second"]
    dram_peak = c["dram__bytes.sum.peak_sustained"] * c["dram__cycles_elapsed.avg.per_second"]
    r = roofline(_launch_values(FP32))
    assert r["precision"] == "fp32"
    assert r["flop_per_s"] == pytest.approx(flop_s, rel=1e-9)            # 39.4 TFLOP/s
    assert r["flop_peak_per_s"] == pytest.approx(peak, rel=1e-9)         # 50.7 TFLOP/s
    assert r["dram_bytes_per_s"] == pytest.approx(dram_s, rel=1e-9)
    assert r["dram_peak_bytes_per_s"] == pytest.approx(dram_peak, rel=1e-9)
    assert r["intensity"] == pytest.approx(flop_s / dram_s, rel=1e-9)    # 347 FLOP/byte
    assert r["ridge"] == pytest.approx(peak / dram_peak, rel=1e-9)
    assert r["roof"] == "compute" and flop_s / dram_s > peak / dram_peak
    assert r["roof_pct"] == pytest.approx(100 * flop_s / peak, rel=1e-9)
    # ncu's own FMA-pipe utilisation of the same launch (elapsed cycles): 77.84 %
    assert r["roof_pct"] == pytest.approx(
        c["sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed"], abs=0.1)
    assert r["missing"] == []


def test_bf16_roofline_is_the_tensor_path_and_equals_ncus_tensor_pipe() -> None:
    c = _cells(BF16)
    r = roofline(_launch_values(BF16))
    path = "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum"
    assert r["precision"] == "tensor bf16 (hgmma)"
    assert r["flop_per_s"] == pytest.approx(c[f"{path}.per_second"], rel=1e-9)
    assert r["flop_peak_per_s"] == pytest.approx(
        c[f"{path}.peak_sustained_elapsed.per_second"], rel=1e-9)
    assert r["roof_pct"] == pytest.approx(
        c["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"], abs=0.01)
    assert "fp32" not in r["flops"] or r["flops"]["fp32"]["achieved"] == 0.0


def test_a_bare_fp32_report_leads_with_findings_for_its_kernel(tmp_path: Path) -> None:
    """No NVTX, no op: the kernel still gets its findings, fixes and roofline."""
    result = analyze([FP32], out=tmp_path / "r")
    ncu = result.report["ncu"]
    assert ncu["attribution"] == {"no_nvtx": 1}
    [family] = ncu["families"]
    assert family["kernel"].startswith("sm80_xmma_gemm_f32f32") and family["ops"] == []
    assert family["duration_ns"] == pytest.approx(3_486_880)
    by_id = {f["id"]: f for f in family["findings"]}
    tensor = by_id["no-tensor-cores"]
    assert "fp32 without TF32" in tensor["detail"] and tensor["fix"] == TF32_FIX
    assert "allow_tf32 = True" in TF32_FIX and "bfloat16" in TF32_FIX
    assert family["findings"][0]["id"] == "no-tensor-cores"
    assert by_id["roofline"]["title"] == "compute roof binds"
    assert "39.4 TFLOP/s fp32" in by_id["roofline"]["detail"]
    assert "347 FLOP/byte" in by_id["roofline"]["detail"]
    assert "3.49 ms" in by_id["roofline"]["detail"]
    assert by_id["low-occupancy"]["detail"].startswith("achieved 12.5% of peak warps")
    assert "limited by registers" in by_id["low-occupancy"]["detail"]
    # FLOPs and DRAM bytes the capture gives only as rates are not "missing"
    assert not {"flop_fp32", "dram_bytes"} & set(ncu["missing_quantities"])
    [launch] = ncu["kernels"]
    assert launch["roof"] == "compute" and launch["precision"] == "fp32"
    assert [r["id"] for r in result.report["recommendations"]] == ["tensor-cores"]
    md = (tmp_path / "r" / "report.md").read_text()
    for text in ("fp32 without TF32", "allow\\_tf32 = True", "compute roof binds",
                 "| 3.487 |", "39.4 T"):
        assert text in md, text


def test_the_terminal_prints_the_kernels_findings(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["analyze", "--out", str(tmp_path / "r"), str(FP32)])
    assert out.exit_code == 0, out.output
    text = out.output
    assert "matmul eligible for Tensor Cores but not on them" in text
    assert "fp32 without TF32" in text and "allow_tf32 = True" in text
    assert "compute roof binds" in text and "over 3.49 ms" in text
    assert "Roofline per kernel family" in text


def test_report_html_has_the_roofline_chart_with_each_kernel(tmp_path: Path) -> None:
    result = analyze([FP32, BF16], out=tmp_path / "r")
    page = (tmp_path / "r" / "report.html").read_text()
    assert "id='chart-pass-roofline'" in page        # the ncu view's chart
    blob = page[page.index("id='nsbridge-data'>") + 19:]
    data = json.loads(blob[:blob.index("</script>")])
    roofline = next(c for c in data["pass_charts"] if c["id"] == "roofline")
    points = {p["label"].split(" (")[0][:20]: p for p in roofline["points"]}
    assert len(points) == 2
    fams = {f["kernel"][:20]: f for f in result.report["ncu"]["families"]}
    for key, point in points.items():
        assert (point["x"], point["y"]) == (fams[key]["intensity"], fams[key]["flop_per_s"])
    roofs = {r["label"] for r in roofline["roofs"]}
    assert roofs == {"fp32 roof", "tensor bf16 (hgmma) roof"}


def test_an_nvtx_capture_keeps_per_op_findings_and_groups_kernels() -> None:
    kernels = analyze([NVTX]).report["ncu"]["families"]
    assert sum(f["launches"] for f in kernels) == 39
    assert all(f["findings"] for f in kernels if f.get("sm_pct") is not None)
    assert len({f["kernel"] for f in kernels}) == len(kernels)


def test_kernel_family_drops_templates_and_parameters() -> None:
    assert kernel_family("void at::native::vectorized_elementwise_kernel<4, "
                         "at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
                         "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
                         ) == "at::native::vectorized_elementwise_kernel"
    assert kernel_family("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == \
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert kernel_family("void at::native::(anonymous namespace)::softmax_warp_forward"
                         "<float, float, float, 10, false, false>(float*, float const*, int)"
                         ) == "at::native::(anonymous namespace)::softmax_warp_forward"
