"""Mixture arithmetic: exact per-source counts, balanced use within an epoch, cycles over epochs,
stratified quotas, and the units a plain dataset keeps (its episode indices)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from feedline.episodes.errors import MixtureError
from feedline.streaming.schedule.elastic import Remainder
from feedline.streaming.schedule.mixture import MixtureUnits, Quota, source_counts
from feedline.streaming.schedule.pool import fetch_order
from feedline.streaming.schedule.stratified import stratified_quotas

lengths_st = st.lists(st.integers(1, 30), min_size=1, max_size=12)


def _uses(units: MixtureUnits, due: Remainder) -> Counter[tuple[int, int, int]]:
    """(source, episode, frame) -> times the epoch uses it."""
    uses: Counter[tuple[int, int, int]] = Counter()
    for unit, n in due.lengths.items():
        source, episode, _ = units.locate(unit)
        for frame in due.due(unit).tolist():
            uses[(source, episode, frame)] += 1
        assert due.due(unit).size == n
    return uses


@settings(max_examples=60, deadline=None)
@given(
    sources=st.lists(lengths_st, min_size=1, max_size=4),
    factors=st.lists(st.floats(0.05, 3.5), min_size=4, max_size=4),
    seed=st.integers(0, 2**31),
    epochs=st.integers(1, 4),
)
def test_each_source_gives_its_count_and_frames_differ_in_use_by_at_most_one(
    sources: list[list[int]], factors: list[float], seed: int, epochs: int
) -> None:
    maps = [dict(enumerate(lengths)) for lengths in sources]
    frames = [sum(lengths) for lengths in sources]
    counts = source_counts(frames, [Quota(repeat=f) for f in factors[: len(sources)]])
    units = MixtureUnits(maps, counts, seed=seed)
    for epoch in range(epochs):
        uses = _uses(units, units.epoch(epoch))
        for s, lengths in enumerate(sources):
            got = [uses[(s, e, f)] for e, n in enumerate(lengths) for f in range(n)]
            assert sum(got) == counts[s]
            assert max(got) - min(got) <= 1


@settings(max_examples=40, deadline=None)
@given(lengths=lengths_st, share=st.integers(1, 200), seed=st.integers(0, 2**31))
def test_downsampled_windows_walk_the_whole_cycle(lengths: list[int], share: int, seed: int) -> None:
    """Over k epochs, every frame is used k*c/N times give or take one: the windows tile."""
    total = sum(lengths)
    choose = max(1, min(total - 1, total * share // 200)) if total > 1 else 1
    units = MixtureUnits([dict(enumerate(lengths))], [choose], seed=seed)
    seen: Counter[tuple[int, int, int]] = Counter()
    for epoch in range(6):
        seen.update(_uses(units, units.epoch(epoch)))
        every = [seen[(0, e, f)] for e, n in enumerate(lengths) for f in range(n)]
        assert sum(every) == choose * (epoch + 1)
        assert max(every) - min(every) <= 1  # cumulative balance, not only per epoch


def test_a_plain_source_keeps_its_episode_indices() -> None:
    lengths = {0: 5, 2: 7, 9: 3}
    units = MixtureUnits([lengths], [15], seed=3)
    assert units.plain
    assert units.epoch(0) == Remainder(dict(lengths), {})
    assert units.epoch(5).lengths == lengths


def test_unit_ids_round_trip_over_sources_and_copies() -> None:
    units = MixtureUnits([{0: 4, 3: 2}, {1: 5}], [12, 11], seed=0)
    for source, episode in ((0, 0), (0, 3), (1, 1)):
        for copy in range(3):
            assert units.locate(units.unit(source, episode, copy)) == (source, episode, copy)
    ids = np.asarray([units.unit(1, 1, 2), units.unit(0, 3, 0)])
    assert units.sources_of(ids).tolist() == [1, 0]


def test_counts_from_weight_repeat_and_choose() -> None:
    assert source_counts([100, 50], [Quota(weight=3), Quota(weight=1)]) == [113, 37]
    assert source_counts([100, 50], [Quota(weight=1), Quota(weight=1)], epoch_size=11) == [6, 5]
    assert source_counts([100, 50, 10], [Quota(repeat=0.5), Quota(choose=7), Quota()]) == [50, 7, 10]
    assert source_counts([10, 10], [Quota(choose=5), Quota(weight=1)], epoch_size=30) == [5, 25]


@pytest.mark.parametrize(
    ("frames", "quotas", "epoch_size", "message"),
    [
        ([10], [Quota(choose=5)], 7, "add up to 5"),
        ([10, 10], [Quota(choose=50), Quota(weight=1)], 20, "more than epoch_size=20"),
        ([10, 10], [Quota(weight=0), Quota(weight=0)], None, "add up to 0"),
    ],
)
def test_impossible_counts_are_refused(
    frames: list[int], quotas: list[Quota], epoch_size: int | None, message: str
) -> None:
    with pytest.raises(MixtureError, match=message):
        source_counts(frames, quotas, epoch_size)


def test_a_quota_takes_one_kind() -> None:
    with pytest.raises(MixtureError, match="not weight and repeat"):
        Quota(weight=1, repeat=2)
    with pytest.raises(MixtureError, match=">= 0"):
        Quota(repeat=-1)


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(0, 300), min_size=1, max_size=6), batch=st.integers(1, 64))
@example(counts=[1, 1, 8, 8, 60], batch=1)  # whole parts that overfill a batch of one
@example(counts=[1, 1, 1, 1, 16, 19], batch=1)
def test_stratified_quotas_are_exact_and_near_the_share(counts: list[int], batch: int) -> None:
    total = sum(counts)
    quotas = stratified_quotas(counts, batch)
    if total == 0:
        assert quotas.shape[0] == 0
        return
    assert quotas.sum(axis=0).tolist() == counts
    sizes = quotas.sum(axis=1)
    assert (sizes[:-1] == batch).all() and 0 < sizes[-1] <= batch
    given_so_far = np.cumsum(quotas, axis=0)
    ends = np.cumsum(sizes)
    ideal = ends[:, None] * np.asarray(counts)[None, :] / total
    assert (quotas >= 0).all()
    assert np.abs(given_so_far - ideal).max() < 1.5


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(1, 20), min_size=1, max_size=6), min_size=1, max_size=3),
    batch=st.integers(1, 12), seed=st.integers(0, 1000),
)
def test_a_stratified_pool_cuts_every_batch_by_its_quotas(
    sizes: list[list[int]], batch: int, seed: int
) -> None:
    from feedline.streaming.schedule.pool import EpisodePool
    from feedline.streaming.schedule.stratified import StratifiedPool

    pools, owner = [], {}
    next_id = 0
    for s, lengths in enumerate(sizes):
        ids = list(range(next_id, next_id + len(lengths)))
        next_id += len(lengths)
        owner.update(dict.fromkeys(ids, s))
        pools.append(EpisodePool(ids, lengths, strategy="spread", pool_size=2, seed=seed,
                                 substream=1 + s))
    pool = StratifiedPool(pools, batch)
    eps, frames = pool.take(pool.anchors_remaining)
    quotas = stratified_quotas([sum(lengths) for lengths in sizes], batch)
    for b, row in enumerate(quotas):
        got = Counter(owner[int(e)] for e in eps[b * batch : (b + 1) * batch])
        assert [got[s] for s in range(len(sizes))] == row.tolist()
    assert len(set(zip(eps.tolist(), frames.tolist(), strict=True))) == eps.size  # once each
    firsts = {int(e): i for i, e in reversed(list(enumerate(eps.tolist())))}
    assert fetch_order(eps).tolist() == sorted(firsts, key=firsts.get)  # what the worker fetches
