"""nsbridge for scripts and agents: one JSON document per command (``answer``, its schema
in ``answer.schema.json``), the MCP server (``mcp_server``) and the skill file that teaches
an agent the triage -> timeline -> deep -> gate loop (``SKILL.md``)."""
