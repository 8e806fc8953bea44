"""The layering rules of style.md section 4, checked on the source and in fresh interpreters."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "nsbridge"

# package (relative to nsbridge/) -> imports it must not use
FORBIDDEN = {
    "parse": {"subprocess", "torch", "click", "nsbridge.collect", "nsbridge.model"},
    "model": {"subprocess", "torch", "click", "nsbridge.parse", "nsbridge.collect"},
    "collect": {"pandas", "torch", "click", "nsbridge.parse", "nsbridge.model", "nsbridge.report"},
    "report": {"subprocess", "torch", "click"},
    "_bootstrap": {"pandas", "click", "nsbridge.api", "nsbridge.model", "nsbridge.parse"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    package = "nsbridge." + ".".join(path.relative_to(PKG).parent.parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rstrip(".").split(".")
                base = base[: len(base) - (node.level - 1)]
                names.add(".".join(base + ([node.module] if node.module else [])))
            else:
                names.add(node.module or "")
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports(layer: str) -> None:
    for path in (PKG / layer).glob("*.py"):
        used = _imports(path)
        bad = {u for u in used for f in FORBIDDEN[layer] if u == f or u.startswith(f + ".")}
        assert not bad, f"{path.name} imports {bad}"


def test_subprocess_only_in_collect_process() -> None:
    users = [p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")
             if "subprocess" in _imports(p)]
    assert users == ["collect/_process.py"]


def test_no_shell_anywhere() -> None:
    banned = ("shell" + "=True", "os." + "system(")
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        assert not any(b in text for b in banned), path


def test_import_nsbridge_is_light() -> None:
    code = ("import sys, nsbridge; nsbridge.step(); "
            "print(sorted(m for m in ('torch', 'pandas', 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_module_imports_in_a_fresh_interpreter() -> None:
    names = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        if rel.name in ("__main__",) or rel.parts[-1] == "entry":
            continue
        names.append(".".join(rel.parts).removesuffix(".__init__"))
    for name in names:
        subprocess.run([sys.executable, "-c", f"import {name}"], check=True)
