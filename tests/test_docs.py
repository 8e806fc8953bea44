"""The docs site (docs/, mkdocs.yml) and the code it documents: the site builds with
warnings as errors, every generated reference is rendered from its code, and the pages
written by hand are held to the code they describe."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shlex
from pathlib import Path
from types import ModuleType

import click
import pytest

import nsbridge
from nsbridge import errors
from nsbridge.profiles import SECTIONS, load_profile
from nsbridge.report.frame_reference import frame_reference
from nsbridge.result import FRAMES
from nsbridge.schema import report as report_schema
from nsbridge.schema.exit_codes import EXIT_CODES

from conftest import ROOT

DOCS = ROOT / "docs"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generated", DOCS / "_hooks" / "generated.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _rendered(page: str) -> str:
    """A page as committed (test_every_generated_block_is_current holds it to the code)."""
    return (DOCS / page).read_text(encoding="utf-8")


def _table_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for line in text.splitlines() if line.startswith("| ") and "---" not in line]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built in this process as `make docs` builds it (strict: a warning, a
    broken internal link or a page missing from the nav fails the build)."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    out = tmp_path_factory.mktemp("site")
    build(load_config(str(ROOT / "mkdocs.yml"), site_dir=str(out), strict=True))
    return out


def _page_text(site: Path, page: str) -> str:
    html = (site / page / "index.html").read_text(encoding="utf-8")
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.mark.slow      # the build asks git for the repository (a process)
def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")
             if "_hooks" not in p.parts}
    for page in pages:
        built = site / ("" if page == "index" else page) / "index.html"
        assert built.is_file(), page


def test_every_generated_block_is_current() -> None:
    """What GitHub shows is what the code says: each committed block equals its generator's
    output (`make docs-reference` rewrites them)."""
    hook = _hook()
    for page in [*DOCS.rglob("*.md")]:
        text = page.read_text(encoding="utf-8")
        opened = re.findall(r"^<!-- generated: ", text, re.MULTILINE)
        assert len(opened) == len(hook.BLOCK.findall(text)), page
        assert hook.render(text) == text, f"{page} is stale: run make docs-reference"
    with pytest.raises(KeyError):
        hook.render("<!-- generated: no-such-table -->\n<!-- end generated -->")


def test_the_cli_reference_is_every_command_s_help() -> None:
    from nsbridge.cli import main

    text = _rendered("reference/cli.md")
    assert "Sentinel" not in text and "UNSET" not in text
    assert isinstance(main, click.Group)
    for name, command in main.commands.items():
        section = text.split(f"## nsbridge {name}\n")[1].split("\n## ")[0]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[-1] in section, (name, param.opts)


def test_the_api_reference_documents_every_public_function() -> None:
    text = _rendered("reference/api.md")
    for name in nsbridge.__all__:
        if name != "__version__":
            assert f"## nsbridge.{name}\n" in text, name
    tables = re.findall(r"\*\*Raises\*\*\n\n\| exception \| when \|\n\|---\|---\|\n((?:\|.*\n)+)",
                        text)
    assert len(tables) >= 8, "no Raises table"
    for table in tables:         # every exception is a row of its own, never prose
        for row in table.splitlines():
            assert not re.search(r"\b[A-Z]\w+Error: ", row), row


_FENCE = re.compile(r"^```(sh|bash|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SHELL_OPERATOR = re.compile(r"^(\||\|\||&&|;|&|\d?>>?.*|<.*)$")


def _documented_commands() -> list[tuple[str, str, list[str]]]:
    """(page, line, arguments) of every nsbridge command the pages' shell blocks show."""
    found = []
    for page in [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]:
        for _, body in _FENCE.findall(page.read_text(encoding="utf-8")):
            for line in body.replace("\\\n", " ").splitlines():
                words = shlex.split(line.strip().removeprefix("$ "), comments=True)
                at = next((i for i, w in enumerate(words)
                           if w == "nsbridge" or w.endswith("bin/nsbridge")), None)
                if at is None:
                    continue
                args = words[at + 1:]
                cut = next((i for i, w in enumerate(args) if _SHELL_OPERATOR.match(w)),
                           len(args))
                found.append((page.name, line.strip(), args[:cut]))
    return found


def test_every_documented_command_parses_with_the_real_command_line() -> None:
    """A slip in a page (an option renamed, a value out of range, a missing argument)
    fails here: each command goes through nsbridge's own parser. Paths the page names as
    placeholders need not exist."""
    from nsbridge.cli import main

    commands = _documented_commands()
    assert len(commands) > 60
    for page, line, args in commands:
        try:
            with main.make_context("nsbridge", list(args)) as ctx:
                # the subcommand's name (click 8.2+ keeps it apart from ctx.args)
                name_first = vars(ctx).get("_protected_args", vars(ctx).get("protected_args"))
                rest = [*(name_first or []), *ctx.args]
                if rest:
                    name, command, rest = main.resolve_command(ctx, rest)
                    assert command is not None, (page, line)
                    command.make_context(name, rest, parent=ctx)
        except click.exceptions.Exit:
            pass                                  # --help, --version
        except click.BadParameter as exc:
            assert "does not exist" in exc.format_message(), (page, line, exc.format_message())
        except click.ClickException as exc:
            raise AssertionError(f"{page}: {line}: {exc.format_message()}") from None


def test_the_exit_code_table_has_every_code_nsbridge_exits_with() -> None:
    table = {row.code for row in EXIT_CODES}
    raised = {cls.exit_code for cls in vars(errors).values()
              if isinstance(cls, type) and issubclass(cls, errors.NsbridgeError)}
    cli = (ROOT / "nsbridge" / "cli.py").read_text()
    exited = {int(code) for code in re.findall(r"sys\.exit\((\d+)\)", cli)}
    from nsbridge.model.comparing.change import EXIT_CODES as GATE_CODES
    for code in raised | exited | set(GATE_CODES.values()):
        assert str(code) in table, code
    page = _rendered("reference/exit-codes.md")
    assert [r[0] for r in _table_rows(page)[1:]] == [row.code for row in EXIT_CODES]


def test_the_profile_reference_has_every_key_with_its_default_and_range() -> None:
    hook = _hook()
    rows = {r[0].strip("`"): r for r in _table_rows(_rendered("reference/profiles.md"))[1:]}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            key, default, allowed, meaning = rows.pop(f"{section}.{f.name}")
            if f.default is not dataclasses.MISSING:
                assert default == f"`{hook._yaml(f.default)}`", key
            assert allowed == f.metadata.get("range", allowed) and allowed, key
            assert meaning == f.metadata["meaning"], key
    assert set(rows) == {"version", "description"}


def test_the_built_in_profiles_set_only_documented_keys() -> None:
    keys = {r[0].strip("`") for r in _table_rows(_rendered("reference/profiles.md"))[1:]}
    for path in (ROOT / "profiles").glob("*.yaml"):
        profile = load_profile(path.stem)
        for section in SECTIONS:
            for f in dataclasses.fields(getattr(profile, section)):
                assert f"{section}.{f.name}" in keys


def test_the_frames_reference_is_the_frames_docstring() -> None:
    page = _rendered("reference/frames.md")
    documented = frame_reference()
    assert [f.name for f in documented] == sorted(
        (f.name for f in documented), key=[f.name for f in documented].index)
    assert set(FRAMES) <= {f.name for f in documented}
    for frame in documented:
        section = page[page.index(f"## `run.{frame.name}`"):]
        for column in frame.columns:
            assert f"| `{column.column}` | {column.dtype} |" in section, (frame.name, column)


def test_the_report_json_reference_names_every_top_level_key() -> None:
    page = (DOCS / "reference" / "report-json.md").read_text()
    assert page.startswith(f"# report.json (schema_version {report_schema.SCHEMA_VERSION})")
    documented = " ".join(r[0] for r in _table_rows(page))
    sections = (report_schema.TIMELINE_SECTION, report_schema.NCU_SECTION,
                report_schema.DISTRIBUTED_SECTION, report_schema.TENSOR_CORES_SECTION,
                report_schema.MEMORY_SECTION, report_schema.OP_GROUPS_SECTION)
    for key in (*report_schema.REPORT_KEYS, *sections):
        assert re.search(rf"`{key}(\[\])?`", documented), key


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test\n" in ci and "make test " in text.split("\n## ")[0]
