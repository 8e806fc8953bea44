"""The MCP server's trust boundaries (issue 48): its roots hold for every path nsbridge reads
or runs on a client's behalf (ten indirect ways out, each refused, no outside byte in any
answer, no outside script run); a cancelled or disconnected command, or SIGTERM, leaves no
process; every argument is checked with the CLI's ranges (nsbridge.guard.limits), in one line."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from click.testing import CliRunner

from nsbridge.guard import limits
from nsbridge.cli import main
from nsbridge.guard.confine import confined_to, readable
from nsbridge.errors import OutsideRootsError

from conftest import EXAMPLES

SECRET = "PASSWORD=hunter2_TOP"
SECRET_OP = "aten::outside_secret_op"
# a script that never ends, and starts a process of its own that never ends either
FOREVER = ("import subprocess, sys, time\n"
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)',\n"
           "                  *sys.argv[1:]])\n"
           "while True:\n    time.sleep(0.1)\n")


# --- in this process: the ranges and the roots ------------------------------------------

def test_the_cli_refuses_what_the_ranges_refuse_with_a_usage_error() -> None:
    for args in (["triage", "--threads", "100000", "x.py"], ["diff", "--fail-above", "nan",
                                                              "a", "b"],
                 ["gate", "--processes", "0", "a", "b"], ["gate", "--steps", "0", "a", "b"],
                 ["triage", "--runs", "0", "x.py"], ["triage", "--timeout", "inf", "x.py"],
                 ["diff", "--min-step-share", "inf", "a", "b"],
                 ["triage", "--nproc-per-node", "100000", "x.py"],
                 ["triage", "--node-rank", "-1", "x.py"], ["analyze", "--jobs", "100000", "x"]):
        result = CliRunner().invoke(main, args, prog_name="nsbridge")
        assert result.exit_code == 2, (args, result.output)
        assert "must be a" in result.output, result.output


def test_a_bound_refuses_nan_infinities_bools_and_out_of_range_in_one_line() -> None:
    for bound, value in ((limits.FAIL_ABOVE_PCT, float("nan")), (limits.TIMEOUT_S, 1e300),
                         (limits.RUNS, 0), (limits.RUNS, True), (limits.STEPS, 2.5),
                         (limits.THREADS, limits.usable_cores() + 1), (limits.ROWS, "3")):
        why = bound.refusal(value)
        assert why and "\n" not in why and len(why) < 200, (bound, value)
    assert limits.THREADS.refusal(limits.usable_cores()) is None
    assert limits.FAIL_ABOVE_PCT.refusal(5) is None
    assert limits.clipped("x" * 10**7).endswith("(10,000,000 characters in all)")


def test_an_answer_carries_no_string_longer_than_the_bound() -> None:
    pytest.importorskip("mcp", reason="the MCP SDK (nsbridge[agent]) is not installed")
    from nsbridge.agent.mcp_server import _bounded

    huge = "aten::" + "x" * 10**7          # a 10 MB op name from a report
    answer = _bounded({"ops": [{"name": huge, "pct": float("nan")}], huge: 1})
    assert len(json.dumps(answer)) < 3 * limits.ECHO_CHARS + 200
    assert answer["ops"][0]["pct"] is None


def test_readable_follows_symlinks_and_names_the_path_never_its_bytes(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.json").write_text(SECRET)
    (root / "link.json").symlink_to(outside / "secret.json")
    (root / "own.json").write_text("{}")
    assert readable(root / "link.json") == root / "link.json"    # nothing confined
    with confined_to([root]):
        assert readable(root / "own.json") == root / "own.json"
        for path in (root / "link.json", outside / "secret.json", root / ".." / "outside"):
            with pytest.raises(OutsideRootsError) as refused:
                readable(path)
            assert str(path) in str(refused.value) and "hunter2" not in str(refused.value)
    assert readable(outside / "secret.json")                      # and nothing after


def test_a_folder_member_a_summary_trace_and_a_child_record_are_checked(
        tmp_path: Path) -> None:
    """analyze's own reads, confined (the server's command process runs them so)."""
    from nsbridge import api

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "traces").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.json").write_text(SECRET)
    (root / "traces" / "rank0.json").symlink_to(outside / "secret.json")
    with confined_to([root]), pytest.raises(OutsideRootsError) as refused:
        api.analyze([root / "traces"], out=root / "r")
    assert "hunter2" not in str(refused.value) and not (root / "r").exists()


# --- over MCP ------------------------------------------------------------------------------

def _mcp_params(root: Path, cwd: Path) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, cwd=str(cwd), env=dict(os.environ),
                                 args=["-m", "nsbridge", "mcp", "--root", str(root)])


def _session(root: Path, cwd: Path, body: Callable[[Any], Any]) -> None:
    """``body(client)`` in an MCP client session with a server over ``root``."""
    pytest.importorskip("mcp", reason="the MCP SDK (nsbridge[agent]) is not installed")
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    async def run() -> None:
        async with stdio_client(_mcp_params(root, cwd)) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                await body(client)

    anyio.run(run)


def _text_of(result: Any) -> str:
    return json.dumps(result.structured_content) + "".join(
        getattr(c, "text", "") for c in result.content)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A root holding one real triage run ("run"), and an outside folder beside it holding a
    secret file, a trace with an op of its own, that trace's report, and a script that
    leaves a mark when it runs."""
    top = tmp_path_factory.mktemp("mcp-roots")
    root, outside = top / "root", top / "outside"
    root.mkdir()
    outside.mkdir()
    shutil.copy(EXAMPLES / "sync_bound.py", root / "sync_bound.py")
    made = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "triage", "--format", "json",
                           "--threads", "1", "--out", "run", "sync_bound.py", "--steps", "6"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    run = root / "run"
    child = json.loads((run / "child.json").read_text())
    trace = run / child["traces"][0]
    (outside / "secret.json").write_text(SECRET)
    text = gzip.decompress(trace.read_bytes()).decode().replace("aten::", "aten::outside_secret_")
    (outside / "trace.json.gz").write_bytes(gzip.compress(text.replace(
        "aten::outside_secret_item", SECRET_OP).encode()))
    report = json.loads((run / "report.json").read_text())
    for op in report["ops"]:
        op["name"] = SECRET_OP
    (outside / "report.json").write_text(json.dumps(report))
    (outside / "evil.py").write_text(f"open({str(outside / 'RAN')!r}, 'w').write('ran')\n")
    yield root, outside


def _copy_run(root: Path, name: str) -> Path:
    copy = root / name
    shutil.copytree(root / "run", copy, symlinks=True)
    return copy


def _edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _ranked(root: Path, name: str, outside: Path) -> Path:
    """A folder of one rank whose summary names a trace outside the root."""
    from nsbridge.job.summary import write_summary
    from nsbridge.profiles import load_profile

    rank = root / name / "rank-00"
    rank.mkdir(parents=True)
    child = json.loads((root / "run" / "child.json").read_text())
    shutil.copy(root / "run" / child["traces"][0], rank / "trace.json.gz")
    write_summary(rank, trace=rank / "trace.json.gz", thresholds=load_profile("default").analysis,
                  rank=0, host="h", world_size=1, status="ok", exit_code=0, error=None)
    _edit_json(rank / "summary.json", trace=str(outside / "trace.json.gz"))
    return root / name


@pytest.mark.slow
def test_none_of_the_ten_indirect_ways_out_of_the_root_reads_or_runs_anything(
        project: tuple[Path, Path]) -> None:
    root, outside = project
    cases: dict[str, tuple[str, dict[str, Any]]] = {}
    members = root / "members"
    members.mkdir()
    (members / "trace.json.gz").symlink_to(outside / "trace.json.gz")
    cases["a folder member that is a symlink"] = ("analyze", {"paths": [str(members)]})
    cases["a rank summary's trace"] = ("analyze", {"paths": [str(_ranked(root, "job", outside))]})
    linked = root / "linked-rank"
    linked.mkdir()
    shutil.copytree(_ranked(root, "job2", outside) / "rank-00", outside / "rank-00")
    (linked / "rank-00").symlink_to(outside / "rank-00")
    cases["a rank folder that is a symlink"] = ("analyze", {"paths": [str(linked)]})
    child = _copy_run(root, "child-abs")
    _edit_json(child / "child.json", traces=[str(outside / "secret.json")])
    cases["a child record's absolute trace"] = ("analyze", {"paths": [str(child)]})
    for tool, name in (("top_ops", "report-link"), ("diff", "report-link-diff")):
        linked_report = _copy_run(root, name)
        (linked_report / "report.json").unlink()
        (linked_report / "report.json").symlink_to(outside / "report.json")
        cases[f"a symlinked report.json ({tool})"] = (tool, (
            {"run_dir": str(linked_report)} if tool == "top_ops" else
            {"base": str(root / "run"), "new": str(linked_report)}))
    target = _copy_run(root, "manifest-target")
    _edit_json(target / "manifest.json", target=str(outside / "evil.py"))
    cases["a manifest's script (gate)"] = ("gate", {"base": str(target), "new": str(target),
                                                    "processes": 1, "steps": 3})
    cases["a manifest's script (deep)"] = ("deep", {"run_dir": str(target), "top": 1})
    folder = _copy_run(root, "manifest-cwd")
    _edit_json(folder / "manifest.json", cwd=str(outside), target="evil.py")
    cases["a manifest's folder"] = ("gate", {"base": str(folder), "new": str(folder),
                                             "processes": 1, "steps": 3})
    for side in ("base", "new"):
        (root / "co" / side).mkdir(parents=True)
    cases["a checkout's script going up"] = ("gate", {
        "base": str(root / "co" / "base"), "new": str(root / "co" / "new"),
        "script": "../../../outside/evil.py", "processes": 1, "steps": 3})
    cases["a checkout's absolute script"] = ("gate", {
        "base": str(root / "co" / "base"), "new": str(root / "co" / "new"),
        "script": str(outside / "evil.py"), "processes": 1, "steps": 3})
    answers: dict[str, Any] = {}

    async def body(client: Any) -> None:
        for what, (tool, arguments) in cases.items():
            answers[what] = await client.call_tool(tool, arguments)

    _session(root, root, body)
    assert len(cases) >= 10
    for what, result in answers.items():
        text = _text_of(result)
        assert "hunter2" not in text and "outside_secret" not in text, (what, text[:600])
        if result.is_error:
            assert "outside the folders" in text, (what, text[:600])
        else:   # refused by the roots, the trust rule, or the record's own shape
            kind = result.structured_content["error"]["kind"]
            assert kind in ("OutsideRootsError", "UntrustedRunError", "RunDirError"), text
    assert not (outside / "RAN").exists()


def _marked(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``, and their parents' families: the
    command's nsbridge process (the marker is among its script's arguments) with the
    profiled script and what it started (the script's own child holds the marker too)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    return sorted(pid for pid in found | {d for pid in found for d in _descendants(pid)}
                  if _alive(pid))


def _descendants(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                out |= {int(child)} | _descendants(int(child))
    except OSError:
        pass
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def _forever(root: Path) -> str:
    (root / "forever.py").write_text(FOREVER)
    return f"nsb-marker-{uuid.uuid4().hex}"


@pytest.mark.slow
def test_a_cancelled_command_leaves_no_process_and_marks_its_run(
        project: tuple[Path, Path]) -> None:
    import anyio

    root, _ = project
    marker = _forever(root)
    seen: dict[str, Any] = {}

    async def body(client: Any) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "triage",
                             {"script": "forever.py", "args": [marker], "timeout_s": 300})
            seen["started"] = await anyio.to_thread.run_sync(
                lambda: _until(lambda: len(_marked(marker)) >= 3, 120))
            family = _marked(marker)
            group.cancel_scope.cancel()
        seen["ended"] = await anyio.to_thread.run_sync(lambda: _until(
            lambda: not _marked(marker) and not any(map(_alive, family)), 10))
        seen["after"] = await client.call_tool("top_ops", {"run_dir": "run", "n": 1})

    _session(root, root, body)
    assert seen["started"] and seen["ended"], _marked(marker)
    assert not seen["after"].is_error             # the server still serves
    assert _status_of_run(root, marker) == "terminated"


def _status_of_run(root: Path, marker: str) -> str:
    """The status the run of the script given ``marker`` ended with."""
    runs = [json.loads(m.read_text()) for m in (root / "nsbridge-runs").glob("*/manifest.json")
            if marker in m.read_text()]
    assert len(runs) == 1, runs
    return str(runs[0]["status"])


def _raw_server(root: Path) -> subprocess.Popen:
    """A server over ``root`` driven with raw JSON-RPC on its stdin."""
    return subprocess.Popen([sys.executable, "-m", "nsbridge", "mcp", "--root", str(root)],
                            cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def _send(server: subprocess.Popen, *messages: dict[str, Any]) -> None:
    assert server.stdin is not None
    for message in messages:
        server.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
    server.stdin.flush()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_a_client_gone_or_sigterm_ends_the_server_and_its_processes(
        project: tuple[Path, Path], how: str) -> None:
    root, _ = project
    marker = _forever(root)
    server = _raw_server(root)
    try:
        _send(server,
              {"id": 1, "method": "initialize", "params": {
                  "protocolVersion": "2025-06-18", "capabilities": {},
                  "clientInfo": {"name": "raw", "version": "0"}}},
              {"method": "notifications/initialized"},
              {"id": 2, "method": "tools/call", "params": {
                  "name": "triage", "arguments": {"script": "forever.py", "args": [marker]}}})
        assert _until(lambda: len(_marked(marker)) >= 3, 120), "the script never started"
        family = _marked(marker)
        if how == "SIGTERM":
            server.send_signal(signal.SIGTERM)
        else:
            assert server.stdin is not None
            server.stdin.close()
        assert _until(lambda: not _marked(marker) and not any(map(_alive, family))
                      and server.poll() is not None, 10), _marked(marker)
        if how == "SIGTERM":
            assert server.returncode == 143
        assert _status_of_run(root, marker) == "terminated"
    finally:
        server.kill()
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_every_argument_out_of_range_is_a_one_line_refusal(project: tuple[Path, Path]) -> None:
    root, _ = project
    calls = [("triage", {"script": "sync_bound.py", "runs": 0}),
             ("triage", {"script": "sync_bound.py", "threads": 10**6}),
             ("triage", {"script": "sync_bound.py", "timeout_s": 10**9}),
             ("triage", {"script": "sync_bound.py", "deep_top": 0}),
             ("analyze", {"paths": []}),
             ("gate", {"base": "run", "new": "run", "processes": 0}),
             ("gate", {"base": "run", "new": "run", "steps": 0}),
             ("diff", {"base": "run", "new": "run", "fail_above_pct": "nan"}),
             ("diff", {"base": "run", "new": "run", "fail_above_pct": "inf"}),
             ("diff", {"base": "run", "new": "run", "fail_above_mib": -1}),
             ("gate", {"base": "run", "new": "run", "fail_above_mib": "nan"}),
             ("top_ops", {"run_dir": "run", "n": 0}),
             ("op", {"run_dir": "run", "name": "x" * 10**7})]
    answers = []

    async def body(client: Any) -> None:
        for tool, arguments in calls:
            answers.append(await client.call_tool(tool, arguments))

    _session(root, root, body)
    for (tool, arguments), result in zip(calls, answers):
        text = "".join(getattr(c, "text", "") for c in result.content)
        assert result.is_error, (tool, arguments, text[:300])
        assert "\n" not in text.strip() and len(text) < 300, (tool, text[:300])
    assert not (root / "nsbridge-runs").exists() or not any(
        "sync_bound" in p.name for p in (root / "nsbridge-runs").iterdir())
