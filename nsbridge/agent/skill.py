"""The skill file shipped with nsbridge (SKILL.md): how an agent uses nsbridge, printed by
`nsbridge agent-skill` and given to MCP clients as the server's instructions."""

from __future__ import annotations

from importlib.resources import files


def skill_text() -> str:
    """SKILL.md as shipped."""
    return files("nsbridge.agent").joinpath("SKILL.md").read_text(encoding="utf-8")
