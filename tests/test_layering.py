"""The layering of style.md section 4 and design.md, checked on a static import graph of
every module under nsbridge/, and the weight of the public entry points in a fresh interpreter.

Part one reads every module's source (ast; relative imports resolved; imports inside
functions, and those under ``if TYPE_CHECKING:``, counted and marked lazy) into one graph,
and checks on it:

- nothing imports upward (``LAYERS``), following every edge, lazy ones included;
- what each package must never reach, transitively (``NEVER_REACH``), or import itself
  (``NEVER_IMPORT``), and what must not be imported yet when one of its modules has just
  been imported (``NOT_AT_IMPORT``, eager edges only: the profiled child while the script
  runs, ``import nsbridge``, the CLI before a command runs);
- what the CLI may import directly (click, api, errors, options, renderers);
- no import cycle among eager imports, so every module imports in any order;
- subprocess only in collect/_process, no shell anywhere.

Part two is one interpreter that imports every module (so none fails to import), and
forked copies of a bare interpreter that import ``nsbridge``, ``nsbridge.cli`` (also running
``--help``), ``nsbridge.api`` and the child's entry, each recording the heavy modules
(torch, pandas, numpy, click, msgspec) it brought in.

Known exceptions: ``KNOWN_EXCEPTIONS`` names each import that breaks a rule today, with the
issue it is tracked under; the test fails when one is no longer there, so the list only
shrinks.
"""

from __future__ import annotations

import ast
import collections
import functools
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import pytest

PKG = Path(__file__).resolve().parents[1] / "nsbridge"

HEAVY = ("torch", "pandas", "numpy", "click", "msgspec")

# Layers, lowest first: a module may import its own layer and the layers below it, never
# one above (design.md: collect -> parse -> model -> report, api wires them, cli is click
# only). A unit is a subpackage (collect, parse, ...) or a top-level module (api, run, ...).
LAYERS: list[set[str]] = [
    {"errors", "schema", "_stepping", "progress",    # stdlib only; progress: rich, lazily;
     "_blas", "guard"},                              # _blas: numpy, lazily; the MCP roots,
                                                     # argument ranges, one escape
    {"profiles", "rundir",                           # YAML recipes; run-directory files;
     "script_check", "contract"},                    # can the script start (no import);
                                                     # report.json's types (msgspec)
    {"collect", "parse"},                            # tool adapters; file -> frame (siblings)
    {"model"},                                       # frames -> findings, no I/O
    {"report"},                                      # sections -> renderers
    {"job"},                                         # who am I (stdlib only; the child),
                                                     # the job's store, the map step
    {"_bootstrap"},                                  # inside the profiled process
    {"run", "result", "pipeline"},                   # the Run, what a command returns,
                                                     # one Run through a list of passes
    {"passes"},                                      # one module per tool
    {"distributed"},                                 # passes on the ranks: launch, a
                                                     # rank's share, fan-out and reduce
    {"commands"},                                    # more than one pass: a script's
                                                     # processes, diff, the gate (its
                                                     # pairs, what a manifest may run)
    {"api"},                                         # commands = passes composed
    {"agent"},                                       # JSON answers, the MCP server, the skill
    {"_options", "cli"},                             # click only
    {"__main__"},
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
RANK["nsbridge"] = 0   # the package's __init__: public names, imported lazily (see _LAZY)

# unit -> what none of its modules may reach through any chain of imports (lazy included):
# units of nsbridge, or third-party top-level packages (style.md section 4's table)
NEVER_REACH: dict[str, set[str]] = {
    "parse": {"collect", "model", "report", "passes", "api", "cli",
              "subprocess", "torch", "click"},
    "model": {"collect", "parse", "report", "passes", "api", "cli", "rundir",
              "subprocess", "torch", "click"},
    "collect": {"parse", "model", "report", "passes", "api", "cli", "_bootstrap",
                "pandas", "numpy", "msgspec", "torch", "click"},
    "report": {"collect", "passes", "api", "cli", "run", "_bootstrap",
               "subprocess", "torch", "click"},
    "_bootstrap": {"api", "cli", "passes", "report", "run", "result", "distributed", "click"},
}

# unit -> what its own modules never import themselves, lazily or not (the child may reach
# analysis code only through job.summary, after the script, for the per-rank summary)
NEVER_IMPORT: dict[str, set[str]] = {
    "_bootstrap": {"pandas", "click", "api", "model", "parse", "report"},
}

# unit -> what must not be imported yet once one of its modules has been imported (eager
# imports only: lazy ones run later, e.g. the child's per-rank summary after the script)
NOT_AT_IMPORT: dict[str, set[str]] = {
    # the profiled child, while the user's script runs: torch is expected, nothing else heavy
    "_bootstrap": {"pandas", "numpy", "msgspec", "click", "api", "model", "parse", "report",
                   "passes", "run", "result", "cli", "job.summary", "distributed"},
    # `import nsbridge` starts nothing and stays light
    "nsbridge": {*HEAVY, "api", "cli", "collect", "parse", "model", "report", "passes", "run",
                 "_bootstrap"},
    # `nsbridge --help` and usage errors import no analysis code
    "cli": {"torch", "pandas", "numpy", "msgspec", "subprocess", "api", "collect", "model",
            "parse", "report", "passes", "run"},
}

# what cli.py and _options.py may import from nsbridge (design.md: click, api, profiles,
# the renderers, errors; progress is the CLI's switch for stderr progress lines; _blas
# imports numpy with one OpenBLAS thread)
CLI_MAY_IMPORT = {"nsbridge", "nsbridge._blas", "nsbridge._options", "nsbridge.api",
                  "nsbridge.errors", "nsbridge.profiles", "nsbridge.progress",
                  "nsbridge.report.render.terminal", "nsbridge.report.render.diff_render",
                  "nsbridge.agent.answer", "nsbridge.agent.mcp_server", "nsbridge.agent.skill",
                  "nsbridge.guard.limits", "nsbridge.guard.confine"}

# (importing module, imported module or unit) -> why it is tolerated for now
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    src: str      # importing module, e.g. nsbridge.model.judging.verdict
    dst: str      # nsbridge module imported, or a third-party top-level name
    lazy: bool    # inside a function (or nsbridge's attribute-triggered _LAZY table)
    line: int

    @property
    def internal(self) -> bool:
        return self.dst == "nsbridge" or self.dst.startswith("nsbridge.")

    def __str__(self) -> str:
        lazy = " (lazy)" if self.lazy else ""
        where = MODULES[self.src].relative_to(PKG).as_posix()
        return f"{self.src} -> {self.dst}{lazy} [{where}:{self.line}]"


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
PACKAGES = {_module_name(p) for p in PKG.rglob("__init__.py")}


def unit(module: str) -> str:
    """nsbridge.model.judging.verdict -> model; nsbridge.api -> api; nsbridge -> nsbridge; a folder
    is one unit, so the folders' graph is the layers'; third-party names are their own
    unit."""
    if not module.startswith("nsbridge."):
        return module.split(".")[0]
    return module.split(".")[1]


def _targets(node: ast.AST, module: str) -> Iterable[str]:
    """The modules an import statement imports (nsbridge modules in full, others by their
    top-level name); `from P import m` with m a module of P imports P.m."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name if alias.name.split(".")[0] == "nsbridge" else alias.name.split(".")[0]
        return
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if module in PACKAGES else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != "nsbridge":
        yield source.split(".")[0]
        return
    named_modules = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in MODULES]
    yield from named_modules
    if len(named_modules) < len(node.names):   # names defined in the module itself
        yield source


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _edges_of(module: str, path: Path) -> list[Edge]:
    tree = _tree(path)
    edges: list[Edge] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                               ast.Lambda)) or _for_the_type_checker(child)
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not (
                    isinstance(child, ast.ImportFrom) and child.module == "__future__"):
                edges.extend(Edge(module, t, inner, child.lineno)
                             for t in _targets(child, module))
            visit(child, inner)

    visit(tree, False)
    if module == "nsbridge":   # `nsbridge.triage` imports api on first use (__getattr__)
        for node in tree.body:
            if (isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)):
                values = {v.value for v in node.value.values}   # type: ignore[attr-defined]
                edges.extend(Edge(module, f"nsbridge.{v}", True, node.lineno)
                             for v in sorted(values))
    return edges


def _for_the_type_checker(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:``: imports that never run (counted lazy, still layered)."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING")


@functools.lru_cache(maxsize=None)
def graph() -> dict[str, list[Edge]]:
    return {name: _edges_of(name, path) for name, path in MODULES.items()}


def _facade(edge: Edge) -> bool:
    """nsbridge/__init__'s _LAZY imports run when a name is looked up on the package, not
    when a module does `from nsbridge import x`: not followed through."""
    return edge.src == "nsbridge" and edge.lazy


def reach(start: str, eager_only: bool) -> dict[str, list[Edge]]:
    """Every module or third-party name reachable from ``start``, with a shortest chain of
    edges that reaches it (breadth first)."""
    g = graph()
    seen: dict[str, list[Edge]] = {start: []}
    todo = collections.deque([start])
    while todo:
        current = todo.popleft()
        for edge in g.get(current, []):
            if (eager_only and edge.lazy) or _facade(edge) or edge.dst in seen:
                continue
            seen[edge.dst] = seen[current] + [edge]
            if edge.internal:
                todo.append(edge.dst)
    del seen[start]
    return seen


def _matches(target: str, banned: str) -> bool:
    """``banned`` is a unit (model), a dotted unit path (job.summary) or a
    third-party name (pandas)."""
    if not target.startswith("nsbridge"):
        return target == banned
    rel = target.removeprefix("nsbridge.")
    return rel == banned or rel.startswith(banned + ".")


def _known(src: str, dst: str) -> bool:
    return any(src == s and (dst == d or dst.startswith(d + ".")) for s, d in KNOWN_EXCEPTIONS)


def _chain(edges: list[Edge]) -> str:
    """a -> b (lazy, b.py:12) -> c: the path that reached c, short names."""
    def short(name: str) -> str:
        return name.removeprefix("nsbridge.") if name != "nsbridge" else name
    hops = [short(edges[0].src)] + [
        short(e.dst) + (f" (lazy, {MODULES[e.src].name}:{e.line})" if e.lazy else "")
        for e in edges]
    return " -> ".join(hops)


def _listing(problems: list[str], limit: int = 25) -> str:
    more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
    return "\n  " + "\n  ".join(problems[:limit]) + more


def _crossings(layer: str, banned: set[str], eager_only: bool) -> list[str]:
    """Each import that brings a banned module within reach of ``layer``'s modules, once,
    with the shortest chain that shows it."""
    found: dict[Edge, list[Edge]] = {}
    for module in (m for m in MODULES if unit(m) == layer):
        for chain in reach(module, eager_only).values():
            cut = next((i for i, e in enumerate(chain)
                        if any(_matches(e.dst, b) for b in banned)), None)
            if cut is None or any(_known(e.src, e.dst) for e in chain[:cut + 1]):
                continue
            chain = chain[:cut + 1]
            if chain[-1] not in found or len(chain) < len(found[chain[-1]]):
                found[chain[-1]] = chain
    return sorted(f"{edge}  via  {_chain(chain)}" for edge, chain in found.items())


# -- part one: the static graph ------------------------------------------------------------
def test_the_graph_sees_every_module_and_the_known_imports() -> None:
    g = graph()
    assert set(g) == set(MODULES) and len(MODULES) > 50
    # spot checks that resolution works: relative (one and two dots), lazy, absolute
    # `from P import module`, and nsbridge's _LAZY table
    edges = {(e.src, e.dst, e.lazy) for es in g.values() for e in es}
    assert ("nsbridge.rundir", "nsbridge.errors", False) in edges
    assert ("nsbridge.job.summary", "nsbridge.parse.torch_trace", False) in edges
    assert ("nsbridge.cli", "nsbridge.api", True) in edges
    assert ("nsbridge._bootstrap.steps", "nsbridge._stepping", False) in edges
    assert ("nsbridge", "nsbridge.api", True) in edges
    unplaced = sorted({unit(m) for m in MODULES} - set(RANK))
    assert not unplaced, f"put these in a layer (LAYERS in tests/test_layering.py): {unplaced}"


def test_nothing_imports_upward() -> None:
    top = len(LAYERS)   # a unit in no layer yet: test_the_graph_sees_every_module names it
    bad = [e for es in graph().values() for e in es if e.internal and not _facade(e)
           and RANK.get(unit(e.dst), top) > RANK.get(unit(e.src), top)]
    assert not bad, "imports into a higher layer:" + _listing([str(e) for e in bad])


# report/ inside, lowest first: the document's parts, the views of them, load's frames of
# report.json, the renderers that write the files
REPORT_LAYERS = [{"document"}, {"views"}, {"frames", "frame_reference"}, {"render"}]
REPORT_RANK = {part: i for i, layer in enumerate(REPORT_LAYERS) for part in layer}


def _report_part(module: str) -> Optional[str]:
    """document, views, frames, ... for a module of nsbridge.report; None elsewhere."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "report" else None


def test_report_reads_bottom_up() -> None:
    parts = {_report_part(m) for m in MODULES} - {None}
    assert parts == set(REPORT_RANK), f"place these in REPORT_LAYERS: {parts - set(REPORT_RANK)}"
    bad = [e for es in graph().values() for e in es
           if _report_part(e.src) and _report_part(e.dst)
           and REPORT_RANK[_report_part(e.dst)] > REPORT_RANK[_report_part(e.src)]]
    assert not bad, "report/ imports upward:" + _listing([str(e) for e in bad])


@pytest.mark.parametrize("layer", sorted(NEVER_REACH))
def test_what_a_layer_never_reaches(layer: str) -> None:
    bad = _crossings(layer, NEVER_REACH[layer], eager_only=False)
    assert not bad, f"{layer}/ reaches what it must not:" + _listing(bad)


@pytest.mark.parametrize("layer", sorted(NEVER_IMPORT))
def test_what_a_layer_never_imports_itself(layer: str) -> None:
    bad = [str(e) for m, es in graph().items() if unit(m) == layer for e in es
           if any(_matches(e.dst, b) for b in NEVER_IMPORT[layer])]
    assert not bad, _listing(bad)


@pytest.mark.parametrize("layer", sorted(NOT_AT_IMPORT))
def test_what_is_not_imported_at_import_time(layer: str) -> None:
    bad = _crossings(layer, NOT_AT_IMPORT[layer], eager_only=True)
    assert not bad, f"importing {layer} imports too much at once:" + _listing(bad)


def test_the_cli_imports_only_click_api_errors_options_and_renderers() -> None:
    bad = [str(e) for m in ("nsbridge.cli", "nsbridge._options") for e in graph()[m]
           if e.internal and e.dst not in CLI_MAY_IMPORT and not _known(e.src, e.dst)]
    assert not bad, "\n".join(bad)
    third_party = {e.dst for m in ("nsbridge.cli", "nsbridge._options") for e in graph()[m]
                   if not e.internal} & {*HEAVY, "subprocess", "yaml", "rich"}
    assert third_party == {"click"}


def test_known_exceptions_are_still_there() -> None:
    """Fix one, then delete it from KNOWN_EXCEPTIONS: the list only shrinks."""
    edges = {(e.src, e.dst) for es in graph().values() for e in es}
    stale = [why for (src, dst), why in KNOWN_EXCEPTIONS.items()
             if not any(s == src and (d == dst or d.startswith(dst + ".")) for s, d in edges)]
    assert not stale, f"fixed, remove from KNOWN_EXCEPTIONS: {stale}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def test_no_import_cycles() -> None:
    """Among modules, eager imports form no cycle (so any module can be imported first);
    among units, no cycle even counting lazy imports (nsbridge's _LAZY table aside)."""
    eager = {m: {e.dst for e in es if e.internal and not e.lazy} for m, es in graph().items()}
    assert _cycles(eager) == [], "eager import cycles among modules"
    units: dict[str, set[str]] = {}
    for es in graph().values():
        for e in es:
            if e.internal and not _facade(e) and unit(e.src) != unit(e.dst):
                units.setdefault(unit(e.src), set()).add(unit(e.dst))
    assert _cycles(units) == [], "import cycles among packages (LAYERS' units)"


def _flat(package: str) -> bool:
    """A package whose __init__ eagerly imports every one of its modules (nsbridge.schema:
    ``from nsbridge import schema as S``): binding it binds them all, so nothing reached
    through it can be missing."""
    subs = {m for m in MODULES if m.rsplit(".", 1)[0] == package}
    eager = {e.dst for e in graph()[package] if e.internal and not e.lazy}
    return bool(subs) and subs <= eager


def test_no_module_binds_a_subpackage() -> None:
    """With no eager cycle, importing every module in one interpreter proves each imports
    fresh, unless a module reached a submodule as an attribute of a package it bound
    (`import nsbridge.model` then `nsbridge.model.stats`): nothing does, a flat package
    (``_flat``) aside."""
    bad = []
    for name, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Import):
                bad += [f"{name}: import {a.name}" for a in node.names
                        if a.name.startswith("nsbridge") and a.asname is None]
            elif isinstance(node, ast.ImportFrom):
                bad += [f"{name}: from .. import {t}" for t in _targets(node, name)
                        if t in PACKAGES and t != "nsbridge" and not _flat(t)]
    assert not bad, bad


def test_subprocess_only_in_collect_process() -> None:
    users = sorted(m for m, es in graph().items() if any(e.dst == "subprocess" for e in es))
    assert users == ["nsbridge.collect._process"]


def test_no_shell_anywhere() -> None:
    banned = ("shell" + "=True", "os." + "system(")
    for path in MODULES.values():
        text = path.read_text(encoding="utf-8")
        assert not any(b in text for b in banned), path


# -- part two: one real interpreter --------------------------------------------------------
PROBE = textwrap.dedent("""
    import importlib, json, os, sys

    HEAVY, MODULES = json.loads(sys.argv[1]), json.loads(sys.argv[2])

    def heavy():
        return sorted(m for m in HEAVY if m in sys.modules)

    def forked(job):
        \"\"\"Start job() in a fork of this interpreter, still bare: (pid, pipe to its JSON).\"\"\"
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                out = job()
            except BaseException as exc:
                out = {"error": f"{type(exc).__name__}: {exc}"}
            os.write(write, json.dumps(out).encode())
            os._exit(0)
        os.close(write)
        return pid, read

    def result(pid, read):
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
        return json.loads(data)

    def package():
        import nsbridge
        imported = heavy()
        nsbridge.step()
        return {"nsbridge": imported, "nsbridge.step()": heavy()}

    def cli():
        from nsbridge.cli import main
        imported = heavy()
        sys.stdout = open(os.devnull, "w")
        try:
            main(["--help"], prog_name="nsbridge")
        except SystemExit:
            pass
        return {"nsbridge.cli": imported, "nsbridge --help": heavy()}

    def child():
        import nsbridge._bootstrap.entry
        return {"nsbridge._bootstrap.entry": heavy()}

    def api_then_every_module():
        import nsbridge.api
        imported, failed = heavy(), {}
        for name in MODULES:
            try:
                importlib.import_module(name)
            except BaseException as exc:
                failed[name] = f"{type(exc).__name__}: {exc}"
        return {"nsbridge.api": imported, "every module": failed}

    started = [forked(job) for job in (api_then_every_module, package, cli, child)]
    found = {}
    for pid, read in started:
        found.update(result(pid, read))
    print(json.dumps(found))
""")


@pytest.fixture(scope="module")
def probe() -> dict:
    """What each entry point imported, from forks of one bare interpreter (one start-up);
    the fork that imports every module starts with nsbridge.api, from a bare state too."""
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    modules = [m for m in MODULES if not m.endswith("__main__")]
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(modules)],
                         capture_output=True, text=True, check=True, timeout=120,
                         cwd=str(PKG.parent))
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow      # the probe fixture runs an interpreter
def test_every_module_imports(probe: dict) -> None:
    assert "error" not in probe, probe
    assert probe["every module"] == {}


@pytest.mark.slow
@pytest.mark.parametrize("entry, heavy", [
    ("nsbridge", []),                           # import nsbridge starts nothing
    ("nsbridge.step()", []),                    # step() outside a profiled run
    ("nsbridge._bootstrap.entry", []),          # the child: torch comes when the run starts
    ("nsbridge.cli", ["click"]),                # the CLI: analysis code comes per command
    ("nsbridge --help", ["click"]),
    ("nsbridge.api", ["msgspec", "numpy", "pandas"]),   # never torch: it runs in the child
])
def test_heavy_modules_each_entry_point_brings_in(probe: dict, entry: str,
                                                  heavy: Optional[list]) -> None:
    assert probe.get(entry) == heavy, probe.get("error")
