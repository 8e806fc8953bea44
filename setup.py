"""Builds nsbridge's one C extension, the trace scanner (nsbridge/parse/_scan.c).

Everything else is in pyproject.toml. The extension is optional: without a C compiler the
install still succeeds and traces are read by the msgspec reader alone (slower; `nsbridge
doctor` says which reader is in use).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("nsbridge.parse._scan", ["nsbridge/parse/_scan.c"],
                             optional=True)])
