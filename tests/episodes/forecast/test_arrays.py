"""``feedline plan``'s array paths against the per-episode computations they replaced.

The plan of a 100,000-episode run must not walk every episode in Python: unit facts, batch
diversity, the byte frontier and the ideal shuffle's episode sums are array operations. These
tests hold them to the answers of the loops they replaced (kept here as the reference), on
real datasets and on random schedules, and hold the plan's Python work flat in episodes.
"""

from __future__ import annotations

import collections
import heapq
import sys

import numpy as np
import pytest

from feedline.episodes.forecast.costs import DecodeCost, unit_facts
from feedline.episodes.forecast.model import _episode_lengths, predict
from feedline.episodes.forecast.simulate import (
    WorkerRun,
    batch_diversity,
    frontier,
    loader_order,
    worker_runs,
)
from feedline.episodes.parquet import EpisodeRows, candidate_row_groups
from feedline.streaming.schedule.diversity import BatchDiversity

from .conftest import WINDOW, open_reader

# ---- the per-episode computations, as they were -----------------------------------------------


def _locate(dataset, unit: int):
    units = dataset.feed.units
    if hasattr(units, "locate"):
        source, episode, _ = units.locate(unit)
        return dataset.feed.sources[source], episode
    return dataset.feed.sources[0], int(unit)


def _parquet_needed(source, position: int) -> int:
    table = source.reader.episode_table
    index = source.parquet.indexes[table.data_path[position]]
    want = EpisodeRows(
        int(table.episode_index[position]),
        int(table.dataset_from_index[position]),
        int(table.dataset_to_index[position]),
    )
    total = 0
    groups = source.parquet.groups_of(position)
    for g in groups if groups is not None else candidate_row_groups(index, want):
        rows = int(index.num_rows[g])
        total += int(index.nbytes[g]) * min(1.0, (want.to_index - want.from_index) / max(1, rows))
    return int(total)


def reference_facts(dataset, units):
    """Per unit: its fetch plans made, then bytes fetched and needed, requests, keyframes."""
    fetched, needed, requests, keyframes = {}, {}, {}, {}
    for unit in units:
        source, episode = _locate(dataset, int(unit))
        reader = source.reader
        table = reader.episode_table
        spans = source.spans_of(episode)
        i = spans.position
        length = int(table.length[i])
        need = _parquet_needed(source, i)
        count = 1
        for key, plans in spans.video.items():
            count += len(plans)
            t = reader.frame_reader().table(table.video_path[key][i])
            order = np.argsort(t.pts, kind="stable")
            pts, size, sync = t.pts[order], np.asarray(t.size)[order], np.asarray(t.sync)[order]
            t0 = float(table.from_timestamp[key][i])
            tol = reader.tolerance_s
            lo = int(np.searchsorted(pts, t0 - tol, side="left"))
            hi = int(np.searchsorted(pts, t0 + (length - 1) / reader.fps + tol, side="right"))
            need += int(size[lo:hi].sum())
            keyframes[(int(unit), key)] = np.flatnonzero(sync[lo:hi]).astype(np.int64)
        fetched[int(unit)] = int(spans.nbytes)
        needed[int(unit)] = need
        requests[int(unit)] = count
    return fetched, needed, requests, keyframes


def reference_diversity(runs, batch_size, drop_last, keys, episodes):
    counter = BatchDiversity(batch_size)
    counter.begin_epoch(episodes, sum(r.anchors for r in runs))
    distinct, touched, share = [], set(), []
    for w, start, size in loader_order(runs, batch_size, drop_last):
        batch = np.asarray(keys(runs[w].episodes[start : start + size]), dtype=np.int64)
        counter.record(batch)
        distinct.append(int(np.unique(batch).size))
        touched.update(batch.tolist())
        share.append(len(touched) / max(1, episodes))
    return counter.report(), np.asarray(distinct), np.asarray(share)


def reference_frontier(run, lag=0):
    last = np.full(run.admission.size, -1, dtype=np.int64)
    position = {int(u): i for i, u in enumerate(run.admission.tolist())}
    order = np.fromiter((position[int(u)] for u in run.episodes.tolist()), np.int64)
    np.maximum.at(last, order, np.arange(order.size))
    reserved = count = admitted = 0
    releases: list[tuple[int, int]] = []
    times, values = [0], [0]

    def admit(now):
        nonlocal reserved, count, admitted
        while (
            admitted < run.admission.size
            and count < run.max_episodes
            and (reserved + int(run.nbytes[admitted]) <= run.budget or count == 0)
        ):
            reserved += int(run.nbytes[admitted])
            count += 1
            heapq.heappush(releases, (int(last[admitted]) + lag, admitted))
            admitted += 1
        times.append(now)
        values.append(reserved)

    admit(0)
    while releases:
        at, i = heapq.heappop(releases)
        reserved -= int(run.nbytes[i])
        count -= 1
        times.append(at)
        values.append(reserved + int(run.nbytes[i]))
        admit(at)
    return np.asarray(times), np.asarray(values)


# ---- equal answers ----------------------------------------------------------------------------


def _mixture(plan_dataset, tmp_path):
    from feedline.episodes.stream.dataset import StreamingEpisodeDataset
    from feedline.episodes.synth.writer import write_synthetic_dataset

    other = write_synthetic_dataset(
        tmp_path / "other",
        episodes=4,
        frames_per_episode=[20, 25, 15, 30],
        cameras=2,
        fps=10,
        width=64,
        height=48,
    )
    return StreamingEpisodeDataset(
        sources=[{"root": str(plan_dataset.root)}, {"root": str(other.root), "repeat": 1.5}],
        delta_timestamps=WINDOW,
        return_uint8=True,
        rank=0,
        world_size=1,
        episode_pool_size=4,
    )


@pytest.mark.parametrize("kind", ["single", "mixture"])
def test_unit_facts_equal_the_per_episode_pass(plan_dataset, tmp_path, kind: str) -> None:
    reader = (
        open_reader(plan_dataset.root) if kind == "single" else _mixture(plan_dataset, tmp_path)
    )
    units = sorted(reader.feed.epoch_lengths(0))  # a mixture's copies and partial windows too
    fetched, needed, requests, keyframes = reference_facts(reader, units)
    facts = unit_facts(reader, units[::-1])
    assert facts.units.tolist() == units
    assert dict(zip(units, facts.fetched.tolist(), strict=True)) == fetched
    assert dict(zip(units, facts.needed.tolist(), strict=True)) == needed
    assert dict(zip(units, facts.requests.tolist(), strict=True)) == requests
    assert sorted(facts.keyframes) == sorted(keyframes)
    for key, frames in keyframes.items():
        assert facts.keyframes[key].tolist() == frames.tolist(), key
    assert facts.keyframes.get((units[0], "no such camera")) is None
    # the pool's byte sizes, unit by unit, are what the arrays give the frontier
    for run in worker_runs(reader, world_size=1, num_workers=2, batch_size=4):
        assert run.nbytes.tolist() == [reader.episode_bytes[int(u)] for u in run.admission]


@pytest.mark.parametrize("kind", ["single", "mixture"])
def test_the_plan_keys_and_lengths_equal_the_per_unit_pass(plan_dataset, tmp_path, kind) -> None:
    reader = (
        open_reader(plan_dataset.root) if kind == "single" else _mixture(plan_dataset, tmp_path)
    )
    runs = worker_runs(reader, world_size=1, num_workers=2, batch_size=4)
    units = np.concatenate([r.admission for r in runs])
    keys = reader.feed.episode_keys(units)
    due = reader.feed.epoch_lengths(0)
    by_episode: dict[int, int] = {}
    for u, k in zip(units.tolist(), keys.tolist(), strict=True):
        by_episode[k] = by_episode.get(k, 0) + int(due[u])
    assert _episode_lengths(units, keys, due) == list(by_episode.values())
    episodes = len(by_episode)
    for batch_size, drop_last in ((4, False), (8, True), (3, False), (1000, False)):
        got = batch_diversity(runs, batch_size, drop_last, reader.feed.episode_keys, episodes)
        want = reference_diversity(runs, batch_size, drop_last, reader.feed.episode_keys, episodes)
        assert got[0] == want[0], (batch_size, drop_last)
        assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()


def _random_run(rng: np.random.Generator, shuffle: bool) -> WorkerRun:
    n = int(rng.integers(1, 40))
    lengths = rng.integers(1, 12, n)
    episodes = np.repeat(np.arange(n), lengths)
    if shuffle:  # anchors of resident episodes interleaved, as a pool serves them
        episodes = episodes[
            np.argsort(
                np.arange(episodes.size) // int(rng.integers(1, 20)) + rng.random(episodes.size),
                kind="stable",
            )
        ]
    units = 100 + 7 * episodes
    _, first = np.unique(units, return_index=True)
    admission = units[np.sort(first)]
    nbytes = rng.integers(1, 100, n)
    budget = int(rng.choice([10**9, int(rng.integers(50, 400))]))
    return WorkerRun(
        0,
        0,
        units,
        np.zeros(units.size, np.int64),
        admission,
        nbytes,
        int(rng.integers(1, 8)),
        budget,
    )


def test_the_frontier_equals_the_replay_on_random_schedules() -> None:
    rng = np.random.default_rng(7)
    for trial in range(400):
        run = _random_run(rng, shuffle=trial % 2 == 1)
        lag = int(rng.integers(0, 3))
        got, want = frontier(run, lag), reference_frontier(run, lag)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist(), trial


def test_batch_diversity_equals_the_counter_on_random_schedules() -> None:
    rng = np.random.default_rng(11)
    for trial in range(100):
        runs = [_random_run(rng, shuffle=True) for _ in range(int(rng.integers(1, 4)))]
        if trial % 5 == 0:  # a worker without anchors
            runs.append(WorkerRun(0, len(runs), *(np.zeros(0, np.int64),) * 4, 1, 1))
        keys = (lambda u: np.asarray(u) % 49) if trial % 2 else (lambda u: np.asarray(u))
        episodes = int(np.unique(keys(np.concatenate([r.episodes for r in runs]))).size)
        batch_size, drop_last = int(rng.integers(1, 9)), bool(trial % 3 == 0)
        got = batch_diversity(runs, batch_size, drop_last, keys, episodes)
        want = reference_diversity(runs, batch_size, drop_last, keys, episodes)
        assert got[0] == want[0], trial
        assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()


# ---- flat in episodes -------------------------------------------------------------------------


def _python_calls(root) -> collections.Counter:
    """Python function calls of one plan of ``root`` (no payload read: the costs are given)."""
    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

    reader = StreamingEpisodeDataset(root=str(root), return_uint8=True, rank=0, world_size=1)
    decode = DecodeCost(1e-3, 2e-3, 1e-4, 1000, 10, 0, [0])
    calls: collections.Counter = collections.Counter()

    def count(frame, event, arg) -> None:
        if event == "call":
            calls[(frame.f_code.co_filename, frame.f_code.co_name)] += 1

    sys.setprofile(count)
    try:
        predict(reader, num_workers=0, batch_size=8, decode=decode, pipeline=False)
    finally:
        sys.setprofile(None)
    return calls


def test_the_plan_does_no_python_work_per_episode(tmp_path_factory) -> None:
    """2,000 and 20,000 episodes of 30-40 frames: the decode replay is capped (60,000 anchors)
    and the rest is arrays, so feedline plan's own Python calls stay about the same; only the
    reader's pool, whose schedule the plan replays, admits one episode at a time."""
    from feedline.episodes.synth.bulk import write_bulk_dataset

    counts = {}
    for n in (2_000, 20_000):
        root = tmp_path_factory.mktemp("scale") / f"bulk-{n}"
        write_bulk_dataset(
            root, episodes=n, min_frames=30, max_frames=40, workers=1, progress=False
        )
        counts[n] = _python_calls(root)

    def ours(calls: collections.Counter) -> int:
        return sum(
            v for (path, _), v in calls.items() if "episodes/forecast" in path.replace("\\", "/")
        )

    small, large = ours(counts[2_000]), ours(counts[20_000])
    assert large < 1.5 * small, (small, large)  # a per-episode pass would be 10x

    def named(calls: collections.Counter, name: str) -> int:
        return sum(v for (_, function), v in calls.items() if function == name)

    for per_episode in ("spans_of", "get_with", "plan_span"):  # no fetch plan is made
        assert named(counts[20_000], per_episode) == 0, per_episode
    # the ideal shuffle batches at most 5,000 batches a round, at either size
    assert named(counts[20_000], "record") == named(counts[2_000], "record")
