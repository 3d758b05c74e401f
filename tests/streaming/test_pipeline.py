"""UnitPipeline: schedule order kept across threads, byte budget held, errors surfaced, no leaks,
exact resume through the shared harness.

The payloads here are small objects so that thread timing (random fetch and decode delays) can be
driven hard; the real fetch/decode path is covered sample by sample in test_streaming.py.
"""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from feedline.episodes.errors import ResumeMismatchError, StreamingError
from feedline.streaming.budget import ByteBudget
from feedline.streaming.pipeline import UnitPipeline
from feedline.streaming.schedule.pool import EpisodePool, fetch_order
from tests.streaming.resume_harness import Epochs, check_resume, json_roundtrip, resume_points


class Payload:
    def __init__(self, ep: int, nbytes: int) -> None:
        self.ep = ep
        self.fetched_bytes = nbytes


def _schedule(lengths: list[int], sizes: list[int], budget: int, pool_size: int, seed: int):
    episodes = list(range(len(lengths)))
    pool = EpisodePool(
        episodes, lengths, pool_size=pool_size, seed=seed, episode_bytes=sizes, byte_budget=budget
    )
    eps, frames = pool.take(pool.total_anchors)
    return episodes, eps, frames


def _pipeline(eps, frames, order, sizes, cache, *, seed=0, fetch_delay=0.003, decode_delay=0.002,
              fetch=None, **kw):
    rng = random.Random(seed)
    lock = threading.Lock()
    live = {"decoding": 0}

    def default_fetch(ep: int) -> Payload:
        with lock:
            delay = rng.random() * fetch_delay
        time.sleep(delay)
        return Payload(ep, sizes[ep])

    def assemble(payload: Payload, frame: int) -> dict:
        with lock:
            delay = rng.random() * decode_delay
            live["decoding"] += 1
        time.sleep(delay)
        assert cache.reserved_bytes <= cache.budget_bytes
        with lock:
            live["decoding"] -= 1
        return {"episode": payload.ep, "frame": frame}

    return UnitPipeline(
        eps, frames, order, dict(enumerate(sizes)), fetch=fetch or default_fetch,
        assemble=assemble, cache=cache, **kw,
    )


@pytest.mark.parametrize("fetch", ["first need", "admission"])
@pytest.mark.parametrize(("seed", "assemble_threads"), [(0, 3), (1, 3), (2, 3), (3, 3), (4, 0), (5, 0)])
def test_order_and_budget_under_random_timing(seed, assemble_threads, fetch):
    """The readers fetch by first need (fetch_order); the pool's admission order works too."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, size=24).tolist()
    sizes = rng.integers(100, 1000, size=24).tolist()
    budget = 2500  # a few episodes at a time: admission waits for releases all the time
    order, eps, frames = _schedule(lengths, sizes, budget, pool_size=4, seed=seed)
    if fetch == "first need":
        order = fetch_order(eps).tolist()
        assert order != list(range(24))  # the pool draws across its resident episodes
    cache = ByteBudget(budget, max_episodes=4 + 2)
    pipe = _pipeline(eps, frames, order, sizes, cache, seed=seed, fetch_threads=3,
                     assemble_threads=assemble_threads, queue_size=5)  # 0: on the consuming thread
    out = [(s["episode"], s["frame"]) for s in pipe]
    assert out == list(zip(eps.tolist(), frames.tolist(), strict=True))  # exact schedule order
    assert cache.peak_reserved_bytes <= budget
    assert pipe.metrics.samples == sum(lengths)
    assert pipe.metrics.episodes_fetched == len(lengths)
    assert pipe.metrics.bytes_fetched == sum(sizes)


@pytest.mark.parametrize("assemble_threads", [2, 0])
def test_every_episode_released_at_the_end(assemble_threads):
    lengths, sizes = [5, 3, 8, 2, 6], [300, 200, 400, 100, 300]
    order, eps, frames = _schedule(lengths, sizes, 700, pool_size=2, seed=7)
    cache = ByteBudget(700, max_episodes=3)
    pipe = _pipeline(eps, frames, order, sizes, cache, assemble_threads=assemble_threads, queue_size=3)
    assert len(list(pipe)) == sum(lengths)
    deadline = time.monotonic() + 5
    while cache.reserved_bytes and time.monotonic() < deadline:  # the last decodes end
        time.sleep(0.01)
    assert cache.reserved_bytes == 0 and cache.reserved_episodes == 0


def test_slow_fetches_count_as_refill_stalls():
    lengths, sizes = [4, 4, 4], [10, 10, 10]
    order, eps, frames = _schedule(lengths, sizes, 100, pool_size=1, seed=1)
    cache = ByteBudget(100, max_episodes=1)  # no prefetch: every new episode stalls

    def slow(ep: int) -> Payload:
        time.sleep(0.05)
        return Payload(ep, 10)

    pipe = _pipeline(eps, frames, order, sizes, cache, fetch=slow, decode_delay=0.0)
    assert len(list(pipe)) == 12
    assert pipe.metrics.refill_stalls >= 3 and pipe.metrics.refill_stall_s >= 0.1


def test_fetch_error_reaches_the_consumer_and_stops_threads():
    lengths, sizes = [3, 3, 3, 3], [10, 10, 10, 10]
    order, eps, frames = _schedule(lengths, sizes, 1000, pool_size=2, seed=3)
    cache = ByteBudget(1000, max_episodes=4)
    bad = int(order[2])

    def failing(ep: int) -> Payload:
        if ep == bad:
            raise OSError(f"episode {ep}: connection reset")
        return Payload(ep, 10)

    before = threading.active_count()
    pipe = _pipeline(eps, frames, order, sizes, cache, fetch=failing)
    with pytest.raises(OSError, match=f"episode {bad}: connection reset"):
        list(pipe)
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= before
    assert list(pipe) == []  # closed: nothing more, no hang


def test_close_mid_epoch_stops_a_blocked_dispatcher():
    lengths, sizes = [50, 50, 50], [600, 600, 600]
    order, eps, frames = _schedule(lengths, sizes, 1000, pool_size=3, seed=0)
    cache = ByteBudget(1000, max_episodes=3)  # the second episode waits for the first
    before = threading.active_count()
    pipe = _pipeline(eps, frames, order, sizes, cache, decode_delay=0.0)
    first = [next(pipe) for _ in range(5)]
    assert len(first) == 5
    pipe.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= before
    with pytest.raises(StopIteration):
        next(pipe)


def test_bad_settings_are_refused():
    cache = ByteBudget(10, max_episodes=1)
    empty = np.empty(0, np.int64)
    with pytest.raises(StreamingError, match="assemble_threads must be an integer >= 0"):
        UnitPipeline(empty, empty, [], {}, fetch=Payload, assemble=dict, cache=cache,
                        assemble_threads=-1)
    with pytest.raises(StreamingError, match="no admission"):
        UnitPipeline(np.array([1]), np.array([0]), [], {}, fetch=Payload, assemble=dict,
                        cache=cache)


# ---- resume ----------------------------------------------------------------------------------

LENGTHS, SIZES = [5, 3, 8, 2, 6], [300, 200, 400, 100, 300]


def _epoch_pipeline(epoch: int, fetched: list[int] | None = None) -> UnitPipeline:
    """One epoch's pipeline (the schedule's seed is the epoch), with a roomy thread setup."""
    order, eps, frames = _schedule(LENGTHS, SIZES, 700, pool_size=2, seed=epoch)
    cache = ByteBudget(700, max_episodes=3)

    def fetch(ep: int) -> Payload:
        if fetched is not None:
            fetched.append(ep)
        return Payload(ep, SIZES[ep])

    return _pipeline(eps, frames, order, SIZES, cache, seed=epoch, fetch=fetch, decode_delay=0.0,
                     fetch_threads=2, assemble_threads=2, queue_size=3)


def test_resume_at_every_sample_of_two_epochs() -> None:
    """Mid-epoch, at the epoch's end, and the epoch after a resume: exactly the rest, in order."""
    make = lambda: Epochs(_epoch_pipeline, [0, 1])  # noqa: E731
    check_resume(make, resume_points(2 * sum(LENGTHS), every=True))


def test_resume_never_fetches_an_episode_already_consumed() -> None:
    full = list(_epoch_pipeline(0))
    done = full[0]["episode"]
    k = max(i for i, s in enumerate(full) if s["episode"] == done) + 1  # its last sample taken
    first = _epoch_pipeline(0)
    assert [next(first) for _ in range(k)] == full[:k]
    state = json_roundtrip(first.state_dict())
    first.close()
    assert state["samples_taken"] == k and state["anchors"] == len(full)
    fetched: list[int] = []
    resumed = _epoch_pipeline(0, fetched)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state  # loaded, not yet iterated: the same checkpoint
    assert list(resumed) == full[k:]
    assert done not in fetched and sorted(fetched) == sorted({s["episode"] for s in full[k:]})


def test_load_state_refuses_other_anchors_and_a_started_pipeline() -> None:
    first = _epoch_pipeline(0)
    next(first)
    state = first.state_dict()
    with pytest.raises(StreamingError, match="before the pipeline's first sample"):
        first.load_state_dict(state)
    first.close()
    with pytest.raises(ResumeMismatchError, match="identity"):
        _epoch_pipeline(1).load_state_dict(state)  # another epoch: other anchors
    with pytest.raises(ResumeMismatchError, match="state_version"):
        _epoch_pipeline(0).load_state_dict({**state, "state_version": 2})
    with pytest.raises(ResumeMismatchError, match="99 samples were taken of 24"):
        _epoch_pipeline(0).load_state_dict({**state, "samples_taken": 99})


def test_fetch_order_is_by_first_anchor_and_serves_the_first_sample_first():
    assert fetch_order(np.array([5, 2, 5, 9, 2, 1, 9])).tolist() == [5, 2, 9, 1]
    assert fetch_order(np.array([], dtype=np.int64)).tolist() == []
    lengths, sizes = [6] * 12, [100] * 12
    _, eps, frames = _schedule(lengths, sizes, 10_000, pool_size=12, seed=3)
    fetched: list[int] = []

    def fetch(ep: int) -> Payload:
        fetched.append(ep)
        return Payload(ep, 100)

    cache = ByteBudget(10_000, max_episodes=13)
    pipe = _pipeline(eps, frames, fetch_order(eps).tolist(), sizes, cache, fetch=fetch, fetch_threads=1,
                     assemble_threads=0)
    first = next(pipe)
    assert fetched[0] == first["episode"] == int(eps[0])  # not the first of the pool's admissions
    assert len(list(pipe)) == sum(lengths) - 1
    assert fetched == fetch_order(eps).tolist()
