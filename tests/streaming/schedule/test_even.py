"""Evening out an epoch (feedline.streaming.schedule.even): the arithmetic, as properties.

The promise a DDP loop needs: whatever the batch size and ``drop_last``, every rank's DataLoader
yields the same number of batches; ``pad`` never yields fewer of a worker's own anchors,
``drop`` never more, and both change as little as the plan allows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.streaming.errors import StreamingError
from feedline.streaming.schedule.even import EVEN_MODES, check_even_mode, even_counts, pad_positions
from feedline.streaming.schedule.loader import batches_per_worker
from feedline.streaming.schedule.plan import plan_shards_arrays
from feedline.streaming.schedule.resume import ResumeSettings, rank_batch_counts, rank_worker_counts


@st.composite
def worker_counts(draw):
    parts = draw(st.integers(1, 6))
    ranks = draw(st.integers(1, 6))
    rows = []
    for _ in range(ranks):
        busy = draw(st.integers(1, parts))  # a rank may leave workers idle
        rows.append(draw(st.lists(st.integers(1, 400), min_size=busy, max_size=busy)))
    return rows, parts


@settings(max_examples=300, deadline=None)
@given(worker_counts(), st.integers(1, 64), st.booleans())
def test_every_rank_has_the_same_batches_for_any_batch_size(counts, batch_size, drop_last):
    rows, parts = counts
    for mode in ("pad", "drop"):
        evened = even_counts(rows, parts, mode)
        batches = {sum(batches_per_worker(row, batch_size, drop_last)) for row in evened.tolist()}
        assert len(batches) == 1, (mode, evened)
        own = even_counts(rows, parts, "none")
        assert (evened >= own).all() if mode == "pad" else (evened <= own).all()


@settings(max_examples=200, deadline=None)
@given(worker_counts())
def test_the_change_is_the_least_that_makes_the_workers_alike(counts):
    """Sorted worker counts become the k-th largest (pad) or smallest (drop) of all ranks: any
    smaller change would leave two ranks with other multisets."""
    rows, parts = counts
    own = even_counts(rows, parts, "none")
    ranked = np.sort(own, axis=1)
    for mode, pick in (("pad", ranked.max(axis=0)), ("drop", ranked.min(axis=0))):
        evened = even_counts(rows, parts, mode)
        assert (np.sort(evened, axis=1) == pick).all()
        assert int(np.abs(evened - own).sum()) == int(np.abs(ranked - pick).sum())


def test_one_rank_or_none_keeps_the_plan():
    assert even_counts([[5, 3]], 2, "pad").tolist() == [[5, 3]]
    assert even_counts([[5, 3], [4]], 2, "none").tolist() == [[5, 3], [4, 0]]
    assert even_counts([[5, 3], [4]], 2, "pad").tolist() == [[5, 3], [5, 3]]
    assert even_counts([[5, 3], [4]], 2, "drop").tolist() == [[4, 0], [4, 0]]


def test_a_mode_is_checked_in_one_line():
    assert [check_even_mode(m) for m in EVEN_MODES] == list(EVEN_MODES)
    with pytest.raises(StreamingError, match="even_batches must be one of 'pad', 'drop', 'none'"):
        check_even_mode("yes")


@given(st.integers(1, 50), st.integers(0, 120), st.integers(0, 3))
def test_repeats_are_distinct_while_they_last_and_seeded(available, repeats, part):
    picks = pad_positions(available, repeats, seed=7, epoch=1, rank=0, part=part)
    assert picks.size == repeats and ((picks >= 0) & (picks < available)).all()
    per_round = np.bincount(picks, minlength=available)
    assert per_round.max() - per_round.min() <= 1  # as even as it can be
    again = pad_positions(available, repeats, seed=7, epoch=1, rank=0, part=part)
    assert np.array_equal(picks, again)


def test_lerobot_medium_lengths_repeat_under_one_percent_at_two_ranks():
    """The bench's "LeRobot medium" shape (80 episodes of 60-240 frames) at 2 ranks x 2
    workers: the share of repeated anchors per epoch, over 20 epochs' plans."""
    lengths = np.random.default_rng(0).integers(60, 241, 80)
    shares = []
    for epoch in range(20):
        plan = plan_shards_arrays(lengths, world_size=2, num_workers=2, seed=1000, epoch=epoch)
        evened = even_counts(plan.report.worker_frames, 2, "pad")
        shares.append((evened.sum() - lengths.sum()) / lengths.sum())
    assert np.median(shares) < 0.01


def test_resume_arithmetic_counts_the_evened_epoch():
    lengths = {e: n for e, n in enumerate([30, 7, 12, 25, 9, 14, 3])}
    base = ResumeSettings(seed=3, strategy="spread", pool_settings={"pool_size": 4}, world_size=3,
                          batch_size=4, num_workers=2, drop_last=False, sampler_identity="x")
    for mode in EVEN_MODES:
        settings_ = ResumeSettings(**{**base.__dict__, "even_batches": mode})
        batches = rank_batch_counts(lengths, settings_, epoch=0)
        counts = [rank_worker_counts(lengths, world_size=3, num_workers=2, seed=3, epoch=0,
                                     rank=r, even=mode) for r in range(3)]
        assert batches == [sum(batches_per_worker(c, 4, False)) for c in counts]
        if mode != "none":
            assert len(set(batches)) == 1
