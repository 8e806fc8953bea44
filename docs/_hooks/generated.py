"""Reference pages generated from the code that is their truth, committed in the pages.

A page holds each generated table between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``, so it reads the same in the repository (GitHub) and on the
site; ``python docs/_hooks/generated.py`` (``make docs-reference``) rewrites every block,
and tests/test_docs.py fails when a committed block differs from its generator's output.
``<!-- include: CHANGELOG.md -->`` pulls the root changelog into the site only. As an
MkDocs hook it renders each page the same way (the build fails on an unknown name).
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^<!-- generated: ([a-z-]+) -->\n.*?^<!-- end generated -->$",
                   re.MULTILINE | re.DOTALL)
INCLUDE = re.compile(r"^<!-- include: CHANGELOG\.md -->$", re.MULTILINE)
HELP_WIDTH = 100   # the CLI reference's help text, as a terminal this wide prints it


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


def report_keys() -> str:
    """docs/reference/report-json.md: every key contract/report.py declares, with its type."""
    from nsbridge.contract.introspect import declared_paths, described, is_required
    from nsbridge.contract.report import Report

    rows = ["| key | type | always there |", "|---|---|---|"]
    rows += [f"| `{path}` | {described(kind)} | {'yes' if is_required(kind) else ''} |"
             for path, kind in declared_paths(Report)]
    return "\n".join(rows)


def comparison_keys() -> str:
    """docs/reference/answer-json.md: every key contract/comparison.py declares for what
    `diff` and `gate` answer (a side's machine is report.json's, not repeated; the judging's
    working values, ``_``-prefixed, never leave)."""
    from nsbridge.contract.comparison import Comparison
    from nsbridge.contract.introspect import declared_paths, described

    rows = ["| key | type |", "|---|---|"]
    rows += [f"| `{path}` | {described(kind)} |"
             for path, kind in sorted(declared_paths(Comparison))
             if not re.search(r"(^|\.)_", path) and not re.match(r"machine\.[ab]\.", path)]
    return "\n".join(rows)


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


def cli() -> str:
    """docs/reference/cli.md: every command's --help, as nsbridge prints it."""
    from nsbridge.cli import main

    width = {"terminal_width": HELP_WIDTH, "max_content_width": HELP_WIDTH}
    root = main.make_context("nsbridge", [], resilient_parsing=True, **width)
    parts = [_help_block("nsbridge", main.get_help(root))]
    for name, command in main.commands.items():
        if command.hidden:
            continue
        ctx = command.make_context(name, [], parent=root, resilient_parsing=True, **width)
        parts.append(_help_block(f"nsbridge {name}", command.get_help(ctx)))
    return "\n\n".join(parts)


def _help_block(title: str, text: str) -> str:
    return f"## {title}\n\n```text\n{text.rstrip()}\n```"


# docs/reference/api.md: nsbridge's public names, in the order the page documents them
API = ("nsbridge.api.triage", "nsbridge.api.timeline", "nsbridge.api.deep",
       "nsbridge.api.analyze", "nsbridge.api.load", "nsbridge.api.diff", "nsbridge.api.gate",
       "nsbridge.api.rejudge", "nsbridge.step", "nsbridge.profiles.load_profile",
       "nsbridge.parse._stream.read_ahead", "nsbridge.result.RunResult",
       "nsbridge.errors.NsbridgeError")
_SECTION = re.compile(r"^(Args|Arguments|Returns|Yields|Raises|Attributes):\s*$")


def api() -> str:
    """docs/reference/api.md: each public function's signature and docstring, its Raises
    section as a table (one row per exception)."""
    import importlib

    parts = []
    for dotted in API:
        module, _, name = dotted.rpartition(".")
        obj = getattr(importlib.import_module(module), name)
        public = f"nsbridge.{name}"
        parts.append(f"## {public}\n\n```python\n{_signature(public, obj)}\n```\n\n"
                     + _docstring(inspect.getdoc(obj) or ""))
    return "\n\n".join(parts)


def _signature(public: str, obj: Any) -> str:
    if inspect.isclass(obj):
        return f"class {public}"
    signature = inspect.signature(obj)
    params = []
    for p in signature.parameters.values():
        text = p.name if p.kind is not p.VAR_POSITIONAL else f"*{p.name}"
        if p.kind is p.VAR_KEYWORD:
            text = f"**{p.name}"
        if p.annotation is not p.empty:
            text += f": {p.annotation if isinstance(p.annotation, str) else p.annotation.__name__}"
        if p.default is not p.empty:
            text += f" = {_default(p.default)}"
        params.append(text)
    keyword_only = next((i for i, p in enumerate(signature.parameters.values())
                         if p.kind is p.KEYWORD_ONLY), None)
    if keyword_only is not None:
        params.insert(keyword_only, "*")
    returns = signature.return_annotation
    shown = "" if returns is inspect.Signature.empty else f" -> {returns}"
    return f"{public}(\n" + "".join(f"    {p},\n" for p in params) + f"){shown}"


def _default(value: Any) -> str:
    if value is os.environ:
        return "os.environ"
    return repr(value)


def _docstring(doc: str) -> str:
    """A Google-style docstring as Markdown: its prose, then each section under a bold
    title, Raises as a table."""
    doc = doc.replace("``", "`")
    out: list[str] = []
    section, entries = None, []
    for line in [*doc.splitlines(), ""]:
        head = _SECTION.match(line)
        if head:
            out += _section(section, entries)
            section, entries = head.group(1), []
        elif section and (line.startswith("    ") or not line.strip()):
            if line.startswith("        ") and entries:
                entries[-1] += " " + line.strip()
            elif line.strip():
                entries.append(line.strip())
        else:
            out += _section(section, entries)
            section, entries = None, []
            out.append(line)
    out += _section(section, entries)
    return "\n".join(out).strip()


def _section(title: Any, entries: list[str]) -> list[str]:
    if not title:
        return []
    if title == "Raises":
        rows = ["| exception | when |", "|---|---|"]
        for entry in entries:
            name, _, when = entry.partition(": ")
            rows.append(f"| `{name}` | {when} |")
        return ["", "**Raises**", "", *rows, ""]
    return ["", f"**{title}**", "", " ".join(entries), ""]


def changelog() -> str:
    """docs/changelog.md on the site: CHANGELOG.md at the repository's root, as it is."""
    return (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


GENERATORS: dict[str, Callable[[], str]] = {"exit-codes": exit_codes,
                                            "profile-keys": profile_keys,
                                            "frames": frames, "report-keys": report_keys,
                                            "answer-schema": answer_schema,
                                            "comparison-keys": comparison_keys,
                                            "cli": cli, "api": api}


def render(markdown: str) -> str:
    """``markdown`` with every generated block rewritten from its generator.

    Raises:
        KeyError: a block names no generator.
    """
    def block(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"<!-- generated: {name} -->\n{GENERATORS[name]()}\n<!-- end generated -->"
    return BLOCK.sub(block, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return INCLUDE.sub(lambda _: changelog(), render(markdown))


def write(docs: Path = ROOT / "docs") -> list[Path]:
    """Rewrite every page's generated blocks; the pages that changed."""
    changed = []
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        fresh = render(text)
        if fresh != text:
            page.write_text(fresh, encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for path in write():
        print(f"rewrote {path.relative_to(ROOT)}")
