"""What a command adds its pass to: a new run directory for a script, an earlier run
(the latest one by default), and the profile an earlier run recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

from .. import schema as S
from ..errors import RunDirError, ScriptError
from ..profiles import Profile, as_profile
from ..run import Run
from ..rundir import DEFAULT_BASE
from ..script_check import Script, checked_script


def out_path(out: Optional[Union[str, Path]]) -> Optional[Path]:
    """``--out`` as a path (None: a new folder under nsbridge-runs/)."""
    return Path(out) if out else None


def run_for(run: Optional[Union[str, Path]], target: Optional[str], args: Sequence[str],
            module: bool, cwd: Optional[Union[str, Path]], prof: Profile, command: str,
            out: Optional[Union[str, Path]]) -> tuple[Run, Script]:
    """The run to add a pass to (an earlier one, or a new one) and the script it runs."""
    if target is None:
        raise ScriptError(f"Give a script to run under {command}, or --run DIR of a triage run.")
    script = checked_script(target, args, module, cwd)
    if run is None:
        return Run.for_script(script, command=command, profile=prof, out=out_path(out)), script
    return Run.open(Path(run)), script


def recorded_profile(run: Run) -> Profile:
    """The profile a run's manifest recorded (the default profile when it has none).

    Raises:
        ProfileError: what it recorded is not a profile this version reads.
    """
    from ..profiles import profile_from_dict

    recorded = run.manifest.get("profile")
    if not isinstance(recorded, dict):
        return as_profile("default")
    return profile_from_dict(recorded, name=str(recorded.get("name") or "recorded"),
                             source=f"{run.dir}'s manifest")


def latest_run() -> Path:
    """The newest run directory under nsbridge-runs/.

    Raises:
        RunDirError: there is none.
    """
    runs = sorted((p for p in DEFAULT_BASE.glob("*") if (p / S.REPORT_JSON).is_file()),
                  key=lambda p: p.stat().st_mtime) if DEFAULT_BASE.is_dir() else []
    if not runs:
        raise RunDirError(f"No earlier run under {DEFAULT_BASE}/ to take the ops from. Give "
                          "--run DIR, or a script to triage first (nsbridge deep --top 5 "
                          "train.py).")
    return runs[-1]
