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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.episodes.stream.decoded import DECODE_AHEAD
from feedline.streaming.schedule.diversity import BatchDiversity, DiversityReport
from feedline.streaming.schedule.elastic import epoch_start
from feedline.streaming.schedule.loader import loader_batches
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
                [int(e) for e in order], epoch=epoch, rank=rank, part=part,
                num_workers=num_workers, batch_size=batch_size, remainder=due,
            )
            episodes, frames = pool.take(pool.anchors_remaining)
            admission = fetch_order(episodes)  # the pipeline's fetch order
            nbytes = np.fromiter((dataset.episode_bytes[int(u)] for u in admission), np.int64,
                                 admission.size)
            limit = max(slot.share(settings.episode_pool_size), pool.resident_limit)
            out.append(WorkerRun(rank, part, episodes, frames, admission, nbytes,
                                 limit + settings.prefetch_episodes, budget))
    return out


def frontier(run: WorkerRun, lag: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Bytes the worker's budget holds reserved as its anchors are served, when fetches keep up:
    ``(anchor index, reserved bytes)`` at every reservation change; ``lag`` anchors pass between
    an episode's last anchor and the return of its bytes (its decodes in the ordered buffer)."""
    last = np.full(run.admission.size, -1, dtype=np.int64)
    position = {int(u): i for i, u in enumerate(run.admission.tolist())}
    order = np.fromiter((position[int(u)] for u in run.episodes.tolist()), np.int64,
                        run.episodes.size)
    np.maximum.at(last, order, np.arange(order.size))
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
    for i, (u, f) in enumerate(zip(run.episodes[:n].tolist(), run.frames[:n].tolist(), strict=True)):
        length = int(lengths[u])
        for camera, offsets in windows.items():
            size = int(frame_bytes[camera])
            cam = state.get((u, camera))
            if cam is None:
                cam = state[(u, camera)] = _Camera(length, offsets, keyframes.get((u, camera)))
            wanted = np.clip(f + offsets, 0, length - 1).tolist()
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
        self.uses = np.zeros(length, dtype=np.int64)
        for d in offsets.tolist():
            np.add.at(self.uses, np.clip(np.arange(length) + d, 0, length - 1), 1)
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
    episodes: int,
) -> tuple[DiversityReport, np.ndarray, np.ndarray]:
    """The diversity of one rank's batches (``keys(units)``: what counts as one episode):
    its report, the distinct episodes of each batch, and the share of the rank's episodes
    touched after each batch."""
    counter = BatchDiversity(batch_size)
    anchors = sum(r.anchors for r in runs)
    counter.begin_epoch(episodes, anchors)
    distinct: list[int] = []
    touched: set[int] = set()
    share: list[float] = []
    for w, start, size in loader_order(runs, batch_size, drop_last):
        batch = np.asarray(keys(runs[w].episodes[start : start + size]), dtype=np.int64)
        counter.record(batch)
        distinct.append(int(np.unique(batch).size))
        touched.update(batch.tolist())
        share.append(len(touched) / max(1, episodes))
    return counter.report(), np.asarray(distinct), np.asarray(share)
