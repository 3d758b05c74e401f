"""Elastic resume arithmetic: a checkpoint of W x K x B resumes mid-epoch at W' x K' x B'.

Ranks are simulated in lockstep (every rank takes the same number of batches, as lerobot-train
does); the loader is torch's IterableDataset order (workers in turn). Properties: the anchors
consumed before and delivered after a resume are disjoint and together the whole epoch, the
remainder is balanced over the new ranks, everything is a pure function of its inputs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from itertools import islice
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.streaming.schedule.elastic import (
    PoolMaker,
    Remainder,
    Stage,
    consumed_anchors,
    remainder_after,
    stage_plan,
    subtract,
)
from feedline.streaming.schedule.resume import (
    ConsumptionTracker,
    ResumePosition,
    ResumeSettings,
    sampler_identity,
)
from tests.streaming.resume_harness import json_roundtrip

Anchor = tuple[int, int]


def make_settings(lengths: Mapping[int, int], **kw: Any) -> ResumeSettings:
    base: dict[str, Any] = {
        "seed": 1000, "strategy": "spread", "pool_settings": {"pool_size": 4},
        "world_size": 4, "batch_size": 3, "num_workers": 2, "drop_last": False,
        "sampler_identity": sampler_identity(lengths),
    }
    return ResumeSettings(**{**base, **kw})


def lengths_of(n: int, seed: int = 0) -> dict[int, int]:
    rng = np.random.default_rng(seed)
    return {i: int(x) for i, x in enumerate(rng.integers(3, 30, n))}


def rank_batches(lengths: Mapping[int, int], s: ResumeSettings, rank: int,
                 pos: ResumePosition) -> Iterator[list[Anchor]]:
    """What rank ``rank``'s DataLoader yields from ``pos`` (the reader's pools, torch's order)."""
    make_pool = s.pool_maker(lengths)
    due = pos.remainder(lengths, make_pool)
    plan = stage_plan(due or Remainder.whole(lengths), world_size=s.world_size,
                      num_workers=s.num_workers, seed=s.seed, epoch=pos.epoch).parts[rank]
    iters: list[Iterator[Anchor] | None] = []
    for w in range(max(1, s.num_workers)):
        part = pos.part_for_worker(w)
        if part >= len(plan):
            iters.append(None)
            continue
        pool = make_pool(plan[part], epoch=pos.epoch, rank=rank, part=part,
                         num_workers=s.num_workers, remainder=due)
        pool.skip(pos.offset_for_worker(w))
        iters.append(iter(pool))
    active = [it is not None for it in iters]
    while any(active):
        for w, it in enumerate(iters):
            if not active[w] or it is None:
                continue
            batch = list(islice(it, s.batch_size))
            if not batch or (s.drop_last and len(batch) < s.batch_size):
                active[w] = False
                continue
            yield batch


class Ranks:
    """Every rank of one run, stepping in lockstep; each rank's tracker makes its checkpoint."""

    def __init__(self, lengths: Mapping[int, int], s: ResumeSettings,
                 state: Mapping[str, Any] | None = None) -> None:
        self.lengths, self.s = lengths, s
        self.trackers = [ConsumptionTracker(replace(s), lengths, rank=r)
                         for r in range(s.world_size)]
        if state is not None:
            for t in self.trackers:
                t.load_state_dict(state)
        self.loaders = [rank_batches(lengths, s, r, t.position)
                        for r, t in enumerate(self.trackers)]

    def step(self, batches: int | None = None) -> list[Anchor]:
        """Up to ``batches`` lockstep steps (``None``: to the end); the anchors consumed."""
        out: list[Anchor] = []
        k = 0
        while batches is None or k < batches:
            got = [next(loader, None) for loader in self.loaders]
            if all(b is None for b in got):
                break
            for tracker, batch in zip(self.trackers, got, strict=True):
                if batch is not None:
                    tracker.record_batch(len(batch))
                    out += batch
            k += 1
        return out

    def state(self, rank: int = 0) -> dict[str, Any]:
        return json_roundtrip(self.trackers[rank].state_dict())


def everything(lengths: Mapping[int, int]) -> list[Anchor]:
    return sorted((e, f) for e, n in lengths.items() for f in range(n))


def assert_exact(parts: list[list[Anchor]], lengths: Mapping[int, int]) -> None:
    flat = [a for part in parts for a in part]
    assert len(flat) == len(set(flat)), "an anchor came twice"
    assert sorted(flat) == everything(lengths), "an anchor is missing"


@pytest.mark.parametrize(("w2", "k2", "b2"), [(3, 1, 3), (2, 3, 5), (4, 2, 3), (1, 0, 7)])
@pytest.mark.parametrize("stop", [0, 1, 7, 19])
def test_resume_under_another_topology_delivers_exactly_the_rest(
    w2: int, k2: int, b2: int, stop: int, caplog: pytest.LogCaptureFixture
) -> None:
    lengths = lengths_of(40)
    s = make_settings(lengths)
    first = Ranks(lengths, s)
    consumed = first.step(stop)
    new = replace(s, world_size=w2, num_workers=k2, batch_size=b2)
    caplog.set_level(logging.INFO)
    for rank in (0, 3):  # any rank's checkpoint resumes every rank the same way
        second = Ranks(lengths, new, first.state(rank))
        rest = second.step()
        assert_exact([consumed, rest], lengths)
        assert Ranks(lengths, new, first.state(rank)).step() == rest  # deterministic
    if (w2, k2, b2) != (4, 2, 3):
        assert "coverage stays exact" in caplog.text
    else:
        assert "coverage stays exact" not in caplog.text  # same topology: the exact resume


def test_chained_elastic_resumes_and_a_same_topology_resume_inside() -> None:
    lengths = lengths_of(60, seed=3)
    s = make_settings(lengths)
    a = Ranks(lengths, s)
    part1 = a.step(9)
    s2 = replace(s, world_size=3, num_workers=1, batch_size=4)
    b = Ranks(lengths, s2, a.state(2))
    uninterrupted = Ranks(lengths, s2, a.state(2))
    part2 = b.step(5)
    assert part2 == uninterrupted.step(5)
    # same topology: sample-exact, identical to the uninterrupted run
    b_again = Ranks(lengths, s2, b.state(1))
    part3 = b_again.step(4)
    assert part3 == uninterrupted.step(4)
    state = b_again.state(0)
    assert len(state["history"]) == 1
    s3 = replace(s, world_size=2, num_workers=3, batch_size=5)
    c = Ranks(lengths, s3, state)
    assert len(c.trackers[0].position.history) == 2
    assert_exact([part1, part2, part3, c.step()], lengths)


def test_a_finished_epoch_resumes_at_the_next_one() -> None:
    lengths = lengths_of(12)
    s = make_settings(lengths)
    first = Ranks(lengths, s)
    first.step()
    longest = max(range(s.world_size), key=lambda r: first.trackers[r].batches_consumed)
    state = first.state(longest)  # every rank took at most this many batches: nothing is due
    assert state["epoch"] == 0  # the loop did not call next_epoch
    resumed = ConsumptionTracker(replace(s, world_size=2, num_workers=1), lengths, rank=0)
    resumed.load_state_dict(state)
    assert resumed.position.epoch == 1 and resumed.position.history == ()


# ---- properties of the restriping arithmetic -------------------------------------------------


stages = st.tuples(st.integers(1, 4), st.integers(0, 3), st.integers(1, 6), st.booleans(),
                   st.integers(0, 12))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(8, 40), seed=st.integers(0, 2**16), history=st.lists(stages, max_size=3),
       strategy=st.sampled_from(["spread", "remaining", "round_robin"]))
def test_remainder_is_exact_and_deterministic(
    n: int, seed: int, history: list[tuple[int, int, int, bool, int]], strategy: str
) -> None:
    lengths = lengths_of(n, seed)
    make_pool = PoolMaker(strategy, 6, seed, lengths)
    due = Remainder.whole(lengths)
    consumed: list[Anchor] = []
    ran: list[Stage] = []
    for values in history:
        stage = Stage(*values)
        if len(due.lengths) < stage.world_size:
            break
        ran.append(stage)
        eps, frames = consumed_anchors(due, stage, seed=seed, epoch=1, make_pool=make_pool)
        got = list(zip(eps.tolist(), frames.tolist(), strict=True))
        left = {(e, int(f)) for e in due.lengths for f in due.due(e)}
        assert set(got) <= left and len(set(got)) == len(got)  # only due anchors, once each
        consumed += got
        due = subtract(due, eps, frames)
    rest = [(e, int(f)) for e in due.lengths for f in due.due(e)]
    assert_exact([consumed, rest], lengths)
    assert all(n == due.due(e).size > 0 for e, n in due.lengths.items())
    again = remainder_after(lengths, ran, seed=seed, epoch=1, make_pool=make_pool)
    assert again.lengths == due.lengths
    assert all(np.array_equal(again.due(e), due.due(e)) for e in due.lengths)


@settings(max_examples=40, deadline=None)
@given(ranks=st.integers(1, 6), workers=st.integers(0, 3), seed=st.integers(0, 2**16),
       batches=st.integers(0, 30))
def test_remainder_is_balanced_over_the_new_ranks(
    ranks: int, workers: int, seed: int, batches: int
) -> None:
    lengths = {i: int(x) for i, x in
               enumerate(np.random.default_rng(seed).integers(20, 61, 20 * 6 + 40))}
    make_pool = PoolMaker("spread", 8, seed, lengths)
    due = remainder_after(lengths, [Stage(4, 2, 8, False, batches)], seed=seed, epoch=0,
                          make_pool=make_pool)
    plan = stage_plan(due, world_size=ranks, num_workers=workers, seed=seed, epoch=0)
    report = plan.report
    assert sum(report.rank_frames) == due.total
    assert report.rank_spread <= max(due.lengths.values())  # the greedy deal's bound
    if min(report.rank_episodes) >= 20:
        assert report.rank_imbalance <= 0.10
    # an episode's due frames stay whole: one worker of one rank owns each episode
    owners = [int(e) for rank in plan.parts for part in rank for e in part]
    assert sorted(owners) == sorted(due.lengths)


def test_state_stays_a_few_integers() -> None:
    lengths = lengths_of(30)
    s = make_settings(lengths)
    first = Ranks(lengths, s)
    first.step(6)
    second = Ranks(lengths, replace(s, world_size=2, num_workers=1), first.state(0))
    second.step(3)
    state = second.state(0)
    assert state["history"] == [[4, 2, 3, 0, 6, 2]]  # the last: even_batches "none"
    assert state["batches_consumed_on_rank"] == 3
