"""The ``spread`` strategy: playback order per episode, balanced cohorts, and its diversity bounds.

The hard bounds follow from the rule (episode ``i`` of a cohort rings its ``L_i`` frames at
``(k + u_k) / L_i`` over one shared stay, ring ``k`` inside its own slot ``[k, k + 1) / L_i``):
a window of ``w`` consecutive anchors inside a cohort of ``m`` episodes and ``F`` frames holds
more than ``L_i (w - 2m) / F - 2`` and fewer than ``L_i (w + 2m) / F + 2`` anchors of episode
``i``, so with equal lengths every window of ``4 m`` anchors holds every episode of the cohort.
The typical batch is far better than the worst case the jitter allows; the pinned-seed test
checks the figures docs/episodes.md quotes (40 equal episodes per worker, batch 16).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.streaming.schedule.pool import EpisodePool


def drain(pool: EpisodePool) -> tuple[np.ndarray, np.ndarray]:
    return pool.take(pool.anchors_remaining)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 60), min_size=1, max_size=30),
       pool_size=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_every_frame_once_in_playback_order_from_one_start(
    lengths: list[int], pool_size: int, seed: int
) -> None:
    episodes = np.arange(len(lengths)) + 100
    e, f = drain(EpisodePool(episodes, lengths, strategy="spread", pool_size=pool_size, seed=seed))
    assert e.size == sum(lengths)
    for ep, n in zip(episodes.tolist(), lengths, strict=True):
        frames = f[e == ep]
        assert sorted(frames.tolist()) == list(range(n))  # exact coverage
        assert np.all(np.diff(frames) % n == 1 % n)  # forward from one start, wrapping once


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), pool_size=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_cohorts_are_balanced_and_never_overlap(n: int, pool_size: int, seed: int) -> None:
    e, _ = drain(EpisodePool(range(n), [5] * n, strategy="spread", pool_size=pool_size, seed=seed))
    first = {ep: i for i, ep in reversed(list(enumerate(e.tolist())))}
    last = {ep: i for i, ep in enumerate(e.tolist())}
    cohorts: list[list[int]] = []
    for ep in sorted(first, key=first.get):  # admission order
        if cohorts and first[ep] < max(last[x] for x in cohorts[-1]):
            cohorts[-1].append(ep)
        else:
            cohorts.append([ep])
    sizes = [len(c) for c in cohorts]
    assert max(sizes) <= pool_size and max(sizes) - min(sizes) <= 1
    assert len(cohorts) == -(-n // pool_size)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 80), min_size=1, max_size=24),
       window=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_every_window_holds_each_episode_within_the_bounds(
    lengths: list[int], window: int, seed: int
) -> None:
    m, frames = len(lengths), sum(lengths)
    window = min(window, frames)
    e, _ = drain(EpisodePool(range(m), lengths, strategy="spread", pool_size=m, seed=seed))
    for start in range(frames - window + 1):
        counts = Counter(e[start : start + window].tolist())
        for ep, n in enumerate(lengths):
            assert n * (window - 2 * m) / frames - 2 < counts[ep] < n * (window + 2 * m) / frames + 2


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 40), length=st.integers(1, 50), seed=st.integers(0, 2**16))
def test_every_4m_window_of_equal_episodes_holds_all_of_them(m: int, length: int, seed: int) -> None:
    e, _ = drain(EpisodePool(range(m), [length] * m, strategy="spread", pool_size=m, seed=seed))
    for start in range(0, e.size - 4 * m + 1):
        assert len(set(e[start : start + 4 * m].tolist())) == m


def test_batches_of_16_from_40_resident_episodes() -> None:
    """The worker of docs/episodes.md's table: 40 episodes of 150 frames, batches of 16."""
    per_batch = []
    for seed in range(5):
        e, _ = drain(EpisodePool(range(40), [150] * 40, strategy="spread", pool_size=40,
                                 seed=seed))
        per_batch += [len(set(e[i : i + 16].tolist())) for i in range(0, e.size, 16)]
    assert np.mean(per_batch) >= 15.5 and min(per_batch) >= 11
