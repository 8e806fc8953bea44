"""Builds nsbridge's two C extensions: the trace scanner (nsbridge/parse/_scan.c) and the
interval-nesting sweep (nsbridge/model/_nest.c).

Everything else is in pyproject.toml. Both are optional: without a C compiler the install
still succeeds, traces are read by the msgspec reader alone and nested by numpy (slower,
the same results; `nsbridge doctor` says which are in use).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("nsbridge.parse._scan", ["nsbridge/parse/_scan.c"],
                             optional=True),
                   Extension("nsbridge.model._nest", ["nsbridge/model/_nest.c"],
                             optional=True)])
