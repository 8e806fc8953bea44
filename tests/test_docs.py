"""The docs site (docs/, mkdocs.yml) and the code it documents: the site builds with
warnings as errors, every generated reference is rendered from its code, and the pages
written by hand are held to the code they describe."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
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
    return _hook().render((DOCS / page).read_text(encoding="utf-8"))


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


def test_every_marker_names_a_generator_and_none_is_left() -> None:
    hook = _hook()
    for page in DOCS.rglob("*.md"):
        assert not hook.MARKER.search(hook.render(page.read_text(encoding="utf-8"))), page
    with pytest.raises(KeyError):
        _hook().render("<!-- generated: no-such-table -->")


@pytest.mark.slow      # the build asks git for the repository (a process)
def test_the_cli_reference_is_every_command_s_help(site: Path) -> None:
    from nsbridge.cli import main

    text = _page_text(site, "reference/cli")
    assert isinstance(main, click.Group)
    for name, command in main.commands.items():
        assert f"nsbridge {name}" in text, name
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[-1] in text, (name, param.opts)


@pytest.mark.slow      # the build asks git for the repository (a process)
def test_the_api_reference_documents_every_public_function(site: Path) -> None:
    text = _page_text(site, "reference/api")
    for name in nsbridge.__all__:
        if name != "__version__":
            assert name in text, name
    raises = re.findall(r"Raises: Type Description (?:\S+ )+?(?=nsbridge \. |$)", text)
    assert raises, "no Raises section rendered"
    for section in raises:       # every exception is a row of its own, never prose
        assert not re.search(r"\b[A-Z]\w+Error: ", section), section


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
