"""The pool strategies' dispatch table: names, refusals, pinned orders, and a new entry in use."""

from __future__ import annotations

import re

import numpy as np
import pytest

from feedline.episodes.errors import StreamingError
from feedline.streaming.schedule.pool import STRATEGIES, EpisodePool
from feedline.streaming.schedule.strategies import (
    POOL_STRATEGIES,
    Block,
    Clocks,
    PoolStrategy,
    get_strategy,
)


def test_the_table_is_what_pools_and_datasets_accept() -> None:
    assert STRATEGIES == tuple(POOL_STRATEGIES) == ("remaining", "round_robin", "spread")
    streams = [s.stream for s in POOL_STRATEGIES.values()]
    assert len(set(streams)) == len(streams)  # no two strategies share random numbers
    assert get_strategy("round_robin") is POOL_STRATEGIES["round_robin"]


def test_the_pool_and_strategy_modules_describe_every_strategy_of_the_table() -> None:
    """A strategy registered in the table gets its one line in both module docstrings."""
    import feedline.streaming.schedule.pool as pool
    import feedline.streaming.schedule.strategies as strategies

    for module in (pool, strategies):
        described = set(re.findall(r"^\* ``(\w+)`` - \S", module.__doc__ or "", flags=re.M))
        assert described == set(POOL_STRATEGIES), module.__name__


@pytest.mark.parametrize("name", ["uniform", "", None, ["remaining"]])
def test_unknown_names_list_the_tables_keys(name: object) -> None:
    with pytest.raises(StreamingError) as info:
        get_strategy(name, setting="sampling_strategy")  # type: ignore[arg-type]
    assert str(info.value) == (
        f"unknown sampling_strategy {name!r}; choose one of ['remaining', 'round_robin', 'spread']"
    )


@pytest.mark.parametrize(("strategy", "anchors"), [
    ("remaining", [(0, 0), (1, 1), (1, 0), (0, 2), (2, 3), (2, 0), (2, 2), (0, 1), (2, 1)]),
    ("round_robin", [(1, 1), (0, 1), (1, 0), (0, 0), (0, 2), (2, 2), (2, 1), (2, 3), (2, 0)]),
    ("spread", [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (2, 0), (2, 1), (2, 2), (2, 3)]),
])
def test_anchor_orders_are_pinned(strategy: str, anchors: list[tuple[int, int]]) -> None:
    """Checkpoints store offsets into these orders: a change here breaks every saved resume."""
    assert list(EpisodePool([0, 1, 2], [3, 2, 4], strategy=strategy, pool_size=2)) == anchors


def _in_order(block: Block, rng: np.random.Generator) -> Clocks:
    return Clocks(block.pos, block.pos.astype(np.float64), block.lengths.astype(np.float64))


def test_a_registered_strategy_is_selectable_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(POOL_STRATEGIES, "in_order", PoolStrategy(stream=99, ring=_in_order))
    pool = EpisodePool([5, 3], [2, 3], strategy="in_order", pool_size=1)
    assert list(pool) == [(5, 0), (5, 1), (3, 0), (3, 1), (3, 2)]
