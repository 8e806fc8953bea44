"""`nsbridge mcp`: a Model Context Protocol server (the official `mcp` SDK, stdio) so that
an agent can triage, look at a run and gate a change through tools that answer JSON.

Every tool answers what `--format json` prints (agent/answer.py) or a bounded query over a
run (top ops, one op's kernels and ncu findings, sync points, memory, ranks), each pointing
at the run's files for more. Trust boundaries:

- Roots: paths in arguments are taken only under the roots given at start (``--root``,
  default the current folder), and every path nsbridge reads or runs on the way (traces a
  summary or a child record names, a folder's members, symlinks, report.json, a manifest's
  script and folder) is checked against them too (nsbridge.guard.confine); a file outside is
  never read, so no answer quotes it.
- Stopping: each command (doctor, triage, analyze, deep, diff, gate) runs as its own
  ``nsbridge --confine ROOT ... --format json`` process in a process group of its own.
  A client's cancel, the client going away (stdin closed) and SIGTERM to the server send
  SIGTERM to that group (nsbridge ends the script and marks the run 'terminated'), then
  SIGKILL after END_GRACE_S.
- Arguments: every number is checked against nsbridge.guard.limits, the ranges the CLI's
  options use; strings and lists are bounded, and so is every string an answer carries.

Nothing runs through a shell; a long command reports progress every few seconds. While
serving, the SDK points file descriptor 1 at stderr, and a command's process gets only its
answer's pipe as stdout, so a profiled script's output never reaches the protocol.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import anyio
from anyio.abc import Process
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server

from ..guard import limits
from .. import schema as S
from ..collect._process import signal_group, start_group
from ..guard.confine import confined_to, inside
from ..errors import NsbridgeError
from ..guard.limits import Bound, clipped
from ..rundir import DEFAULT_BASE
from .answer import TOP_OPS, error_answer

LIST_LIMIT = 50              # the most rows any query answers with
PROGRESS_EVERY_S = 5.0       # how often a running command reports progress
END_GRACE_S = 8.0            # a stopped command's processes: SIGTERM, then SIGKILL after this
ANSWER_BYTES = 64 << 20      # the most a command's answer may print


class OutsideRoots(ToolError):
    """A path the server was not allowed to use (its message reaches the client)."""


class Refused(ToolError):
    """A tool argument out of its range (one line, sent to the client)."""


class Roots:
    """The folders the server may read and run from."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = [Path(r).resolve() for r in roots] or [Path.cwd().resolve()]

    def check(self, path: str) -> Path:
        """``path`` resolved, when it lies under a root (relative paths: under the first).

        Raises:
            OutsideRoots: it does not.
        """
        _text("path", path)
        full = (self.roots[0] / path).resolve()
        if not inside(full, self.roots):
            raise OutsideRoots(f"{path} is outside the folders this server may use "
                               f"({', '.join(map(str, self.roots))}); start it with "
                               "--root FOLDER to allow another")
        return full

    def home(self, path: Path) -> Path:
        """The root a path lies under: commands run there, runs go under its nsbridge-runs/."""
        return next(root for root in self.roots if path == root or root in path.parents)

    def confine_args(self) -> list[str]:
        """The options that confine a command's nsbridge process to these roots."""
        return [arg for root in self.roots for arg in ("--confine", str(root))]

    def trust_args(self) -> list[str]:
        """gate's and deep's ``--trust``: a run's script may run from any root."""
        return [arg for root in self.roots for arg in ("--trust", str(root))]


def build_server(roots: Sequence[str]) -> MCPServer:
    """The MCP server with nsbridge's tools over ``roots``."""
    from .. import __version__, api
    from .skill import skill_text

    allowed = Roots(roots)
    server = MCPServer(name="nsbridge", version=__version__, instructions=skill_text())

    async def command(ctx: Context, name: str, argv: list[str], cwd: Path) -> dict[str, Any]:
        """``nsbridge ARGV --format json`` as a process of its own, confined to the roots:
        its answer, bounded."""
        full = [sys.executable, "-m", "nsbridge", *allowed.confine_args(), *argv]
        code, out = await _run_command(ctx, name, full, cwd)
        try:
            answer = json.loads(out)
            if not isinstance(answer, dict):
                raise ValueError("not an object")
        except ValueError:
            answer = error_answer(name, RuntimeError(
                f"the nsbridge {name} process ended with exit code {code} without an answer "
                "(its output went to the server's stderr)"))
        if name in ("diff", "gate"):
            answer = _bounded_comparison(answer)
        return _bounded(answer)

    @server.tool()
    async def doctor(ctx: Context) -> dict[str, Any]:
        """What this machine can profile: torch and CUDA, GPUs, nsys with an NVTX round trip,
        ncu and counter permission, each OK/WARN/FAIL with its fix. Start here."""
        return await command(ctx, "doctor", ["doctor", "--format", "json"], allowed.roots[0])

    @server.tool()
    async def triage(ctx: Context, script: str, args: Optional[list[str]] = None,
                     threads: Optional[int] = None, runs: int = 1, nsys: bool = False,
                     deep_top: Optional[int] = None, timeout_s: float = 900.0) -> dict[str, Any]:
        """Run SCRIPT (a path under the allowed roots) with ARGS under torch.profiler and
        say what bounds it: verdict and confidence, top ops, sync points with their lines,
        recommendations. threads=1 and runs>=3 on a busy machine; nsys=True adds the
        timeline, deep_top=N Nsight Compute on the N hottest ops (GPU). timeout_s stops
        the script (at most a week)."""
        path = allowed.check(script)
        script_args = _texts("args", args or [])
        home = allowed.home(path)
        argv = ["triage", "--format", "json", "--out", str(home / DEFAULT_BASE / _run_name(path)),
                "--runs", _number(limits.RUNS, runs, "runs"),
                "--timeout", _number(limits.TIMEOUT_S, timeout_s, "timeout_s")]
        if threads is not None:
            argv += ["--threads", _number(limits.THREADS, threads, "threads")]
        if nsys:
            argv.append("--nsys")
        if deep_top is not None:
            argv.append("--deep=" + _number(limits.DEEP_TOP, deep_top, "deep_top"))
        return await command(ctx, "triage", [*argv, str(path), "--", *script_args], home)

    @server.tool()
    async def analyze(ctx: Context, paths: list[str]) -> dict[str, Any]:
        """Analyse files captured elsewhere (torch traces, nsys exports, ncu reports, or a
        folder of them) under the allowed roots."""
        if not paths:
            raise Refused("paths must name at least one trace file or folder")
        files = [allowed.check(p) for p in _texts("paths", paths)]
        home = allowed.home(files[0])
        out = home / DEFAULT_BASE / _run_name(files[0], "analyze")
        return await command(ctx, "analyze", ["analyze", "--format", "json", "--out", str(out),
                                              "--", *map(str, files)], home)

    @server.tool()
    async def deep(ctx: Context, run_dir: str, ops: Optional[list[str]] = None,
                   top: Optional[int] = None, timeout_s: float = 900.0) -> dict[str, Any]:
        """Nsight Compute on the kernels of OPS (or the TOP ops by device time) of a run,
        merged into it: what bounds each kernel, occupancy, Tensor Cores, roofline,
        findings with fixes. Needs a GPU and counter permission (doctor says)."""
        run = allowed.check(run_dir)
        argv = ["deep", "--format", "json", "--run", str(run), *allowed.trust_args(),
                "--timeout", _number(limits.TIMEOUT_S, timeout_s, "timeout_s")]
        argv += [arg for op in _texts("ops", ops or []) for arg in ("--kernel", op)]
        if top is not None:
            argv += ["--top", _number(limits.DEEP_TOP, top, "top")]
        return await command(ctx, "deep", argv, allowed.home(run))

    @server.tool()
    async def diff(ctx: Context, base: str, new: str, fail_above_pct: float = 10.0,
                   fail_above_mib: Optional[float] = None) -> dict[str, Any]:
        """Compare two recorded runs op by op, as they were recorded: pass, regression (with
        the op) or inconclusive (with what would settle it); a peak memory FAIL_ABOVE_MIB
        higher is a regression too (default: 20% of the base peak, at least 16 MiB)."""
        sides = allowed.check(base), allowed.check(new)
        argv = ["diff", "--format", "json",
                "--fail-above", _number(limits.FAIL_ABOVE_PCT, fail_above_pct, "fail_above_pct"),
                *_memory_threshold(fail_above_mib), "--", *map(str, sides)]
        return await command(ctx, "diff", argv, allowed.home(sides[1]))

    @server.tool()
    async def gate(ctx: Context, base: str, new: str, script: Optional[str] = None,
                   args: Optional[list[str]] = None, processes: int = 3,
                   max_processes: int = 10, budget_s: float = 600.0, steps: int = 20,
                   fail_above_pct: float = 10.0, timeout_s: float = 900.0,
                   fail_above_mib: Optional[float] = None) -> dict[str, Any]:
        """Run both sides of a change again, interleaved (PROCESSES each to start with, one
        more pair at a time while inconclusive, up to MAX_PROCESSES and within BUDGET_S
        seconds; STEPS measured steps each), and judge op by op: the CI gate. BASE and
        NEW are run directories, or two checkouts with SCRIPT (a path inside each) and its
        ARGS. timeout_s stops any one process. FAIL_ABOVE_MIB: record memory too, and call
        a peak that many MiB higher a regression."""
        sides = allowed.check(base), allowed.check(new)
        home = allowed.home(sides[1])
        argv = ["gate", "--format", "json", *allowed.trust_args(),
                "--out", str(home / DEFAULT_BASE / _run_name(sides[1], "gate")),
                "--processes", _number(limits.PROCESSES, processes, "processes"),
                "--max-processes", _number(limits.MAX_PROCESSES, max_processes,
                                           "max_processes"),
                "--budget", _number(limits.BUDGET_S, budget_s, "budget_s"),
                "--steps", _number(limits.STEPS, steps, "steps"),
                "--fail-above", _number(limits.FAIL_ABOVE_PCT, fail_above_pct, "fail_above_pct"),
                "--timeout", _number(limits.TIMEOUT_S, timeout_s, "timeout_s"),
                *_memory_threshold(fail_above_mib), *map(str, sides)]
        if script is not None:
            argv += [_text("script", script), "--", *_texts("args", args or [])]
        return await command(ctx, "gate", argv, home)

    def report_of(run_dir: str) -> dict[str, Any]:
        """A run's report.json, read confined to the roots (nsbridge.guard.confine)."""
        path = allowed.check(run_dir)
        with confined_to(allowed.roots):
            try:
                return dict(api.load(path).report)
            except NsbridgeError as exc:
                raise ToolError(clipped(str(exc))) from None

    @server.tool()
    def top_ops(run_dir: str, n: int = TOP_OPS) -> dict[str, Any]:
        """A run's top N ops (at most 50) as report.json ranks them, with every pass's
        per-op numbers (torch.profiler, nsys, ncu)."""
        _number(limits.ROWS, n, "n")
        report = report_of(run_dir)
        ops = report.get("ops") or []
        return _bounded({"ranked_by": report.get("ranked_by"), "ops_in_run": len(ops),
                         "ops": [_op_summary(op) for op in ops[:n]],
                         "more": str(allowed.check(run_dir) / S.OPS_CSV)})

    @server.tool()
    def op(run_dir: str, name: str) -> dict[str, Any]:
        """One op of a run: its times, input shapes, the kernels and copies it launched,
        its Tensor Core mark, and after the deep pass ncu's numbers and findings."""
        _text("name", name)
        report = report_of(run_dir)
        found = next((o for o in report.get("ops") or [] if o["name"] == name), None)
        if found is None:
            names = [o["name"] for o in report.get("ops") or []]
            import difflib
            close = difflib.get_close_matches(name, names, n=3)
            return _bounded({"error": f"the run has no op {clipped(name, 200)!r}"
                             + (f"; did you mean {', '.join(close)}?" if close else "")})
        detail = _op_summary(found)
        detail.update({"shapes": found.get("shapes"),
                       "kernels": (found.get("kernels") or [])[:20],
                       "copies": (found.get("copies") or [])[:20],
                       "findings": ((found.get("ncu") or {}).get("findings") or [])[:20],
                       "more": str(allowed.check(run_dir) / S.REPORT_JSON)})
        return _bounded(detail)

    @server.tool()
    def sync_points(run_dir: str) -> dict[str, Any]:
        """Where the host waits (or on a CPU run would wait) for the device: each call site
        with its file:line, kind, count per step and cost, those in the steps first."""
        points = report_of(run_dir).get("sync_points") or []
        return _bounded({"sync_points": points[:LIST_LIMIT], "total": len(points)})

    @server.tool()
    def memory(run_dir: str) -> dict[str, Any]:
        """The allocator over the measured window: peak, where (step, op stack), the level
        at each step's end; the curve itself is in report.json."""
        mem = report_of(run_dir).get("memory") or {}
        return _bounded({k: v for k, v in mem.items() if k != "points"})

    @server.tool()
    def ranks(run_dir: str) -> dict[str, Any]:
        """A job of several ranks: each rank's step and its split, the straggler with its
        evidence, collectives; null for a single process."""
        dist = report_of(run_dir).get("distributed")
        if not dist:
            return {"distributed": None}
        return _bounded({k: (v[:LIST_LIMIT] if isinstance(v, list) else v)
                         for k, v in dist.items()})

    return server


def serve(roots: Sequence[str]) -> None:
    """Serve on stdin/stdout until the client goes away or SIGTERM; either way the running
    commands are ended first, and SIGTERM exits 143."""
    anyio.run(_serve, build_server(roots))


async def _serve(server: MCPServer) -> None:
    """The stdio loop, cancelled (and with it every running command) when stdin closes or
    SIGTERM comes. The SDK's own loop would wait for running commands to finish before it
    noticed either; and after SIGTERM its stdin reader, a thread blocked on a pipe the
    client still holds open, would never end: the process exits 143 once its commands
    have."""
    from mcp.shared.message import SessionMessage

    lowlevel = server._lowlevel_server
    stopped = False
    async with stdio_server() as (read, write):
        inbox_in, inbox = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        async with anyio.create_task_group() as group:
            async def relay() -> None:
                async with inbox_in:
                    async for message in read:
                        await inbox_in.send(message)
                group.cancel_scope.cancel()       # the client went away

            async def on_sigterm() -> None:
                nonlocal stopped
                with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                    async for _ in signals:
                        stopped = True
                        group.cancel_scope.cancel()
                        return

            group.start_soon(relay)
            group.start_soon(on_sigterm)
            await lowlevel.run(inbox, write, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()
        if stopped:
            sys.stderr.flush()
            os._exit(143)


async def _run_command(ctx: Context, name: str, argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``argv`` in a process group of its own, reporting progress every few seconds;
    its exit code and what it printed. Cancelled (a client's cancel, the client gone,
    SIGTERM), the group is ended: SIGTERM, then SIGKILL after END_GRACE_S."""
    started = time.monotonic()
    process: Process = await start_group(argv, cwd=cwd)
    printed = bytearray()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_collect, process, printed)
            step = 0
            while True:
                await ctx.report_progress(step, None, f"{name}: running for "
                                                      f"{time.monotonic() - started:.0f} s")
                step += 1
                with anyio.move_on_after(PROGRESS_EVERY_S):
                    await process.wait()
                    break
        return int(process.returncode or 0), printed.decode("utf-8", errors="replace")
    finally:
        if process.returncode is None:
            with anyio.CancelScope(shield=True):
                await _end(process)


async def _collect(process: Process, printed: bytearray) -> None:
    """What the process prints on stdout, up to ANSWER_BYTES."""
    assert process.stdout is not None
    async for chunk in process.stdout:
        if len(printed) < ANSWER_BYTES:
            printed.extend(chunk[:ANSWER_BYTES - len(printed)])


async def _end(process: Process) -> None:
    """End a command's process group: SIGTERM (nsbridge ends its script and marks the run),
    then SIGKILL to whatever is left after END_GRACE_S."""
    signal_group(process.pid, signal.SIGTERM)
    with anyio.move_on_after(END_GRACE_S):
        await process.wait()
    signal_group(process.pid, signal.SIGKILL)
    await process.wait()


def _memory_threshold(mib: Optional[float]) -> list[str]:
    """--fail-above-mib and its value, once in range (nothing when not given)."""
    return [] if mib is None else ["--fail-above-mib",
                                   _number(limits.FAIL_ABOVE_MIB, mib, "fail_above_mib")]


def _number(bound: Bound, value: Any, name: str) -> str:
    """``value`` of the argument ``name`` as a command-line argument, once it is in
    ``bound``'s range.

    Raises:
        Refused: it is not.
    """
    why = bound.refusal(value, name)
    if why:
        raise Refused(why)
    return repr(value) if isinstance(value, float) else str(value)


def _text(name: str, value: str) -> str:
    """A string argument of at most limits.ARG_CHARS characters, without NUL."""
    if len(value) > limits.ARG_CHARS or "\0" in value:
        raise Refused(f"{name} must be at most {limits.ARG_CHARS} characters, without NUL; "
                      f"got {len(value):,} characters")
    return value


def _texts(name: str, values: list[str]) -> list[str]:
    """A list argument of at most limits.ARG_ITEMS strings, each bounded as ``_text``."""
    if len(values) > limits.ARG_ITEMS:
        raise Refused(f"{name} may hold at most {limits.ARG_ITEMS} entries; got {len(values):,}")
    return [_text(name, v) for v in values]


def _bounded(value: Any) -> Any:
    """An answer with every string cut to limits.ECHO_CHARS and NaN/infinities as null."""
    if isinstance(value, str):
        return clipped(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {clipped(str(k)): _bounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v) for v in value]
    return value


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


def _bounded_comparison(answer: dict[str, Any]) -> dict[str, Any]:
    """A comparison's answer, its op rows cut to the ones that decide the outcome (or the
    first ones)."""
    ops = answer.get("ops")
    if not isinstance(ops, list):
        return answer
    kept = [o for o in ops if isinstance(o, dict) and o.get("decides")] or ops[:LIST_LIMIT]
    return {**answer, "ops": kept[:LIST_LIMIT], "ops_total": len(ops)}
