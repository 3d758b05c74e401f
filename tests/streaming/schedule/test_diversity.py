"""Batch diversity arithmetic: the counter on hand-made batches, the ideal shuffle's properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.episodes.errors import StreamingError
from feedline.streaming.schedule.diversity import (
    DIVERSITY_METRICS,
    BatchDiversity,
    expected_share,
    ideal_diversity,
)


def test_counter_on_hand_counted_batches() -> None:
    counter = BatchDiversity(batch_size=4, window=2, early=0.5)
    counter.begin_epoch(episodes=5, anchors=14)  # early mark: 7 anchors
    for batch in ([0, 0, 1, 1], [1, 1, 1, 1], [3, 3, 3, 3], [4, 0]):  # the last one is short
        counter.record(np.array(batch))
    report = counter.report()
    assert report.diversity_batches == 3  # full batches only
    assert report.batch_episodes_mean == pytest.approx(4 / 3)
    assert report.batch_episodes_min == 1 and report.batch_episodes_p5 == 1
    assert report.window_episodes_mean == pytest.approx((2 + 2 + 3) / 3)  # {0,1} {1,3} {3,4,0}
    assert report.early_episode_share == pytest.approx(2 / 5)  # 0 and 1 in the first 7 anchors
    assert list(report.as_dict()) == list(DIVERSITY_METRICS)

    counter.begin_epoch(episodes=5, anchors=14, from_start=False)  # a resume: no early share
    counter.record([4, 4, 4, 4])
    assert counter.report().early_episode_share == pytest.approx(2 / 5)
    counter.reset()
    assert all(v == 0 for v in counter.report().as_dict().values())


def test_ideal_matches_the_issue_and_is_deterministic() -> None:
    lengths = np.random.default_rng(0).integers(60, 241, 80)
    ideal = ideal_diversity(lengths, 16)
    assert 14.2 < ideal.batch_episodes_mean < 14.7
    assert 64 < ideal.window_episodes_mean < 69 and ideal.early_episode_share == 1.0
    assert ideal_diversity(lengths, 16) == ideal
    assert ideal_diversity(lengths, 16, seed=1) != ideal


def test_early_share_past_the_batched_prefix_is_its_exact_expectation() -> None:
    lengths = np.full(1000, 12)
    simulated = ideal_diversity(lengths, 16, rounds=8)
    exact = expected_share(lengths, 1200)
    assert simulated.early_episode_share == pytest.approx(exact, abs=0.01)
    assert ideal_diversity(lengths, 16, max_batches=10).early_episode_share == exact


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(StreamingError):
        ideal_diversity([], 4)
    with pytest.raises(StreamingError):
        ideal_diversity([3, 0], 4)
    with pytest.raises(StreamingError):
        BatchDiversity(early=0)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    batch_size=st.integers(1, 24),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_ideal_properties(lengths, batch_size, drop_last, seed) -> None:
    ideal = ideal_diversity(lengths, batch_size, drop_last=drop_last, rounds=2, seed=seed)
    bound = min(batch_size, len(lengths))
    total = sum(lengths)
    assert ideal.diversity_batches == total // batch_size
    assert 0 <= ideal.batch_episodes_min <= ideal.batch_episodes_p5 <= bound
    assert ideal.batch_episodes_min <= ideal.batch_episodes_mean <= bound
    if ideal.diversity_batches:
        assert ideal.batch_episodes_min >= 1
    assert ideal.window_episodes_mean <= min(10 * batch_size, len(lengths))
    if ideal.window_episodes_mean:
        assert ideal.window_episodes_mean >= ideal.batch_episodes_min
    assert 0 <= ideal.early_episode_share <= 1
    assert ideal_diversity(lengths, batch_size, drop_last=drop_last, rounds=2, seed=seed) == ideal


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=2, max_size=25), seed=st.integers(0, 2**16))
def test_more_batches_per_window_see_no_fewer_episodes(lengths, seed) -> None:
    """Windows of one permutation nest: a longer one holds every episode of a shorter one."""
    means = [ideal_diversity(lengths, 3, window=w, rounds=1, seed=seed).window_episodes_mean
             for w in (1, 2, 5)]
    filled = [m for m in means if m]
    assert filled == sorted(filled)
    shares = [ideal_diversity(lengths, 3, early=e, rounds=1, seed=seed).early_episode_share
              for e in (0.1, 0.5, 1.0)]
    assert shares == sorted(shares) and shares[-1] == 1.0


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=25),
       batches=st.integers(1, 50), seed=st.integers(0, 2**16))
def test_counter_bounds_on_any_batches(lengths, batches, seed) -> None:
    rng = np.random.default_rng(seed)
    counter = BatchDiversity(batch_size=4)
    counter.begin_epoch(len(lengths), sum(lengths))
    for _ in range(batches):
        counter.record(rng.integers(0, len(lengths), 4))
    report = counter.report()
    assert report.diversity_batches == batches
    assert 1 <= report.batch_episodes_min <= report.batch_episodes_p5 <= min(4, len(lengths))
    assert report.batch_episodes_mean <= min(4, len(lengths))
    assert 0 <= report.early_episode_share <= 1
