"""Profiles: built-ins resolve, every field is validated, typos get a did-you-mean."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsbridge.errors import ProfileError
from nsbridge.profiles import builtin_profiles, load_profile


def test_builtin_profiles_load_with_their_own_values() -> None:
    assert {"default", "quick", "memory"} <= set(builtin_profiles())
    default, quick, memory = (load_profile(n) for n in ("default", "quick", "memory"))
    assert default.schedule.active == 3 and quick.schedule.active == 1
    assert memory.capture.with_stack is True and quick.capture.profile_memory is False
    assert default.analysis.input_bound_share == pytest.approx(0.30)


def test_profile_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("version: 1\nschedule:\n  active: 5\ncapture:\n  cuda: false\n")
    prof = load_profile(str(path))
    assert prof.name == "mine" and prof.schedule.active == 5 and prof.capture.cuda is False
    assert prof.schedule.wait == 1  # unspecified keys keep their defaults


@pytest.mark.parametrize("text, expected", [
    ("schedule:\n  activ: 2\n", "Did you mean 'schedule.active'"),
    ("shedule:\n  active: 2\n", "Did you mean 'schedule'"),
    ("capture:\n  record_shape: true\n", "Did you mean 'capture.record_shapes'"),
])
def test_unknown_keys_are_rejected_with_a_suggestion(tmp_path: Path, text: str,
                                                     expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=expected):
        load_profile(str(path))


@pytest.mark.parametrize("text, expected", [
    ("schedule:\n  active: two\n", "must be int"),
    ("schedule:\n  active: 0\n", "must be at least 1; got 0"),
    ("analysis:\n  input_bound_share: -1\n", "input_bound_share' .* must be above 0 and at most 1"),
    ("analysis:\n  gpu_bound_busy: 80\n", "must be above 0 and at most 1; got 80"),
    ("analysis:\n  sync_calls_per_step: 0\n", "must be above 0; got 0"),
    ("analysis:\n  straggler_pct: .nan\n", "straggler_pct' .* got nan"),
    ("analysis:\n  straggler_min_ms: .inf\n", "got inf"),
    ("analysis:\n  top_ops: true\n", "must be int; got True"),
    ("analysis:\n  straggler_pct: false\n", "must be float; got False"),
    ("deep:\n  max_launches: 0\n", "must be at least 1"),
    ("version: true\n", "version True"),
    ("version: 1.0\n", "version 1.0"),
    ("capture:\n  cuda: maybe\n", "true, false or auto"),
    ("capture:\n  record_shapes: 1\n", "must be bool"),
    ("version: 7\n", "version 7"),
    ("- a\n- b\n", "must be a YAML mapping"),
    ("schedule: [1, 2]\n", "must be a mapping"),
    ("schedule:\n  active: [\n", "is not YAML nsbridge can read"),
])
def test_bad_values_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=expected):
        load_profile(str(path))


def test_unknown_profile_name_suggests_a_builtin() -> None:
    with pytest.raises(ProfileError, match="Did you mean 'quick'"):
        load_profile("quik")
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile("no/such/profile.yaml")


def test_profiles_ship_inside_the_package() -> None:
    import nsbridge.profiles as module

    shipped = Path(module.__file__).parent / "profiles"
    assert (shipped / "default.yaml").is_file()


def test_a_profile_that_is_not_utf8_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("description: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ProfileError, match=r"not UTF-8 text \(byte 16 is 0xe9\)"):
        load_profile(str(path))


def test_fractional_thresholds_are_floats(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("analysis:\n  sync_calls_per_step: 8.5\n  input_bound_share: 1\n")
    analysis = load_profile(str(path)).analysis
    assert analysis.sync_calls_per_step == 8.5 and analysis.input_bound_share == 1.0


def test_every_numeric_field_has_a_range() -> None:
    """Each number a profile sets is checked against its range on load."""
    from dataclasses import fields

    from nsbridge.profiles import SECTIONS
    for cls in SECTIONS.values():
        for f in fields(cls):
            if str(f.type) in ("int", "float"):
                assert "range" in f.metadata, (cls.__name__, f.name)


def test_a_recorded_profile_written_as_yaml_loads_back_the_same(tmp_path: Path) -> None:
    """What the ranks of a `timeline/deep --run` load: the profile the run's manifest
    recorded, written to a file (it has no file of its own)."""
    from nsbridge.profiles import SECTIONS, profile_from_dict, profile_yaml

    import json

    as_recorded = json.loads(json.dumps(load_profile("deep").to_dict()))   # as a manifest
    recorded = profile_from_dict({**as_recorded, "analysis": {"top_ops": 7}},
                                 name="recorded", source="a run's manifest")
    path = tmp_path / "timeline-profile.yaml"
    path.write_text(profile_yaml(recorded), encoding="utf-8")
    again = load_profile(str(path))
    assert all(getattr(again, key) == getattr(recorded, key) for key in SECTIONS)
    assert again.analysis.top_ops == 7 and again.deep == load_profile("deep").deep
