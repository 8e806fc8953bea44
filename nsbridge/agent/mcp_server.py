"""`nsbridge mcp`: a Model Context Protocol server (the official `mcp` SDK, stdio) so that
an agent can triage, look at a run and gate a change through tools that answer JSON.

Every tool answers what `--format json` prints (agent/answer.py) or a bounded query over a
run (top ops, one op's kernels and ncu findings, sync points, memory, ranks), each pointing
at the run's files for more. Scripts, traces and runs are taken only under the roots given
at start (``--root``, default the current folder); nothing runs through a shell; a long
command reports progress every few seconds while it runs. While serving, the SDK points
file descriptor 1 at stderr, so a profiled script's output never reaches the protocol.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from .. import schema as S
from ..rundir import DEFAULT_BASE
from .answer import TOP_OPS, comparison_answer, doctor_answer, error_answer, run_answer

LIST_LIMIT = 50          # the most rows any query answers with
PROGRESS_EVERY_S = 5.0   # how often a running command reports progress


class OutsideRoots(ToolError):
    """A path the server was not allowed to use (its message reaches the client)."""


class Roots:
    """The folders the server may read and run from."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = [Path(r).resolve() for r in roots] or [Path.cwd().resolve()]

    def check(self, path: str) -> Path:
        """``path`` resolved, when it lies under a root (relative paths: under the first).

        Raises:
            OutsideRoots: it does not.
        """
        full = (self.roots[0] / path).resolve()
        if not any(full == root or root in full.parents for root in self.roots):
            raise OutsideRoots(f"{path} is outside the folders this server may use "
                                  f"({', '.join(map(str, self.roots))}); start it with "
                                  "--root FOLDER to allow another")
        return full

    def home(self, path: Path) -> Path:
        """The root a path lies under: commands run there, runs go under its nsbridge-runs/."""
        return next(root for root in self.roots if path == root or root in path.parents)


def build_server(roots: Sequence[str]) -> MCPServer:
    """The MCP server with nsbridge's tools over ``roots``."""
    from .. import __version__, api
    from .skill import skill_text

    allowed = Roots(roots)
    server = MCPServer(name="nsbridge", version=__version__, instructions=skill_text())

    async def running(ctx: Context, what: str, work: Callable[[], Any]) -> Any:
        """``work`` on a worker thread, with a progress notification every few seconds."""
        started = time.monotonic()
        done = anyio.Event()
        result: dict[str, Any] = {}

        async def work_then_stop() -> None:
            try:
                result["value"] = await anyio.to_thread.run_sync(work)
            except BaseException as exc:   # handed back below, as the command's error
                result["error"] = exc
            done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(work_then_stop)
            step = 0
            while not done.is_set():
                await ctx.report_progress(step, None, f"{what}: running for "
                                                      f"{time.monotonic() - started:.0f} s")
                step += 1
                with anyio.move_on_after(PROGRESS_EVERY_S):
                    await done.wait()
        if "error" in result:
            raise result["error"]
        return result["value"]

    async def command(ctx: Context, name: str, work: Callable[[], Any]) -> dict[str, Any]:
        try:
            return run_answer(name, await running(ctx, name, work))
        except Exception as exc:     # nsbridge's own errors and bugs: the error answer
            return error_answer(name, exc)

    async def compared(ctx: Context, name: str, work: Callable[[], Any]) -> dict[str, Any]:
        """``command`` for diff and gate: the comparison's answer, bounded."""
        try:
            result = await running(ctx, name, work)
        except Exception as exc:
            return error_answer(name, exc)
        return comparison_answer(name, _bounded_comparison(result), result["exit_code"])

    @server.tool()
    async def doctor(ctx: Context) -> dict[str, Any]:
        """What this machine can profile: torch and CUDA, GPUs, nsys with an NVTX round trip,
        ncu and counter permission, each OK/WARN/FAIL with its fix. Start here."""
        return doctor_answer(await running(ctx, "doctor", api.doctor))

    @server.tool()
    async def triage(ctx: Context, script: str, args: Optional[list[str]] = None,
                     threads: Optional[int] = None, runs: int = 1, nsys: bool = False,
                     deep_top: Optional[int] = None, timeout_s: float = 900.0) -> dict[str, Any]:
        """Run SCRIPT (a path under the allowed roots) with ARGS under torch.profiler and
        say what bounds it: verdict and confidence, top ops, sync points with their lines,
        recommendations. threads=1 and runs>=3 on a busy machine; nsys=True adds the
        timeline, deep_top=N Nsight Compute on the N hottest ops (GPU)."""
        path = allowed.check(script)
        return await command(ctx, "triage", lambda: api.triage(
            str(path), list(args or []), cwd=allowed.home(path), threads=threads, runs=runs,
            nsys=nsys, deep_top=deep_top, timeout=timeout_s,
            out=allowed.home(path) / DEFAULT_BASE / _run_name(path)))

    @server.tool()
    async def analyze(ctx: Context, paths: list[str]) -> dict[str, Any]:
        """Analyse files captured elsewhere (torch traces, nsys exports, ncu reports, or a
        folder of them) under the allowed roots."""
        files = [allowed.check(p) for p in paths]
        return await command(ctx, "analyze", lambda: api.analyze(
            [str(f) for f in files], out=allowed.home(files[0]) / DEFAULT_BASE /
            _run_name(files[0], "analyze")))

    @server.tool()
    async def deep(ctx: Context, run_dir: str, ops: Optional[list[str]] = None,
                   top: Optional[int] = None) -> dict[str, Any]:
        """Nsight Compute on the kernels of OPS (or the TOP ops by device time) of a run,
        merged into it: what bounds each kernel, occupancy, Tensor Cores, roofline,
        findings with fixes. Needs a GPU and counter permission (doctor says)."""
        run = allowed.check(run_dir)
        return await command(ctx, "deep", lambda: api.deep(None, kernels=list(ops or []),
                                                           top=top, run=run))

    @server.tool()
    async def diff(ctx: Context, base: str, new: str, fail_above_pct: float = 10.0
                   ) -> dict[str, Any]:
        """Compare two recorded runs op by op, as they were recorded: pass, regression (with
        the op) or inconclusive (with what would settle it)."""
        sides = allowed.check(base), allowed.check(new)
        return await compared(ctx, "diff", lambda: api.diff(*sides, fail_above=fail_above_pct))

    @server.tool()
    async def gate(ctx: Context, base: str, new: str, script: Optional[str] = None,
                   args: Optional[list[str]] = None, processes: int = 3, steps: int = 20,
                   fail_above_pct: float = 10.0) -> dict[str, Any]:
        """Run both sides of a change again, interleaved (PROCESSES each, STEPS measured
        steps), and judge op by op: the CI gate. BASE and NEW are run directories, or two
        checkouts with SCRIPT (a path inside each) and its ARGS."""
        sides = allowed.check(base), allowed.check(new)
        return await compared(ctx, "gate", lambda: api.gate(
            *sides, script, list(args or []), processes=processes, steps=steps,
            fail_above=fail_above_pct,
            out=allowed.home(sides[1]) / DEFAULT_BASE / _run_name(sides[1], "gate")))

    @server.tool()
    def top_ops(run_dir: str, n: int = TOP_OPS) -> dict[str, Any]:
        """A run's top N ops (at most 50) as report.json ranks them, with every pass's
        per-op numbers (torch.profiler, nsys, ncu)."""
        report = api.load(allowed.check(run_dir)).report
        ops = report.get("ops") or []
        return {"ranked_by": report.get("ranked_by"), "ops_in_run": len(ops),
                "ops": [_op_summary(op) for op in ops[:max(1, min(n, LIST_LIMIT))]],
                "more": str(allowed.check(run_dir) / S.OPS_CSV)}

    @server.tool()
    def op(run_dir: str, name: str) -> dict[str, Any]:
        """One op of a run: its times, input shapes, the kernels and copies it launched,
        its Tensor Core mark, and after the deep pass ncu's numbers and findings."""
        report = api.load(allowed.check(run_dir)).report
        found = next((o for o in report.get("ops") or [] if o["name"] == name), None)
        if found is None:
            names = [o["name"] for o in report.get("ops") or []]
            import difflib
            close = difflib.get_close_matches(name, names, n=3)
            return {"error": f"the run has no op {name!r}"
                             + (f"; did you mean {', '.join(close)}?" if close else "")}
        detail = _op_summary(found)
        detail.update({"shapes": found.get("shapes"),
                       "kernels": (found.get("kernels") or [])[:20],
                       "copies": (found.get("copies") or [])[:20],
                       "findings": ((found.get("ncu") or {}).get("findings") or [])[:20],
                       "more": str(allowed.check(run_dir) / S.REPORT_JSON)})
        return detail

    @server.tool()
    def sync_points(run_dir: str) -> dict[str, Any]:
        """Where the host waits (or on a CPU run would wait) for the device: each call site
        with its file:line, kind, count per step and cost, those in the steps first."""
        points = api.load(allowed.check(run_dir)).report.get("sync_points") or []
        return {"sync_points": points[:LIST_LIMIT], "total": len(points)}

    @server.tool()
    def memory(run_dir: str) -> dict[str, Any]:
        """The allocator over the measured window: peak, where (step, op stack), the level
        at each step's end; the curve itself is in report.json."""
        mem = api.load(allowed.check(run_dir)).report.get("memory") or {}
        return {k: v for k, v in mem.items() if k != "points"}

    @server.tool()
    def ranks(run_dir: str) -> dict[str, Any]:
        """A job of several ranks: each rank's step and its split, the straggler with its
        evidence, collectives; null for a single process."""
        dist = api.load(allowed.check(run_dir)).report.get("distributed")
        if not dist:
            return {"distributed": None}
        return {k: (v[:LIST_LIMIT] if isinstance(v, list) else v) for k, v in dist.items()}

    return server


def serve(roots: Sequence[str]) -> None:
    """Serve on stdin/stdout until the client goes away."""
    build_server(roots).run("stdio")


def _run_name(path: Path, kind: str = "") -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + (kind or path.stem) + f"-{time.time_ns() % 10**6}"


def _op_summary(op: dict[str, Any]) -> dict[str, Any]:
    keep = ("name", "calls", "cpu_self_us", "cpu_total_us", "device_self_us",
            "device_total_us", "self_pct", "spread_pct", "mem_mib")
    out = {k: op.get(k) for k in keep}
    out["tensor_cores"] = op.get("tensor_cores")
    for key in ("nsys", "ncu"):
        if isinstance(op.get(key), dict):
            out[key] = {k: v for k, v in op[key].items() if not isinstance(v, (list, dict))}
    return out


def _bounded_comparison(comparison: dict[str, Any]) -> dict[str, Any]:
    """A comparison as `--format json` writes it, its op rows cut to the ones that decide
    the outcome (or the first ones)."""
    import json

    from ..report.diff_render import render_diff

    result = json.loads(render_diff(comparison, "json"))
    ops = result.get("ops") or []
    kept = [o for o in ops if o.get("decides")] or ops[:LIST_LIMIT]
    return {**result, "ops": kept[:LIST_LIMIT], "ops_total": len(ops)}
