"""Builds nsbridge's C extension, the trace scanner (nsbridge/parse/_scan.c).

Everything else is in pyproject.toml (the version: nsbridge/__init__.py). The extension is
optional: without a C compiler (or without Python's headers) the install still succeeds and
traces are read by the msgspec reader alone (slower, the same results). When it does not
compile, that is reported in the build's output and as a Python warning.
`python -m build` and `pip install -v` print the output; pip prints a build backend's
warnings without -v only from 26.3 on and only when it builds a local folder
(`pip install .`), so the warning is also written to the terminal an install runs in, if
any; `nsbridge doctor` says which path is in use.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

# what nsbridge uses in place of each extension when it is not built (doctor says the same)
FALLBACK = {
    "nsbridge.parse._scan": ("the C trace scanner (nsbridge/parse/_scan.c)",
                             "msgspec reads every trace batch, so analysing a large trace "
                             "takes about 1.5-2x as long"),
}
FIX = ("to build it, install a C compiler and Python's headers (Debian/Ubuntu: apt install "
       "gcc python3-dev) and reinstall: pip install --force-reinstall --no-deps "
       "--no-cache-dir nsbridge")


class NsbridgeBuildWarning(UserWarning):
    """An optional C extension that did not compile (a UserWarning: the kind pip passes on
    from a build backend)."""


class OptionalBuildExt(build_ext):
    """build_ext that says which extension did not compile, why, what nsbridge uses instead
    and how to build it (setuptools' own note names only the extension)."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, BaseError) as exc:
            if not ext.optional:
                raise
            what, instead = FALLBACK.get(ext.name, (ext.name, "a slower Python path"))
            message = (f"nsbridge: {what} was not built ({self._why(exc)}); nsbridge works "
                       f"without it: {instead}. `nsbridge doctor` says so too; {FIX}")
            print(f"WARNING: {message}", file=sys.stderr, flush=True)
            _tell_terminal(message)
            warnings.warn(message, NsbridgeBuildWarning, stacklevel=1)  # installed without it

    def _why(self, exc: Exception) -> str:
        """The likeliest cause in words: no compiler, no Python.h, or the compiler's exit."""
        compiler = getattr(self.compiler, "compiler_so", None) or [os.environ.get("CC", "cc")]
        if not shutil.which(compiler[0]):
            return f"no C compiler: {compiler[0]} not found"
        include = sysconfig.get_path("include")
        if include and not os.path.isfile(os.path.join(include, "Python.h")):
            return f"Python's headers are missing: no Python.h in {include}"
        return (f"{compiler[0]} failed: {type(exc).__name__}; pip install -v shows the "
                f"compiler's output")


def _tell_terminal(message: str) -> None:
    """pip shows a build's output only with -v: an install run from a terminal gets the
    warning on it all the same (CI, with no terminal, has the build log and doctor)."""
    try:
        with open("/dev/tty", "w", encoding="utf-8") as tty:
            tty.write(f"\nWARNING: {message}\n\n")
    except OSError:
        pass


setup(ext_modules=[Extension("nsbridge.parse._scan", ["nsbridge/parse/_scan.c"],
                             optional=True)],
      cmdclass={"build_ext": OptionalBuildExt})
