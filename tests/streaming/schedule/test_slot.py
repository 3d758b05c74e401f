"""A worker's slot: how many parts a rank's limits split into and what one part gets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedline.episodes.errors import EpisodeTooLargeError, StreamingError
from feedline.streaming.schedule.plan import plan_shards
from feedline.streaming.schedule.slot import (
    WorkerSlot,
    check_episode_sizes,
    data_parallel_group,
    worker_parts,
)


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


@given(groups=st.integers(1, 64), replication=st.integers(1, 16), data=st.data())
def test_replicated_ranks_form_consecutive_groups(groups: int, replication: int, data) -> None:
    """rank -> group: N consecutive ranks per group, W/N groups, each rank in exactly one; the
    plan the group reads is the plan of its data rank over W/N ranks, so group mates read alike."""
    world = groups * replication
    rank = data.draw(st.integers(0, world - 1))
    group, data_world = data_parallel_group(rank, world, replication)
    assert data_world == groups and 0 <= group < groups
    assert group * replication <= rank < (group + 1) * replication  # consecutive ranks
    mates = [r for r in range(world) if data_parallel_group(r, world, replication)[0] == group]
    assert mates == list(range(group * replication, (group + 1) * replication))
    slot = WorkerSlot(rank=rank, world_size=world, replication=replication)
    assert (slot.data_rank, slot.data_world_size) == (group, groups)
    assert data_parallel_group(rank, world, 1) == (rank, world)  # replication 1: the ranks
    lengths = [3 + (7 * e) % 11 for e in range(groups + 3)]
    plan = plan_shards(lengths, world_size=data_world, num_workers=2, seed=7, epoch=1)
    read = sorted(e for r in range(world)  # every rank reads its group's share of the plan
                  for part in plan[data_parallel_group(r, world, replication)[0]] for e in part)
    assert read == sorted(e for e in range(len(lengths)) for _ in range(replication))


@given(world=st.integers(1, 200), replication=st.integers(1, 40))
def test_world_not_divisible_by_replication_names_both(world: int, replication: int) -> None:
    if world % replication == 0:
        assert data_parallel_group(world - 1, world, replication)[1] == world // replication
        return
    message = f"world_size {world} is not divisible by replication {replication}"
    with pytest.raises(StreamingError, match=message) as info:
        WorkerSlot(rank=0, world_size=world, replication=replication)
    assert "\n" not in str(info.value)


def test_one_too_large_check_names_the_workers_share() -> None:
    slot = WorkerSlot(num_workers=2)
    slot.check_fits({0: 2**30}, 2 * 2**30)  # fits exactly
    with pytest.raises(EpisodeTooLargeError, match="1/2 of the rank budget byte_budget_gb=2.000"):
        slot.check_fits({0: 2**30 + 1}, 2 * 2**30)
    with pytest.raises(EpisodeTooLargeError, match="the rank byte budget byte_budget_gb=1.000"):
        check_episode_sizes([(3, 2**30 + 1)], 2**30)
