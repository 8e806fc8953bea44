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
import json
import math
import reprlib
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import yaml

from .errors import ProfileError

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
SUPPORTED_VERSION = 1
MAX_COUNT = 2 ** 31 - 1     # the largest count a profile may set
MAX_BYTES = 1 << 20         # a profile is a page of settings; larger files are refused
MAX_SHOWN = 200             # characters of a user's value quoted in a message


def bounded(default: Any, interval: str, meaning: str) -> Any:
    """A field with its allowed interval, written as in mathematics: "(0, 1]" (a share
    above 0, at most 1), "[1, inf)" (a count of at least 1), and what it means (the
    profile reference in the docs is generated from these)."""
    return field(default=default, metadata={"range": interval, "meaning": meaning})


def described(default: Any, meaning: str) -> Any:
    """A field without a range (a flag, a choice, a list) and what it means; a mutable
    default (a dict) is copied for each instance."""
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"meaning": meaning})
    return field(default=default, metadata={"meaning": meaning})


@dataclass(frozen=True)
class Capture:
    """torch.profiler options."""

    cuda: Union[bool, str] = described("auto",
        "record CUDA kernels and copies: `auto` (when a GPU is present), `true`, `false`")
    record_shapes: bool = described(True,
        "input shapes per op, with their dtypes and strides (the work signatures `gate` "
        "and `diff` compare)")
    profile_memory: bool = described(True,
        "allocations per op (`mem_mib`, `mem_net_mib`) and the memory curve")
    with_stack: bool = described(False,
        "Python stacks in the trace (ops by source line)")
    with_flops: bool = described(False,
        "FLOP estimates for matmul and convolution (torch's key_averages table; it records "
        "input shapes too)")
    with_modules: bool = described(False,
        "the module hierarchy of TorchScript models in the trace (torch records it for "
        "TorchScript only; an eager model's modules come with with_stack)")


@dataclass(frozen=True)
class Schedule:
    """Which steps are measured (torch.profiler.schedule semantics)."""

    skip_first: int = bounded(1, "[0, inf)",
        "steps before the schedule starts (at least the first step is always skipped)")
    wait: int = bounded(1, "[0, inf)",
        "unprofiled steps per cycle (also the overhead baseline)")
    warmup: int = bounded(1, "[0, inf)",
        "steps with the profiler on and the results discarded")
    active: int = bounded(3, "[1, inf)",
        "measured steps")
    repeat: int = bounded(1, "[0, inf)",
        "cycles (0 = until the script ends); each cycle writes `trace.N.json.gz`, the "
        "report reads the first")
    wait_for_step_s: float = bounded(20.0, "(0, inf)",
        "seconds recorded while no step has come; then the start-up is dropped and a time"
        " window is profiled")
    window_s: float = bounded(5.0, "(0, inf)",
        "length of that time window, for scripts without steps")
    max_record_mib: float = bounded(512.0, "(0, inf)",
        "any recording that grows the process by this much (at most half the available "
        "memory) is stopped and kept")
    speed_probe: bool = described(False,
        "time a fixed reference workload (about 1 ms) at every step boundary, outside the "
        "step, so `gate` can take out how fast the machine ran each process "
        "(`steps.per_step[].probe_ms`)")


@dataclass(frozen=True)
class Analysis:
    """Thresholds for the ranking and the verdict."""

    top_ops: int = bounded(10, "[1, inf)",
        "rows of each table (the ops first) in the terminal summary and report.md; --top "
        "overrides it")
    top_gaps: int = bounded(10, "[0, inf)",
        "idle gaps listed")
    input_bound_share: float = bounded(0.30, "(0, 1]",
        "input-bound when data loading takes at least this share of a step")
    sync_bound_share: float = bounded(0.15, "(0, 1]",
        "sync-bound (GPU run) when the GPU idles after syncs at least this share of the step")
    sync_calls_per_step: float = bounded(8.0, "(0, inf)",
        "sync-bound (CPU-only run) at this many of the script's sync calls per step or more...")
    sync_max_ops_between: float = bounded(500.0, "[1, inf)",
        "...with at most this many host ops between two of them on average")
    sync_recommend_per_step: float = bounded(1.0, "(0, inf)",
        "syncs rarer than this per step are listed, never recommended away")
    gpu_bound_busy: float = bounded(0.80, "(0, 1]",
        "gpu-bound when the device is busy at least this share of the window")
    straggler_pct: float = bounded(10.0, "(0, inf)",
        "a rank whose excess over the median rank is this share of the step is the straggler...")
    straggler_min_ms: float = bounded(1.0, "[0, inf)",
        "...when the excess is also at least this many ms per step, all through the "
        "measured steps")
    contention_wait_share: float = bounded(0.10, "(0, 1]",
        "contended when the threads wait for a CPU at least this share of the step time")
    contention_steal_share: float = bounded(0.05, "(0, 1]",
        "contended when the hypervisor steals at least this share of the CPU time")


@dataclass(frozen=True)
class Timeline:
    """The nsys pass."""

    trace: tuple = described(("cuda", "nvtx", "osrt", "cudnn", "cublas"),
        "the `nsys profile --trace` set")
    top_gaps: int = bounded(10, "[0, inf)",
        "GPU idle gaps listed in the timeline section")


@dataclass(frozen=True)
class Deep:
    """The Nsight Compute pass (docs: "A GPU deep dive")."""

    top: int = bounded(5, "[1, inf)",
        "ops picked by `--top` / `--deep` without a number")
    min_kernel_us: float = bounded(2.0, "[0, inf)",
        "`--top` skips ops whose kernels average less per launch")
    skip_steps: int = bounded(2, "[0, inf)",
        "steps' worth of the ops' launches skipped (warm-up)")
    profile_steps: int = bounded(1, "[1, inf)",
        "steps' worth of the ops' launches then profiled")
    max_launches: int = bounded(200, "[1, inf)",
        "cap on profiled launches")
    replay_mode: str = described("kernel",
        "ncu's `--replay-mode`, always passed explicitly")
    clock_control: str = described("base",
        "ncu's `--clock-control`, always passed explicitly")
    cache_control: str = described("all",
        "ncu's `--cache-control`, always passed explicitly")
    sections: tuple = described(("SpeedOfLight", "Occupancy", "LaunchStats",
                                 "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis"),
        "ncu sections")
    metrics: tuple = described((),
        "extra ncu metric names")
    passes_per_kernel: int = bounded(14, "[1, inf)",
        "replay passes per kernel, for the plan's time estimate")
    seconds_per_pass: float = bounded(0.05, "(0, inf)",
        "seconds per replay pass, for the plan's time estimate")
    timeout_s: float = bounded(3600.0, "(0, inf)",
        "ncu's time limit when `--timeout` is not given")
    quantities: dict = described({},
        "quantity -> candidate metric names, the first ncu collected wins (see "
        "`profiles/deep.yaml`)")


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
CHOICES = {"replay_mode": ("kernel", "application"), "clock_control": ("base", "none"),
            "cache_control": ("all", "none")}
_TOP_KEYS = {"version", "description", *SECTIONS}


def as_profile(profile: Union[str, Profile]) -> Profile:
    """``profile`` itself, or the profile that name or path loads (load_profile)."""
    return profile if isinstance(profile, Profile) else load_profile(profile)


def summary_rows(manifest: Mapping[str, object]) -> int:
    """The op rows a run's summaries show: the ``analysis.top_ops`` its manifest recorded
    (a run directory is untrusted: anything else gives the default)."""
    profile = manifest.get("profile")
    analysis = profile.get("analysis") if isinstance(profile, dict) else None
    rows = analysis.get("top_ops") if isinstance(analysis, dict) else None
    if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1:
        return rows
    return int(Analysis().top_ops)


def with_overrides(profile: Profile, *, steps: Optional[int] = None,
                   top: Optional[int] = None, memory: Optional[bool] = None) -> Profile:
    """``profile`` with a command's options in place of its keys: ``steps`` for
    ``schedule.active``, ``top`` for ``analysis.top_ops``, ``memory`` for
    ``capture.profile_memory`` (None: as the profile says)."""
    if memory is not None:
        profile = replace(profile, capture=replace(profile.capture, profile_memory=memory))
    if steps is not None:
        profile = replace(profile, schedule=replace(profile.schedule, active=steps))
    if top is not None:
        profile = replace(profile, analysis=replace(profile.analysis, top_ops=top))
    return profile


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
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"Profile {path} could not be read: {exc.strerror or exc}.") from None
    if len(raw) > MAX_BYTES:
        raise ProfileError(f"Profile {path} is larger than {MAX_BYTES // 1024} KiB; a profile "
                           f"is a page of settings. Point --profile at the YAML profile itself.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"Profile {path} is not UTF-8 text (byte {exc.start} is "
                           f"0x{raw[exc.start]:02x}): save it as UTF-8.") from None
    try:
        _refuse_aliases(text)
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
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
        raise ProfileError(f"Profile {path} has version {_shown(version)}; this nsbridge reads "
                           f"version {SUPPORTED_VERSION}. Update the file or nsbridge.")
    return profile_from_dict(data, name=path.stem, source=str(path))


def profile_yaml(profile: Profile) -> str:
    """``profile`` as a profile file's YAML, which load_profile reads back as it is."""
    data = {"version": SUPPORTED_VERSION, "description": profile.description,
            **{key: asdict(getattr(profile, key)) for key in SECTIONS}}
    return yaml.safe_dump(json.loads(json.dumps(data)), sort_keys=False)   # tuples as lists


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
                           f"{_shown(description)}.")
    return Profile(name=name, description=description or "", source=source, **sections)


def _yaml_problem(exc: BaseException) -> str:
    """PyYAML's complaint on one line, with where it is (its own text spans lines)."""
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    if isinstance(exc, ValueError):     # an integer past Python's digit limit
        return " ".join(str(exc).split())[:MAX_SHOWN]
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
            shown = key if isinstance(key, str) and len(key) <= MAX_SHOWN else _shown(key)
            close = difflib.get_close_matches(shown, sorted(allowed), n=1)
            hint = f" Did you mean '{prefix}{close[0]}'?" if close else ""
            raise ProfileError(f"Unknown key '{prefix}{shown}' in profile {path}.{hint} "
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
    if spec.name in CHOICES:
        ok = value in CHOICES[spec.name]
    if not ok:
        want = ("true, false or auto" if spec.name == "cuda" else "a list of names"
                if expected is tuple else "a mapping of names to lists of metric names"
                if expected is dict else " or ".join(CHOICES[spec.name])
                if spec.name in CHOICES else getattr(expected, "__name__", str(spec.type)))
        raise ProfileError(f"{where} must be {want}; got {_shown(value)}.")
    return value


class _Short(reprlib.Repr):
    """reprlib with an integer of any size named by its length (``repr`` of one past
    Python's digit limit raises)."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 13_000:     # past about 3,900 digits: str() may refuse it
            return f"<an integer of about {int(x.bit_length() * 0.30103)} digits>"
        text = str(x)
        return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


_REPR = _Short()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 8, 8, 8
_REPR.maxstring, _REPR.maxlong, _REPR.maxother = MAX_SHOWN, 40, MAX_SHOWN


def _shown(value: Any) -> str:
    """A user's value for a message, at most about MAX_SHOWN characters however large
    the value (reprlib stops at a few items per level, so a huge list is never turned
    into text)."""
    text = _REPR.repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN - 20]}... (cut)"


def _refuse_aliases(text: str) -> None:
    """A ComposerError at the first alias: ``*name`` may expand a 400-byte file into billions
    of values (a "billion laughs"), and a profile has nothing to repeat. PyYAML's event
    stream is read without building anything, so the refusal costs no expansion."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, f"aliases (*{event.anchor}) are not read in profiles; write the "
                f"value out", event.start_mark)


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
