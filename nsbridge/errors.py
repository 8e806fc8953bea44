"""Errors nsbridge raises on purpose, each with a message a user can act on.

Library code raises these; only the CLI turns them into exit codes. The tree:

- NsbridgeError                 root; every expected, user-facing failure
  - ProfileError                a profile YAML is missing, malformed or has unknown keys
  - ScriptError                 the script to profile cannot be run (missing, not a file)
  - LaunchError                 a job of several ranks cannot be run as asked: options that
                                do not go with a launcher or with ranks (--runs, deep alone
                                under a launcher, a tool pass over several machines, a
                                run whose ranks cannot be started again, no rank profiled)
  - RunDirError                 the run directory exists, or cannot be created or written
  - ClusterError                `analyze --cluster`: Dask is not installed, no scheduler
                                answers at the address, or its workers lack this nsbridge
  - TraceError                  a file given to `analyze` cannot be used as a trace
    - TraceNotFoundError        the path does not exist / a folder holds no trace
    - TraceFormatError          not JSON, truncated, corrupt, or not a torch.profiler trace
    - EmptyTraceError           a valid trace with no events to analyse
    - NsysExportError           an nsys SQLite export without the tables nsbridge needs
    - NcuFormatError            not an Nsight Compute report or CSV export
  - ToolNotFoundError           nsys, ncu (or another tool) is not installed / not on PATH
  - ToolFailedError             a tool ran and failed; its own error lines and log path
  - DeepError                   the deep pass cannot run as asked (no GPU, an op the run
                                does not have, counters not permitted, a filter that
                                matched no kernel)
  - DiffInputError              `diff` was given something that is not a run (exit 2, so a
                                gate never mistakes bad input for a regression's exit 1)
  - DiffRefusedError            `diff` will not compare these runs: one failed, is still
                                running, measured nothing, is of another schema version or
                                shape, or they profiled different scripts (exit 1, which no
                                --inconclusive mapping turns into a pass)
  - GateRunError                a process `gate` started failed: nothing compared (exit 1);
                                the runs already made are kept
  - OutsideRootsError           a path nsbridge would read or run for an MCP client resolves
                                outside the server's roots (nsbridge.guard.confine); it was not
                                read, and the message never quotes it
  - UntrustedRunError           a run directory names what nsbridge will not run: a script
                                or folder outside the trusted folders, a module, a variable
                                that loads code (exit 5; nothing ran)

Not an NsbridgeError: ``Stopped``, a BaseException (like KeyboardInterrupt) raised in
nsbridge's own process when it gets SIGTERM (``stop_on_sigterm``), so a running pass ends
its child and the CLI exits 143.
"""

from __future__ import annotations

import signal


class NsbridgeError(Exception):
    """Root of every expected nsbridge failure; its text is one paragraph for the user."""

    exit_code = 1


class ProfileError(NsbridgeError):
    """A profile cannot be loaded or validated."""


class ScriptError(NsbridgeError):
    """The user's script cannot be started."""


class LaunchError(NsbridgeError):
    """A job of several ranks (a launcher, or ranks started outside) cannot run as asked."""


class RunDirError(NsbridgeError):
    """The run directory cannot be used."""


class ClusterError(NsbridgeError):
    """The cluster given to run a map on cannot be used (job.executors)."""


class TraceError(NsbridgeError):
    """A trace file cannot be analysed."""


class TraceNotFoundError(TraceError):
    """A trace path does not exist, or a folder contains no trace files."""


class TraceFormatError(TraceError):
    """A file is not a readable torch.profiler trace."""


class EmptyTraceError(TraceError):
    """A readable trace without any events to analyse."""


class NsysExportError(TraceError):
    """An nsys export that cannot be read or lacks the tables the join needs."""


class NcuFormatError(TraceError):
    """A file that is not a readable Nsight Compute report or CSV export."""


class ToolNotFoundError(NsbridgeError):
    """A profiler tool is not installed."""


class ToolFailedError(NsbridgeError):
    """A profiler tool ran and failed."""


class DeepError(NsbridgeError):
    """The Nsight Compute deep pass cannot run as asked."""


class DiffInputError(NsbridgeError):
    """`nsbridge diff` cannot read what it was given as a run."""

    exit_code = 2


class DiffRefusedError(NsbridgeError):
    """`nsbridge diff` was given runs it cannot compare; the text says which and why.
    Its own exit code (5), so a CI tells "a run failed" from "slower" (1)."""

    exit_code = 5


class GateRunError(NsbridgeError):
    """A process `nsbridge gate` started failed: nothing can be compared; its run
    directory and the ones before it are kept (exit 5, as a refusal)."""

    exit_code = 5


class UntrustedRunError(NsbridgeError):
    """A run directory's manifest names what nsbridge will not run (nsbridge.commands.trust);
    nothing ran (exit 5, as a refusal: never a regression's 1)."""

    exit_code = 5


class OutsideRootsError(NsbridgeError):
    """A path resolves outside the folders the MCP server may use (nsbridge.guard.confine)."""


class Stopped(BaseException):
    """nsbridge itself got SIGTERM (a launcher or scheduler ending the job)."""


def stop_on_sigterm() -> None:
    """Turn SIGTERM into Stopped, so a running pass ends its child before nsbridge exits."""
    def handler(signum: int, frame: object) -> None:
        raise Stopped()

    signal.signal(signal.SIGTERM, handler)
