"""MkDocs hook: reference tables generated from the code that is their truth.

A page asks for one with a marker line, ``<!-- generated: NAME -->``; the build fails on
a name it does not know. tests/test_docs.py renders every marker the pages use.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def exit_codes() -> str:
    """docs/reference/exit-codes.md: nsbridge.schema.exit_codes.EXIT_CODES."""
    from nsbridge.schema.exit_codes import EXIT_CODES

    rows = ["| code | commands | meaning |", "|---|---|---|"]
    rows += [f"| {row.code} | {row.commands} | {row.meaning} |" for row in EXIT_CODES]
    return "\n".join(rows)


def profile_keys() -> str:
    """docs/reference/profiles.md: every key of a profile with its default, what it may be
    and what it means, from the dataclasses nsbridge.profiles validates against."""
    import dataclasses

    from nsbridge.profiles import CHOICES, SECTIONS

    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|",
            "| `version` | `1` | `1` | profile format version |",
            "| `description` | | text | free text |"]
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            default = (f.default if f.default is not dataclasses.MISSING
                       else f.default_factory())   # type: ignore[misc]
            shown = ("see `profiles/deep.yaml`" if isinstance(default, dict)
                     else f"`{_yaml(default)}`")
            allowed = (f.metadata.get("range") or " or ".join(CHOICES.get(f.name, ()))
                       or _kind(f.type))
            rows.append(f"| `{section}.{f.name}` | {shown} | {allowed} | "
                        f"{f.metadata['meaning']} |")
    return "\n".join(rows)


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    return str(value)


def _kind(annotation: Any) -> str:
    text = str(annotation)
    return {"bool": "true or false", "tuple": "a list", "Union[bool, str]":
            "auto, true or false", "str": "text", "dict": "a mapping"}.get(text, text)


def frames() -> str:
    """docs/reference/frames.md: report/frames.py's column reference."""
    from nsbridge.report.frame_reference import markdown

    return markdown()


def answer_schema() -> str:
    """docs/reference/answer-json.md: the top-level fields, then the schema as shipped."""
    import json

    from nsbridge.agent.answer import schema

    doc = schema()
    required = set(doc["required"])
    rows = ["| field | type | always | meaning |", "|---|---|---|---|"]
    for name, spec in doc["properties"].items():
        kind = spec.get("type") or ("one of" if "oneOf" in spec else
                                     "enum" if "enum" in spec else "const")
        rows.append(f"| `{name}` | {kind} | {'yes' if name in required else ''} | "
                    f"{spec.get('description', '')} |")
    return ("\n".join(rows) + "\n\n```json\n" + json.dumps(doc, indent=2) + "\n```")


def changelog() -> str:
    """docs/changelog.md: CHANGELOG.md at the repository's root, as it is."""
    return (Path(__file__).resolve().parents[2] / "CHANGELOG.md").read_text(encoding="utf-8")


GENERATORS: dict[str, Callable[[], str]] = {"exit-codes": exit_codes,
                                            "profile-keys": profile_keys,
                                            "frames": frames, "changelog": changelog,
                                            "answer-schema": answer_schema}


def render(markdown: str) -> str:
    """``markdown`` with every marker replaced by its table.

    Raises:
        KeyError: a marker names no generator.
    """
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
