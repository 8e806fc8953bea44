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
    ("schedule:\n  active: 0\n", "must be >= 1"),
    ("capture:\n  cuda: maybe\n", "true, false or auto"),
    ("capture:\n  record_shapes: 1\n", "must be bool"),
    ("version: 7\n", "version 7"),
    ("- a\n- b\n", "must be a YAML mapping"),
    ("schedule: [1, 2]\n", "must be a mapping"),
    ("schedule:\n  active: [\n", "could not be read"),
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
