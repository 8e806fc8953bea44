"""Profiles: YAML recipes saying what to capture and how to judge it.

A profile is chosen by name (a file in the bundled ``profiles/`` folder) or by path.
Unknown keys are rejected with a did-you-mean, wrong types with the expected type, so a
typo never silently falls back to a default.
"""

from __future__ import annotations

import difflib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Union

import yaml

from .errors import ProfileError

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
SUPPORTED_VERSION = 1


@dataclass(frozen=True)
class Capture:
    """torch.profiler options."""

    cuda: Union[bool, str] = "auto"
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False


@dataclass(frozen=True)
class Schedule:
    """Which steps are measured (torch.profiler.schedule semantics, see README)."""

    skip_first: int = 1
    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    wait_for_step_s: float = 20.0   # recording while no step has come yet, at most this long
    window_s: float = 5.0           # then (no steps) a time window of this length instead
    max_record_mib: float = 512.0  # any recording stops once the process grew this much


@dataclass(frozen=True)
class Analysis:
    """Thresholds for the ranking and the verdict."""

    top_ops: int = 15
    top_gaps: int = 10
    input_bound_share: float = 0.30
    sync_bound_share: float = 0.15
    sync_calls_per_step: float = 8
    sync_max_ops_between: float = 500
    sync_recommend_per_step: float = 1.0
    gpu_bound_busy: float = 0.80
    straggler_pct: float = 10.0
    straggler_min_ms: float = 1.0
    contention_wait_share: float = 0.10
    contention_steal_share: float = 0.05


@dataclass(frozen=True)
class Timeline:
    """The nsys pass."""

    trace: tuple = ("cuda", "nvtx", "osrt", "cudnn", "cublas")
    top_gaps: int = 10


@dataclass(frozen=True)
class Deep:
    """The Nsight Compute pass (see README, "The deep pass")."""

    top: int = 5
    min_kernel_us: float = 2.0
    skip_steps: int = 2
    profile_steps: int = 1
    max_launches: int = 200
    replay_mode: str = "kernel"
    clock_control: str = "base"
    cache_control: str = "all"
    sections: tuple = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis",
                       "ComputeWorkloadAnalysis")
    metrics: tuple = ()
    passes_per_kernel: int = 14
    seconds_per_pass: float = 0.05
    timeout_s: float = 3600.0
    quantities: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    """A validated profile."""

    name: str
    description: str
    capture: Capture
    schedule: Schedule
    analysis: Analysis
    source: str
    timeline: Timeline = Timeline()
    deep: Deep = Deep()

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for the manifest and the child process)."""
        return asdict(self)


SECTIONS = {"capture": Capture, "schedule": Schedule, "analysis": Analysis,
             "timeline": Timeline, "deep": Deep}
_CHOICES = {"replay_mode": ("kernel", "application"), "clock_control": ("base", "none"),
            "cache_control": ("all", "none")}
_TOP_KEYS = {"version", "description", *SECTIONS}


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped with nsbridge."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str = "default") -> Profile:
    """Load a built-in profile by name, or a YAML file by path.

    Raises:
        ProfileError: the file is missing, not YAML, of another version, or has unknown
            keys or values of the wrong type.
    """
    path = _resolve(name_or_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"Profile {path} could not be read: {exc}. Fix the YAML or pick "
                           f"a built-in profile ({', '.join(builtin_profiles())}).") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"Profile {path} must be a YAML mapping with the keys "
                           f"{', '.join(sorted(_TOP_KEYS))}; it holds {type(data).__name__}.")
    _reject_unknown(data, _TOP_KEYS, str(path), "")
    version = data.get("version", SUPPORTED_VERSION)
    if version != SUPPORTED_VERSION:
        raise ProfileError(f"Profile {path} has version {version!r}; this nsbridge reads "
                           f"version {SUPPORTED_VERSION}. Update the file or nsbridge.")
    sections = {key: _section(data.get(key) or {}, cls, str(path), key)
                for key, cls in SECTIONS.items()}
    _check_schedule(sections["schedule"], str(path))
    return Profile(name=path.stem, description=str(data.get("description", "")),
                   source=str(path), **sections)


def _resolve(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path("."):
        if candidate.is_file():
            return candidate
        raise ProfileError(f"Profile file {name_or_path} does not exist. Give a path to a "
                           f"YAML profile or a built-in name ({', '.join(builtin_profiles())}).")
    builtin = PROFILE_DIR / f"{name_or_path}.yaml"
    if builtin.is_file():
        return builtin
    if candidate.is_file():
        return candidate
    close = difflib.get_close_matches(name_or_path, builtin_profiles(), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ProfileError(f"No profile named '{name_or_path}'.{hint} Built-in profiles: "
                       f"{', '.join(builtin_profiles())}; or pass a path to a YAML file.")


def _reject_unknown(data: dict, allowed: set, path: str, prefix: str) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f" Did you mean '{prefix}{close[0]}'?" if close else ""
            raise ProfileError(f"Unknown key '{prefix}{key}' in profile {path}.{hint} "
                               f"Allowed here: {', '.join(sorted(allowed))}.")


def _section(data: Any, cls: type, path: str, name: str) -> Any:
    if not isinstance(data, dict):
        raise ProfileError(f"'{name}' in profile {path} must be a mapping, not "
                           f"{type(data).__name__}.")
    allowed = {f.name: f for f in fields(cls)}
    _reject_unknown(data, set(allowed), path, f"{name}.")
    values = {}
    for key, value in data.items():
        spec = allowed[key]
        default = spec.default if spec.default is not MISSING else spec.default_factory()
        expected = type(default)
        ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if key == "cuda":
            ok = value in (True, False, "auto")
        if expected is tuple:
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            value = tuple(value) if ok else value
        if expected is dict:
            ok = isinstance(value, dict) and all(
                isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value.values())
        if key in _CHOICES:
            ok = value in _CHOICES[key]
        if not ok:
            want = ("true, false or auto" if key == "cuda" else "a list of names"
                    if expected is tuple else "a mapping of names to lists of metric names"
                    if expected is dict else " or ".join(_CHOICES[key]) if key in _CHOICES
                    else expected.__name__)
            raise ProfileError(f"'{name}.{key}' in profile {path} must be {want}; got {value!r}.")
        values[key] = value
    return cls(**values)


def _check_schedule(schedule: Schedule, path: str) -> None:
    for key in ("skip_first", "wait", "warmup", "repeat"):
        if getattr(schedule, key) < 0:
            raise ProfileError(f"'schedule.{key}' in profile {path} must be >= 0.")
    for key in ("wait_for_step_s", "window_s", "max_record_mib"):
        if not getattr(schedule, key) > 0:
            raise ProfileError(f"'schedule.{key}' in profile {path} must be > 0.")
    if schedule.active < 1:
        raise ProfileError(f"'schedule.active' in profile {path} must be >= 1: nothing "
                           "would be measured.")
