"""report.json is untrusted input for `load` and `diff`: a real run's report mutated at
random (seeded: every JSON type put where any field was, keys dropped, values wrapped in
lists, numbers too big for a float, the text damaged) is read back as a run whose frames
and views work, or refused with RunDirError / nsbridge's own diff error, never a traceback.
Fast tier a few hundred cases, slow tier hundreds more, `make fuzz` thousands
(tests/sweeps.py)."""

from __future__ import annotations

import itertools
import json
import random
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

import nsbridge
from nsbridge.errors import NsbridgeError, RunDirError
from nsbridge.report.render.diff_render import render_diff

from conftest import DATA, TORCH_DATA
from sweeps import fast_share, seeded, slow_share

VALUES: list[Any] = [None, True, False, 0, -1, 1, 0.5, -0.0, 2 ** 64, 10 ** 401, "", "x",
                     "ok", [], [1, 2], [None], {}, {"a": 1}, [[[]]], "1e999"]
# one of each JSON type, and the numbers no field holds: what the sweep puts in every field
SWEEP_VALUES: list[Any] = [None, True, [], [1, [2]], {}, {"a": 1}, "", "x", -1, 0.5,
                           10 ** 401, 2 ** 64]
TRIAGE_RUN = DATA / "runs" / "triage_tiny"   # a real CPU triage: machine, overhead, steps
SWEEP_STRIDE = 23   # the fast tier's share of the sweep


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: an H200 trace analysed (ops, kernels, steps, syncs, recommendations)."""
    out = tmp_path_factory.mktemp("base") / "run"
    nsbridge.analyze([TORCH_DATA / "h200" / "train_cnn_h200.json.gz"], out=out)
    return out


def random_path(rng: random.Random, node: Any) -> list[Any]:
    """A random path (keys and indices) into ``node``: deeper with decreasing chance."""
    path: list[Any] = []
    while isinstance(node, (dict, list)) and node and (not path or rng.random() < 0.7):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        path.append(rng.choice(keys))
        node = node[path[-1]]
    return path


def damage(report: Any, step: dict[str, Any]) -> Any:
    """``report`` after one recorded damage (``mutate``'s, or a corpus entry's): at
    ``path``, one of ``set`` (a value), ``drop``, ``wrap`` (in a list), ``extra`` (a key
    beside it with that value)."""
    *above, last = step["path"]
    parent = report
    for key in above:
        parent = parent[key]
    if "set" in step:
        parent[last] = step["set"]
    elif step.get("drop"):
        del parent[last]
    elif step.get("wrap"):
        parent[last] = [parent[last]]
    elif "extra" in step and isinstance(parent, dict):
        parent[f"{last}_"] = step["extra"]
    return report


def mutate(report: dict[str, Any], rng: random.Random) -> tuple[str, str]:
    """report.json text after one random damage, and the damage (as ``damage`` takes it)."""
    kind = rng.choice(["value", "value", "value", "drop", "wrap", "extra", "text"])
    path = random_path(rng, report)
    step: dict[str, Any] = {"path": path}
    if kind == "value":
        step["set"] = rng.choice(VALUES)
    elif kind in ("drop", "wrap"):
        step[kind] = True
    elif kind == "extra":
        step["extra"] = rng.choice(VALUES)
    if kind == "text":
        text = json.dumps(report)
        at = rng.randrange(len(text))
        return rng.choice([text[:at], text[:at] + "\udcff" + text[at:], "\ufeff" + text,
                           text[:at] + "NaN" + text[at:], text.replace("1", "1" * 400, 1)]), kind
    if path:
        damage(report, step)
    return json.dumps(report), json.dumps(step)


def field_paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[list[Any]]:
    """Every field of a report once: each key of each object, the first item of each list."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield [*path, key]
            yield from field_paths(value, (*path, key))
    elif isinstance(node, list) and node:
        yield [*path, 0]
        yield from field_paths(node[0], (*path, 0))


def _check(base: Path, tmp: Path, case: int) -> str:
    """'loaded' or 'refused' (by load), after load, the frames, the views and diff."""
    report = json.loads((base / "report.json").read_text())
    text, kind = mutate(report, random.Random(case))
    return _check_text(base, tmp, text, f"case {case} ({kind})")


def _check_text(base: Path, tmp: Path, text: str, label: str) -> str:
    """_check of one report.json text, in a copy of ``base``."""
    run = tmp / "case"
    shutil.rmtree(run, ignore_errors=True)   # a case that failed left its copy
    shutil.copytree(base, run)
    (run / "report.json").write_bytes(text.encode("utf-8", errors="surrogateescape"))
    try:
        loaded = nsbridge.load(run)
        repr(loaded), loaded._repr_html_()
        for frame in (loaded.ops, loaded.steps, loaded.timeline):
            if frame is not None:      # no timeline without nsys
                frame.to_csv()
        outcome = "loaded"
    except RunDirError:
        outcome = "refused"
    except Exception as exc:   # noqa: BLE001 - the point: nothing but nsbridge's errors
        raise AssertionError(f"{label}: load: {exc!r}") from exc
    try:
        render_diff(nsbridge.diff(base, run))
    except NsbridgeError:
        pass
    except Exception as exc:   # noqa: BLE001
        raise AssertionError(f"{label}: diff: {exc!r}") from exc
    shutil.rmtree(run)
    return outcome


@pytest.mark.parametrize("block", range(3))
def test_mutated_reports_load_and_diff_or_give_nsbridges_own_error(base: Path, tmp_path: Path,
                                                                   block: int) -> None:
    outcomes = [_check(base, tmp_path, case) for case in range(block * 100, block * 100 + 100)]
    assert {"loaded", "refused"} <= set(outcomes)    # both paths exercised


@pytest.mark.slow
def test_thousands_of_mutated_reports(base: Path, tmp_path: Path) -> None:
    for case in seeded(1000, 3000):
        _check(base, tmp_path, case)


def _sweep(base: Path) -> list[tuple[Path, str, str]]:
    """Every SWEEP_VALUES value in every field of ``base``'s report: (base, text, label)."""
    report = json.loads((base / "report.json").read_text())
    cases = []
    for path, value in itertools.product(field_paths(report), SWEEP_VALUES):
        step = {"path": path, "set": value}
        cases.append((base, json.dumps(damage(json.loads(json.dumps(report)), step)),
                      json.dumps(step)))
    return cases


def _sweeps(base: Path) -> list[tuple[Path, str, str]]:
    return _sweep(base) + _sweep(TRIAGE_RUN)


def test_the_sweep_puts_every_json_type_in_every_field(base: Path) -> None:
    cases = _sweeps(base)
    assert len(cases) >= 3000
    labels = {json.loads(label)["path"][0] for _, _, label in cases}
    assert {"ops", "steps", "machine", "overhead", "verdict", "device", "memory"} <= labels


def test_every_field_with_a_wrong_json_type(base: Path, tmp_path: Path) -> None:
    """Every SWEEP_STRIDE-th case of the sweep."""
    outcomes = {_check_text(*case[:1], tmp_path, *case[1:])
                for case in fast_share(_sweeps(base), SWEEP_STRIDE)}
    assert outcomes == {"loaded", "refused"}


def _field_and_value(case: tuple[Path, str, str]) -> tuple[str, str]:
    """The field's path with its list positions left out (ops[3].calls is ops[].calls),
    and the value."""
    step = json.loads(case[2])
    return ".".join("[]" if isinstance(p, int) else p for p in step["path"]), json.dumps(
        step["set"])


@pytest.mark.slow
def test_every_field_with_every_wrong_json_type(base: Path, tmp_path: Path) -> None:
    """One report, and one element of a list, for each field and value the fast tier left
    (tests/sweeps.py)."""
    for run, text, label in slow_share(_sweeps(base), SWEEP_STRIDE, _field_and_value):
        _check_text(run, tmp_path, text, label)
