"""nsbridge for agents and scripts: every command's --format json answer validates against
the published schema (and is all stdout holds), and an MCP client session drives the loop
end to end: tools listed, a bundled example triaged, the top op's evidence asked for, a
script outside the allowed roots refused, a planted slowdown caught by the gate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from nsbridge.agent.answer import (ANSWER_VERSION, error_answer, exit_meaning, headline,
                                   run_answer, schema)
from nsbridge.agent.skill import skill_text
from nsbridge.errors import ScriptError
from nsbridge.schema.exit_codes import EXIT_CODES

from conftest import EXAMPLES, TORCH_DATA


def _valid(answer: dict[str, Any]) -> dict[str, Any]:
    jsonschema.validate(answer, schema())
    return answer


def test_the_schema_is_a_valid_json_schema_of_this_version() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    assert schema()["properties"]["nsbridge_answer"]["const"] == ANSWER_VERSION


def test_an_answer_that_breaks_the_schema_is_refused() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"nsbridge_answer": 1, "command": "triage", "status": "ok",
                             "exit_code": 0, "exit_meaning": "ok"}, schema())   # no run_dir


def test_exit_meanings_come_from_the_one_table() -> None:
    for row in EXIT_CODES:
        if row.code.isdigit():
            assert exit_meaning(int(row.code)) == row.meaning
    assert "signal 9" in exit_meaning(137)


def test_an_error_answer_carries_the_kind_and_the_paragraph() -> None:
    answer = _valid(error_answer("triage", ScriptError("The script x.py does not exist.")))
    assert answer["status"] == "error" and answer["exit_code"] == 1
    assert answer["error"] == {"kind": "ScriptError", "bug": False,
                               "message": "The script x.py does not exist."}


def test_the_headline_is_the_reports_own_numbers(tmp_path: Path) -> None:
    from nsbridge import api

    result = api.analyze([TORCH_DATA / "h100_bert-small_2025-07.json.gz"], out=tmp_path / "r")
    report = result.report
    _valid(run_answer("analyze", result))
    head = headline(report, top=3)
    assert [op["name"] for op in head["top_ops"]] == [op["name"] for op in report["ops"][:3]]
    ranked = report["ranked_by"]
    assert [op[ranked] for op in head["top_ops"]] == [op[ranked] for op in report["ops"][:3]]
    assert head["verdict"]["label"] == report["verdict"]["label"]


def test_the_skill_file_teaches_the_loop_and_the_stop_rules() -> None:
    text = skill_text()
    for step in ("doctor", "triage", "timeline", "deep", "gate", "Inconclusive is not a pass",
                 "--threads 1 --runs 3", "confidence"):
        assert step in text, step


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, Any, str]:
    proc = subprocess.run([sys.executable, "-m", "nsbridge", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=600, env=env)
    return proc.returncode, json.loads(proc.stdout), proc.stderr   # stdout: one document


@pytest.mark.slow
def test_every_command_answers_one_valid_json_document(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "sync_bound.py", tmp_path / "sync_bound.py")
    code, tri, err = _cli("triage", "--format", "json", "--out", "a", "sync_bound.py",
                          "--steps", "8", cwd=tmp_path)
    assert code == 0 and _valid(tri)["headline"]["verdict"]["label"] == "sync-bound"
    assert "step 7: loss" in err                         # the script's output: stderr
    assert tri["headline"]["sync_points"][0]["line"] == 36
    assert Path(tri["files"]["report_html"]).is_file()
    code, shown, _ = _cli("show", "--format", "json", "a", cwd=tmp_path)
    assert code == 0 and _valid(shown)["headline"] == tri["headline"]
    code, ana, _ = _cli("analyze", "--format", "json", "--out", "b",
                        str(TORCH_DATA / "h100_bert-small_2025-07.json.gz"), cwd=tmp_path)
    assert code == 0 and _valid(ana)["headline"]["ranked_by"] == "device_self_us"
    code, dif, _ = _cli("diff", "--format", "json", "a", "a", cwd=tmp_path)
    assert _valid(dif)["command"] == "diff" and dif["exit_code"] == code
    code, doc, _ = _cli("doctor", "--format", "json", cwd=tmp_path)
    assert _valid(doc)["checks"] and code == (1 if doc["status"] == "failed" else 0)
    code, bad, err = _cli("triage", "--format", "json", "missing.py", cwd=tmp_path)
    assert code == 1 and _valid(bad)["error"]["kind"] == "ScriptError"
    assert "missing.py" in bad["error"]["message"] and "missing.py" in err
    code, bad, _ = _cli("deep", "--format", "json", "--run", "a", "--kernel", "aten::mmm",
                        cwd=tmp_path)
    assert code == 1 and _valid(bad)["error"]["kind"] == "DeepError"


@pytest.mark.slow
def test_a_script_that_fails_is_said_to_have_failed_not_nsbridge(tmp_path: Path) -> None:
    """Regression: a script exiting 1 (or 2) was explained as 'nsbridge could not do its job'
    (or 'a usage error'): the code is the script's own."""
    for code in (1, 2):
        (tmp_path / "fails.py").write_text(f"import sys\nsys.exit({code})\n")
        got, answer, _ = _cli("triage", "--format", "json", "--out", f"r{code}", "fails.py",
                              cwd=tmp_path)
        assert got == code and _valid(answer)["status"] == "failed"
        scripts_own = next(r.meaning for r in EXIT_CODES if r.code == "the script's own")
        assert answer["exit_meaning"] == scripts_own


@pytest.mark.slow
def test_an_mcp_client_triages_asks_for_evidence_and_gates_a_planted_slowdown(
        tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK (nsbridge[agent]) is not installed")
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    project, outside = tmp_path / "project", tmp_path / "elsewhere"
    for side in ("base", "new"):
        (project / side).mkdir(parents=True)
        shutil.copy(EXAMPLES / "train_cnn.py", project / side / "train_cnn.py")
    outside.mkdir()
    shutil.copy(EXAMPLES / "train_cnn.py", outside / "train_cnn.py")
    slow = project / "new" / "train_cnn.py"          # the change: 64 extra matmuls a step
    slow.write_text(slow.read_text().replace('"NSBRIDGE_EXAMPLE_SLOW_MATMULS", "0"',
                                             '"NSBRIDGE_EXAMPLE_SLOW_MATMULS", "64"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSBRIDGE_EXAMPLE")}
    params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path), env=env,
                                   args=["-m", "nsbridge", "mcp", "--root", str(project)])
    seen: dict[str, Any] = {}

    async def session() -> None:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                seen["tools"] = {t.name for t in (await client.list_tools()).tools}
                tri = await client.call_tool("triage", {
                    "script": "base/train_cnn.py", "args": ["--steps", "10"], "threads": 1})
                seen["triage"] = tri.structured_content
                top = seen["triage"]["headline"]["top_ops"][0]["name"]
                seen["op"] = (await client.call_tool("op", {
                    "run_dir": seen["triage"]["run_dir"], "name": top})).structured_content
                refused = await client.call_tool("triage", {
                    "script": str(outside / "train_cnn.py")})
                seen["refused"] = (refused.is_error, refused.content[0].text)
                gate = await client.call_tool("gate", {
                    "base": "base", "new": "new", "script": "train_cnn.py",
                    "args": ["--steps", "28"], "processes": 3, "steps": 20})
                seen["gate"] = gate.structured_content

    anyio.run(session)
    assert {"doctor", "triage", "analyze", "deep", "diff", "gate", "top_ops", "op",
            "sync_points", "memory", "ranks"} <= seen["tools"]
    triage = _valid(seen["triage"])
    assert triage["status"] == "ok" and triage["headline"]["verdict"]["label"] == "cpu-bound"
    assert Path(triage["run_dir"]).is_relative_to(project)
    report = json.loads(Path(triage["files"]["report_json"]).read_text())
    top = report["ops"][0]
    assert seen["op"]["name"] == top["name"]
    assert seen["op"]["cpu_self_us"] == top["cpu_self_us"]      # the report's own number
    assert seen["refused"][0] and "outside the folders" in seen["refused"][1]
    gate = _valid(seen["gate"])
    assert gate["command"] == "gate" and gate["outcome"] == "regression", gate.get("summary")
    assert gate["exit_code"] == 1
    assert any(r.get("op") == "aten::mm" or "aten::mm" in json.dumps(r)
               for r in gate["regressions"]), gate["regressions"]
