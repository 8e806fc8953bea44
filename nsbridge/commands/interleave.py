"""The interleaved gate's measurements: both sides run again, in pairs, in one session.

A side is what to run: a run directory (its manifest's script, arguments, folder, recorded
environment and threads, as far as nsbridge.commands.trust allows; a note when its folder's git
commit has moved on since), or a checkout (a folder: the given script inside it, run from
there with the folder first on PYTHONPATH, so the checkout's own package is the one
imported). ``describe`` says what each side will run, before anything does. Pair i runs
base then new when i is odd, new then base when it is even (A B, B A, A B, ...): a machine
that drifts during the gate slows both sides alike, and the first process's cold start
falls on each side in turn. Each process is a triage of its own into the gate's folder.
A gate that is still inconclusive grows a pair at a time (``run_pairs`` from a later pair),
up to DEFAULT_MAX_PROCESSES pairs unless told otherwise.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .. import schema as S
from ..collect.source import git_state
from ..collect.torch_profiler import THREAD_VARIABLES
from ..guard.confine import readable
from ..errors import DiffInputError, RunDirError
from ..guard.printable import printable
from ..run import is_ranked
from ..rundir import load_record
from .trust import (check_checkout_script, check_manifest_script, manifest_env,
                    trusted_folders)
from ..contract.report import as_report

SIDES = ("base", "new")
# the pairs a gate may grow to while its answer is inconclusive (unless told otherwise)
DEFAULT_MAX_PROCESSES = 10


@dataclass(frozen=True)
class GateSide:
    """What one side of the gate runs."""

    name: str                    # "base" or "new"
    given: str                   # the path the user gave
    target: str
    args: list[str]
    module: bool
    cwd: Path
    env: dict[str, str]          # set over nsbridge's own environment
    threads: Optional[int] = None   # recorded by the run directory, if it set them
    notes: list[str] = field(default_factory=list)
    env_from: dict[str, str] = field(default_factory=dict)   # where each of env came from
    from_run: bool = False       # a run directory's manifest (else a checkout)


def resolve_side(name: str, given: str, script: Optional[str], args: Sequence[str],
                 module: bool, env: Mapping[str, str],
                 trust: Optional[Sequence[Union[str, Path]]] = None,
                 environ: Mapping[str, str] = os.environ) -> GateSide:
    """A side from a run directory (or its report.json) or a checkout folder. A run
    directory's script and folder must lie in ``trust`` (None: the current directory);
    ``environ`` is the environment the side's processes start from.

    Raises:
        DiffInputError: neither, or a checkout without a script, or a script given with
            a run directory (it brings its own).
        UntrustedRunError: what nsbridge.commands.trust refuses (nothing has run).
    """
    path = Path(given)
    if path.is_file() and path.name == S.REPORT_JSON:
        path = path.parent
    manifest_path = path / S.MANIFEST_JSON
    if manifest_path.is_file():
        if script is not None:
            raise DiffInputError(f"{given} is a run directory: the gate runs its own script "
                                 "again as its manifest recorded it. Give SCRIPT only when "
                                 "BASE and NEW are checkouts (folders of the code).")
        return _from_run(name, given, manifest_path, env, trusted_folders(trust), environ)
    if not path.is_dir():
        raise DiffInputError(f"{given} is neither a run directory of nsbridge nor a folder: "
                             "give two run directories (made by nsbridge triage) or two "
                             "checkouts and the script to run in each.")
    if script is None:
        raise DiffInputError(f"{given} is a folder without a run in it, taken as a checkout: "
                             "name the script to run in it (nsbridge gate BASE NEW train.py "
                             "-- ARGS), its path relative to the checkout.")
    folder = path.resolve()
    if not module:
        check_checkout_script(given, folder, script)
    if not module and not (folder / script).is_file():
        raise DiffInputError(f"The checkout {given} has no {script}: the script's path is "
                             "taken relative to each checkout.")
    paths = [str(folder)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                             else [])
    option = f"--{name}-env"
    return GateSide(name=name, given=given, target=script, args=list(args), module=module,
                    cwd=folder, env={**env, "PYTHONPATH": os.pathsep.join(paths)},
                    env_from={**{k: option for k in env},
                              "PYTHONPATH": "the checkout, first on your PYTHONPATH"})


def _from_run(name: str, given: str, manifest_path: Path, env: Mapping[str, str],
              trusted: list[Path], environ: Mapping[str, str]) -> GateSide:
    try:
        manifest = load_record(readable(manifest_path), S.Manifest)
    except RunDirError as exc:
        raise DiffInputError(f"{given}: {exc} The gate cannot run it again: triage that "
                             "side again, or give checkouts.") from None
    if not manifest.get("cwd"):
        raise DiffInputError(f"{given}: its manifest.json names no folder to run in: the "
                             "gate cannot run it again. Triage that side again, or give "
                             "checkouts.")
    target, cwd = manifest["target"], Path(manifest["cwd"])
    args = list(manifest.get("args") or [])
    recorded_env = manifest.get("env") or {}
    if manifest.get("command") != "triage" or _ranked(manifest_path.parent):
        raise DiffInputError(f"{given} is a run of `{manifest.get('command')}`, not of a "
                             "one-process triage: the gate runs one process per side at a "
                             "time. Give a triage run or checkouts.")
    check_manifest_script(given, target, bool(manifest.get("module")), cwd, trusted)
    applied = manifest_env(given, recorded_env, environ)
    notes = []
    recorded = manifest.get("git") or {}
    now = git_state(cwd) if recorded else None
    if recorded and now and now.get("commit") != recorded.get("commit"):
        notes.append(f"{given} was made at commit {recorded['commit'][:12]}; its folder "
                     f"{cwd} is now at {now['commit'][:12]}: the {name} side measures the "
                     "code as it is now")
    if not cwd.is_dir():
        raise DiffInputError(f"{given} ran in {cwd}, which no longer exists: the gate cannot "
                             "run it again there.")
    threads = manifest.get("threads")
    option = f"--{name}-env"
    return GateSide(name=name, given=given, target=target, args=args, module=False, cwd=cwd,
                    env={**applied, **env}, threads=threads if isinstance(threads, int)
                    and not isinstance(threads, bool) else None, notes=notes,
                    env_from={**{k: f"{given}'s manifest" for k in applied},
                              **{k: option for k in env}}, from_run=True)


def applied_env(side: GateSide, threads: Optional[int]) -> dict[str, tuple[str, str]]:
    """{name: (value, where it came from)}: every variable a side's processes get over the
    user's environment, ``threads`` (the thread pools' variables) last, as triage sets it."""
    env = {k: (v, side.env_from[k]) for k, v in side.env.items()}
    if threads:
        env.update({k: (str(threads), "the gate's threads") for k in THREAD_VARIABLES})
    return dict(sorted(env.items()))


def describe(sides: Mapping[str, GateSide], threads: Optional[int], why: str) -> str:
    """What each side will run, for the user to read before anything runs: script,
    arguments, folder, the variables set over the user's environment (and where each came
    from), threads (``why``: where that number came from)."""
    lines = ["gate: what each side runs, over your environment:"]
    for side in sides.values():
        command = shlex.join(["python", *(["-m"] if side.module else []), side.target,
                              *side.args])
        lines += [f"  {side.name} ({side.given}): {command}", f"    in {side.cwd}"]
        lines += [f"    {k}={shlex.quote(v)}  ({source})"
                  for k, (v, source) in applied_env(side, threads).items()] or [
                      "    no variable set"]
    lines.append(f"  threads: {threads or 'as each script sets them'} ({why})")
    return "\n".join(printable(line) for line in lines)


def _ranked(run_dir: Path) -> bool:
    """A run of several ranks (its report's distributed section lists them)."""
    try:
        report = json.loads((run_dir / S.REPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and is_ranked(as_report(report))


def judged_apart(sides: Mapping[str, GateSide], allow: Sequence[str]) -> Optional[str]:
    """Why two run directories could only be judged inconclusive, whatever their processes
    measure: their scripts or arguments differ and ``allow`` does not accept it. Known from
    the manifests, so said before any process runs (with the flag that would judge them);
    None when they can be judged. Checkouts run the same script and arguments on both
    sides."""
    base, new = sides["base"], sides["new"]
    if not (base.from_run and new.from_run):
        return None
    if "target" not in allow and PurePath(base.target) != PurePath(new.target):
        return (f"{base.given} and {new.given} ran different scripts ({base.target} vs "
                f"{new.target}), so the gate would refuse to compare what it measured. "
                "Nothing was run. Pass --allow-different-target to gate them anyway, or "
                "gate two runs of the same script.")
    if "args" not in allow and base.args != new.args:
        shown = [shlex.join(side.args) or "(none)" for side in (base, new)]
        return (f"{base.given} and {new.given} ran the script with different arguments "
                f"({shown[0]} vs {shown[1]}), so the gate could only answer inconclusive "
                "after measuring every pair. Nothing was run. Pass --allow args to judge "
                "them as they are, or gate two runs made with the same arguments.")
    return None


def order(pairs: int) -> list[tuple[int, str]]:
    """(pair, side) in the order they run: A B, B A, A B, ..."""
    out = []
    for i in range(1, pairs + 1):
        first = SIDES if i % 2 else SIDES[::-1]
        out += [(i, side) for side in first]
    return out


def run_pairs(sides: dict[str, GateSide], pairs: int, folder: Path,
              run_one: Callable[[GateSide, Path], Any],
              on_progress: Optional[Callable[[str], None]] = None, *, most: int = 0,
              first: int = 1) -> dict[str, list[Any]]:
    """The gate's processes of pairs ``first`` to ``pairs``, in order (``run_one(side,
    run_dir)`` makes one and returns its result); {side: results in pair order}. ``most``:
    the pairs the gate may grow to, for the progress lines."""
    results: dict[str, list[Any]] = {side: [] for side in SIDES}
    plan = [(i, side) for i, side in order(pairs) if i >= first]
    of = f"at most {2 * most}" if most > pairs else str(2 * pairs)
    for n, (i, side) in enumerate(plan, 2 * (first - 1) + 1):
        if on_progress:
            on_progress(f"gate: process {n} of {of}: pair {i}, {side} "
                        f"({sides[side].given})")
        results[side].append(run_one(sides[side], folder / f"{side}-{i:02d}"))
    return results
