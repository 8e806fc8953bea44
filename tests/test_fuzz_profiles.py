"""YAML profiles are untrusted input: the built-in profiles mutated at random (seeded: every
kind of YAML value put into every key, keys dropped or misspelt, sections replaced, the
text damaged) either load as a profile whose every value has its field's type and lies in
its field's range, or give one ProfileError that names the file, never a traceback.
Fast tier a few hundred cases, slow tier hundreds more, `make fuzz` thousands
(tests/sweeps.py)."""

from __future__ import annotations

import math
import random
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from nsbridge.errors import ProfileError
from nsbridge.profiles import PROFILE_DIR, SECTIONS, Profile, load_profile

from sweeps import fast_share, seeded, slow_share

SOURCES = sorted(PROFILE_DIR.glob("*.yaml"))
# one of every YAML type, and the numbers that break thresholds
VALUES: list[Any] = [None, True, False, 0, 1, -1, 2, 0.5, 1.5, -0.5, 2 ** 64, 10 ** 400,
                     float("nan"), float("inf"), -float("inf"), "", "x", "1", "auto", [],
                     [1, 2], ["cuda"], [[1]], {}, {"a": 1}, {"a": ["b"]}]
TEXT_DAMAGE = ["\t", "\x00", ": :", "- ", "&a *a", "!!python/object:os.system", "\xff",
               "'", "{", "]", "\n  - ", "? ", "%YAML 9.9\n---\n"]


def mutate(data: dict[str, Any], rng: random.Random) -> tuple[str, str]:
    """A mutated copy of a profile's mapping, as YAML text, and what was done."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    kind = rng.choice(["value", "value", "value", "section", "drop", "misspell", "top",
                       "version", "text"])
    sections = [s for s in SECTIONS if isinstance(data.get(s), dict)] or ["analysis"]
    section = rng.choice(sections)
    body = data.setdefault(section, {})
    keys = [f.name for f in fields(SECTIONS[section])]
    key = rng.choice(keys)
    if kind == "value":
        body[key] = rng.choice(VALUES)
    elif kind == "section":
        data[section] = rng.choice(VALUES)
    elif kind == "drop" and body:
        body.pop(rng.choice(sorted(body)))
    elif kind == "misspell":
        body[key[:-1] + rng.choice("xs_")] = body.pop(key, 1)
    elif kind == "top":
        data[rng.choice(["Analysis", "extra", "", "1"])] = rng.choice(VALUES)
    elif kind == "version":
        data["version"] = rng.choice(VALUES)
    text = yaml.safe_dump(data, allow_unicode=True)
    if kind == "text":
        at = rng.randrange(len(text) + 1)
        text = text[:at] + rng.choice(TEXT_DAMAGE) + text[at:]
    return text, kind


def _within(profile: Profile, where: str) -> None:
    """Every value of a loaded profile has its field's type and is in its field's range."""
    for name, cls in SECTIONS.items():
        section = getattr(profile, name)
        for spec in fields(cls):
            value = getattr(section, spec.name)
            if str(spec.type) == "int":
                assert type(value) is int, (where, name, spec.name, value)
            if str(spec.type) == "float":
                assert type(value) is float and math.isfinite(value), (where, spec.name, value)
            if "range" in spec.metadata:
                interval = spec.metadata["range"]
                low, high = (float(x) for x in interval.strip("([)]").split(","))
                assert (value > low if interval[0] == "(" else value >= low), (where, value)
                assert (value < high if interval[-1] == ")" else value <= high), (where, value)
    assert isinstance(profile.description, str)


def _check(tmp: Path, case: int) -> None:
    rng = random.Random(case)
    source = SOURCES[case % len(SOURCES)]
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    text, kind = mutate(data, rng)
    _check_text(tmp, text, f"case {case} ({source.name}: {kind})")


def _check_text(tmp: Path, text: str, label: str) -> None:
    """One profile text loads in range or gives one ProfileError naming the file."""
    path = tmp / "case.yaml"
    path.write_bytes(text.encode("utf-8").replace("\xff".encode("utf-8"), b"\xff"))  # not UTF-8
    try:
        profile = load_profile(str(path))
    except ProfileError as exc:
        message = str(exc)
        assert path.name in message, (label, message)
        assert "Traceback" not in message and "\n" not in message, (label, message)
        return
    except Exception as exc:   # noqa: BLE001 - the point: nothing but nsbridge's errors
        raise AssertionError(f"{label}: {exc!r}\n{text}") from exc
    _within(profile, label)


@pytest.mark.parametrize("block", range(3))
def test_mutated_profiles_load_in_range_or_give_one_clear_error(tmp_path: Path,
                                                                block: int) -> None:
    for case in range(block * 100, block * 100 + 100):
        _check(tmp_path, case)


@pytest.mark.slow
def test_thousands_of_mutated_profiles(tmp_path: Path) -> None:
    for case in seeded(1000, 4000):
        _check(tmp_path, case)



SWEEP_STRIDE = 11   # the fast tier's share of the sweep
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)   # the C one where libyaml is built


def _sweep() -> list[tuple[str, str]]:
    """Each VALUES value in each key of each section (and as each whole section) of each
    built-in profile: (YAML text, label)."""
    cases = []
    for source in SOURCES:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
        for section, cls in SECTIONS.items():
            for key in [None, *(f.name for f in fields(cls))]:
                for value in VALUES:
                    changed = {k: (dict(v) if isinstance(v, dict) else v)
                               for k, v in data.items()}
                    if key is None:
                        changed[section] = value
                    else:
                        body = changed.get(section)
                        changed[section] = {**(body if isinstance(body, dict) else {}),
                                            key: value}
                    cases.append((yaml.dump(changed, Dumper=DUMPER, allow_unicode=True),
                                  f"{source.name}: {section}.{key} = {value!r}"))
    return cases


def test_every_key_with_a_wrong_yaml_type(tmp_path: Path) -> None:
    """Every SWEEP_STRIDE-th case of the sweep (which holds 3,000 and more)."""
    cases = _sweep()
    assert len(cases) >= 3000
    for text, label in fast_share(cases, SWEEP_STRIDE):
        _check_text(tmp_path, text, label)


def _key_and_value(case: tuple[str, str]) -> str:
    """'section.key = value', the profile it was put in left out."""
    return case[1].split(": ", 1)[1]


@pytest.mark.slow
def test_every_key_with_every_wrong_yaml_type(tmp_path: Path) -> None:
    """One built-in profile for each key and value the fast tier left (tests/sweeps.py)."""
    for text, label in slow_share(_sweep(), SWEEP_STRIDE, _key_and_value):
        _check_text(tmp_path, text, label)
