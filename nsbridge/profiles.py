"""Profiles: YAML recipes saying what to capture and how to judge it.

A profile is chosen by name (a file in the bundled ``profiles/`` folder) or by path. The
dataclasses below are its schema: each field's type is its annotation and its range is in
its metadata (``bounded``), checked on load, so a profile file is untrusted input like any
other. Unknown keys are rejected with a did-you-mean, wrong types with the expected type,
out-of-range, NaN and infinite values with the range, a file that is not UTF-8 with the
byte: a typo never silently falls back to a default or turns every run input-bound. (A
hand schema on the dataclasses rather than pydantic or msgspec: the classes are the
profile nsbridge uses, the ranges sit beside the defaults, and each message can name the
key and say what it means.)
"""

from __future__ import annotations

import difflib
import math
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Union

import yaml

from .errors import ProfileError

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
SUPPORTED_VERSION = 1
MAX_COUNT = 2 ** 31 - 1     # the largest count a profile may set


def bounded(default: Any, interval: str) -> Any:
    """A field with its allowed interval, written as in mathematics: "(0, 1]" (a share
    above 0, at most 1), "[1, inf)" (a count of at least 1)."""
    return field(default=default, metadata={"range": interval})


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

    skip_first: int = bounded(1, "[0, inf)")
    wait: int = bounded(1, "[0, inf)")
    warmup: int = bounded(1, "[0, inf)")
    active: int = bounded(3, "[1, inf)")
    repeat: int = bounded(1, "[0, inf)")
    # recording while no step has come yet, at most this long; then (no steps) a time
    # window of this length instead; any recording stops once the process grew this much
    wait_for_step_s: float = bounded(20.0, "(0, inf)")
    window_s: float = bounded(5.0, "(0, inf)")
    max_record_mib: float = bounded(512.0, "(0, inf)")


@dataclass(frozen=True)
class Analysis:
    """Thresholds for the ranking and the verdict."""

    top_ops: int = bounded(15, "[1, inf)")
    top_gaps: int = bounded(10, "[0, inf)")
    input_bound_share: float = bounded(0.30, "(0, 1]")
    sync_bound_share: float = bounded(0.15, "(0, 1]")
    sync_calls_per_step: float = bounded(8.0, "(0, inf)")
    sync_max_ops_between: float = bounded(500.0, "[1, inf)")
    sync_recommend_per_step: float = bounded(1.0, "(0, inf)")
    gpu_bound_busy: float = bounded(0.80, "(0, 1]")
    straggler_pct: float = bounded(10.0, "(0, inf)")
    straggler_min_ms: float = bounded(1.0, "[0, inf)")
    contention_wait_share: float = bounded(0.10, "(0, 1]")
    contention_steal_share: float = bounded(0.05, "(0, 1]")


@dataclass(frozen=True)
class Timeline:
    """The nsys pass."""

    trace: tuple = ("cuda", "nvtx", "osrt", "cudnn", "cublas")
    top_gaps: int = bounded(10, "[0, inf)")


@dataclass(frozen=True)
class Deep:
    """The Nsight Compute pass (see README, "The deep pass")."""

    top: int = bounded(5, "[1, inf)")
    min_kernel_us: float = bounded(2.0, "[0, inf)")
    skip_steps: int = bounded(2, "[0, inf)")
    profile_steps: int = bounded(1, "[1, inf)")
    max_launches: int = bounded(200, "[1, inf)")
    replay_mode: str = "kernel"
    clock_control: str = "base"
    cache_control: str = "all"
    sections: tuple = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis",
                       "ComputeWorkloadAnalysis")
    metrics: tuple = ()
    passes_per_kernel: int = bounded(14, "[1, inf)")
    seconds_per_pass: float = bounded(0.05, "(0, inf)")
    timeout_s: float = bounded(3600.0, "(0, inf)")
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
        ProfileError: the file is missing, not UTF-8, not YAML, of another version, or has
            unknown keys, values of the wrong type or out of range.
    """
    path = _resolve(name_or_path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"Profile {path} could not be read: {exc.strerror or exc}.") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"Profile {path} is not UTF-8 text (byte {exc.start} is "
                           f"0x{raw[exc.start]:02x}): save it as UTF-8.") from None
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ProfileError(f"Profile {path} is not YAML nsbridge can read ({_yaml_problem(exc)})"
                           f". Fix the YAML or pick a built-in profile "
                           f"({', '.join(builtin_profiles())}).") from None
    if not isinstance(data, dict):
        held = "is empty" if data is None else f"holds {type(data).__name__}"
        raise ProfileError(f"Profile {path} must be a YAML mapping with the keys "
                           f"{', '.join(sorted(_TOP_KEYS))}; it {held}.")
    _reject_unknown(data, _TOP_KEYS, str(path), "")
    version = data.get("version", SUPPORTED_VERSION)
    if type(version) is not int or version != SUPPORTED_VERSION:
        raise ProfileError(f"Profile {path} has version {version!r}; this nsbridge reads "
                           f"version {SUPPORTED_VERSION}. Update the file or nsbridge.")
    return profile_from_dict(data, name=path.stem, source=str(path))


def profile_from_dict(data: dict[str, Any], *, name: str, source: str) -> Profile:
    """A profile from its sections as a mapping (a YAML file's, or the one a run's
    manifest recorded), every value checked as load_profile checks a file's.

    Raises:
        ProfileError: a section or value that is not one this version reads.
    """
    sections = {key: _section({} if data.get(key) is None else data[key], cls, source, key)
                for key, cls in SECTIONS.items()}
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise ProfileError(f"'description' in profile {source} must be text; got "
                           f"{description!r}.")
    return Profile(name=name, description=description or "", source=source, **sections)


def _yaml_problem(exc: BaseException) -> str:
    """PyYAML's complaint on one line, with where it is (its own text spans lines)."""
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


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


_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "tuple": tuple,
          "dict": dict}


def _section(data: Any, cls: type, path: str, name: str) -> Any:
    """One section of the profile as its dataclass: each key known, of its field's type
    (an int where a float is asked is taken as one; a bool is never a number), within its
    field's range."""
    if not isinstance(data, dict):
        raise ProfileError(f"'{name}' in profile {path} must be a mapping, not "
                           f"{type(data).__name__}.")
    allowed = {f.name: f for f in fields(cls)}
    _reject_unknown(data, set(allowed), path, f"{name}.")
    values = {}
    for key, value in data.items():
        spec = allowed[key]
        where = f"'{name}.{key}' in profile {path}"
        value = _typed(value, spec, where)
        if "range" in spec.metadata:
            _in_range(value, spec.metadata["range"], where)
        values[key] = value
    return cls(**values)


def _typed(value: Any, spec: Any, where: str) -> Any:
    """``value`` as the field's type, or ProfileError saying what was expected."""
    expected = _TYPES.get(str(spec.type))
    ok = isinstance(value, expected) if expected else True
    if expected in (int, float) and isinstance(value, bool):
        ok = False
    elif expected is float and isinstance(value, int):
        ok = abs(value) <= sys.float_info.max
        value = float(value) if ok else value
    if spec.name == "cuda":
        ok = value in (True, False, "auto")
    if expected is tuple:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    if expected is dict:
        ok = isinstance(value, dict) and all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value.values())
    if spec.name in _CHOICES:
        ok = value in _CHOICES[spec.name]
    if not ok:
        want = ("true, false or auto" if spec.name == "cuda" else "a list of names"
                if expected is tuple else "a mapping of names to lists of metric names"
                if expected is dict else " or ".join(_CHOICES[spec.name])
                if spec.name in _CHOICES else getattr(expected, "__name__", str(spec.type)))
        raise ProfileError(f"{where} must be {want}; got {_shown(value)}.")
    return value


def _shown(value: Any) -> str:
    """A value for a message, cut to a readable length (a 400-digit integer is not)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _in_range(value: float, interval: str, where: str) -> None:
    """ProfileError unless ``value`` is a finite number in ``interval`` ("(0, 1]"); a count
    is at most MAX_COUNT."""
    low, high = (float(x) for x in interval.strip("([)]").split(","))
    closed_high, capped = interval[-1] == "]", isinstance(value, int) and high > MAX_COUNT
    if capped:
        high, closed_high = MAX_COUNT, True     # counts go to torch and ncu as C integers
    above = value > low if interval[0] == "(" else value >= low
    below = value <= high if closed_high else value < high
    finite = isinstance(value, int) or math.isfinite(value)
    if not (finite and above and below):
        lowest = f"{'above' if interval[0] == '(' else 'at least'} {low:g}"
        said = high != math.inf and not (capped and below)
        highest = f" and at most {high:.10g}" if said else ""
        raise ProfileError(f"{where} must be {lowest}{highest}; got {_shown(value)}.")
