"""nsbridge: torch.profiler triage, Nsight timelines and kernel deep dives in one report.

Public API (importing nsbridge starts no tool and does not import torch or pandas):

- ``nsbridge.triage(script, args, ...)``: profile a script, return a ``RunResult``
- ``nsbridge.timeline(script, args, ...)``: the Nsight Systems pass (or ``run=DIR``)
- ``nsbridge.deep(kernels=[...] | top=N, run=DIR)``: Nsight Compute on the ops' kernels
- ``nsbridge.analyze(paths, ...)``: analyse traces, nsys exports and ncu reports
- ``nsbridge.load(run_dir)``: a run read back, its tables as DataFrames
- ``nsbridge.diff(base, new)``: two runs compared op by op, as they were recorded
- ``nsbridge.gate(base, new, ...)``: both sides run again in interleaved pairs and judged;
  ``nsbridge.rejudge(gate_dir)``: an earlier gate's processes judged again
- ``nsbridge.step()``: mark a step in loops without an optimizer
- ``nsbridge.load_profile(name_or_path)``; errors in ``nsbridge.errors``
- ``nsbridge.read_ahead(trace)``: start reading a large trace on background threads; a
  later read of that file (``analyze``) takes over (imports only numpy and msgspec)
"""

from __future__ import annotations

from typing import Any

from ._stepping import step
from .errors import NsbridgeError

# the one place the version is written: pyproject.toml reads it from here (without
# importing nsbridge), and a release adds its CHANGELOG.md section
__version__ = "0.1.0"
__all__ = ["triage", "timeline", "deep", "analyze", "load", "diff", "gate", "rejudge", "step",
           "load_profile", "read_ahead", "RunResult", "NsbridgeError", "__version__"]

_LAZY = {"triage": "api", "timeline": "api", "deep": "api", "analyze": "api", "load": "api",
         "diff": "api", "gate": "api", "rejudge": "api", "RunResult": "api", "load_profile": "profiles",
         "read_ahead": "parse._stream"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'nsbridge' has no attribute {name!r}")
