"""feedline.validate.check_int: the one integer validator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedline.errors import FeedlineError
from feedline.validate import check_int


class _PartError(FeedlineError):
    pass


@given(st.integers(), st.integers(min_value=-5, max_value=5))
def test_accepts_exactly_the_integers_at_or_above_the_minimum(value: int, minimum: int) -> None:
    if value >= minimum:
        assert check_int("n", value, minimum=minimum) == value
    else:
        with pytest.raises(FeedlineError, match=rf"n must be an integer >= {minimum}, got {value}"):
            check_int("n", value, minimum=minimum)


@pytest.mark.parametrize("value", [True, False, 1.0, "3", None])
def test_refuses_non_integers_naming_the_setting_with_the_callers_error(value: object) -> None:
    with pytest.raises(_PartError, match=r"--workers must be an integer >= 1, got "):
        check_int("--workers", value, minimum=1, error=_PartError)


def test_without_a_minimum_any_integer_passes() -> None:
    assert check_int("offset", -7) == -7
    with pytest.raises(FeedlineError, match=r"offset must be an integer, got 'x'"):
        check_int("offset", "x")


def test_numpy_integers_are_integers_and_come_back_as_int() -> None:
    import numpy as np

    out = check_int("episode_index", np.int64(3), minimum=0)
    assert out == 3 and type(out) is int
    with pytest.raises(FeedlineError, match="must be an integer"):
        check_int("episode_index", np.bool_(True), minimum=0)
    with pytest.raises(FeedlineError, match="must be an integer"):
        check_int("episode_index", np.float64(3.0), minimum=0)
