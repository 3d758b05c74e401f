"""Admission frontier: budget never exceeded, no deadlock, too-large episodes fail before fetching."""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.episodes.errors import EpisodeTooLargeError, StreamingError
from feedline.streaming.budget import ByteBudget, EpisodePhase
from feedline.streaming.schedule.pool import STRATEGIES, EpisodePool


def simulate(
    lengths: list[int], sizes: list[int], *, pool_size: int, prefetch: int, budget: int,
    fetchers: int, decoders: int, strategy: str, seed: int,
) -> dict[str, int]:
    """Discrete-event run of one worker's pipeline against the real cache.

    Fetchers reserve episodes in admission order (speculatively, as room allows) and complete
    after random delays; decoders take anchors in schedule order once their episode is resident;
    the dispatcher releases an episode when it hands out the episode's last anchor. Invariants are
    checked after every event; a state with work left and no pending event is a deadlock.
    """
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    pool = EpisodePool(order, lengths, strategy=strategy, pool_size=pool_size, seed=seed,
                       episode_bytes=sizes, byte_budget=budget)
    anchors = list(pool)
    cache = ByteBudget(budget, max_episodes=pool_size + prefetch)
    events: list[tuple[float, int, str, int]] = []
    now, seq = 0.0, 0
    next_reserve = 0
    fetching = 0
    busy = 0
    cursor = 0
    dispatched: Counter[int] = Counter()
    steps = 0
    peak = 0

    def push(delay: float, kind: str, ep: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (now + delay, seq, kind, ep))

    def check() -> None:
        nonlocal peak
        assert cache.reserved_bytes <= budget
        assert cache.resident_bytes <= cache.reserved_bytes
        assert cache.reserved_episodes <= pool_size + prefetch
        peak = max(peak, cache.reserved_bytes)

    while cursor < len(anchors) or events:
        steps += 1
        assert steps < 20 * (len(anchors) + len(lengths)) + 100, "no progress: livelock"
        while fetching < fetchers and next_reserve < len(order):
            ep = order[next_reserve]
            if not cache.try_reserve(ep, sizes[ep]):
                break  # full: speculative prefetch pauses
            next_reserve += 1
            fetching += 1
            push(rng.expovariate(1.0), "fetched", ep)
            check()
        while busy < decoders and cursor < len(anchors):
            ep = anchors[cursor][0]
            if cache.phase(ep) in (None, EpisodePhase.FETCHING):
                break  # the next anchor in schedule order waits for its episode
            cache.begin_decode(ep)
            cursor += 1
            dispatched[ep] += 1
            if dispatched[ep] == lengths[ep]:
                cache.release(ep)  # the pool has handed out the episode's last anchor
            busy += 1
            push(rng.expovariate(4.0), "decoded", ep)
            check()
        if not events:
            assert cursor == len(anchors), (
                f"deadlock: anchor {cursor} of {len(anchors)} waits for episode "
                f"{anchors[cursor][0]}, reserved {cache.reserved_bytes}/{budget} bytes"
            )
            break
        now, _, kind, ep = heapq.heappop(events)
        if kind == "fetched":
            fetching -= 1
            cache.mark_resident(ep)
        else:
            busy -= 1
            cache.end_decode(ep)
        check()
    assert cache.reserved_bytes == cache.resident_bytes == 0 and cache.reserved_episodes == 0
    return {"steps": steps, "peak": peak}


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 1000)), min_size=1, max_size=60),
    pool_size=st.integers(1, 8), prefetch=st.integers(0, 8), slack=st.integers(0, 3000),
    fetchers=st.integers(1, 4), decoders=st.integers(1, 4), strategy=st.sampled_from(STRATEGIES),
    seed=st.integers(0, 2**31),
)
def test_simulated_timeline_stays_in_budget_and_finishes(
    data: list[tuple[int, int]], pool_size: int, prefetch: int, slack: int, fetchers: int,
    decoders: int, strategy: str, seed: int,
) -> None:
    lengths = [n for n, _ in data]
    sizes = [b for _, b in data]
    budget = max(sizes) + slack  # from "one episode at a time" to roomy
    out = simulate(lengths, sizes, pool_size=pool_size, prefetch=prefetch, budget=budget,
                   fetchers=fetchers, decoders=decoders, strategy=strategy, seed=seed)
    assert out["peak"] <= budget


def test_too_large_episode_fails_before_any_fetch() -> None:
    fetches: list[int] = []
    sizes = {0: 10, 1: 5 * 2**30, 2: 10}
    cache = ByteBudget.for_worker(byte_budget_gb=8, pool_size=32, prefetch=8,
                                        num_workers=2)

    def run_worker() -> None:
        cache.check_sizes(sizes)  # what the pipeline does before starting its fetch thread
        for ep, nbytes in sizes.items():
            cache.reserve(ep, nbytes)
            fetches.append(ep)

    with pytest.raises(EpisodeTooLargeError) as info:
        run_worker()
    assert fetches == []
    msg = str(info.value)
    for part in ("episode 1", "5.000 GiB", "4.000 GiB", "1/2 of the rank budget",
                 "rank budget byte_budget_gb=8.000", "at least 10.00", "smaller pool",
                 "smaller"):
        assert part in msg, part
    assert "streaming_" not in msg  # the Python keyword, not the CLI flag
    assert info.value.episode_index == 1
    with pytest.raises(EpisodeTooLargeError):  # reserve refuses it too, before any fetch
        cache.reserve(1, sizes[1])
    assert cache.reserved_bytes == 0


def test_phases_and_byte_accounting() -> None:
    cache = ByteBudget(100, max_episodes=3)
    assert cache.try_reserve(1, 40) and cache.reserve(2, 50)
    assert (cache.reserved_bytes, cache.resident_bytes) == (90, 0)
    assert not cache.try_reserve(3, 20)  # bytes full
    cache.mark_resident(1)  # completed prefetch counts as resident before any sample
    assert (cache.reserved_bytes, cache.resident_bytes) == (90, 40)
    assert cache.phase(1) is EpisodePhase.RESIDENT and cache.phase(2) is EpisodePhase.FETCHING
    cache.begin_decode(1)
    cache.begin_decode(1)
    cache.release(1)  # last anchor handed out, two decodes still running
    assert cache.reserved_bytes == 90 and cache.phase(1) is EpisodePhase.DECODING
    cache.end_decode(1)
    assert cache.reserved_bytes == 90
    cache.end_decode(1)  # the last decode returns the bytes
    assert (cache.reserved_bytes, cache.resident_bytes) == (50, 0) and cache.phase(1) is None
    cache.abandon(2)  # failed fetch
    assert cache.reserved_bytes == 0
    assert cache.try_reserve(3, 100) and cache.try_reserve(4, 0)  # exactly full is allowed
    assert not cache.try_reserve(5, 1)


def test_count_limit_and_wrong_transitions() -> None:
    cache = ByteBudget(10**9, max_episodes=2)
    assert cache.try_reserve(1, 1) and cache.try_reserve(2, 1)
    assert not cache.try_reserve(3, 1)  # count full
    with pytest.raises(StreamingError, match="already reserved"):
        cache.try_reserve(1, 1)
    with pytest.raises(StreamingError, match="still being fetched"):
        cache.begin_decode(1)
    with pytest.raises(StreamingError, match="released before it was fetched"):
        cache.release(1)
    with pytest.raises(StreamingError, match="not reserved"):
        cache.mark_resident(9)
    cache.mark_resident(1)
    with pytest.raises(StreamingError, match="already fetched"):
        cache.mark_resident(1)
    with pytest.raises(StreamingError, match="no decode in progress"):
        cache.end_decode(1)
    with pytest.raises(StreamingError, match="resident; release it"):
        cache.abandon(1)


def test_waiting_reserve_is_not_overtaken_and_wakes_on_release() -> None:
    cache = ByteBudget(100, max_episodes=8)
    assert cache.reserve(1, 80)
    cache.mark_resident(1)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(cache.reserve(2, 60, timeout=10)))
    waiter.start()
    deadline = time.monotonic() + 5
    while cache.reserve_waits == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not cache.try_reserve(3, 10)  # fits, but the waiting reservation goes first
    cache.release(1)
    waiter.join(5)
    assert got == [True] and cache.reserved_bytes == 60
    assert cache.reserve_wait_seconds > 0


def test_reserve_timeout_and_close() -> None:
    cache = ByteBudget(10, max_episodes=1)
    assert cache.reserve(1, 10)
    assert cache.reserve(2, 1, timeout=0.05) is False
    errors: list[Exception] = []

    def wait() -> None:
        try:
            cache.reserve(3, 1)
        except StreamingError as exc:
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.05)
    cache.close()
    t.join(5)
    assert errors and "closed" in str(errors[0])


def test_for_worker_splits_the_rank_budget() -> None:
    cache = ByteBudget.for_worker(byte_budget_gb=8, pool_size=32, prefetch=8,
                                        num_workers=4)
    assert cache.budget_bytes == 2 * 2**30 and cache.max_episodes == 8 + 8
    solo = ByteBudget.for_worker(num_workers=0)
    assert solo.budget_bytes == 8 * 2**30 and solo.max_episodes == 256 + 8


@pytest.mark.parametrize(("make", "message"), [
    (lambda: ByteBudget(0, max_episodes=1), "budget_bytes must be an integer >= 1, got 0"),
    (lambda: ByteBudget(10, max_episodes=0), "max_episodes must be an integer >= 1, got 0"),
    (lambda: ByteBudget.for_worker(prefetch=-1),
     "prefetch must be an integer >= 0, got -1"),
    (lambda: ByteBudget.for_worker(pool_size=True), "pool_size must be an integer >= 1"),
    (lambda: ByteBudget.for_worker(num_workers=-2), "num_workers must be an integer >= 0"),
])
def test_bad_settings_name_the_keyword(make, message: str) -> None:
    with pytest.raises(StreamingError, match=message):
        make()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_threads_drive_the_cache_without_exceeding_the_budget(strategy: str) -> None:
    """Real fetch and decode threads (blocking reserve) with a monitor sampling the budget."""
    rng = random.Random(3)
    lengths = [rng.randint(1, 12) for _ in range(80)]
    sizes = [rng.randint(10, 400) for _ in range(80)]
    budget, pool_size = 900, 4
    anchors = list(EpisodePool(range(80), lengths, strategy=strategy, pool_size=pool_size,
                               seed=1, episode_bytes=sizes, byte_budget=budget))
    cache = ByteBudget(budget, max_episodes=pool_size + 3)
    lock = threading.Lock()
    cursor = [0]
    dispatched: Counter[int] = Counter()
    violations: list[int] = []
    done = threading.Event()

    def fetcher() -> None:
        for ep in range(80):
            cache.reserve(ep, sizes[ep])
            time.sleep(rng.random() * 0.0005)
            cache.mark_resident(ep)

    def decoder() -> None:
        while True:
            with lock:
                if cursor[0] >= len(anchors):
                    return
                ep = anchors[cursor[0]][0]
                if cache.phase(ep) in (None, EpisodePhase.FETCHING):
                    wait = True
                else:
                    wait = False
                    cache.begin_decode(ep)
                    cursor[0] += 1
                    dispatched[ep] += 1
                    if dispatched[ep] == lengths[ep]:
                        cache.release(ep)
            if wait:
                time.sleep(0.0002)
                continue
            time.sleep(rng.random() * 0.0003)
            cache.end_decode(ep)

    def monitor() -> None:
        while not done.is_set():
            if cache.reserved_bytes > budget:
                violations.append(cache.reserved_bytes)
            time.sleep(0.0001)

    threads = [threading.Thread(target=f) for f in (fetcher, decoder, decoder, monitor)]
    for t in threads:
        t.start()
    for t in threads[:3]:
        t.join(60)
        assert not t.is_alive(), "deadlock"
    done.set()
    threads[3].join()
    assert violations == [] and cache.peak_reserved_bytes <= budget
    assert cache.reserved_bytes == 0 and cursor[0] == len(anchors)
