"""A worker's slot: how many parts a rank's limits split into and what one part gets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedline.episodes.errors import EpisodeTooLargeError, StreamingError
from feedline.episodes.schedule.slot import WorkerSlot, check_episode_sizes, worker_parts


def test_parts_and_shares() -> None:
    assert worker_parts(0) == 1 and worker_parts(3) == 3
    assert WorkerSlot().parts == 1 and WorkerSlot(num_workers=4, worker_id=3).parts == 4
    assert WorkerSlot(num_workers=0).share(32) == 32
    assert WorkerSlot(num_workers=4).share(32) == 8
    assert WorkerSlot(num_workers=8).share(3) == 1  # a worker cannot do without one
    assert WorkerSlot(num_workers=8).share(3, minimum=0) == 0  # decoded memory may be 0


@given(per_rank=st.integers(0, 2**40), workers=st.integers(0, 64))
def test_shares_sum_to_at_most_the_rank_limit(per_rank: int, workers: int) -> None:
    slot = WorkerSlot(num_workers=workers)
    share = slot.share(per_rank, minimum=0)
    assert share * slot.parts <= per_rank < (share + 1) * slot.parts  # 1/N, rounded down
    if per_rank >= slot.parts:  # at least 1 each changes nothing then
        assert slot.share(per_rank) == share and share * slot.parts <= per_rank


@pytest.mark.parametrize(("make", "message"), [
    (lambda: WorkerSlot(rank=2, world_size=2), "rank 2 is not in range for world_size 2"),
    (lambda: WorkerSlot(world_size=0), "world_size must be an integer >= 1, got 0"),
    (lambda: WorkerSlot(num_workers=-1), "num_workers must be an integer >= 0, got -1"),
    (lambda: WorkerSlot(num_workers=2, worker_id=2), "worker 2 is not in range for num_workers 2"),
])
def test_bad_slots_name_the_keyword(make, message: str) -> None:
    with pytest.raises(StreamingError, match=message):
        make()


def test_one_too_large_check_names_the_workers_share() -> None:
    slot = WorkerSlot(num_workers=2)
    slot.check_fits({0: 2**30}, 2 * 2**30)  # fits exactly
    with pytest.raises(EpisodeTooLargeError, match="1/2 of the rank budget byte_budget_gb=2.000"):
        slot.check_fits({0: 2**30 + 1}, 2 * 2**30)
    with pytest.raises(EpisodeTooLargeError, match="the rank byte budget byte_budget_gb=1.000"):
        check_episode_sizes([(3, 2**30 + 1)], 2**30)
