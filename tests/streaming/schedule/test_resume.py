"""Resume arithmetic: every batch boundary, both drop_last modes, 0/1/2/4 workers, real DataLoaders."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from itertools import islice
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from feedline.episodes.errors import ResumeMismatchError, StreamingError
from feedline.streaming.schedule.plan import plan_shards
from feedline.streaming.schedule.pool import STRATEGIES, EpisodePool
from feedline.streaming.schedule.resume import (
    ConsumptionTracker,
    ResumePosition,
    ResumeSettings,
    ResumeState,
    loader_batches,
    loader_cursor,
    rank_batch_counts,
    sampler_identity,
    worker_offsets,
)
from feedline.streaming.schedule.slot import WorkerSlot
from feedline.streaming.schedule.state import Stateful
from tests.streaming.resume_harness import check_resume, json_roundtrip, resume_points
from tests.streaming.sched_data import Selection, make_selection, selections

Batch = tuple[tuple[int, int], ...]


def make_settings(lengths: Mapping[int, int], **kw: Any) -> ResumeSettings:
    base: dict[str, Any] = {
        "seed": 1000, "strategy": "remaining", "pool_settings": {"pool_size": 4},
        "world_size": 1, "batch_size": 3, "num_workers": 2, "drop_last": False,
        "sampler_identity": sampler_identity(lengths),
    }
    return ResumeSettings(**{**base, **kw})


def worker_pools(lengths: Mapping[int, int], s: ResumeSettings, rank: int,
                 pos: ResumePosition) -> list[EpisodePool | None]:
    """The pools DataLoader workers 0..N-1 iterate in ``pos.epoch`` (what the pipeline builds)."""
    plan = plan_shards(lengths, world_size=s.world_size, num_workers=s.num_workers, seed=s.seed,
                       epoch=pos.epoch)[rank]
    pools: list[EpisodePool | None] = []
    for w in range(max(1, s.num_workers)):
        part = pos.part_for_worker(w)
        if part >= len(plan):
            pools.append(None)  # the plan leaves this worker idle
            continue
        pool = EpisodePool(plan[part], lengths, strategy=s.strategy,
                           pool_size=WorkerSlot(num_workers=len(plan)).share(s.pool_settings["pool_size"]),
                           seed=s.seed, epoch=pos.epoch, rank=rank, worker=part)
        pool.skip(pos.offset_for_worker(w))
        pools.append(pool)
    return pools


def reference_loader(pools: list[EpisodePool | None], batch_size: int,
                     drop_last: bool) -> Iterator[Batch]:
    """torch's DataLoader over an IterableDataset: ask workers in turn, skip exhausted ones."""
    active = [p is not None for p in pools]
    while any(active):
        for w, pool in enumerate(pools):
            if not active[w] or pool is None:
                continue
            batch = tuple(islice(pool, batch_size))
            if not batch or (drop_last and len(batch) < batch_size):
                active[w] = False
                continue
            yield batch


class SimulatedRank(Stateful):
    """Batches a training loop on one rank consumes over ``epochs`` epochs; resumable."""

    def __init__(self, lengths: Mapping[int, int], s: ResumeSettings, rank: int, epochs: int = 2,
                 allow_order_change: bool = False) -> None:
        self.lengths, self.s, self.rank, self.epochs = lengths, s, rank, epochs
        self.tracker = ConsumptionTracker(s, lengths, rank=rank,
                                          allow_order_change=allow_order_change)
        self._batches: Iterator[Batch] | None = None

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        while self.tracker.epoch < self.epochs:
            if self._batches is None:
                pools = worker_pools(self.lengths, self.s, self.rank, self.tracker.position)
                self._batches = reference_loader(pools, self.s.batch_size, self.s.drop_last)
            batch = next(self._batches, None)
            if batch is None:
                self.tracker.next_epoch()
                self._batches = None
                continue
            self.tracker.record_batch(len(batch))
            return batch
        raise StopIteration

    def state_dict(self) -> dict[str, Any]:
        return self.tracker.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.tracker.load_state_dict(state)
        self._batches = None


# ---- arithmetic ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=9),
       batch_size=st.integers(1, 8), drop_last=st.booleans())
def test_cursor_matches_the_loader_order(counts: list[int], batch_size: int,
                                         drop_last: bool) -> None:
    order = list(loader_batches(counts, batch_size, drop_last))
    delivered = [0] * len(counts)
    for k in range(len(order) + 1):
        offsets, rotation = loader_cursor(counts, batch_size, drop_last, k)
        assert offsets == delivered
        if k < len(order):  # the rotation names the worker of the next batch's round
            rotated = list(loader_batches(
                [counts[(w + rotation) % len(counts)] - offsets[(w + rotation) % len(counts)]
                 for w in range(len(counts))], batch_size, drop_last))
            first_worker = (rotated[0][0] + rotation) % len(counts)
            assert first_worker == order[k][0]
            w, start, size = order[k]
            delivered[w] = start + size


def test_partial_last_batches_and_drop_last() -> None:
    counts = [7, 2, 0]
    assert list(loader_batches(counts, 3, False)) == [
        (0, 0, 3), (1, 0, 2), (0, 3, 3), (0, 6, 1)]
    assert list(loader_batches(counts, 3, True)) == [(0, 0, 3), (0, 3, 3)]
    assert worker_offsets(counts, 3, False, 2) == [3, 2, 0]
    assert worker_offsets(counts, 3, True, 2) == [6, 0, 0]
    with pytest.raises(StreamingError, match="batch_size must be an integer >= 1, got 0"):
        loader_batches(counts, 0, False).__next__()
    with pytest.raises(StreamingError, match="rank must be an integer >= 0, got -1"):
        ConsumptionTracker(make_settings(SMALL), SMALL, rank=-1)


# ---- resume through the whole chain (plan -> pools -> loader -> tracker) ---------------------


SMALL = {0: 4, 2: 1, 3: 7, 5: 2, 6: 9, 7: 3, 10: 5, 11: 1, 12: 6, 15: 2, 16: 8, 19: 3}


@pytest.mark.parametrize("num_workers", [0, 1, 2, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_resume_at_every_batch_boundary_of_a_small_epoch(
    num_workers: int, drop_last: bool, strategy: str
) -> None:
    s = make_settings(SMALL, num_workers=num_workers, drop_last=drop_last, strategy=strategy,
                      world_size=2)
    full = list(SimulatedRank(SMALL, s, rank=1))
    check_resume(lambda: SimulatedRank(SMALL, s, rank=1), resume_points(len(full), every=True),
                 full=full)
    first_epoch = list(islice(SimulatedRank(SMALL, s, rank=1, epochs=1), 10**6))
    assert full[: len(first_epoch)] == first_epoch  # the epoch end is one of the stops above


def large_epoch_args(max_total: int) -> dict[str, st.SearchStrategy[Any]]:
    return {"sel": selections(max_total=max_total, max_episodes=400), "world": st.integers(1, 6),
            "num_workers": st.sampled_from([0, 1, 2, 4]), "batch_size": st.integers(1, 64),
            "drop_last": st.booleans(), "strategy": st.sampled_from(STRATEGIES),
            "pool_size": st.integers(1, 40), "seed": st.integers(0, 2**31), "data": st.data()}


def check_resume_at_random_batches(
    sel: Selection, world: int, num_workers: int, batch_size: int, drop_last: bool,
    strategy: str, pool_size: int, seed: int, data: st.DataObject,
) -> None:
    assume(len(sel.lengths) >= world)
    rank = data.draw(st.integers(0, world - 1))
    s = make_settings(sel.lengths, num_workers=num_workers, drop_last=drop_last,
                      strategy=strategy, world_size=world, batch_size=batch_size,
                      pool_settings={"pool_size": pool_size}, seed=seed)
    full = list(SimulatedRank(sel.lengths, s, rank))
    first = list(SimulatedRank(sel.lengths, s, rank, epochs=1))
    stops = resume_points(len(full), [len(first)], random_count=3, seed=seed)
    check_resume(lambda: SimulatedRank(sel.lengths, s, rank), stops, full=full)
    if not drop_last:  # the loader hands over every anchor of the rank exactly once per epoch
        anchors = [a for b in first for a in b]
        assert len(anchors) == len(set(anchors))


test_resume_at_random_batches_of_large_epochs = settings(max_examples=12, deadline=None)(
    given(**large_epoch_args(12_000))(check_resume_at_random_batches))
test_resume_at_random_batches_of_large_epochs_slow = pytest.mark.slow(
    settings(max_examples=25, deadline=None)(given(**large_epoch_args(60_000))(
        check_resume_at_random_batches)))


def test_rank_batch_counts_match_each_ranks_loader() -> None:
    s = make_settings(SMALL, world_size=3, num_workers=2, batch_size=2)
    counts = rank_batch_counts(SMALL, s, epoch=1)
    for rank in range(3):
        run = SimulatedRank(SMALL, s, rank=rank, epochs=2)
        run.tracker.next_epoch()
        assert len(list(run)) == counts[rank]


def test_a_rank_can_resume_from_another_ranks_checkpoint() -> None:
    sel = make_selection(60, 30, "uniform", 2, subset=False, max_total=10**9)
    s = make_settings(sel.lengths, world_size=3, num_workers=2, batch_size=5)
    runs = [SimulatedRank(sel.lengths, s, rank=r) for r in range(3)]
    for run in runs:
        list(islice(run, 9))  # DDP: every rank takes the same number of steps
    saved_by_rank0 = json_roundtrip(runs[0].state_dict())
    for r in (1, 2):
        own = ConsumptionTracker(s, sel.lengths, rank=r)
        own.load_state_dict(json_roundtrip(runs[r].state_dict()))
        other = ConsumptionTracker(s, sel.lengths, rank=r)
        other.load_state_dict(saved_by_rank0)
        assert other.position == own.position


# ---- refusals and allow_order_change -------------------------------------------------------


@pytest.mark.parametrize("change", [
    {"strategy": "round_robin"}, {"pool_settings": {"pool_size": 8}}, {"seed": 1},
])
def test_changed_settings_are_refused_naming_what_differs(change: dict[str, Any]) -> None:
    s = make_settings(SMALL)
    run = SimulatedRank(SMALL, s, rank=0)
    list(islice(run, 3))
    state = json_roundtrip(run.state_dict())
    (name, value), = change.items()
    with pytest.raises(ResumeMismatchError) as info:
        SimulatedRank(SMALL, replace(s, **change), rank=0).load_state_dict(state)
    msg = str(info.value)
    assert f"{name} (checkpoint {getattr(s, name)!r}, now {value!r})" in msg
    assert "allow_order_change=True" in msg


def test_other_dataset_or_selection_is_refused() -> None:
    s = make_settings(SMALL)
    run = SimulatedRank(SMALL, s, rank=0)
    list(islice(run, 2))
    fewer = {k: v for k, v in SMALL.items() if k != 19}
    with pytest.raises(ResumeMismatchError, match="sampler_identity"):
        SimulatedRank(fewer, make_settings(fewer), rank=0).load_state_dict(run.state_dict())


def test_inconsistent_sample_count_is_refused() -> None:
    s = make_settings(SMALL)
    run = SimulatedRank(SMALL, s, rank=0)
    list(islice(run, 3))
    state = {**run.state_dict(), "samples_consumed_on_rank": 5}
    with pytest.raises(ResumeMismatchError, match="does not belong to this data order"):
        SimulatedRank(SMALL, s, rank=0).load_state_dict(state)
    with pytest.raises(ResumeMismatchError, match="state_version"):
        ResumeState.from_dict({**state, "state_version": 99})


@pytest.mark.parametrize("consumed, epoch, effect", [
    (2, 0, "repeats the 2 batch"), ("most", 1, "skips the last"), (0, 0, "loses nothing"),
])
def test_allow_order_change_restarts_at_the_nearest_epoch_boundary(
    consumed: int | str, epoch: int, effect: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = make_settings(SMALL, num_workers=2)
    total = len(list(SimulatedRank(SMALL, s, rank=0, epochs=1)))
    k = total - 1 if consumed == "most" else int(consumed)
    run = SimulatedRank(SMALL, s, rank=0)
    list(islice(run, k))
    state = json_roundtrip(run.state_dict())
    changed = replace(s, num_workers=4, batch_size=2, seed=7)
    caplog.set_level(logging.WARNING)
    resumed = SimulatedRank(SMALL, changed, rank=0, allow_order_change=True)
    resumed.load_state_dict(state)
    pos = resumed.tracker.position
    assert (pos.epoch, pos.exact, set(pos.worker_offsets)) == (epoch, False, {0})
    assert "different anchor order" in pos.message and effect in pos.message
    assert f"epoch {epoch}" in pos.message and pos.message in caplog.text
    uninterrupted = list(SimulatedRank(SMALL, changed, rank=0, epochs=2))
    first_epoch = len(list(SimulatedRank(SMALL, changed, rank=0, epochs=1)))
    assert list(resumed) == uninterrupted[first_epoch * epoch :]


# ---- a real torch DataLoader with worker processes -------------------------------------------


class PoolDataset(IterableDataset):  # type: ignore[type-arg]
    """The pipeline's shape in miniature: each worker serves its (rotated) plan part."""

    def __init__(self, lengths: Mapping[int, int], s: ResumeSettings, rank: int,
                 pos: ResumePosition) -> None:
        self.lengths, self.s, self.rank, self.pos = lengths, s, rank, pos

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        w = 0 if info is None else info.id
        pool = worker_pools(self.lengths, self.s, self.rank, self.pos)[w]
        if pool is None:
            return
        for ep, frame in pool:
            yield torch.tensor([ep, frame])


def real_run(lengths: Mapping[int, int], s: ResumeSettings, rank: int, *, epochs: int,
             stop: int | None = None, state: Mapping[str, Any] | None = None
             ) -> tuple[list[Batch], dict[str, Any]]:
    tracker = ConsumptionTracker(s, lengths, rank=rank)
    if state is not None:
        tracker.load_state_dict(state)
    out: list[Batch] = []
    while tracker.epoch < epochs:
        loader = DataLoader(PoolDataset(lengths, s, rank, tracker.position),
                            batch_size=s.batch_size, num_workers=s.num_workers,
                            drop_last=s.drop_last)
        for batch in loader:
            out.append(tuple((int(e), int(f)) for e, f in batch.tolist()))
            tracker.record_batch(len(batch))
            if stop is not None and len(out) == stop:
                return out, json_roundtrip(tracker.state_dict())
        tracker.next_epoch()
    return out, json_roundtrip(tracker.state_dict())


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("num_workers, drop_last", [
    (0, False), (2, False), (2, True), pytest.param(4, False, marks=pytest.mark.slow),
    pytest.param(1, True, marks=pytest.mark.slow),
])
def test_real_dataloader_resume_matches_uninterrupted_run(num_workers: int,
                                                          drop_last: bool) -> None:
    s = make_settings(SMALL, num_workers=num_workers, drop_last=drop_last, batch_size=2,
                      world_size=2)
    full, _ = real_run(SMALL, s, 0, epochs=2)
    assert full == list(SimulatedRank(SMALL, s, rank=0))  # the reference loader is torch's
    epoch_len = len(list(SimulatedRank(SMALL, s, rank=0, epochs=1)))
    for stop in sorted({1, 3, epoch_len, epoch_len + 1}):
        head, state = real_run(SMALL, s, 0, epochs=2, stop=stop)
        tail, _ = real_run(SMALL, s, 0, epochs=2, state=state)
        assert head + tail == full, stop
