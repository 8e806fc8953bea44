"""Fail in milliseconds, before any profiler starts, when the script cannot run: a path that
is not a file, a ``-m`` module python would not find, or code that does not compile.

Nothing of the user's code runs here: a module is found by walking the import system's
path finders package by package (as ``python -m`` would, without importing the packages),
and a script is compiled, not executed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Optional, Sequence, Union

from .guard.confine import readable
from .errors import ScriptError


@dataclass(frozen=True)
class Script:
    """What a pass that runs the user's code executes (a run's manifest keeps it)."""

    target: str
    args: list[str]
    module: bool
    cwd: Path

    @property
    def label(self) -> str:
        """The name a run directory of it takes: the module's last part, the file's stem."""
        return self.target.split(".")[-1] if self.module else Path(self.target).stem


def checked_script(target: str, args: Sequence[str], module: bool,
                   cwd: Optional[Union[str, Path]]) -> Script:
    """The script to run from ``cwd`` (None: the current directory), checked first.

    Raises:
        ScriptError: it cannot be started, or does not compile (check_script).
    """
    workdir = readable(Path(cwd) if cwd else Path.cwd())
    check_script(target, module, workdir)
    return Script(target=target, args=list(args), module=module, cwd=workdir)


def check_script(target: str, module: bool, workdir: Path) -> None:
    """Raise ScriptError when ``target`` (a path, or a module name with ``module``) cannot
    be started from ``workdir``, or does not compile."""
    if module:
        origin = module_file(target, workdir)
        if origin is not None:
            check_compiles(origin, f"-m {target}")
        return
    script = readable((workdir / target) if not Path(target).is_absolute() else Path(target))
    if not script.is_file():
        what = "is a directory" if script.is_dir() else "does not exist"
        raise ScriptError(f"The script {target} {what}. Give the path of a Python file "
                          "(relative to the current directory), or use -m package.module "
                          "to run a module.")
    check_compiles(script, target)


def module_file(name: str, cwd: Path) -> Optional[Path]:
    """The source file ``python -m name`` run in ``cwd`` would run (a package's
    ``__main__.py``), found as the profiled process will look (``cwd`` first on sys.path,
    then this interpreter's path, PYTHONPATH included; _bootstrap/entry.py). None for a
    module without a source file (a built-in or an extension).

    Raises:
        ScriptError: a relative name, or no such module or package.
    """
    parts = name.split(".")
    if not all(parts):
        raise ScriptError(f"-m {name}: a relative module name cannot be run (python -m says "
                          "the same); give the full name, package.module.")
    saved = list(sys.path)
    sys.path[:1] = [str(cwd.resolve())]
    try:
        spec, depth = _walk(parts)
    finally:
        sys.path[:] = saved
    if spec is None:
        missing = ".".join(parts[:depth])
        if depth > 1:
            raise ScriptError(f"No module named {missing!r}, so -m {name} cannot run: the "
                              f"package {'.'.join(parts[:depth - 1])} has no {parts[depth - 1]}"
                              ".py or folder of that name. Check the module's name.")
        raise ScriptError(f"No module named {missing!r}, so -m {name} cannot run: python looks "
                          f"for it in {cwd} (the current directory) and on sys.path "
                          f"(PYTHONPATH, installed packages). Run nsbridge from the folder that "
                          f"holds {parts[0]}/ or {parts[0]}.py, install the package (pip "
                          "install -e .), or add its folder to PYTHONPATH.")
    if spec.submodule_search_locations is not None:       # a package: its __main__
        main = _find(f"{name}.__main__", list(spec.submodule_search_locations))
        if main is None:
            raise ScriptError(f"-m {name}: {name} is a package without a __main__.py, so "
                              "python cannot run it; name the module to run inside it.")
        spec = main
    origin = spec.origin
    return Path(origin) if origin and origin.endswith(".py") else None


def _walk(parts: list[str]) -> tuple[Optional[ModuleSpec], int]:
    """The spec of the dotted name, each package's submodules looked up in its search
    locations as the import system does (its meta path finders, editable installs
    included), without importing it; with how many parts were looked up."""
    spec = _find(parts[0], None)
    for depth in range(2, len(parts) + 1):
        if spec is None or spec.submodule_search_locations is None:
            return None, depth - 1
        spec = _find(".".join(parts[:depth]), list(spec.submodule_search_locations))
    return spec, len(parts)


def _find(fullname: str, path: Optional[list[str]]) -> Optional[ModuleSpec]:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(fullname, path)
        except KeyError:   # a namespace subpackage: python asks for its imported parent
            return _namespace(fullname, path or [])
        except (ImportError, ValueError, OSError):
            continue
        if spec is not None:
            return spec
    return None


def _namespace(fullname: str, path: list[str]) -> Optional[ModuleSpec]:
    """The spec of a namespace package (folders without __init__.py) under ``path``."""
    name = fullname.rpartition(".")[2]
    folders = [str(Path(p, name)) for p in path if Path(p, name).is_dir()]
    if not folders:
        return None
    spec = ModuleSpec(fullname, None, is_package=True)
    spec.submodule_search_locations = folders
    return spec


def check_compiles(path: Path, shown: str) -> None:
    """Raise ScriptError, with the file, line and python's own message, when ``path`` does
    not compile (what `python script.py` would say first)."""
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise ScriptError(f"{shown}: cannot read {path}: {exc.strerror or exc}.") from None
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        if not isinstance(exc, SyntaxError) or exc.lineno is None:    # NUL bytes, by version
            msg = exc.msg if isinstance(exc, SyntaxError) else exc
            raise ScriptError(f"{shown}: {path} is not Python source: {msg}.") from None
        text = (exc.text or "").strip()
        raise ScriptError(
            f"The script has a syntax error at {exc.filename or path}:{exc.lineno}: "
            f"{exc.msg}" + (f" ({text!r})" if text else "") + ". Nothing was profiled: "
            "fix the line and run again (python -m py_compile checks a file alone)."
        ) from None
