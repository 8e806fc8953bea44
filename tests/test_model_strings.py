"""model.strings: factorize by object identity first, exactly as pandas factorizes by value."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from nsbridge.model.strings import (factorize, first_and_distinct, name_mask, per_value,
                                    row_groups, starts_with, thread_codes, value_codes)
from nsbridge.parse.torch_trace import read_trace

from conftest import TORCH_DATA


def _assert_same_as_pandas(values: np.ndarray) -> None:
    codes, uniques = factorize(values)
    want_codes, want_uniques = pd.factorize(values)
    assert np.array_equal(codes, want_codes)
    assert list(uniques) == list(want_uniques)


def test_factorize_equals_pandas_on_random_object_arrays() -> None:
    rng = random.Random(7)
    pool = ["aten::mm", "aten::add_", "", "void k<float>()", None, float("nan")]
    for _ in range(300):
        # equal strings as distinct objects too (built at run time, not interned)
        items = [rng.choice(pool) if rng.random() < 0.7 else "".join(["aten", "::mm"])
                 for _ in range(rng.randrange(0, 40))]
        _assert_same_as_pandas(np.array(items, dtype=object))


def test_factorize_of_a_categorical_equals_pandas_on_its_values() -> None:
    """The reader's columns are categoricals: their codes are renumbered in order of first
    appearance, unused categories dropped, missing values -1, as pandas does on values."""
    rng = random.Random(11)
    pool = ["aten::mm", "aten::add_", "", "void k<float>()", None]
    for _ in range(300):
        items = [rng.choice(pool) for _ in range(rng.randrange(0, 40))]
        extra = rng.sample(["unused", "zzz", "aaa"], rng.randrange(0, 3))
        used = sorted({i for i in items if i is not None})
        column = pd.Series(pd.Categorical(items, categories=sorted(used + extra)))
        codes, uniques = factorize(column)
        want_codes, want_uniques = pd.factorize(np.array(items, dtype=object))
        assert np.array_equal(codes, want_codes)
        assert list(uniques) == list(want_uniques)
        assert np.array_equal(name_mask(column, lambda n: n.startswith("aten")),
                              np.array([isinstance(i, str) and i.startswith("aten")
                                        for i in items]))


def test_value_codes_index_the_values_with_missing_on_the_extra_last_entry() -> None:
    items = ["b", None, "a", "b", "c"]
    for column in (pd.Series(pd.Categorical(items, categories=["a", "b", "c", "unused"])),
                   np.array(items, dtype=object)):
        codes, values = value_codes(column)
        table = np.array(list(values) + [None], dtype=object)
        assert table[codes].tolist() == items


def test_factorize_and_masks_on_a_real_trace_column() -> None:
    events = read_trace(TORCH_DATA / "h100_bert-small_2025-07.json.gz").events
    names = events["name"].to_numpy()
    _assert_same_as_pandas(names)
    codes, uniques = factorize(events["name"])          # the categorical column itself
    want_codes, want_uniques = pd.factorize(names)
    assert np.array_equal(codes, want_codes) and list(uniques) == list(want_uniques)
    _assert_same_as_pandas(names[::3].copy())           # a strided subset, copied
    want = np.array([n.startswith("aten::") for n in names])
    assert np.array_equal(starts_with(events["name"], "aten::"), want)   # a Series too
    assert np.array_equal(name_mask(names, lambda n: "gemm" in n),
                          np.array(["gemm" in n for n in names]))
    codes, keys = thread_codes(events["pid"], events["tid"])
    want_keys = [f"{p}/{t}" for p, t in zip(events["pid"], events["tid"])]
    assert [keys[c] for c in codes] == want_keys


def test_factorize_of_nothing() -> None:
    codes, uniques = factorize([])
    assert len(codes) == 0 and len(uniques) == 0
    assert name_mask(np.array([None, float("nan")], dtype=object), lambda n: True).tolist() == [
        False, False]


def test_row_groups_are_pandas_groups_in_order_of_appearance() -> None:
    """Grouping by row_groups' codes puts the same rows in the same groups, numbered as
    groupby(sort=False) numbers them, as grouping by the string columns themselves (a
    missing value is a group of its own here, where pandas would drop the row)."""
    rng = random.Random(7)
    names = [rng.choice(["aten::mm", "aten::add", "k<1>", ""]) for _ in range(3000)]
    ops = np.array([rng.choice(["a", "b", None]) for _ in range(3000)], dtype=object)
    kinds = pd.Categorical([rng.choice(["kernel", "memcpy"]) for _ in range(3000)])
    groups, firsts = row_groups(np.array(names, dtype=object), ops, kinds)
    frame = pd.DataFrame({"name": names, "op": pd.Series(ops).fillna("<none>"),
                          "kind": np.asarray(kinds)})
    want = frame.groupby(["name", "op", "kind"], sort=False).ngroup().to_numpy()
    assert (groups == want).all()
    assert (firsts == frame.assign(g=want).drop_duplicates("g").index.to_numpy()).all()
    assert row_groups(np.array([], dtype=object))[1].size == 0


def test_row_groups_of_many_wide_columns_do_not_overflow() -> None:
    """Eight columns of 3000 distinct values: the combined key would pass 2^63, so the
    groups are renumbered on the way; still pandas' groups."""
    rng = np.random.default_rng(3)
    columns = [np.array([f"v{i}" for i in rng.integers(0, 3000, 3000)], dtype=object)
               for _ in range(8)]
    groups, _ = row_groups(*columns)
    frame = pd.DataFrame({f"c{k}": c for k, c in enumerate(columns)})
    want = frame.groupby(list(frame.columns), sort=False).ngroup().to_numpy()
    assert (groups == want).all()


@pytest.mark.parametrize("seed", range(20))
def test_first_and_distinct_equal_groupby_first_and_nunique(seed: int) -> None:
    """Per group, the first value that is not missing and the count of distinct ones:
    pandas' groupby first and nunique (groups with no value at all included; equal
    strings held as different objects count once)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    pool = ["32,1,1 128,1,1", "64,1,1 128,1,1", "".join(["32,1,1 ", "128,1,1"]), None]
    values = np.array([pool[i] for i in rng.integers(0, len(pool), n)], dtype=object)
    groups = rng.integers(0, 12, n)
    groups, _ = pd.factorize(groups)          # codes 0..k-1, as row_groups gives them
    k = int(groups.max()) + 1 if n else 0
    first, distinct = first_and_distinct(values, groups, k)
    grouped = pd.Series(values, dtype=object).groupby(groups, sort=True)
    want_first = grouped.first().reindex(range(k))
    assert [None if pd.isna(v) else v for v in want_first] == first.tolist()
    assert grouped.nunique().reindex(range(k)).tolist() == distinct.tolist()


def test_per_value_converts_each_distinct_value_once() -> None:
    seen = []
    out = per_value(pd.Categorical(["x", "y", "x", None, "x"]),
                    lambda v: seen.append(v) or f"<{v}>")
    assert out.tolist() == ["<x>", "<y>", "<x>", "<nan>", "<x>"]
    assert seen[:2] == ["x", "y"] and len(seen) == 3


@pytest.mark.parametrize("seed", range(20))
def test_is_in_equals_pandas_isin(seed: int) -> None:
    """is_in, tested per category, against pandas' isin row by row: Categoricals with
    unused and missing values, and plain object columns."""
    from nsbridge.model.strings import is_in

    rng = np.random.default_rng(seed)
    pool = np.array(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", None], dtype=object)
    values = pd.Series(pool[rng.integers(0, len(pool), int(rng.integers(0, 200)))])
    wanted = {"kernel", "gpu_memcpy", "not there"}
    for column in (values, values.astype("category"),
                   values.astype(pd.CategoricalDtype(["zzz", *pool[:4]]))):
        assert np.array_equal(is_in(column, wanted), column.isin(wanted).to_numpy())
