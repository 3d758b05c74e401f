"""LSH: band/row choice minimises the weighted S-curve error; the numpy index matches a dict oracle."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.dedup.errors import DedupError
from feedline.dedup.lsh import (
    DEFAULT_FN_WEIGHT,
    DEFAULT_FP_WEIGHT,
    LSHIndex,
    SortedKeyIndex,
    collision_probability,
    false_negative_area,
    false_positive_area,
    optimal_bands_rows,
)


def _cost(t: float, b: int, r: int, wfp: float = DEFAULT_FP_WEIGHT, wfn: float = DEFAULT_FN_WEIGHT):
    return wfp * false_positive_area(t, b, r) + wfn * false_negative_area(t, b, r)


def test_known_choices() -> None:
    # datasketch's equal weights reproduce its 9x13 for t=0.8; feedline's recall-leaning default
    assert optimal_bands_rows(0.8, 128, 0.5, 0.5) == (9, 13)
    assert optimal_bands_rows(0.8, 128) == (16, 8)
    b, r = optimal_bands_rows(0.8, 128)
    assert collision_probability(0.85, b, r) > 0.99
    assert collision_probability(0.9, b, r) > 0.999


@settings(max_examples=40, deadline=None)
@given(
    t=st.floats(0.3, 0.95),
    num_perm=st.integers(8, 160),
    other=st.tuples(st.integers(1, 160), st.integers(1, 160)),
    wfp=st.floats(0.01, 0.99),
)
def test_choice_is_minimal_and_valid(t: float, num_perm: int, other, wfp: float) -> None:
    b, r = optimal_bands_rows(t, num_perm, wfp, 1 - wfp)
    assert b >= 1 and r >= 1 and b * r <= num_perm
    ob, orows = other
    if ob * orows <= num_perm:
        assert _cost(t, b, r, wfp, 1 - wfp) <= _cost(t, ob, orows, wfp, 1 - wfp) + 1e-9


@settings(max_examples=30, deadline=None)
@given(t1=st.floats(0.3, 0.9), dt=st.floats(0.02, 0.09))
def test_higher_threshold_moves_the_curve_right(t1: float, dt: float) -> None:
    """The S-curve's midpoint (P = 0.5) does not move left when the threshold goes up."""
    grid = np.linspace(0, 1, 2001)

    def midpoint(t: float) -> float:
        b, r = optimal_bands_rows(t, 128)
        return float(grid[np.searchsorted(collision_probability(grid, b, r), 0.5)])

    assert midpoint(min(t1 + dt, 0.95)) >= midpoint(t1) - 1e-9


@settings(max_examples=30, deadline=None)
@given(
    s=st.lists(st.floats(0, 1), min_size=2, max_size=20), b=st.integers(1, 32), r=st.integers(1, 16)
)
def test_collision_probability_is_monotone(s: list[float], b: int, r: int) -> None:
    s_sorted = np.sort(np.array(s))
    p = collision_probability(s_sorted, b, r)
    assert (np.diff(p) >= -1e-12).all() and (p >= 0).all() and (p <= 1).all()


def test_bad_threshold() -> None:
    with pytest.raises(DedupError, match="threshold"):
        optimal_bands_rows(1.0, 128)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=0, max_size=300),
        min_size=1,
        max_size=8,
    ),
    queries=st.lists(st.tuples(st.integers(0, 14), st.integers(0, 14)), min_size=1, max_size=50),
)
def test_sorted_key_index_matches_dict_oracle(batches, queries) -> None:
    index = SortedKeyIndex(columns=2)
    oracle: list[dict[int, set[int]]] = [defaultdict(set), defaultdict(set)]
    value = 0
    for batch in batches:
        keys = np.array(batch, dtype=np.uint64).reshape(-1, 2)
        values = np.arange(value, value + len(batch), dtype=np.uint32)
        index.insert(keys, values)
        for (k0, k1), v in zip(batch, values.tolist(), strict=True):
            oracle[0][k0].add(v)
            oracle[1][k1].add(v)
        value += len(batch)
    q = np.array(queries, dtype=np.uint64)
    rows, found = index.query(q)
    got = set(zip(rows.tolist(), found.tolist(), strict=True))
    expected = {(i, v) for i, (k0, k1) in enumerate(queries) for v in oracle[0][k0] | oracle[1][k1]}
    assert got == expected
    assert index.rows == value


def test_index_memory_is_twelve_bytes_per_band_per_document() -> None:
    lsh = LSHIndex(16, 8, seed=1)
    rng = np.random.default_rng(0)
    n = 50_000
    for start in range(0, n, 5000):
        sigs = rng.integers(0, 2**32, (5000, 128), dtype=np.uint64).astype(np.uint32)
        lsh.insert(lsh.band_keys(sigs), np.arange(start, start + 5000))
    tail = 1024 * (16 * 8 + 4)
    assert lsh.nbytes - tail == n * lsh.bytes_per_document == n * 192


def test_band_keys_depend_only_on_band_values_and_seed() -> None:
    rng = np.random.default_rng(1)
    sig = rng.integers(0, 2**32, (1, 128), dtype=np.uint64).astype(np.uint32)
    changed = sig.copy()
    changed[0, 9] ^= 1  # band 1 (rows 8..15) differs
    a = LSHIndex(16, 8, seed=1)
    ka, kb = a.band_keys(sig)[0], a.band_keys(changed)[0]
    assert (ka == kb).sum() == 15 and ka[1] != kb[1]
    assert np.array_equal(ka, LSHIndex(16, 8, seed=1).band_keys(sig)[0])
    assert not np.array_equal(ka, LSHIndex(16, 8, seed=2).band_keys(sig)[0])
    with pytest.raises(ValueError):
        LSHIndex(20, 8).band_keys(sig)
