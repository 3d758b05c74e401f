"""EpisodeValues reads exactly like the dict it replaces: lookups, membership, iteration order,
views, equality, pickling; ``take`` and ``as_arrays`` agree with them."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.streaming.values import EpisodeValues, as_arrays


@settings(max_examples=60, deadline=None)
@given(
    pairs=st.dictionaries(st.integers(0, 400), st.integers(-(2**40), 2**40), max_size=40),
    dense_from=st.integers(0, 50),
    probes=st.lists(st.integers(-5, 460), max_size=20),
)
def test_it_reads_like_the_dict(pairs: dict[int, int], dense_from: int, probes: list[int]) -> None:
    for expected in (pairs, {dense_from + i: v for i, v in enumerate(pairs.values())}):
        expected = dict(sorted(expected.items()))
        got = EpisodeValues(list(expected), list(expected.values()))
        assert len(got) == len(expected)
        assert list(got) == list(expected)
        assert list(got.keys()) == list(expected.keys())
        assert list(got.values()) == list(expected.values())
        assert list(got.items()) == list(expected.items())
        assert got == expected and dict(got) == expected
        for key in probes:
            assert (key in got) == (key in expected)
            assert got.get(key, "none") == expected.get(key, "none")
            if key in expected:
                assert got[key] == expected[key] and isinstance(got[key], int)
            else:
                with pytest.raises(KeyError):
                    got[key]
        present = [k for k in probes if k in expected]
        assert got.take(np.array(present, np.int64)).tolist() == [expected[k] for k in present]
        missing = [k for k in probes if k not in expected]
        if missing:
            with pytest.raises(KeyError) as err:
                got.take(np.array([*present, *missing], np.int64))
            assert err.value.args[0] == missing[0]
        assert pickle.loads(pickle.dumps(got)) == expected
        keys, values = as_arrays(expected)
        assert keys.tolist() == list(expected) and values.tolist() == list(expected.values())
        assert got.total() == sum(expected.values())


def test_the_callers_arrays_stay_writable_and_keys_must_ascend() -> None:
    keys, values = np.arange(5, dtype=np.int64), np.ones(5, np.int64)
    got = EpisodeValues(keys, values)
    keys[0] = 0  # still the caller's to write
    with pytest.raises(ValueError):
        got.values_array[0] = 3
    with pytest.raises(ValueError, match="ascend"):
        EpisodeValues([3, 1], [1, 1])
    with pytest.raises(ValueError, match="2 values"):
        EpisodeValues([1, 2, 3], [1, 1])
    assert EpisodeValues.from_mapping({4: 1, 2: 7}) == {2: 7, 4: 1}
    assert "x" not in got and got.get("x") is None
