"""What a run directory may make nsbridge run: a run directory is code.

`gate`, `deep --run` and `timeline --run` run a manifest's script again. The manifest is a file anyone could
have written, so what it names is checked before any process starts (even ``git``): its
script and folder must lie, symlinks resolved, in a trusted folder (the folder nsbridge
runs in, or those named by ``--trust DIR``; over MCP, the server's roots); ``module: true``
is refused (``-m`` only from the command line); of its ``env``, only the variables triage
records (collect.source.RECORDED_PREFIXES) are applied, less those that name code, a
library or a file to load. A variable whose value the user's environment already has
changes nothing and is not applied. A checkout's script must lie inside its checkout.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from ..collect.source import NOT_RECORDED, PER_LAUNCH, RECORDED_PREFIXES
from ..collect.torch_profiler import with_threads
from ..errors import UntrustedRunError
from ..guard.printable import printable

TrustArg = Optional[Sequence[Union[str, Path]]]

# parts of a name whose value is a path, a library or a plugin to load (CUDA_INJECTION64_PATH,
# NCCL_NET_PLUGIN, OMP_TOOL_LIBRARIES, TORCH_HOME, TORCHINDUCTOR_CACHE_DIR, NCCL_TOPO_FILE,
# CUDA_HOME): code chosen by whoever wrote the manifest
LOADS_CODE = ("PATH", "PRELOAD", "PLUGIN", "LIBRAR", "INJECTION", "TOOL", "HOME", "_DIR",
              "_FILE")
# nsbridge's own variables that name the tools it runs or the process it watches
NSBRIDGE_INTERNAL = ("NSBRIDGE_NSYS", "NSBRIDGE_NCU", "NSBRIDGE_PARENT_PID")
# torch.distributed.run's options as triage --nproc-per-node records them (distributed.launch):
# with a value, or alone
LAUNCHER_OPTIONS = ("--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-backend",
                    "--rdzv-endpoint")
LAUNCHER_FLAGS = ("--standalone",)
WAY_OUT = ("Triage again from a trusted folder, or name the script on the command line "
           "(gate: checkouts, nsbridge gate BASE_DIR NEW_DIR SCRIPT; deep: nsbridge deep "
           "--kernel OP SCRIPT), or, if you trust whoever wrote the run directory, name "
           "the folder with --trust DIR.")


def trusted_folders(trust: TrustArg) -> list[Path]:
    """The folders whose code may run, resolved (None: the current directory)."""
    return [Path(d).resolve() for d in (trust if trust is not None else [Path.cwd()])]


def may_apply(name: str) -> bool:
    """Whether a manifest may set the variable ``name`` (a torch or threading knob)."""
    return (name.startswith(RECORDED_PREFIXES) and not name.startswith(NOT_RECORDED)
            and name not in NSBRIDGE_INTERNAL and not any(p in name for p in LOADS_CODE))


def check_manifest_script(given: str, target: str, module: bool, cwd: Path,
                          folders: Sequence[Path]) -> None:
    """A manifest's script and folder lie in ``folders``; not a module.

    Raises:
        UntrustedRunError: a module, or a script or folder outside every trusted folder.
    """
    if module:
        raise UntrustedRunError(printable(
            f"{given}: its manifest asks to run the module {target!r} (python -m), which "
            "nsbridge never takes from a run directory: a module can be any installed "
            "program. Nothing was run. Name the module yourself on the command line "
            "(gate, with checkouts: nsbridge gate -m BASE_DIR NEW_DIR MODULE; deep: "
            "nsbridge deep --kernel OP -m MODULE)."))
    script = (cwd / target).resolve()
    for what, path in (("folder", cwd.resolve()), ("script", script)):
        if not any(_inside(path, folder) for folder in folders):
            raise UntrustedRunError(printable(
                f"{given}: its manifest names the {what} {path}, outside the trusted "
                f"folders ({', '.join(map(str, folders))}); nsbridge runs a run "
                f"directory's script only from those. Nothing was run. {WAY_OUT}"))


@dataclass(frozen=True)
class Rerun:
    """How a run directory's script runs again (`deep --run`, `timeline --run`): the
    environment (the user's, with the manifest's checked variables and the threads' over
    it), torch's intra-op threads, and what will run, in words."""

    environ: dict[str, str]
    threads: Optional[int]
    plan: str


def rerun_plan(given: str, manifest: Mapping[str, Any], folders: Sequence[Path],
               environ: Mapping[str, str] = os.environ,
               threads: Optional[int] = None) -> Rerun:
    """What running a run directory's script again will run, once checked: its script and
    folder in ``folders``, no module, torch.distributed.run options only as triage records
    them, of its ``env`` only what a manifest may set (``manifest_env``), with the threads
    it recorded unless ``threads`` is given.

    Raises:
        UntrustedRunError: what ``check_manifest_script``, the launcher check or
            ``manifest_env`` refuses.
    """
    target, args = str(manifest.get("target")), [str(a) for a in manifest.get("args") or []]
    cwd = Path(str(manifest.get("cwd") or Path.cwd()))
    check_manifest_script(given, target, bool(manifest.get("module")), cwd, folders)
    launcher = [str(a) for a in manifest.get("launcher") or []]
    _check_launcher(given, launcher)
    recorded = manifest.get("env")
    applied = manifest_env(given, {str(k): str(v) for k, v in recorded.items()}
                           if isinstance(recorded, Mapping) else {}, environ)
    ran_with = manifest.get("threads")
    recorded_threads = ran_with if isinstance(ran_with, int) and not isinstance(
        ran_with, bool) and ran_with > 0 else None
    use = threads or recorded_threads
    under = f" under torch.distributed.run {shlex.join(launcher)}" if launcher else ""
    said = [f"{k}={shlex.quote(v)}" for k, v in sorted(applied.items())]
    if use:
        said.append(f"{use} intra-op thread(s) ("
                    + ("--threads" if threads else "as the run recorded") + ")")
    return Rerun(environ=with_threads({**environ, **applied}, use), threads=use,
                 plan=printable(f"runs {shlex.join(['python', target, *args])} in {cwd}"
                                f"{under} (from {given}'s manifest), in your environment"
                                + (f" with {', '.join(said)}" if said else
                                   ": the manifest sets nothing more")))


def _check_launcher(given: str, launcher: Sequence[str]) -> None:
    rest = list(launcher)
    while rest:
        option = rest.pop(0)
        if option in LAUNCHER_FLAGS:
            continue
        if option not in LAUNCHER_OPTIONS or not rest or rest.pop(0).startswith("-"):
            raise UntrustedRunError(printable(
                f"{given}: its manifest starts the ranks with torch.distributed.run options "
                f"nsbridge does not write ({shlex.join(launcher)}): only "
                f"{', '.join(LAUNCHER_OPTIONS + LAUNCHER_FLAGS)} with their values. Nothing "
                f"was run. {WAY_OUT}"))


def check_checkout_script(given: str, folder: Path, script: str) -> None:
    """A checkout's script lies inside the checkout, symlinks resolved.

    Raises:
        UntrustedRunError: it resolves outside (``..``, an absolute path, a symlink).
    """
    path = (folder / script).resolve()
    if not _inside(path, folder.resolve()):
        raise UntrustedRunError(printable(
            f"The script {script!r} resolves to {path}, outside the checkout {given}: the "
            "gate runs only a script inside each checkout. Nothing was run. Give its path "
            "relative to the checkout, inside it."))


def manifest_env(given: str, env: Mapping[str, str],
                 environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables of a manifest's ``env`` to apply: those whose value differs from
    ``environ``'s (the others change nothing), each one a manifest may set; a launcher's
    own for its launch (``PER_LAUNCH``) is left out, as this run is another launch.

    Raises:
        UntrustedRunError: a variable it may not set, named.
    """
    applied = {k: v for k, v in env.items()
               if environ.get(k) != v and not k.startswith(PER_LAUNCH)}
    refused = sorted(k for k in applied if not may_apply(k))
    if refused:
        raise UntrustedRunError(printable(
            f"{given}: its manifest sets {', '.join(refused)}, which a run directory may "
            "not set: nsbridge applies from a manifest only the variables that change how "
            "torch runs (OMP_*, MKL_*, TORCH*, PYTORCH_*, CUDA_*, NCCL_*, NSBRIDGE_*, ...), "
            "never one that names a library, a path or a plugin to load. Nothing was run. "
            "If you mean it, set it yourself in your environment (then the manifest "
            "changes nothing) or with --base-env/--new-env NAME=VALUE."))
    return applied


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
