"""``StreamingEpisodeDataset``: LeRobot v3 episodes streamed under a byte budget, sample-exact resume.

Same constructor as :class:`~feedline.episodes.dataset.EpisodeDataset` plus the streaming knobs.
Each epoch (``set_epoch``) this rank owns whole episodes (:func:`~feedline.episodes.schedule.plan.plan_shards`
over ``rank``/``world_size``, default :func:`~feedline.episodes.schedule.plan.resolve_rank_and_world`);
each DataLoader worker serves one part through an exact-coverage
:class:`~feedline.episodes.schedule.pool.EpisodePool`, fetching whole episodes (Parquet rows + mini-MP4
bytes) under an :class:`~feedline.episodes.schedule.admission.EpisodeByteCache` and decoding samples on
threads (:mod:`feedline.episodes.stream.pipeline`). Every sample equals the map-style dataset's sample of
the same frame; every selected frame is yielded exactly once per epoch over ranks and workers.

Resume: the checkpoint counts what the training loop *consumed*, so iterate through
:meth:`track`, which wraps the DataLoader and counts its batches::

    ds = StreamingEpisodeDataset(root=..., delta_timestamps=...)
    loader = DataLoader(ds, batch_size=8, num_workers=2)
    ds.load_state_dict(checkpoint["dataset"])        # optional, before iterating
    for batch in ds.track(loader):                   # one epoch; the next call runs the next one
        ...
        checkpoint["dataset"] = ds.state_dict()

Image transforms run on the thread that iterates the dataset (the training thread with
``num_workers=0``), in schedule order, so the same seed gives the same transforms.
``persistent_workers=True`` (lerobot-train's default, with ``prefetch_factor=4``) works: before
each pass the training process publishes the epoch and each worker's resume offset in shared
memory, and workers read it when their next pass starts.
The dataset, its pool, tracker and pipeline share one checkpoint contract
(:class:`~feedline.episodes.schedule.state.Stateful`).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.context as mp_context
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from feedline.episodes.assemble import assemble_sample
from feedline.episodes.base import EpisodeDatasetBase
from feedline.episodes.errors import EpisodeTooLargeError, ResumeMismatchError, StreamingError
from feedline.episodes.schedule.admission import (
    DEFAULT_BYTE_BUDGET_GB,
    DEFAULT_PREFETCH_EPISODES,
    EpisodeByteCache,
)
from feedline.episodes.schedule.plan import plan_shards_arrays, resolve_rank_and_world
from feedline.episodes.schedule.pool import (
    DEFAULT_POOL_SIZE,
    DEFAULT_SEED,
    EpisodePool,
    resolve_seed,
    worker_share,
)
from feedline.episodes.schedule.resume import (
    ConsumptionTracker,
    ResumePosition,
    ResumeSettings,
    ResumeState,
    rank_batch_counts,
    resume_position,
    sampler_identity,
)
from feedline.episodes.schedule.state import Stateful
from feedline.episodes.schedule.strategies import get_strategy
from feedline.episodes.stream.decoded import (
    DEFAULT_DECODED_CACHE_GB,
    MAX_CURSORS_PER_SLOT,
    DecodedCounters,
    DecodedFrames,
)
from feedline.episodes.stream.payload import (
    EpisodePayload,
    episode_spans,
    fetch_episode,
    parquet_episode_bytes,
    parquet_footers,
)
from feedline.episodes.stream.pipeline import (
    DEFAULT_DECODE_THREADS,
    DEFAULT_DECODED_QUEUE_SIZE,
    DEFAULT_MAX_NUM_SHARDS,
    EpisodePipeline,
    PipelineMetrics,
)
from feedline.validate import check_int

__all__ = ["StreamingEpisodeDataset"]

log = logging.getLogger(__name__)
_warned_in_process = False


def _warn_in_process_threads() -> None:
    """Once per process: iterating in the training process with torch's intra-op pool of
    several threads. Its threads spin-wait after every parallel op (collate's stack among them)
    on the cores the decode threads need: measured 4x fewer samples/s at 96x128 on 2 cores than
    with ``torch.set_num_threads(1)``, which DataLoader workers set for themselves."""
    global _warned_in_process
    if _warned_in_process or torch.get_num_threads() <= 1:
        return
    _warned_in_process = True
    log.warning(
        "StreamingEpisodeDataset is iterated in the training process while torch uses %d "
        "intra-op threads, which compete with its decode threads: use DataLoader(num_workers>=1) "
        "(each worker runs torch with one thread) or torch.set_num_threads(1)",
        torch.get_num_threads(),
    )


# Counters shared by every worker of one dataset: one row per process (the training process,
# then DataLoader worker ids), each written by one process only, so no lock (a lock would tie
# the array to one multiprocessing start method); rows are summed, the peak is a maximum.
_METRICS = ("samples", "bytes_fetched", "episodes_fetched", "refill_stalls",
            "refill_stall_us", "peak_reserved_bytes", "outside_fetches", "decoded_frames",
            "redecoded_frames", "delivered_frames", "decoder_opens", "peak_decoded_bytes")
_ROWS = 64
_PEAKS = {_METRICS.index("peak_reserved_bytes"), _METRICS.index("peak_decoded_bytes")}
# Where each worker reads the epoch and its resume offset when its iteration starts: the
# training process writes them before every ``iter(loader)``, so persistent workers (which keep
# their copy of the dataset from the first epoch) follow epochs and resumes too.
_CONTROL_EPOCH, _CONTROL_SET, _CONTROL_OFFSETS = 0, 1, 2


def _setting(name: str, value: Any, minimum: int) -> int:
    return check_int(name, value, minimum=minimum, error=StreamingError)


def _batch_len(batch: Any) -> int:
    if isinstance(batch, Mapping):
        for value in batch.values():
            if isinstance(value, torch.Tensor | list | tuple):
                return len(value)
    return len(batch)


class StreamingEpisodeDataset(EpisodeDatasetBase, IterableDataset, Stateful):
    """Streaming LeRobot v3 dataset: whole episodes fetched under a byte budget, in seeded order.

    A *rank* is one training process of ``world_size``; it owns whole episodes and reads them
    with its DataLoader's N workers (``num_workers=0``: one worker, in process). Limits given
    per rank are split 1/N per worker (at least 1 each); the others apply to every worker.
    See the module docstring for the resume loop.

    Args:
        repo_id: ``OWNER/NAME`` of a Hub dataset, as for
            :class:`~feedline.episodes.dataset.EpisodeDataset`. Default ``None`` (give ``root``).
        episode_pool_size: most whole episodes mixed at once per rank; each worker's
            exact-coverage pool holds 1/N of them. Larger mixes more, holds more bytes.
            Default 32.
        sampling_strategy: how a worker's pool orders the frames of its resident episodes, a key
            of :data:`~feedline.episodes.schedule.strategies.POOL_STRATEGIES`: ``"remaining"``
            (default) draws weighted by remaining frames; ``"round_robin"`` shuffles the resident
            episodes each round and takes one shuffled frame of each. Both yield every frame
            exactly once per epoch.
        prefetch_episodes: episodes each worker may fetch ahead of what its pool needs now, per
            worker (within the byte budget). Default 8.
        byte_budget_gb: most GiB of fetched payload (mini-MP4s plus Parquet row groups) held per
            rank, 1/N per worker: pending fetches, prefetched and still-decoding episodes all
            count. An episode larger than one worker's share fails before anything is fetched.
            Bounds compressed payload, not RSS. Default 8.
        decode_threads: threads per worker assembling windows and decoding frames. Default 2.
        decoded_queue_size: decoded samples each worker holds ready ahead, in schedule order.
            Default 8.
        max_num_shards: episodes fetched in parallel per worker (Parquet rows and MP4 byte
            ranges; LeRobot's name). Default 16.
        decoded_cache_gb: most GiB of decoded RGB frames held per rank, 1/N per worker. Within
            it every frame of a resident episode is decoded and colour-converted once and the
            windows are gathered from memory; a frame it cannot hold is decoded again when a
            later sample needs it (``metrics()["redecoded_frames"]``), never exceeding it. 0
            keeps none. Default 4 (see :data:`~feedline.episodes.stream.decoded.DEFAULT_DECODED_CACHE_GB`).
        seed: with the epoch, seeds the shard plan and every pool: the same seed repeats the
            order, another seed gives another. Default 1000 (lerobot-train's ``--seed``);
            ``None`` uses the fixed streaming seed 42.
        rank: this process's rank. Default ``None``: from ``torch.distributed`` when
            initialised, else the ``RANK`` environment variable, else 0.
        world_size: number of ranks. Default ``None``: from ``torch.distributed`` when
            initialised, else ``WORLD_SIZE``, else 1. Each rank needs at least one episode.
        allow_order_change: resume from a checkpoint taken with other order settings (world
            size, batch size, workers, seed, pool) at the nearest epoch boundary, with a
            warning, instead of refusing it. Default ``False``.
        **source_options: the arguments of :class:`~feedline.episodes.dataset.EpisodeDataset`
            (``root``, ``repo_type``, ``revision``, ``episodes``, ``delta_timestamps``,
            ``tolerance_s``, ``return_uint8``, ``storage_options``, ``sidecar_lock_timeout_s``),
            with the same meaning, and: ``image_transforms`` runs on the thread iterating the
            dataset, in schedule order; ``decoder_cache_size`` is the most open video decoders
            (up to two per resident episode and camera: one decoding forward, one filling the
            frames before where the first sample started) per rank, 1/N per worker, least
            recently used closed first, at least one per worker (default: 2 x
            ``episode_pool_size`` x cameras; about 3 MiB each at 480x640).
    """

    def __init__(
        self,
        repo_id: str | None = None,
        *,
        episode_pool_size: int = DEFAULT_POOL_SIZE,
        sampling_strategy: str = "remaining",
        prefetch_episodes: int = DEFAULT_PREFETCH_EPISODES,
        byte_budget_gb: float = DEFAULT_BYTE_BUDGET_GB,
        decode_threads: int = DEFAULT_DECODE_THREADS,
        decoded_queue_size: int = DEFAULT_DECODED_QUEUE_SIZE,
        max_num_shards: int = DEFAULT_MAX_NUM_SHARDS,
        decoded_cache_gb: float = DEFAULT_DECODED_CACHE_GB,
        seed: int | None = DEFAULT_SEED,
        rank: int | None = None,
        world_size: int | None = None,
        allow_order_change: bool = False,
        **source_options: Any,
    ) -> None:
        get_strategy(sampling_strategy, setting="sampling_strategy")  # settings first: no I/O yet
        self.sampling_strategy = sampling_strategy
        self.episode_pool_size = _setting("episode_pool_size", episode_pool_size, 1)
        self.prefetch_episodes = _setting("prefetch_episodes", prefetch_episodes, 0)
        if not byte_budget_gb > 0:
            raise StreamingError(f"byte_budget_gb must be > 0, got {byte_budget_gb!r}")
        self.byte_budget_gb = float(byte_budget_gb)
        self.decode_threads = _setting("decode_threads", decode_threads, 1)
        self.decoded_queue_size = _setting("decoded_queue_size", decoded_queue_size, 1)
        self.max_num_shards = _setting("max_num_shards", max_num_shards, 1)
        if not decoded_cache_gb >= 0:
            raise StreamingError(f"decoded_cache_gb must be >= 0, got {decoded_cache_gb!r}")
        self.decoded_cache_gb = float(decoded_cache_gb)
        decoders = source_options.get("decoder_cache_size")
        self._decoders_per_rank = None if decoders is None else _setting(
            "decoder_cache_size", decoders, 0
        )
        self.seed = resolve_seed(seed)
        if rank is None and world_size is None:
            rank, world_size = resolve_rank_and_world()
        self.world_size = _setting("world_size", 1 if world_size is None else world_size, 1)
        self.rank = _setting("rank", 0 if rank is None else rank, 0)
        if self.rank >= self.world_size:
            raise StreamingError(f"rank {self.rank} is not in range for world_size {self.world_size}")
        self.allow_order_change = bool(allow_order_change)
        super().__init__(repo_id, **source_options)

        table = self.episode_table
        self.episode_lengths: dict[int, int] = {
            int(e): int(n) for e, n in zip(table.episode_index, table.length, strict=True)
        }
        self.parquet_footers = parquet_footers(self.store, table)  # read once, shipped to workers
        parquet = parquet_episode_bytes(self.store, table, self.parquet_footers)
        self.spans = episode_spans(table, self.frame_reader(), self.fps, parquet, self.tolerance_s)
        self.episode_bytes: dict[int, int] = {ep: s.nbytes for ep, s in self.spans.items()}
        budget = self.rank_budget_bytes
        for ep, nbytes in self.episode_bytes.items():  # before any payload is fetched
            if nbytes > budget:
                raise EpisodeTooLargeError(ep, nbytes, budget)
        self.sampler_identity = sampler_identity(self.episode_lengths, self.episode_bytes)
        plan_shards_arrays(  # fail now, not in a worker, when ranks outnumber episodes
            self.episode_lengths, world_size=self.world_size, num_workers=0, seed=self.seed,
            epoch=0,
        )
        self.epoch = 0
        self._tracker: ConsumptionTracker | None = None
        self._pending_state: dict[str, Any] | None = None
        self._position: ResumePosition | None = None
        self._shared = mp.RawArray("q", _ROWS * len(_METRICS))
        self._control = mp.RawArray("q", _CONTROL_OFFSETS + _ROWS + 1)

    # ---- settings --------------------------------------------------------------------------

    @property
    def rank_budget_bytes(self) -> int:
        """``byte_budget_gb`` in bytes: the budget of this rank, shared by its workers."""
        return int(self.byte_budget_gb * 2**30)

    @property
    def decoders_per_rank(self) -> int:
        """Open decoders per rank (``decoder_cache_size``; default 2 x pool x cameras)."""
        if self._decoders_per_rank is not None:
            return self._decoders_per_rank
        return MAX_CURSORS_PER_SLOT * self.episode_pool_size * max(1, len(self.video_keys))

    @property
    def pool_settings(self) -> dict[str, Any]:
        """Every pool knob that changes the anchor order (the pool admits by bytes too)."""
        return {"pool_size": self.episode_pool_size, "byte_budget": self.rank_budget_bytes}

    def resume_settings(self, batch_size: int, num_workers: int, drop_last: bool) -> ResumeSettings:
        """Everything that fixes this rank's order and batches under a DataLoader's settings."""
        return ResumeSettings(
            seed=self.seed, strategy=self.sampling_strategy, pool_settings=self.pool_settings,
            world_size=self.world_size, batch_size=int(batch_size),
            num_workers=int(num_workers), drop_last=bool(drop_last),
            sampler_identity=self.sampler_identity,
        )

    def rank_frames(self, epoch: int | None = None) -> int:
        """Frames this rank yields in ``epoch`` (default: the current one)."""
        report = plan_shards_arrays(
            self.episode_lengths, world_size=self.world_size, num_workers=0, seed=self.seed,
            epoch=self.epoch if epoch is None else epoch,
        ).report
        return report.rank_frames[self.rank]

    def batches_per_rank(
        self, batch_size: int, num_workers: int, drop_last: bool = False, epoch: int | None = None
    ) -> list[int]:
        """Batches every rank's DataLoader yields in ``epoch``.

        Ranks are balanced by frames, not made equal, so the counts can differ by a few; a DDP
        loop stops every rank at ``min(...)`` so that no rank waits alone in a collective.
        """
        return rank_batch_counts(
            self.episode_lengths, self.resume_settings(batch_size, num_workers, drop_last),
            epoch=self.epoch if epoch is None else epoch,
        )

    def __len__(self) -> int:
        return self.rank_frames()

    def __repr__(self) -> str:
        return (
            f"StreamingEpisodeDataset(root={self.root_url!r}, episodes={self.num_episodes}, "
            f"frames={self.num_frames}, rank={self.rank}/{self.world_size}, epoch={self.epoch})"
        )

    # ---- epochs and resume -------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch``'s order next (a resume position of another epoch is dropped)."""
        if int(epoch) != self.epoch:
            self._position = None
            self._pending_state = None
        self.epoch = int(epoch)
        self._write_control(self._position)

    def _write_control(self, position: ResumePosition | None) -> None:
        """Tell the workers (persistent ones too) the epoch and offsets their next pass serves."""
        control = self._control
        offsets = () if position is None or position.epoch != self.epoch else position.worker_offsets
        control[_CONTROL_EPOCH] = self.epoch
        control[_CONTROL_OFFSETS] = len(offsets)
        control[_CONTROL_OFFSETS + 1 : _CONTROL_OFFSETS + 1 + len(offsets)] = list(offsets)
        control[_CONTROL_SET] = 1 + (position.worker_rotation if offsets else 0)

    def _read_control(self) -> ResumePosition | None:
        control = self._control
        if control is None or not control[_CONTROL_SET]:
            return None
        parts = control[_CONTROL_OFFSETS]
        offsets = tuple(control[_CONTROL_OFFSETS + 1 : _CONTROL_OFFSETS + 1 + parts])
        return ResumePosition(
            control[_CONTROL_EPOCH], 0, offsets, True, worker_rotation=control[_CONTROL_SET] - 1
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a checkpoint taken by :meth:`state_dict`; call before iterating.

        Refuses (``ResumeMismatchError``) a checkpoint whose order settings differ, naming them,
        unless ``allow_order_change=True`` (then the nearest epoch boundary, with a warning).
        """
        saved = ResumeState.from_dict(state)
        settings = self.resume_settings(saved.batch_size, saved.num_workers, saved.drop_last)
        position = resume_position(
            saved, settings, self.episode_lengths, rank=self.rank,
            allow_order_change=self.allow_order_change,
        )
        self._pending_state = dict(state)
        self._position = position
        self.epoch = position.epoch
        self._write_control(position)

    def state_dict(self) -> dict[str, Any]:
        """What the training loop consumed on this rank (needs :meth:`track`)."""
        if self._tracker is not None:
            return self._tracker.state_dict()
        if self._pending_state is not None:
            return dict(self._pending_state)
        raise StreamingError(
            "state_dict() counts the batches the training loop consumed: iterate with "
            "`for batch in dataset.track(loader)` to make the reader checkpointable"
        )

    def track(self, loader: Any) -> Iterator[Any]:
        """Iterate ``loader`` (a DataLoader over this dataset) for one epoch, counting batches."""
        if loader.dataset is not self:
            raise StreamingError("track(loader) needs a DataLoader over this dataset")
        settings = self.resume_settings(loader.batch_size or 1, loader.num_workers, loader.drop_last)
        tracker = ConsumptionTracker(
            settings, self.episode_lengths, rank=self.rank, epoch=self.epoch,
            allow_order_change=self.allow_order_change,
        )
        if self._pending_state is not None:
            tracker.load_state_dict(self._pending_state)
            self._pending_state = None
        self._tracker = tracker
        self.epoch = tracker.epoch
        self._position = tracker.position
        self._write_control(self._position)
        return self._tracked(loader, tracker)

    def _tracked(self, loader: Any, tracker: ConsumptionTracker) -> Iterator[Any]:
        iterator = iter(loader)  # workers start (with this position) or the in-process iterator
        self._position = None
        for batch in iterator:
            tracker.record_batch(_batch_len(batch))
            yield batch
        tracker.next_epoch()
        self.epoch = tracker.epoch
        self._write_control(None)

    # ---- metrics ------------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Counters summed over every worker of this dataset so far (all epochs).

        ``samples``, ``bytes_fetched``, ``episodes_fetched``, ``refill_stalls``,
        ``refill_stall_s`` and ``outside_fetches`` as in
        :class:`~feedline.episodes.stream.pipeline.PipelineMetrics`;
        ``peak_reserved_bytes`` is the largest byte reservation one worker held (its budget is
        ``rank_budget_bytes / num_workers``). Decoding
        (:class:`~feedline.episodes.stream.decoded.DecodedCounters`): ``decoded_frames``
        (re-decodes included), ``redecoded_frames``, ``delivered_frames`` (distinct frames
        handed to samples while their episode was resident), ``decoded_per_delivered`` (1.0
        when each frame is decoded once), ``decoder_opens`` and ``peak_decoded_bytes`` (the
        most decoded RGB bytes one worker held; its limit is ``decoded_cache_gb / num_workers``).
        """
        width = len(_METRICS)
        rows = np.asarray(self._shared[:], dtype=np.int64).reshape(_ROWS, width)
        values: dict[str, Any] = {
            name: int(rows[:, i].max() if i in _PEAKS else rows[:, i].sum())
            for i, name in enumerate(_METRICS)
        }
        values["refill_stall_s"] = values.pop("refill_stall_us") / 1e6
        delivered = values["delivered_frames"]
        values["decoded_per_delivered"] = values["decoded_frames"] / delivered if delivered else 0.0
        return values

    def reset_metrics(self) -> None:
        """Zero every counter of :meth:`metrics` (all workers)."""
        self._shared[:] = [0] * (_ROWS * len(_METRICS))

    def _publish(
        self, metrics: PipelineMetrics, decoded: DecodedCounters, published: dict[str, int],
        row: int,
    ) -> None:
        current = {
            "decoded_frames": decoded.decoded_frames, "redecoded_frames": decoded.redecoded_frames,
            "delivered_frames": decoded.delivered_frames, "decoder_opens": decoded.decoder_opens,
            "peak_decoded_bytes": decoded.peak_decoded_bytes,
            "peak_reserved_bytes": metrics.peak_reserved_bytes,
            "samples": metrics.samples, "bytes_fetched": metrics.bytes_fetched,
            "episodes_fetched": metrics.episodes_fetched, "refill_stalls": metrics.refill_stalls,
            "refill_stall_us": int(metrics.refill_stall_s * 1e6),
            "outside_fetches": metrics.outside_fetches,
        }
        base = (row % _ROWS) * len(_METRICS)
        for i, name in enumerate(_METRICS):
            if i in _PEAKS:
                self._shared[base + i] = max(self._shared[base + i], current[name])
            else:
                self._shared[base + i] += current[name] - published.get(name, 0)
        published.update(current)

    # ---- pickling: the shared counters travel only to spawned/forked workers -------------------

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_tracker"] = None
        if mp_context.get_spawning_popen() is None:
            state["_shared"] = state["_control"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if self._shared is None:
            self._shared = mp.RawArray("q", _ROWS * len(_METRICS))
        if self._control is None:
            self._control = mp.RawArray("q", _CONTROL_OFFSETS + _ROWS + 1)

    # ---- iteration ------------------------------------------------------------------------------

    def _current_position(
        self, num_workers: int, position: ResumePosition | None
    ) -> ResumePosition:
        parts = max(1, num_workers)
        if position is None or position.epoch != self.epoch:
            return ResumePosition(self.epoch, 0, (0,) * parts, True)
        if len(position.worker_offsets) != parts:
            if not any(position.worker_offsets):
                return ResumePosition(self.epoch, 0, (0,) * parts, True)
            raise ResumeMismatchError(
                f"cannot resume sample-exactly: the checkpoint was taken with num_workers="
                f"{len(position.worker_offsets) if len(position.worker_offsets) > 1 else 0}, "
                f"the DataLoader has num_workers={num_workers}"
            )
        return position

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        num_workers, worker_id = (info.num_workers, info.id) if info is not None else (0, 0)
        if info is None:
            _warn_in_process_threads()
            position = self._current_position(num_workers, self._position)
            self._position = None  # in-process: the position is used once
        else:  # what the training process published for this pass (persistent workers too)
            published = self._read_control()
            if published is not None:
                self.epoch = published.epoch
            position = self._current_position(
                num_workers, self._position if published is None else published
            )
        return self._samples(position, num_workers, worker_id)

    def worker_pipeline(
        self, position: ResumePosition, num_workers: int, worker_id: int
    ) -> EpisodePipeline | None:
        """The pipeline DataLoader worker ``worker_id`` runs (None when the plan leaves it idle)."""
        plan = plan_shards_arrays(
            self.episode_lengths, world_size=self.world_size, num_workers=num_workers,
            seed=self.seed, epoch=position.epoch,
        ).parts[self.rank]
        part = position.part_for_worker(worker_id)
        if part >= len(plan):
            return None
        order = [int(e) for e in plan[part]]
        cache = EpisodeByteCache.for_worker(
            byte_budget_gb=self.byte_budget_gb, pool_size=self.episode_pool_size,
            prefetch_episodes=self.prefetch_episodes, num_workers=num_workers,
        )
        cache.check_sizes({ep: self.episode_bytes[ep] for ep in order})
        pool = EpisodePool(
            order, self.episode_lengths, strategy=self.sampling_strategy,
            pool_size=worker_share(self.episode_pool_size, num_workers), seed=self.seed,
            epoch=position.epoch, rank=self.rank, worker=part,
            episode_bytes=self.episode_bytes, byte_budget=cache.budget_bytes,
        )
        pool.skip(position.offset_for_worker(worker_id))
        episodes, frames = pool.take(pool.anchors_remaining)
        reader, table = self.frame_reader(), self.episode_table
        spec = self._decode_spec()
        decoded = DecodedFrames(
            int(self.decoded_cache_gb * 2**30) // max(1, num_workers),
            worker_share(self.decoders_per_rank, num_workers),
        )

        def fetch(ep: int) -> EpisodePayload:
            return fetch_episode(self.store, reader, table, self.spans[ep], self.parquet_footers)

        def assemble(payload: EpisodePayload, frame: int) -> dict[str, Any]:
            def decode(key: str, path: str, stamps: list[float]) -> list[np.ndarray]:
                return payload.frames(reader, key, stamps, self.tolerance_s, decoded)

            return assemble_sample(spec, payload.data, frame, decode, payload.windows(spec))

        pipeline = EpisodePipeline(
            episodes, frames, order, self.episode_bytes, fetch=fetch, assemble=assemble,
            cache=cache, max_num_shards=self.max_num_shards, decode_threads=self.decode_threads,
            decoded_queue_size=self.decoded_queue_size, finish=self._transform,
        )
        pipeline.decoded = decoded  # its counters feed metrics()
        return pipeline

    def _decode_spec(self) -> Any:
        from dataclasses import replace

        return replace(self.sample_spec, image_transforms=None)  # transforms: consumer thread

    def _transform(self, item: dict[str, Any]) -> dict[str, Any]:
        if self.image_transforms is not None:
            for key in self.camera_keys:
                if key in item:
                    item[key] = self.image_transforms(item[key])
        return item

    def _samples(
        self, position: ResumePosition, num_workers: int, worker_id: int
    ) -> Iterator[dict[str, Any]]:
        pipeline = self.worker_pipeline(position, num_workers, worker_id)
        if pipeline is None:
            return
        published: dict[str, int] = {}
        row = 0 if get_worker_info() is None else 1 + worker_id
        try:
            for n, sample in enumerate(pipeline, 1):
                if n % 64 == 0:
                    self._publish(pipeline.metrics, pipeline.decoded.counters, published, row)
                yield sample
        finally:
            pipeline.close()
            self._publish(pipeline.metrics, pipeline.decoded.counters, published, row)

