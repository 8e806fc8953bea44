"""report.html in a real browser: headless Chromium (Debian's `chromium`, driven by
Playwright) loads it from disk with no network, draws the charts, sorts and filters the op
table, and runs nothing planted in a name. Screenshots go to each test's tmp folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nsbridge.api import analyze
from nsbridge.model.analysis import analyze_events
from nsbridge.profiles import load_profile
from nsbridge.report.document.build import build_report

from builders import events, kernel, launch, op
from conftest import DATA, ROOT, TORCH_DATA, run_nsbridge
from rendered import report_html

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow,    # the browser fixture starts chromium
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")]


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield instance
        instance.close()


def _open(browser, path: Path, shot: Path, width: int = 1400):
    """The page, its console errors and page errors, offline; a full-page screenshot."""
    context = browser.new_context(offline=True, viewport={"width": width, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: errors.append(f"dialog: {d.message}"))
    page.goto(path.resolve().as_uri())
    page.screenshot(path=str(shot), full_page=True)
    return page, errors


@pytest.mark.slow
def test_cnn_report_renders_sorts_and_filters(browser, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = run_nsbridge("triage", "--out", str(run), "examples/train_cnn.py", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((run / "report.json").read_text())
    page, errors = _open(browser, run / "report.html", tmp_path / "cnn.png")
    assert errors == []
    assert (tmp_path / "cnn.png").stat().st_size > 10_000
    charts = page.evaluate("Object.values(Chart.instances).map(c => c.canvas.id).sort()")
    assert charts == ["chart-memory", "chart-memory_curve", "chart-ops",
                      "chart-pass-memory_kinds", "chart-steps"]
    _labels_fit(page)
    kinds = page.evaluate("""() => Object.values(Chart.instances).find(
        c => c.canvas.id === 'chart-pass-memory_kinds').data.datasets.map(
        d => [d.label, d.data])""")
    holders = report["memory"]["holders"]      # what holds memory: at the peak, each step's end
    for label, values in kinds:
        at_peak = next((k["mib"] for k in holders["kinds"] if k["kind"] == label), 0.0)
        assert values == [at_peak, *(end[label] for end in holders["per_step_end"])]
    curve = page.evaluate("""() => Object.values(Chart.instances).find(
        c => c.canvas.id === 'chart-memory_curve').data.datasets.map(d => [d.label, d.data.length])""")
    memory = report["memory"]
    assert curve[0][1] == len(memory["points"]["t_ms"]) > 10           # the allocated curve
    sign = "+" if memory["relative"] else ""            # as the memory line says it
    assert curve[-1] == [f"peak {sign}{memory['peak_mib']:.1f} MiB in {memory['peak_ops'][-1]}",
                         1]
    # group by shape: the toggle shows the shape table and hides the op table
    page.locator("#ops .toggle-bar button", has_text="op and input shapes").click()
    assert page.locator("#op-table").is_hidden()
    shapes = page.locator("#op-table-by-shape tbody tr")
    assert shapes.count() == len(report["op_groups"]["by_shape"]) > 0
    assert "[[" in shapes.first.inner_text()
    page.locator("#ops .toggle-bar button[data-show=op-table]").click()
    assert page.locator("#op-table").is_visible()
    rows = page.locator("#op-table tbody tr")
    assert rows.count() == len(report["ops"])
    page.locator("#op-table th", has_text="calls").click()   # numbers: largest first
    calls = [int(v) for v in page.eval_on_selector_all(
        "#op-table tbody tr", "rows => rows.map(r => r.cells[1].textContent)")]
    assert calls == sorted(calls, reverse=True) and calls != [op["calls"] for op in report["ops"]]
    page.locator("#op-table th", has_text="calls").click()
    calls = [int(v) for v in page.eval_on_selector_all(
        "#op-table tbody tr", "rows => rows.map(r => r.cells[1].textContent)")]
    assert calls == sorted(calls)
    page.fill("input.row-filter[data-table=op-table]", "conv")
    visible = page.eval_on_selector_all("#op-table tbody tr", "rows => rows.filter("
                                        "r => r.style.display !== 'none').length")
    assert 0 < visible == sum("conv" in op["name"].lower() for op in report["ops"])
    assert "Verdict:" in page.locator("#verdict").inner_text()


def _labels_fit(page) -> None:
    """Every horizontal bar chart's category labels are drawn whole inside the canvas:
    long names are cut in the middle (…), not clipped at the left edge (each label's
    drawn width, measured in the scale's own font, fits the axis Chart.js gave it)."""
    cut = page.evaluate("""() => Object.values(Chart.instances)
        .filter(c => c.options.indexAxis === 'y')
        .map(c => {
          const y = c.scales.y, ctx = c.ctx;
          ctx.save(); ctx.font = Chart.helpers.toFont(y.options.ticks.font).string;
          const widths = y.ticks.map(t => ctx.measureText(String(t.label)).width);
          ctx.restore();
          return [c.canvas.id, y.left, y.width, Math.max(0, ...widths),
                  y.ticks.map(t => t.label)];
        })""")
    assert cut
    for chart, left, width, widest, labels in cut:
        assert left >= 0, chart
        assert widest <= width, (chart, widest, width, labels)
        assert all(len(label) <= 44 for label in labels), (chart, labels)


LONG_OP = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@pytest.mark.parametrize("width", [1280, 900])
def test_long_op_names_fit_their_axis_at_narrower_windows(browser, tmp_path: Path,
                                                           width: int) -> None:
    """Regression: at 1280 px the top-ops chart cut 'numerate(DataLoader…' at the canvas's
    left edge: the middle cut kept 44 characters where the axis had room for fewer."""
    frame = events(op("ProfilerStep#1", 0, 2000, cat="user_annotation"),
                   op(LONG_OP, 5, 900), op("aten::mm", 1000, 500), op("aten::add", 1600, 100),
                   op("aten::" + "very_long_operator_name_" * 3, 1750, 200))
    analysis = analyze_events(frame, thresholds=load_profile("default").analysis)
    report = build_report(command="analyze", target="t", status="ok", analysis=analysis,
                          step_source=None, overhead=None, files={}, notes=[],
                          has_memory=False)
    (tmp_path / "report.html").write_text(report_html(report), encoding="utf-8")
    page, errors = _open(browser, tmp_path / "report.html", tmp_path / "narrow.png", width)
    assert errors == []
    _labels_fit(page)


def test_gpu_fixture_report_has_device_and_ncu_charts(browser, tmp_path: Path) -> None:
    result = analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz",
                      DATA / "ncu" / "train_cnn_nvtx_sections.raw.csv"], out=tmp_path / "r")
    page, errors = _open(browser, result.run_dir / "report.html", tmp_path / "h200.png")
    assert errors == []
    for chart in ("steps", "ops", "kernels", "gaps", "memory_curve", "memory", "pass-ncu",
                  "pass-memory_kinds"):
        assert page.locator(f"#chart-{chart}").count() == 1, chart
    assert page.evaluate("Object.keys(Chart.instances).length") == 8
    _labels_fit(page)
    kernels = page.evaluate("""() => Object.values(Chart.instances).find(
        c => c.canvas.id === 'chart-kernels').data.datasets[0].data""")
    top = [w for w in result.report["device"]["work"] if w["kind"] == "kernel"][:len(kernels)]
    assert kernels == [w["device_us"] / 1e3 for w in top]
    assert "grid [" in page.locator("#kernels").inner_text()      # launch configurations
    assert page.locator("#op-table tbody tr").count() == len(result.report["ops"])
    header = page.locator("#op-table thead").inner_text()
    assert "Nsight Compute" in header and "torch.profiler" in header     # columns by source


def test_names_from_a_trace_never_run_as_script(browser, tmp_path: Path) -> None:
    evil = "aten::<script>window.__pwned=1</script>&<b>x</b>"
    frame = events(op("ProfilerStep#1", 0, 100, cat="user_annotation"), op(evil, 5, 50),
                   launch(6, 1), kernel("void k<float, (int)1>(T1) </script><script>alert(1)", 10, 85, 1))
    analysis = analyze_events(frame, thresholds=load_profile("default").analysis)
    report = build_report(command="analyze", target="t<script>.json", status="ok",
                          analysis=analysis, step_source=None, overhead=None, files={},
                          notes=[], has_memory=False)
    page_file = tmp_path / "evil.html"
    page_file.write_text(report_html(report))
    page, errors = _open(browser, page_file, tmp_path / "evil.png")
    assert errors == [] and page.evaluate("window.__pwned") is None
    assert evil in page.locator("#op-table tbody").inner_text()      # shown as text


def test_the_roofline_chart_places_each_kernel_under_its_roofs(browser, tmp_path: Path) -> None:
    result = analyze([DATA / "ncu" / "matmul_fp32_full.raw.csv",
                      DATA / "ncu" / "matmul_bf16_full.raw.csv"], out=tmp_path / "r")
    page, errors = _open(browser, result.run_dir / "report.html", tmp_path / "roofline.png")
    assert errors == []
    drawn = page.evaluate("""() => {
        const c = Object.values(Chart.instances).find(c => c.canvas.id === 'chart-pass-roofline');
        return c && {x: c.options.scales.x.type, y: c.options.scales.y.type,
                     sets: c.data.datasets.map(d => [d.type, d.data.length])};
    }""")
    assert drawn["x"] == drawn["y"] == "logarithmic"
    assert sorted(drawn["sets"]) == [["line", 3], ["line", 3], ["scatter", 1], ["scatter", 1]]


def test_two_rank_report_puts_the_rank_chart_under_the_verdict(browser, tmp_path: Path) -> None:
    result = analyze(sorted((TORCH_DATA / "two_ranks").glob("*.json.gz")), out=tmp_path / "r")
    page, errors = _open(browser, result.run_dir / "report.html", tmp_path / "ranks.png")
    assert errors == []
    first = page.evaluate("document.querySelector('#charts canvas').id")
    assert first == "chart-ranks"
    bars = page.evaluate("""() => { const c = Object.values(Chart.instances).find(
        x => x.canvas.id === 'chart-ranks'); return [c.data.labels,
        c.data.datasets.map(d => [d.label, d.data])]; }""")
    labels, sets = bars
    assert labels == ["rank 0", "rank 1"]
    ranks = result.report["distributed"]["ranks"]
    for i, rank in enumerate(ranks):     # the stack adds up to the rank's median step
        assert sum(d[1][i] for d in sets) == pytest.approx(rank["step_ms"], abs=0.01)
    sections = page.evaluate("Array.from(document.querySelectorAll('section[id]')).map(s => s.id)")
    assert sections.index("ranks") < sections.index("ops")


def test_ops_grouped_by_calling_function_on_a_trace_with_stacks(browser, tmp_path: Path) -> None:
    result = analyze([TORCH_DATA / "h100_bert-small_2025-07.json.gz"], out=tmp_path / "r")
    page, errors = _open(browser, result.run_dir / "report.html", tmp_path / "bert.png")
    assert errors == []
    page.locator("#ops .toggle-bar button[data-show=op-table-by-source]").click()
    assert page.locator("#op-table").is_hidden() and page.locator("#op-table-by-shape").is_hidden()
    rows = page.locator("#op-table-by-source tbody tr")
    by_source = result.report["op_groups"]["by_source"]
    assert rows.count() == len(by_source) > 0
    first = rows.first.inner_text()
    assert by_source[0]["name"] in first and by_source[0]["source"] in first
    page.fill("input.row-filter[data-table=op-table-by-source]", "addmm")
    shown = page.eval_on_selector_all("#op-table-by-source tbody tr",
                                      "rows => rows.filter(r => r.style.display !== 'none').length")
    assert shown == sum("addmm" in r["name"] for r in by_source)
    _labels_fit(page)


def test_a_thousand_rank_report_charts_a_distribution_and_a_heat_map(browser,
                                                                     tmp_path: Path) -> None:
    """1,024 ranks, rank 700 slow in one op: the step chart has the table's ranks only, the
    distribution counts every rank, and the heat map (64 columns of 16 ranks) is darkest
    in that op's row at rank 700's column."""
    from nsbridge.job.identity import rank_dir_name
    from nsbridge.rundir import write_json

    job = tmp_path / "job"
    for rank in range(1024):
        slow = 8000.0 if rank == 700 else 0.0
        ops = [{"name": f"aten::op{i}", "calls": 10, "device_self_us": None,
                "cpu_self_us": 100.0 + i + (rank % 5) + slow * (i == 0)} for i in range(5)]
        summary = {"rank": rank, "host": f"node{rank // 8}", "world_size": 1024,
                   "status": "ok", "exit_code": 0, "profiled": True, "verdict": "cpu-bound",
                   "step_ms": [50.0 + (rank % 7) * 0.1 + slow / 1e3] * 3, "has_device": False,
                   "device_busy_pct": None, "comm": None, "collectives": [], "ops": ops}
        (job / rank_dir_name(rank)).mkdir(parents=True)
        write_json(job / rank_dir_name(rank) / "summary.json", summary)
    result = analyze([job], out=tmp_path / "run")
    page, errors = _open(browser, result.run_dir / "report.html", tmp_path / "heat.png")
    assert errors == []
    labels = page.evaluate("""() => Object.values(Chart.instances).find(
        x => x.canvas.id === 'chart-ranks').data.labels""")
    assert 2 <= len(labels) <= 11 and any(label.startswith("rank 700") for label in labels)
    counts = page.evaluate("""() => Object.values(Chart.instances).find(
        x => x.canvas.id === 'chart-rank_steps').data.datasets[0].data""")
    assert sum(counts) == 1024
    rows = page.evaluate("""() => Array.from(document.querySelectorAll('table.heat tr')).map(
        r => Array.from(r.cells).map(c => [c.textContent, c.style.background]))""")
    assert len(rows) == 1 + 5 and len(rows[0]) == 1 + 64
    op0 = next(row for row in rows if row[0][0] == "aten::op0")
    darkest = max(range(1, 65), key=lambda i: float(op0[i][0]))
    assert rows[0][darkest][0] == "ranks 688-703"        # rank 700's run of 16
    shades = {op0[i][1] for i in range(1, 65) if i != darkest}
    assert op0[darkest][1] == "rgb(185, 28, 28)" and shades == {"rgba(185, 28, 28, 0)"}
