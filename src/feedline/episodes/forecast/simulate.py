"""The run's schedule without I/O: every worker's real pool, its byte frontier, its decoded frames.

What ``feedline plan`` predicts from is what the reader would do, computed by the reader's own
code: the shard plan (:func:`~feedline.streaming.schedule.plan.plan_shards_arrays`) and each
worker's pool (the reader's :class:`~feedline.streaming.schedule.elastic.PoolMaker`) give every
anchor in the order the worker serves it; :func:`~feedline.streaming.schedule.loader.loader_batches`
gives the DataLoader's batches from them. Three replays follow that order:

* **the byte frontier** (:func:`frontier`): episodes reserved in admission order while the
  worker's count (its pool share plus ``prefetch_episodes``) and byte share allow, released after
  their last anchor, as :class:`~feedline.streaming.budget.ByteBudget` does when
  fetches keep up (the most the budget can hold: the peak it predicts is an upper bound);
* **decoded frames** (:func:`decoded_peak`): per episode and camera, a forward decoder from the
  keyframe before the first frame asked for, a second one for frames before it, each decoded
  frame kept until the last window that uses it, as
  :class:`~feedline.episodes.stream.decoded.CameraFrames` keeps them (within the limit);
* **batch diversity** (:func:`batch_diversity`): the batches' episodes counted by
  :class:`~feedline.streaming.schedule.diversity.BatchDiversity`, the counter the reader uses.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.episodes.forecast.costs import unit_bytes
from feedline.episodes.stream.decoded import DECODE_AHEAD
from feedline.streaming.schedule.diversity import WINDOW_BATCHES, BatchDiversity, DiversityReport
from feedline.streaming.schedule.elastic import epoch_start
from feedline.streaming.schedule.loader import batches_per_worker, loader_batches
from feedline.streaming.schedule.plan import plan_shards_arrays
from feedline.streaming.schedule.pool import fetch_order
from feedline.streaming.schedule.slot import WorkerSlot

__all__ = [
    "WorkerRun",
    "batch_diversity",
    "decoded_peak",
    "frontier",
    "loader_order",
    "worker_runs",
]


@dataclass
class WorkerRun:
    """One DataLoader worker's epoch, as its pool schedules it.

    Args:
        rank: the data-parallel rank.
        worker: the plan part (the DataLoader worker id).
        episodes: the unit of each anchor, in serving order.
        frames: the frame of each anchor.
        admission: the units in fetch order.
        nbytes: each admitted unit's payload bytes (parallel to ``admission``).
        max_episodes: most units the worker's byte cache reserves at once.
        budget: the worker's share of the byte budget.
        extra: anything a caller keeps with it. Default empty.
    """

    rank: int
    worker: int
    episodes: np.ndarray
    frames: np.ndarray
    admission: np.ndarray
    nbytes: np.ndarray
    max_episodes: int
    budget: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def anchors(self) -> int:
        return int(self.episodes.size)


def worker_runs(
    dataset: Any, *, world_size: int, num_workers: int, batch_size: int, epoch: int = 0,
    ranks: Sequence[int] | None = None,
) -> list[WorkerRun]:
    """Every worker's epoch of ``ranks`` (default all) for a topology, from ``dataset``'s plan,
    pools and byte sizes (a :class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset`
    opened for any rank: only its settings and sizes are used)."""
    settings = dataset.settings
    world = world_size // settings.replication
    plan = plan_shards_arrays(
        dataset.feed.epoch_lengths(epoch), world_size=world, num_workers=num_workers,
        seed=dataset.seed, epoch=epoch, groups=dataset.pool_maker.plan_groups,
    )
    slot = WorkerSlot(num_workers=num_workers)
    budget = slot.share(settings.byte_budget_bytes)
    due = epoch_start(dataset.plan_units, epoch)  # a mixture's units: copies and windows
    out = []
    for rank in range(world) if ranks is None else ranks:
        for part, order in enumerate(plan.parts[rank]):
            pool = dataset.pool_maker(
                order.tolist(), epoch=epoch, rank=rank, part=part,
                num_workers=num_workers, batch_size=batch_size, remainder=due,
            )
            episodes, frames = pool.take(pool.anchors_remaining)
            admission = fetch_order(episodes)  # the pipeline's fetch order
            nbytes = unit_bytes(dataset, admission)  # the reader's episode_bytes, as arrays
            limit = max(slot.share(settings.episode_pool_size), pool.resident_limit)
            out.append(WorkerRun(rank, part, episodes, frames, admission, nbytes,
                                 limit + settings.prefetch_episodes, budget))
    return out


def frontier(run: WorkerRun, lag: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Bytes the worker's budget holds reserved as its anchors are served, when fetches keep up:
    ``(anchor index, reserved bytes)`` at every reservation change; ``lag`` anchors pass between
    an episode's last anchor and the return of its bytes (its decodes in the ordered buffer).

    Where the byte share cannot bind (the ``max_episodes`` largest episodes fit in it) and every
    release comes after its episode was admitted, the replay is array arithmetic: releases in
    order of their anchor, one admission after each. Otherwise the episodes are replayed one
    by one (:func:`_frontier_replay`); both give the same curve.
    """
    last = np.full(run.admission.size, -1, dtype=np.int64)
    sorter = np.argsort(run.admission, kind="stable")  # each anchor's place in the admission
    order = sorter[np.searchsorted(run.admission, run.episodes, sorter=sorter)]
    np.maximum.at(last, order, np.arange(order.size))
    fast = _frontier_arrays(run, last, lag)
    return fast if fast is not None else _frontier_replay(run, last, lag)


def _frontier_arrays(run: WorkerRun, last: np.ndarray, lag: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`frontier` without a loop, or ``None`` where its conditions do not hold."""
    n, m = int(run.admission.size), int(run.max_episodes)
    if n == 0 or m < 1:
        return None
    nbytes = np.asarray(run.nbytes, np.int64)
    if int(np.sort(nbytes)[-min(m, n):].sum()) > run.budget:
        return None  # the byte share may bind: the replay decides
    released = last + lag
    pops = np.lexsort((np.arange(n), released))  # (release anchor, admission) as the heap pops
    k = np.arange(n)
    if np.any(pops >= np.minimum(n, m + k)):  # some release before its episode was admitted
        return None
    held = np.zeros(n + 1, np.int64)
    np.cumsum(nbytes, out=held[1:])  # bytes of the first j admissions
    gone = np.zeros(n + 1, np.int64)
    np.cumsum(nbytes[pops], out=gone[1:])  # bytes of the first k releases
    at = released[pops]
    before = held[np.minimum(n, m + k)] - gone[:-1]  # just before release k
    after = held[np.minimum(n, m + k + 1)] - gone[1:]  # after it and the admission it allows
    times = np.concatenate([[0, 0], np.repeat(at, 2)])
    values = np.concatenate([[0, held[min(n, m)]], np.column_stack([before, after]).ravel()])
    return times.astype(np.int64), values.astype(np.int64)


def _frontier_replay(run: WorkerRun, last: np.ndarray, lag: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`frontier` one episode at a time, as the budget admits and releases them."""
    reserved = count = admitted = 0
    releases: list[tuple[int, int]] = []
    times, values = [0], [0]

    def admit(now: int) -> None:
        nonlocal reserved, count, admitted
        while admitted < run.admission.size and count < run.max_episodes and (
            reserved + int(run.nbytes[admitted]) <= run.budget or count == 0
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
        values.append(reserved + int(run.nbytes[i]))  # the peak just before the release
        admit(at)
    return np.asarray(times, dtype=np.int64), np.asarray(values, dtype=np.int64)


def decoded_peak(
    run: WorkerRun, lengths: Mapping[int, int], windows: Mapping[str, np.ndarray],
    keyframes: Mapping[tuple[int, str], np.ndarray], frame_bytes: Mapping[str, int],
    limit: int, *, max_anchors: int = 60_000,
) -> dict[str, Any]:
    """The decoded-frame memory of ``run``'s first ``max_anchors`` anchors (module docstring).

    ``windows``: per camera, the frame offsets a sample asks for (``[0]`` without a window);
    ``keyframes``: per (unit, camera), the frame indices of the episode's keyframes (missing:
    every frame is one); ``frame_bytes``: the RGB bytes of one frame of each camera. Returns the
    peak bytes (at most ``limit``), the peak the frames would take without a limit, the decoded
    frames per delivered frame that the limit causes (1.0 when each is decoded once), the most
    decoders open at once, and ``(anchor, bytes)`` samples of the held bytes.
    """
    n = min(run.anchors, max_anchors)
    state: dict[tuple[int, str], _Camera] = {}
    held = peak = 0
    counts = {"decoded": 0, "delivered": 0, "over": 0}
    open_decoders = peak_decoders = 0
    remaining: dict[int, int] = {}
    for u in run.episodes[:n].tolist():
        remaining[u] = remaining.get(u, 0) + 1
    every = max(1, n // 400)
    trace: list[tuple[int, int]] = []
    length_of: dict[int, int] = {}
    shifts = {camera: [int(d) for d in offsets.tolist()] for camera, offsets in windows.items()}
    for i, (u, f) in enumerate(zip(run.episodes[:n].tolist(), run.frames[:n].tolist(), strict=True)):
        length = length_of.get(u)
        if length is None:
            length = length_of[u] = int(lengths[u])
        top = length - 1
        for camera, offsets in windows.items():
            size = int(frame_bytes[camera])
            cam = state.get((u, camera))
            if cam is None:
                cam = state[(u, camera)] = _Camera(length, offsets, keyframes.get((u, camera)))
            wanted = [min(max(f + d, 0), top) for d in shifts[camera]]
            for g in wanted:
                if not cam.kept[g]:
                    opened, decoded_now = cam.produce(g)
                    open_decoders += opened
                    for h in decoded_now:
                        counts["decoded"] += 1
                        if cam.uses[h] > 0 and held + size <= limit:
                            cam.kept[h] = True
                            held += size
                    if decoded_now:  # the decoder goes on past g while there is room
                        for h in cam.ahead(g):
                            if held + size > limit:
                                break
                            cam.advance(h)
                            counts["decoded"] += 1
                            if cam.uses[h] > 0:
                                cam.kept[h] = True
                                held += size
                    if not cam.kept[g] and not decoded_now:  # dropped for the limit: its GOP again
                        counts["decoded"] += g - _keyframe(cam.keys, g) + 1
                        counts["over"] += 1
                if not cam.seen[g]:
                    cam.seen[g] = True
                    counts["delivered"] += 1
            peak = max(peak, held)  # a sample holds its frames until it is assembled
            for g in wanted:
                cam.uses[g] -= 1
                if cam.uses[g] == 0 and cam.kept[g]:
                    cam.kept[g] = False
                    held -= size
        peak = max(peak, held)
        peak_decoders = max(peak_decoders, open_decoders)
        remaining[u] -= 1
        if remaining[u] == 0:  # the episode's last sample: its frames and decoders go
            for camera in windows:
                cam = state.pop((u, camera), None)
                if cam is not None:
                    held -= int(cam.kept.sum()) * int(frame_bytes[camera])
                    open_decoders -= cam.decoders
        if i % every == 0:
            trace.append((i, held))
    return {"peak_bytes": min(peak, limit), "over_limit_frames": counts["over"],
            "decoded_per_delivered": counts["decoded"] / max(1, counts["delivered"]),
            "peak_decoders": peak_decoders, "anchors": n, "trace": trace}


class _Camera:
    """One episode's camera in :func:`decoded_peak`: uses left per frame, frames kept, and the
    two forward decoders (``a`` from the first frame asked for, ``b`` for frames before it)."""

    def __init__(self, length: int, offsets: np.ndarray, keys: np.ndarray | None) -> None:
        frames = np.clip(np.arange(length)[None, :] + np.asarray(offsets)[:, None], 0, length - 1)
        self.uses = np.bincount(frames.ravel(), minlength=length).astype(np.int64)
        self.kept = np.zeros(length, dtype=bool)
        self.seen = np.zeros(length, dtype=bool)
        self.keys = keys
        self.a: list[int] | None = None  # [start, next frame]
        self.b: list[int] | None = None
        self._last: list[int] = []  # the decoder that produced the last frame
        self.decoders = 0

    def produce(self, g: int) -> tuple[int, range]:
        """Decoders opened and frames decoded to produce frame ``g`` (an empty range: it was
        decoded before and not kept)."""
        opened = 0
        if self.a is None:
            start = _keyframe(self.keys, g)
            self.a, opened = [start, start], 1
        if g >= self.a[0]:
            cursor = self.a
        else:
            if self.b is None or g < self.b[0]:
                start = _keyframe(self.keys, g)
                opened += self.b is None
                self.b = [start, start]
            cursor = self.b
        self.decoders += opened
        if g < cursor[1]:
            return opened, range(0)
        done = range(cursor[1], g + 1)
        cursor[1] = g + 1
        self._last = cursor
        return opened, done

    def ahead(self, g: int) -> range:
        """The frames the decoder that just produced ``g`` goes on to (``DECODE_AHEAD``): never
        past the episode, nor, for the decoder filling frames before the first, into them."""
        end = len(self.uses) if self._last is self.a or self.a is None else self.a[0]
        return range(g + 1, min(g + 1 + DECODE_AHEAD, end))

    def advance(self, h: int) -> None:
        self._last[1] = h + 1


def _keyframe(keys: np.ndarray | None, frame: int) -> int:
    if keys is None or keys.size == 0:
        return frame
    at = int(np.searchsorted(keys, frame, side="right")) - 1
    return int(keys[max(at, 0)]) if at >= 0 else 0


def loader_order(runs: Sequence[WorkerRun], batch_size: int, drop_last: bool) -> list[tuple[int, int, int]]:
    """One rank's batches in DataLoader order: (run index, first anchor, size)."""
    return list(loader_batches([r.anchors for r in runs], batch_size, drop_last))


def batch_diversity(
    runs: Sequence[WorkerRun], batch_size: int, drop_last: bool, keys: Any,
    episodes: int, window: int = WINDOW_BATCHES,
) -> tuple[DiversityReport, np.ndarray, np.ndarray]:
    """The diversity of one rank's batches (``keys(units)``: what counts as one episode):
    its report, the distinct episodes of each batch, and the share of the rank's episodes
    touched after each batch.

    The same figures :class:`~feedline.streaming.schedule.diversity.BatchDiversity` gives when
    it records the batches one by one (``window`` as its own), counted with array operations
    over every batch at once: a 100,000-episode epoch has hundreds of thousands of batches.
    """
    counter = BatchDiversity(batch_size, window)
    anchors = sum(r.anchors for r in runs)
    seq, sizes = _loader_sequence(runs, batch_size, drop_last)
    seq = np.asarray(keys(seq), dtype=np.int64)
    nb = sizes.size
    if nb == 0:
        return DiversityReport(0, 0.0, 0.0, 0.0, 0.0, 0.0), np.zeros(0, np.int64), np.zeros(0)
    batch = np.repeat(np.arange(nb, dtype=np.int64), sizes)
    base = int(seq.min())
    span = int(seq.max()) - base + 1
    pairs = _distinct(batch * span + (seq - base))  # distinct (batch, episode), batch-major
    pair_batch, pair_key = pairs // span, pairs % span
    distinct = np.bincount(pair_batch, minlength=nb).astype(np.int64)
    full = distinct[sizes >= batch_size]
    histogram = np.bincount(full) if full.size else np.zeros(0, np.int64)
    batches = int(histogram.sum())
    if batches == 0:
        mean = p5 = low = 0.0
    else:
        mean = float((np.arange(histogram.size) * histogram).sum() / batches)
        p5 = float(np.searchsorted(np.cumsum(histogram), math.ceil(0.05 * batches)))
        low = float(np.flatnonzero(histogram)[0])
    # a window [w, w + window) counts an episode once, at its first batch inside it
    windows = max(0, nb - window + 1)
    by_key = np.lexsort((pair_batch, pair_key))
    b, k = pair_batch[by_key], pair_key[by_key]
    previous = np.full(b.size, -window - 1, dtype=np.int64)
    same = np.flatnonzero(k[1:] == k[:-1]) + 1
    previous[same] = b[same - 1]
    first = np.maximum(np.maximum(b - window + 1, previous + 1), 0)
    counted = np.maximum(0, np.minimum(b, nb - window) - first + 1)
    window_mean = int(counted.sum()) / windows if windows else 0.0
    new = np.zeros(seq.size, dtype=bool)
    new[np.unique(seq, return_index=True)[1]] = True
    touched = np.cumsum(new)[np.cumsum(sizes) - 1]
    mark = counter.early_mark(anchors)
    early = 0.0
    if episodes > 0 and anchors > 0 and seq.size >= mark:
        early = float(_distinct(seq[:mark]).size / episodes)
    report = DiversityReport(batches, mean, p5, low, window_mean, early)
    return report, distinct, touched / max(1, episodes)


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique`` by a sort: numpy's hash path takes ~80x longer on a million wide ints."""
    ordered = np.sort(values)
    keep = np.ones(ordered.size, dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


def _loader_sequence(
    runs: Sequence[WorkerRun], batch_size: int, drop_last: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Every anchor's unit in the DataLoader's order (:func:`loader_order`), and the batch
    sizes: the order as arrays."""
    counts = [r.anchors for r in runs]
    per_worker = batches_per_worker(counts, batch_size, drop_last)
    rounds = np.concatenate([np.arange(b, dtype=np.int64) for b in per_worker] or [np.zeros(0, np.int64)])
    worker = np.repeat(np.arange(len(runs), dtype=np.int64), per_worker)
    order = np.lexsort((worker, rounds))  # round by round, worker 0 first
    rounds, worker = rounds[order], worker[order]
    start = rounds * batch_size
    sizes = np.minimum(batch_size, np.asarray(counts, np.int64)[worker] - start) if len(runs) else start
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    at = np.repeat(offsets[worker] + start, sizes) + within
    every = np.concatenate([r.episodes for r in runs]) if runs else np.zeros(0, np.int64)
    return every[at], sizes
