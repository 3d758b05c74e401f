"""A worker's start with arrays: each vectorised step against the per-episode algorithm it
replaced (kept here, small, as the reference), and the start held free of per-episode Python
calls (users resume checkpoints across versions, so every order must stay the same bit for bit).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.episodes.settings import StreamingSettings
from feedline.streaming.budget import ByteBudget
from feedline.streaming.errors import StreamingError, UnitTooLargeError
from feedline.streaming.pipeline import UnitPipeline
from feedline.streaming.reader import StreamingReader
from feedline.streaming.schedule.elastic import PoolMaker
from feedline.streaming.schedule.plan import (
    _greedy_deal,
    _greedy_deal_tuples,
    _grouped_deal,
    _two_bin_deal,
)
from feedline.streaming.schedule.pool import (
    STRATEGIES,
    EpisodePool,
    aligned,
    anchor_counts,
    fetch_order,
    first_anchors,
    last_anchors,
    positions_in,
)
from feedline.streaming.schedule.resume import ResumePosition, sampler_identity
from feedline.streaming.schedule.slot import WorkerSlot, check_episode_sizes

# ---- the per-episode algorithms, as they were --------------------------------------------------


def ref_greedy_deal(lengths: np.ndarray, bins: int) -> np.ndarray:
    heap = [(0, b) for b in range(bins)]
    out = []
    for n in lengths.tolist():
        load, b = heap[0]
        out.append(b)
        heapq.heapreplace(heap, (load + n, b))
    return np.asarray(out, dtype=np.int64)


def ref_grouped_deal(lengths: np.ndarray, groups: np.ndarray, bins: int) -> np.ndarray:
    out = np.zeros(lengths.size, dtype=np.int64)
    if bins == 1:
        return out
    total = [0] * bins
    for g in np.unique(groups).tolist():
        members = np.flatnonzero(groups == g)
        heap = [(0, total[b], b) for b in range(bins)]
        heapq.heapify(heap)
        for i, n in zip(members.tolist(), lengths[members].tolist(), strict=True):
            load, tl, b = heap[0]
            out[i] = b
            total[b] = tl + n
            heapq.heapreplace(heap, (load + n, tl + n, b))
    return out


class RefPool(EpisodePool):
    """The pool with its admission as it was: one ``_admit`` call (and search) per episode."""

    def _admit(self, pos: int) -> float:
        nbytes = 0 if self.episode_bytes is None else int(self.episode_bytes[pos])
        budget = self.byte_budget
        slots = self.pool_size
        if self._cohort_ends is not None:
            cohort = int(np.searchsorted(self._cohort_ends, pos, side="right"))
            slots = int(self._cohort_ends[cohort] - (self._cohort_ends[cohort - 1] if cohort else 0))
        while self._resident >= slots or (
            budget is not None and self._resident_bytes + nbytes > budget
        ):
            end, _, freed = heapq.heappop(self._heap)
            self._now = max(self._now, end)
            self._resident -= 1
            self._resident_bytes -= freed
        self._resident += 1
        self._resident_bytes += nbytes
        return self._now

    def _admit_block(self, a: int, b: int, stays: np.ndarray) -> np.ndarray:
        durations = stays.tolist()
        starts = np.empty(b - a, dtype=np.float64)
        nbytes = None if self.episode_bytes is None else self.episode_bytes[a:b].tolist()
        for j in range(b - a):
            start = self._next_start if j == 0 else self._admit(a + j)
            starts[j] = start
            heapq.heappush(self._heap, (start + durations[j], a + j, nbytes[j] if nbytes else 0))
        self._next_start = self._admit(b) if b < self.episodes.size else math.inf
        return starts


def ref_aligned(episodes: np.ndarray, values: Mapping[int, int], name: str) -> np.ndarray:
    try:
        return np.fromiter((values[int(e)] for e in episodes), np.int64, episodes.size)
    except KeyError as exc:
        raise StreamingError(f"{name} has no entry for episode {exc.args[0]}") from None


def ref_check_sizes(sizes: Mapping[int, int], budget: int) -> int | None:
    for episode, nbytes in sizes.items():
        if nbytes > budget:
            return episode
    return None


def ref_fetch_order(episodes: np.ndarray) -> np.ndarray:
    _, first = np.unique(episodes, return_index=True)
    return episodes[np.sort(first)]


def ref_pipeline_tables(
    eps: np.ndarray, admission: list[int], nbytes: Mapping[int, int]
) -> tuple[dict[int, int], dict[int, int], list[int], dict[int, int]]:
    backwards = eps[::-1]
    distinct, first_backwards = np.unique(backwards, return_index=True)
    last = dict(zip(distinct.tolist(), (len(backwards) - 1 - first_backwards).tolist(), strict=True))
    d, c = np.unique(eps, return_counts=True)
    undecoded = dict(zip(d.tolist(), c.tolist(), strict=True))
    order = [int(ep) for ep in admission if int(ep) in last]
    return last, undecoded, order, {ep: int(nbytes[ep]) for ep in order}


# ---- equivalence -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 12), st.integers(1, 500), st.integers(0, 2**31))
def test_greedy_deal_is_the_heap_of_tuples(n, bins, max_len, seed):
    lengths = np.random.default_rng(seed).integers(1, max_len + 1, n).astype(np.int64)
    expected = ref_greedy_deal(lengths, bins)
    assert np.array_equal(_greedy_deal(lengths, bins), expected)
    assert np.array_equal(_greedy_deal_tuples(lengths, bins), expected)
    if bins == 2:
        assert np.array_equal(_two_bin_deal(lengths), expected)


def test_greedy_deal_past_int64_keeps_the_deal():
    lengths = np.array([2**61, 3, 2**61, 1, 5], dtype=np.int64)
    assert np.array_equal(_greedy_deal(lengths, 3), ref_greedy_deal(lengths, 3))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2000), st.integers(1, 9), st.integers(1, 5), st.integers(0, 2**31))
def test_grouped_deal_is_the_heap_of_tuples(n, bins, groups, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 300, n).astype(np.int64)
    group_of = rng.integers(0, groups, n).astype(np.int64)
    assert np.array_equal(
        _grouped_deal(lengths, group_of, bins), ref_grouped_deal(lengths, group_of, bins)
    )


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 1500), st.sampled_from(STRATEGIES), st.integers(1, 64), st.booleans(),
    st.integers(0, 2**31),
)
def test_pool_admission_is_one_admit_per_episode(n, strategy, pool_size, by_bytes, seed):
    rng = np.random.default_rng(seed)
    episodes = rng.permutation(3 * n)[:n]
    lengths = {int(e): int(x) for e, x in zip(episodes, rng.integers(1, 400, n), strict=True)}
    kw: dict[str, Any] = dict(strategy=strategy, pool_size=pool_size, seed=seed, epoch=2, worker=1)
    if by_bytes:
        sizes = {int(e): int(x) for e, x in zip(episodes, rng.integers(1, 1000, n), strict=True)}
        kw.update(episode_bytes=sizes, byte_budget=int(rng.integers(1000, 20_000)))
    new, ref = EpisodePool(episodes, lengths, **kw), RefPool(episodes, lengths, **kw)
    got, want = new.take(new.total_anchors), ref.take(ref.total_anchors)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert new.identity == ref.identity and new.state_settings() == ref.state_settings()


@pytest.mark.parametrize("layout", ["range", "sparse", "wide", "shuffled"])
def test_aligned_is_the_lookup_per_episode(layout):
    rng = np.random.default_rng(7)
    keys = {
        "range": np.arange(5, 5005), "sparse": np.sort(rng.choice(20_000, 5000, replace=False)),
        "wide": np.sort(rng.choice(2**40, 5000, replace=False)),
        "shuffled": rng.permutation(9000)[:5000],
    }[layout]
    values = dict(zip(keys.tolist(), rng.integers(0, 10**12, keys.size).tolist(), strict=True))
    episodes = rng.permutation(keys)[:3000].astype(np.int64)
    assert np.array_equal(aligned(episodes, values, "x"), ref_aligned(episodes, values, "x"))
    whole = np.asarray(list(values), dtype=np.int64)
    assert np.array_equal(aligned(whole, values, "x"), ref_aligned(whole, values, "x"))
    absent = np.append(episodes, [int(keys.max()) + 1, -3])
    with pytest.raises(StreamingError, match=f"x has no entry for episode {int(keys.max()) + 1}$"):
        aligned(absent, values, "x")
    with pytest.raises(StreamingError, match="x has no entry for episode -3$"):
        aligned(absent[::-1].copy(), values, "x")


def test_positions_in_is_searchsorted():
    rng = np.random.default_rng(3)
    for keys in (np.arange(10, 400), np.sort(rng.choice(5000, 300, replace=False)),
                 np.sort(rng.choice(2**50, 300, replace=False)), np.zeros(0, np.int64)):
        values = rng.choice(np.append(keys, rng.integers(-5, 6000, 50)), 500)
        at, found = positions_in(keys.astype(np.int64), values)
        want = np.isin(values, keys)
        assert np.array_equal(found, want)
        assert np.array_equal(keys[at[found]], values[found])


def test_size_checks_name_the_first_too_large_episode():
    rng = np.random.default_rng(5)
    keys = rng.permutation(4000)
    sizes = dict(zip(keys.tolist(), rng.integers(1, 1000, keys.size).tolist(), strict=True))
    for budget in (10**6, 999, 990, 500, 1):
        want = ref_check_sizes(sizes, budget)
        if want is None:
            check_episode_sizes(sizes, budget)
            continue
        with pytest.raises(UnitTooLargeError) as err:
            check_episode_sizes(sizes, budget)
        with pytest.raises(UnitTooLargeError) as ref_err:
            check_episode_sizes(list(sizes.items()), budget)  # the pairs walk, as before
        assert str(err.value) == str(ref_err.value) and f"{want}" in str(err.value)


@pytest.mark.parametrize("span", [50, 10**9])
def test_first_last_and_counts_are_numpys_unique(span):
    rng = np.random.default_rng(span)
    eps = rng.choice(rng.integers(0, span, 400), 20_000).astype(np.int64)
    assert np.array_equal(fetch_order(eps), ref_fetch_order(eps))
    d, first = np.unique(eps, return_index=True)
    assert all(np.array_equal(a, b) for a, b in zip(first_anchors(eps), (d, first), strict=True))
    back_d, back = np.unique(eps[::-1], return_index=True)
    last = eps.size - 1 - back
    assert all(np.array_equal(a, b) for a, b in zip(last_anchors(eps), (back_d, last), strict=True))
    d, c = np.unique(eps, return_counts=True)
    assert all(np.array_equal(a, b) for a, b in zip(anchor_counts(eps), (d, c), strict=True))


def test_pipeline_tables_are_the_per_episode_ones():
    rng = np.random.default_rng(11)
    episodes = rng.permutation(3000)[:800]
    lengths = dict(zip(episodes.tolist(), rng.integers(1, 40, 800).tolist(), strict=True))
    sizes = {e: 100 + e for e in lengths}
    pool = EpisodePool(episodes, lengths, strategy="spread", pool_size=16, seed=4)
    eps, frames = pool.take(pool.total_anchors)
    admission = fetch_order(eps).tolist() + [10**6]  # an admitted episode without anchors
    cache = ByteBudget(10**9, max_episodes=64)
    pipe = UnitPipeline(eps, frames, admission, sizes | {10**6: 1}, fetch=int,
                        assemble=lambda p, f: {}, cache=cache)
    last, undecoded, order, nbytes = ref_pipeline_tables(eps, admission, sizes | {10**6: 1})
    ids = pipe._distinct.tolist()
    assert dict(zip(ids, pipe._last_at.tolist(), strict=True)) == last
    assert dict(zip(ids, pipe._undecoded.tolist(), strict=True)) == undecoded
    assert pipe._admission.tolist() == order
    assert dict(zip(order, pipe._admission_bytes.tolist(), strict=True)) == nbytes
    assert [pipe._anchor(i) for i in range(eps.size)] == [
        (e, f, ids.index(e), last[e] == i)
        for i, (e, f) in enumerate(zip(eps.tolist(), frames.tolist(), strict=True))
    ]
    half = eps.size // 2
    pipe.restore_state({"samples_taken": half})
    assert pipe._admission.tolist() == [ep for ep in order if last[ep] >= half]
    assert pipe._admission_bytes.tolist() == [nbytes[ep] for ep in order if last[ep] >= half]
    left = {e: n for e, n in anchor_counts_ref(eps[half:]).items()}
    assert dict(zip(ids, pipe._undecoded.tolist(), strict=True)) == {e: left.get(e, 0) for e in ids}
    with pytest.raises(StreamingError, match=r"episodes \[.*\] have anchors but no admission"):
        UnitPipeline(eps, frames, admission[5:], sizes, fetch=int, assemble=lambda p, f: {},
                     cache=cache)
    pipe.close()


def anchor_counts_ref(eps):
    counts = {}
    for e in eps.tolist():
        counts[e] = counts.get(e, 0) + 1
    return counts


@pytest.mark.parametrize("stratified", [False, True])
def test_pool_maker_arrays_give_the_pools_of_the_dicts(stratified):
    """The maker reads its cached arrays; the pools are those built from the dicts."""
    rng = np.random.default_rng(8)
    lengths = dict(enumerate(rng.integers(1, 60, 3000).tolist()))
    sizes = dict(enumerate(rng.integers(1, 5000, 3000).tolist()))
    groups = None if not stratified else (lambda units: np.asarray(units) % 3)
    maker = PoolMaker("spread", 64, 9, lengths, 10**6, sizes, groups=groups,
                      stratified=stratified)
    plain = PoolMaker("spread", 64, 9, _Opaque(lengths), 10**6, _Opaque(sizes), groups=groups,
                      stratified=stratified)
    order = rng.permutation(3000)[:1200]
    kw: dict[str, Any] = dict(epoch=1, rank=0, part=1, num_workers=2, batch_size=16)
    new, ref = maker(order, **kw), plain(order, **kw)
    got, want = new.take(new.anchors_remaining), ref.take(ref.anchors_remaining)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    for a, b in zip(getattr(new, "pools", [new]), getattr(ref, "pools", [ref]), strict=True):
        assert a.state_settings() == b.state_settings()
    assert np.array_equal(maker.plan_input(lengths), list(lengths.values()))


class _Opaque(Mapping[int, int]):
    """A mapping that is not a dict: looked up one episode at a time, as every mapping was."""

    def __init__(self, data: dict[int, int]) -> None:
        self.data = data

    def __getitem__(self, key: int) -> int:
        return self.data[key]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def test_sampler_identity_is_the_digest_it_was():
    """Checkpoints compare it: the bytes are looked up with arrays, the digest is unchanged."""
    rng = np.random.default_rng(2)
    keys = rng.permutation(5000)[:3000].tolist()
    lengths = dict(zip(keys, rng.integers(1, 50, 3000).tolist(), strict=True))
    sizes = dict(zip(keys[::-1], rng.integers(1, 10**9, 3000).tolist(), strict=True))
    indices = np.sort(np.asarray(keys, dtype=np.int64))
    h = hashlib.sha256(b"feedline.streaming.schedule.plan/v1")
    h.update(indices.tobytes())
    h.update(np.asarray([lengths[int(i)] for i in indices], dtype=np.int64).tobytes())
    h.update(np.fromiter((sizes[int(i)] for i in indices), np.int64).tobytes())
    assert sampler_identity(lengths, sizes) == h.hexdigest()[:32]


# ---- no Python step per episode ----------------------------------------------------------------


class _Reader(StreamingReader):
    """The skeleton with a fixed selection and a pipeline that never fetches."""

    def __init__(self, lengths: dict[int, int], nbytes: dict[int, int]) -> None:
        self.settings = StreamingSettings()
        self.slot = WorkerSlot()
        self.unit_bytes = nbytes
        self.sampler_identity = "selection"
        self._lengths = lengths
        self.pool_maker = PoolMaker(
            self.settings.sampling_strategy, self.settings.episode_pool_size,
            self.seed, lengths, self.rank_budget_bytes, nbytes,
        )
        self._init_loop()

    @property
    def plan_units(self) -> dict[int, int]:
        return self._lengths

    def epoch_lengths(self, epoch: int) -> dict[int, int]:
        return self._lengths

    def make_pipeline(self, units, anchors, order, budget, slot) -> UnitPipeline:  # type: ignore[override]
        return UnitPipeline(units, anchors, order, self.unit_bytes, fetch=int,
                            assemble=lambda p, f: {}, cache=budget)


def _python_calls(run: Callable[[], Any]) -> int:
    """Python-level function calls (generator steps too) while ``run`` runs."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def _worker_start_calls(episodes: int) -> int:
    rng = np.random.default_rng(episodes)
    lengths = dict(enumerate(rng.integers(8, 25, episodes).tolist()))
    nbytes = dict(enumerate(rng.integers(20_000, 90_000, episodes).tolist()))
    reader = _Reader(lengths, nbytes)
    pipelines: list[UnitPipeline] = []

    def start() -> None:
        for worker in range(2):
            pipeline = reader.worker_pipeline(ResumePosition(0, 0, (0, 0), True), 2, worker)
            assert pipeline is not None
            pipelines.append(pipeline)

    calls = _python_calls(start)
    assert sum(p.remaining for p in pipelines) == sum(lengths.values())
    for p in pipelines:
        p.close()
    return calls


def test_a_workers_start_makes_no_python_call_per_episode():
    """Ten times the episodes add a few calls per block of anchors, none per episode (the
    per-episode version made two or more calls per episode: ~36,000 more here)."""
    small, large = _worker_start_calls(2_000), _worker_start_calls(20_000)
    assert large - small < 1_500, (small, large)
