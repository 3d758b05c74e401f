"""Exact-coverage pools: coverage, resource bounds, the two strategies' exact laws, determinism."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from itertools import permutations
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from feedline.episodes.errors import EpisodeTooLargeError, ResumeMismatchError, StreamingError
from feedline.streaming.schedule.plan import plan_shards
from feedline.streaming.schedule.pool import STRATEGIES, EpisodePool
from feedline.streaming.schedule.slot import WorkerSlot
from tests.streaming.resume_harness import Epochs, check_resume, resume_points
from tests.streaming.sched_data import Selection, make_selection, selections

STRATEGY = st.sampled_from(STRATEGIES)


def drain(pool: EpisodePool) -> tuple[np.ndarray, np.ndarray]:
    return pool.take(pool.total_anchors + 1)


def open_profile(eps: np.ndarray, weights: Mapping[int, int] | None = None) -> np.ndarray:
    """At each position, how many episodes (or bytes) are between their first and last anchor."""
    uniq, first = np.unique(eps, return_index=True)
    _, last_rev = np.unique(eps[::-1], return_index=True)
    last = eps.size - 1 - last_rev
    w = np.ones(uniq.size) if weights is None else np.array([weights[int(e)] for e in uniq])
    delta = np.zeros(eps.size + 1)
    np.add.at(delta, first, w)
    np.add.at(delta, last + 1, -w)
    return np.cumsum(delta)[:-1]


# ---- coverage over the whole plan -----------------------------------------------------------


def coverage_args(max_total: int) -> dict[str, st.SearchStrategy[Any]]:
    return {"sel": selections(max_total=max_total), "world": st.integers(1, 16),
            "workers": st.integers(0, 8), "pool_per_rank": st.integers(1, 64),
            "strategy": STRATEGY, "seed": st.integers(0, 2**31), "epoch": st.integers(0, 9),
            "with_bytes": st.booleans()}


def check_epoch_coverage(
    sel: Selection, world: int, workers: int, pool_per_rank: int, strategy: str, seed: int,
    epoch: int, with_bytes: bool,
) -> None:
    """Union over ranks x workers of one epoch = every selected frame once; pools in bounds."""
    assume(len(sel.lengths) >= world)
    plan = plan_shards(sel.lengths, world_size=world, num_workers=workers, seed=seed, epoch=epoch)
    keys = np.array(sorted(sel.lengths))
    base = np.concatenate(([0], np.cumsum([sel.lengths[int(k)] for k in keys])))
    seen = np.zeros(sel.total, dtype=np.int64)
    sizes = {e: 1000 + 37 * n for e, n in sel.lengths.items()}  # payload grows with length
    for rank, parts in enumerate(plan):
        pool_size = WorkerSlot(num_workers=len(parts)).share(pool_per_rank)
        for worker, order in enumerate(parts):
            budget = None
            if with_bytes:  # tight: the largest episode plus a little
                budget = max(sizes[e] for e in order) + 2000
            pool = EpisodePool(
                order, sel.lengths, strategy=strategy, pool_size=pool_size, seed=seed,
                epoch=epoch, rank=rank, worker=worker,
                episode_bytes=sizes if with_bytes else None, byte_budget=budget,
            )
            eps, frames = drain(pool)
            assert eps.size == pool.total_anchors == sum(sel.lengths[e] for e in order)
            assert pool.anchors_remaining == 0 and next(pool, None) is None
            lengths = np.array([sel.lengths[int(e)] for e in eps])
            assert np.all((frames >= 0) & (frames < lengths))
            np.add.at(seen, base[np.searchsorted(keys, eps)] + frames, 1)
            assert open_profile(eps).max() <= pool_size
            if budget is not None:
                assert open_profile(eps, sizes).max() <= budget
    assert np.all(seen == 1), "every selected frame exactly once per epoch"


test_one_epoch_yields_every_selected_frame_once = settings(max_examples=40, deadline=None)(
    given(**coverage_args(150_000))(check_epoch_coverage))
test_one_epoch_yields_every_selected_frame_once_large = pytest.mark.slow(
    settings(max_examples=40, deadline=None)(given(**coverage_args(1_500_000))(
        check_epoch_coverage)))


@settings(max_examples=25, deadline=None)
@given(sel=selections(max_total=60_000, max_episodes=300), pool_size=st.integers(1, 40),
       strategy=STRATEGY, seed=st.integers(0, 2**31), cuts=st.lists(st.integers(1, 5000),
                                                                  max_size=12))
def test_order_is_independent_of_how_it_is_consumed(
    sel: Selection, pool_size: int, strategy: str, seed: int, cuts: list[int]
) -> None:
    order = list(sel.lengths)
    make = lambda: EpisodePool(order, sel.lengths, strategy=strategy,  # noqa: E731
                               pool_size=pool_size, seed=seed, epoch=2, rank=1, worker=3)
    eps, frames = drain(make())
    pool = make()
    got: list[tuple[int, int]] = [next(pool) for _ in range(min(700, pool.total_anchors))]
    for cut in cuts:
        e, f = pool.take(cut)
        got += list(zip(e.tolist(), f.tolist(), strict=True))
    got += list(pool)
    assert got == list(zip(eps.tolist(), frames.tolist(), strict=True))


@settings(max_examples=25, deadline=None)
@given(sel=selections(max_total=30_000, max_episodes=200), pool_size=st.integers(1, 16),
       strategy=STRATEGY, seed=st.integers(0, 2**31))
def test_seed_epoch_rank_worker_change_the_anchor_order(
    sel: Selection, pool_size: int, strategy: str, seed: int
) -> None:
    assume(sel.total >= 60 and len(sel.lengths) >= 2)
    assume(pool_size > 1 or sel.max_len > 1)  # one resident 1-frame episode at a time: no choice
    order = list(sel.lengths)

    def anchors(**kw: int) -> list[int]:
        args: dict[str, Any] = {"seed": seed, "epoch": 0, "rank": 0, "worker": 0, **kw}
        e, f = drain(EpisodePool(order, sel.lengths, strategy=strategy, pool_size=pool_size,
                                 **args))
        return (e * 10_000 + f).tolist()

    base = anchors()
    assert anchors() == base
    for change in ({"seed": seed + 1}, {"epoch": 1}, {"rank": 1}, {"worker": 1}):
        assert anchors(**change) != base, change


def test_same_anchor_order_in_another_process() -> None:
    sel = make_selection(400, 300, "heavy", 11, subset=True, max_total=10**9)
    order = list(sel.lengths)

    def digest(strategy: str) -> str:
        e, f = drain(EpisodePool(order, sel.lengths, strategy=strategy, pool_size=7, seed=5))
        return hashlib.sha256(e.tobytes() + f.tobytes()).hexdigest()

    code = (
        "import json,sys,hashlib\n"
        "from feedline.streaming.schedule.pool import EpisodePool\n"
        "d=json.loads(sys.stdin.read()); L={int(k): v for k, v in d.items()}\n"
        "out=[]\n"
        "for s in ('remaining','round_robin'):\n"
        "    p=EpisodePool(list(L), L, strategy=s, pool_size=7, seed=5)\n"
        "    e,f=p.take(p.total_anchors)\n"
        "    out.append(hashlib.sha256(e.tobytes()+f.tobytes()).hexdigest())\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], input=json.dumps(sel.lengths),
                         capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "9"})
    assert json.loads(res.stdout) == [digest("remaining"), digest("round_robin")]


# ---- the strategies' exact laws --------------------------------------------------------------


def remaining_law(lengths: list[int], pool: int) -> dict[tuple[int, ...], float]:
    """Exact distribution of the episode-id sequence under the `remaining` rule."""
    out: dict[tuple[int, ...], float] = {}

    def walk(resident: dict[int, int], nxt: int, seq: tuple[int, ...], p: float) -> None:
        while len(resident) < pool and nxt < len(lengths):
            resident[nxt] = lengths[nxt]
            nxt += 1
        if not resident:
            out[seq] = out.get(seq, 0.0) + p
            return
        total = sum(resident.values())
        for e, rem in resident.items():
            after = dict(resident)
            if rem == 1:
                del after[e]
            else:
                after[e] = rem - 1
            walk(after, nxt, (*seq, e), p * rem / total)

    walk({}, 0, (), 1.0)
    return out


def round_robin_law(lengths: list[int], pool: int) -> dict[tuple[int, ...], float]:
    """Exact distribution of the episode-id sequence under the `round_robin` rule."""
    out: dict[tuple[int, ...], float] = {}

    def walk(resident: dict[int, int], nxt: int, seq: tuple[int, ...], p: float) -> None:
        while len(resident) < pool and nxt < len(lengths):
            resident[nxt] = lengths[nxt]
            nxt += 1
        if not resident:
            out[seq] = out.get(seq, 0.0) + p
            return
        shuffles = list(permutations(resident))
        after = {e: r - 1 for e, r in resident.items() if r > 1}
        for perm in shuffles:
            walk(dict(after), nxt, (*seq, *perm), p / len(shuffles))

    walk({}, 0, (), 1.0)
    return out


def chi2_ok(counts: Counter[Any], law: Mapping[Any, float], n: int) -> tuple[float, float]:
    assert set(counts) <= set(law), "a sequence the rule cannot produce"
    stat = sum((counts.get(k, 0) - n * p) ** 2 / (n * p) for k, p in law.items())
    df = len(law) - 1
    z = 3.72  # one-sided p = 1e-4: flaky one run in ten thousand
    crit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3  # Wilson-Hilferty
    return stat, crit


@pytest.mark.parametrize("strategy, law_of", [("remaining", remaining_law),
                                               ("round_robin", round_robin_law)])
@pytest.mark.parametrize("lengths, pool", [([2, 1, 3], 2), ([1, 3, 2, 1], 3), ([3, 2, 2], 2)])
def test_strategy_follows_its_exact_law(
    strategy: str, law_of: Any, lengths: list[int], pool: int
) -> None:
    law = law_of(lengths, pool)
    n = 3000
    counts: Counter[tuple[int, ...]] = Counter()
    for seed in range(n):
        e, _ = drain(EpisodePool(range(len(lengths)), lengths, strategy=strategy, pool_size=pool,
                                 seed=seed))
        counts[tuple(e.tolist())] += 1
    stat, crit = chi2_ok(counts, law, n)
    assert stat < crit, (stat, crit, len(law))


@pytest.mark.parametrize("strategy", ["remaining", "round_robin"])  # spread: test_spread.py
def test_frames_of_an_episode_come_in_uniform_order(strategy: str) -> None:
    n = 2400
    counts: Counter[tuple[int, ...]] = Counter()
    for seed in range(n):
        e, f = drain(EpisodePool([7, 8], [4, 2], strategy=strategy, pool_size=2, seed=seed))
        counts[tuple(f[e == 7].tolist())] += 1
    law = {p: 1 / 24 for p in permutations(range(4))}
    stat, crit = chi2_ok(counts, law, n)
    assert stat < crit


def reference_rounds(order: list[int], lengths: Mapping[int, int], pool: int,
                     sizes: Mapping[int, int] | None, budget: int | None) -> list[set[int]]:
    """Resident sets of each round_robin round, straight from the rule (no randomness)."""
    resident: dict[int, int] = {}
    held = 0
    nxt = 0
    rounds: list[set[int]] = []

    def admit() -> None:
        nonlocal nxt, held
        while nxt < len(order) and len(resident) < pool:
            b = sizes[order[nxt]] if sizes else 0
            if budget is not None and held + b > budget:
                break
            resident[order[nxt]] = lengths[order[nxt]]
            held += b
            nxt += 1

    admit()
    while resident:
        rounds.append(set(resident))
        for e in list(resident):
            resident[e] -= 1
            if resident[e] == 0:
                del resident[e]
                held -= sizes[e] if sizes else 0
        admit()
    return rounds


@settings(max_examples=30, deadline=None)
@given(sel=selections(max_total=20_000, max_episodes=150), pool_size=st.integers(1, 12),
       seed=st.integers(0, 2**31), with_bytes=st.booleans())
def test_round_robin_rounds_match_the_rule(
    sel: Selection, pool_size: int, seed: int, with_bytes: bool
) -> None:
    order = list(sel.lengths)
    sizes = {e: 1 + (e * 7919) % 50 for e in order} if with_bytes else None
    budget = 80 if with_bytes else None
    e, _ = drain(EpisodePool(order, sel.lengths, strategy="round_robin", pool_size=pool_size,
                             seed=seed, episode_bytes=sizes, byte_budget=budget))
    pos = 0
    for expected in reference_rounds(order, sel.lengths, pool_size, sizes, budget):
        got = e[pos : pos + len(expected)].tolist()
        assert len(set(got)) == len(got) and set(got) == expected
        pos += len(expected)
    assert pos == e.size


# ---- resume ----------------------------------------------------------------------------------


def pool_epochs(lengths: Mapping[int, int], strategy: str, pool_size: int) -> Epochs[Any]:
    """Epochs 4 and 5 of one worker's pool, resumable (what a worker iterates)."""

    def pool(epoch: int) -> EpisodePool:
        order = plan_shards(lengths, world_size=1, num_workers=0, seed=3, epoch=epoch)[0][0]
        return EpisodePool(order, lengths, strategy=strategy, pool_size=pool_size, seed=3,
                           epoch=epoch)

    return Epochs(pool, [4, 5])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_resume_at_every_anchor_of_a_small_epoch(strategy: str) -> None:
    lengths = {0: 5, 3: 1, 4: 9, 8: 2, 9: 7}
    make = lambda: pool_epochs(lengths, strategy, 2)  # noqa: E731
    check_resume(make, resume_points(2 * 24, every=True))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_resume_at_random_points_of_a_large_epoch(strategy: str) -> None:
    sel = make_selection(2000, 400, "uniform", 5, subset=True, max_total=100_000)
    make = lambda: pool_epochs(sel.lengths, strategy, 32)  # noqa: E731
    full = list(make())
    check_resume(make, resume_points(len(full), [len(full) // 2], random_count=3), full=full)


def test_load_state_refuses_other_settings() -> None:
    pool = EpisodePool([1, 2], [3, 4], seed=1)
    next(pool)
    state = pool.state_dict()
    with pytest.raises(ResumeMismatchError, match=r"seed \(checkpoint 1, now 2\)"):
        EpisodePool([1, 2], [3, 4], seed=2).load_state_dict(state)
    with pytest.raises(ResumeMismatchError, match="identity"):
        EpisodePool([1, 2], [3, 5], seed=1).load_state_dict(state)
    with pytest.raises(ResumeMismatchError, match="state_version"):
        EpisodePool([1, 2], [3, 4], seed=1).load_state_dict({**state, "state_version": 0})


# ---- inputs --------------------------------------------------------------------------------


def test_seed_none_is_the_fixed_streaming_seed() -> None:
    a = drain(EpisodePool([0, 1], [5, 5], seed=None))
    b = drain(EpisodePool([0, 1], [5, 5], seed=42))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    with pytest.raises(StreamingError, match="seed"):
        EpisodePool([0], [1], seed=-1)


def test_bad_inputs() -> None:
    with pytest.raises(StreamingError, match=r"unknown strategy 'uniform'; choose one of \['remaining', 'round_robin', 'spread'\]"):
        EpisodePool([0], [1], strategy="uniform")
    with pytest.raises(StreamingError, match="pool_size"):
        EpisodePool([0], [1], pool_size=0)
    with pytest.raises(StreamingError, match="lengths has 1 entries for 2 episodes"):
        EpisodePool([0, 1], [1])
    with pytest.raises(StreamingError, match="no entry for episode 1"):
        EpisodePool([0, 1], {0: 3})
    pool = EpisodePool([0], [3])
    with pytest.raises(StreamingError, match="cannot skip 4 anchors"):
        pool.skip(4)
    assert list(EpisodePool([], [])) == []


def test_episode_larger_than_the_budget_fails_at_construction() -> None:
    with pytest.raises(EpisodeTooLargeError) as info:
        EpisodePool([4, 5], [3, 3], episode_bytes={4: 10, 5: 3 * 2**30}, byte_budget=2**30)
    msg = str(info.value)
    assert "episode 5 needs 3.000 GiB" in msg and "1.00" in msg and "smaller" in msg
