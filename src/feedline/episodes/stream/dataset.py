"""``StreamingEpisodeDataset``: LeRobot v3 episodes streamed under a byte budget, sample-exact resume.

Same constructor as :class:`~feedline.episodes.mapstyle.EpisodeDataset` plus the streaming knobs.
Each epoch (``set_epoch``) this rank owns whole episodes (:func:`~feedline.streaming.schedule.plan.plan_shards`
over ``rank``/``world_size``, default :func:`~feedline.streaming.schedule.plan.resolve_rank_and_world`);
each DataLoader worker serves one part through an exact-coverage
:class:`~feedline.streaming.schedule.pool.EpisodePool`, fetching whole episodes (Parquet rows + mini-MP4
bytes) under an :class:`~feedline.streaming.budget.ByteBudget` and decoding samples on
threads (:mod:`feedline.streaming.pipeline`). Every sample equals the map-style dataset's sample of
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
(:class:`~feedline.streaming.schedule.state.Stateful`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from feedline.episodes.base import EpisodeDatasetBase
from feedline.episodes.errors import MixtureError, StreamingError
from feedline.episodes.mixture.feed import MixtureFeed, SingleFeed, open_mixture
from feedline.episodes.mixture.sources import Mixture, Source
from feedline.episodes.settings import DEFAULTS, StreamingSettings
from feedline.episodes.stream.decoded import MAX_CURSORS_PER_SLOT, DecodedCounters, DecodedFrames
from feedline.episodes.stream.events import EventLog, follow
from feedline.episodes.stream.inprocess import warn_in_process_threads
from feedline.episodes.stream.source import StreamSource
from feedline.io.redact import redact_text
from feedline.streaming.batches import batch_episodes
from feedline.streaming.budget import ByteBudget
from feedline.streaming.pipeline import UnitPipeline
from feedline.streaming.reader import StreamingReader
from feedline.streaming.schedule.diversity import BatchDiversity, DiversityReport, ideal_diversity
from feedline.streaming.schedule.elastic import PoolMaker
from feedline.streaming.schedule.plan import plan_shards_arrays, resolve_rank_and_world
from feedline.streaming.schedule.resume import ConsumptionTracker
from feedline.streaming.schedule.slot import WorkerSlot

__all__ = ["StreamingEpisodeDataset"]

log = logging.getLogger(__name__)
_SETTING_NAMES = frozenset(f.name for f in fields(StreamingSettings))


class StreamingEpisodeDataset(EpisodeDatasetBase, StreamingReader, IterableDataset):
    """Streaming LeRobot v3 dataset: whole episodes fetched under a byte budget, in seeded order.

    A *rank* is one training process of ``world_size``; it owns whole episodes and reads them
    with its DataLoader's N workers (``num_workers=0``: one worker, in process). Limits given
    per rank are split 1/N per worker (at least 1 each); the others apply to every worker.
    See the module docstring for the resume loop.

    Args:
        repo_id: ``OWNER/NAME`` of a Hub dataset, as for
            :class:`~feedline.episodes.mapstyle.EpisodeDataset`. Default ``None`` (give ``root``).
        episode_pool_size: most whole episodes mixed at once per rank; each worker's
            exact-coverage pool holds 1/N of them. Larger mixes more, holds more bytes.
            Default 256.
        sampling_strategy: how a worker's pool orders the frames of its resident episodes, a key
            of :data:`~feedline.streaming.schedule.strategies.POOL_STRATEGIES`: ``"spread"``
            plays each resident episode forward from a random frame, its frames evenly spaced
            over one shared stay (batches mix about as many episodes as a global shuffle, each
            frame decoded once); ``"remaining"`` draws weighted by remaining frames;
            ``"round_robin"`` shuffles the resident episodes each round and takes one shuffled
            frame of each. All three yield every frame exactly once per epoch. Default
            ``"spread"``.
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
            keeps none. Default 4.
        seed: with the epoch, seeds the shard plan and every pool: the same seed repeats the
            order, another seed gives another. Default 1000 (lerobot-train's ``--seed``);
            ``None`` uses the fixed streaming seed 42.
        rank: this process's rank. Default ``None``: from ``torch.distributed`` when
            initialised, else the ``RANK`` environment variable, else 0.
        world_size: number of ranks. Default ``None``: from ``torch.distributed`` when
            initialised, else ``WORLD_SIZE``, else 1. Each data-parallel group needs at least
            one episode.
        allow_order_change: resume from a checkpoint taken with other order settings (seed,
            strategy, pool) at the nearest epoch boundary, with a warning, instead of refusing
            it. Another world size, batch size or worker count needs no flag: it resumes
            mid-epoch with exactly the anchors not yet consumed. Default ``False``.
        outage_s: seconds the store may fail transiently (a restart, a failover, throttling)
            while every read is retried with capped, jittered backoff: the epoch resumes with the
            same samples when it answers again, after one warning per process; past it the
            epoch stops with one line naming the store. Default 60.
        replication: N consecutive ranks (``rank // N`` alike) read identical samples, for
            tensor or context parallelism (MosaicML Streaming's ``replication``): the plan,
            exact coverage and the checkpoint count the ``world_size // N`` data-parallel
            groups. ``world_size`` must be divisible by N. Default 1.
        even_batches: how every rank (every data-parallel group) comes to the same number of
            batches in each epoch, so a DDP loop never waits alone in a collective: ``"pad"``
            (each DataLoader worker repeats a few of its own anchors after all of them, counted
            by :meth:`evened_anchors`), ``"drop"`` (it stops before its last ones) or
            ``"none"`` (the plan's counts, which differ by up to an episode). It holds for any
            batch size and ``drop_last``. Default ``"pad"``.
        sources: a mixture instead of one dataset: a list of
            :class:`~feedline.episodes.mixture.sources.Source` (or dicts of its keys, or bare roots), or a
            :class:`~feedline.episodes.mixture.sources.Mixture`. Each source gives exactly its count of
            anchors per epoch (``weight``, ``repeat`` or ``choose``); every sample carries
            ``dataset_index``; keys are the union (see :mod:`feedline.episodes.mixture.union`). Give no
            ``repo_id``/``root``/``episodes`` with it. Default ``None``: one dataset.
        epoch_size: anchors per epoch over the sources (with ``sources``). Default ``None``: the
            sum of the sources' frames when some source has a weight, else of their counts.
        batching: with ``sources``, ``"random"``: sources mix as the pools draw them. Default
            ``"random"``.
        **source_options: the arguments of :class:`~feedline.episodes.mapstyle.EpisodeDataset`
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
        episode_pool_size: int = DEFAULTS.episode_pool_size,
        sampling_strategy: str = DEFAULTS.sampling_strategy,
        prefetch_episodes: int = DEFAULTS.prefetch_episodes,
        byte_budget_gb: float = DEFAULTS.byte_budget_gb,
        decode_threads: int = DEFAULTS.decode_threads,
        decoded_queue_size: int = DEFAULTS.decoded_queue_size,
        max_num_shards: int = DEFAULTS.max_num_shards,
        decoded_cache_gb: float = DEFAULTS.decoded_cache_gb,
        seed: int | None = DEFAULTS.seed,
        rank: int | None = None,
        world_size: int | None = None,
        allow_order_change: bool = DEFAULTS.allow_order_change,
        outage_s: float = DEFAULTS.outage_s,
        replication: int = DEFAULTS.replication,
        even_batches: str = DEFAULTS.even_batches,
        sources: Sequence[Source | Mapping[str, Any] | str] | Mixture | None = None,
        epoch_size: int | None = None,
        batching: str = "random",
        **source_options: Any,
    ) -> None:
        self.settings = StreamingSettings(  # settings first: no I/O yet
            episode_pool_size=episode_pool_size, sampling_strategy=sampling_strategy,
            prefetch_episodes=prefetch_episodes, byte_budget_gb=byte_budget_gb,
            decode_threads=decode_threads, decoded_queue_size=decoded_queue_size,
            decoded_cache_gb=decoded_cache_gb,
            decoder_cache_size=source_options.get("decoder_cache_size"),
            max_num_shards=max_num_shards, seed=seed, allow_order_change=allow_order_change,
            outage_s=outage_s, replication=replication, even_batches=even_batches,
        )
        if rank is None and world_size is None:
            rank, world_size = resolve_rank_and_world()
        #: This rank's place; each worker's is this with its ``num_workers`` and ``worker_id``.
        self.slot = WorkerSlot(
            rank=0 if rank is None else rank, world_size=1 if world_size is None else world_size,
            replication=self.settings.replication,
        )
        if self.settings.replication > 1:
            log.info(
                "replication %d: rank %d reads the samples of data-parallel group %d of %d "
                "(ranks %d..%d)", self.settings.replication, self.rank, self.data_rank,
                self.data_world_size, self.data_rank * self.settings.replication,
                (self.data_rank + 1) * self.settings.replication - 1,
            )
        if sources is None:
            if epoch_size is not None or batching != "random":
                raise MixtureError("epoch_size and batching apply to a mixture: pass sources=[...]")
            super().__init__(repo_id, **source_options)
            self.feed: SingleFeed | MixtureFeed = SingleFeed(StreamSource(self))
            source = self.feed.source
            self.episode_lengths: dict[int, int] = source.episode_lengths
            self.parquet_footers = source.parquet_footers
            self.spans = source.spans
        else:
            if repo_id is not None:
                raise MixtureError("give the datasets as repo_id/root or as sources=[...], not both")
            self.feed = open_mixture(self, sources, epoch_size, batching, source_options)
        #: Payload bytes per unit (per episode of one dataset).
        self.episode_bytes: Mapping[int, int] = self.feed.unit_bytes
        self.slot.check_fits(self.episode_bytes, self.rank_budget_bytes)  # before any fetch
        self.sampler_identity = self.feed.identity
        #: How every worker builds its pool; the resume replay of an earlier topology uses it too.
        self.pool_maker = PoolMaker(
            self.sampling_strategy, self.episode_pool_size, self.seed, self.episode_lengths,
            self.rank_budget_bytes, self.episode_bytes, groups=self.feed.groups,
            stratified=self.feed.stratified,
        )
        self._batch_size: int | None = None  # a stratified mixture's, from track(loader)
        #: The stage-event recorder (:mod:`feedline.episodes.stream.events`), set by
        #: :meth:`record_events`; ``None``, the default, records nothing.
        self.event_log: EventLog | None = None
        plan_shards_arrays(  # fail now, not in a worker, when ranks outnumber episodes
            self.feed.epoch_lengths(0), world_size=self.data_world_size, num_workers=0,
            seed=self.seed, epoch=0,
        )
        self._init_loop(counters=(DecodedCounters,))
        self._diversity = BatchDiversity()  # counted in the training process, per batch taken

    @property
    def num_episodes(self) -> int:
        return sum(len(s.episode_lengths) for s in self.feed.sources)

    @property
    def mixture(self) -> Mixture | None:
        """The sources and mixture-wide settings (``None``: one dataset)."""
        return getattr(self.feed, "mixture", None)

    # ---- settings --------------------------------------------------------------------------
    @property
    def store_outage_s(self) -> float:  # type: ignore[override]
        """The store rides out failures for ``outage_s`` (see the base's :meth:`_open_store`)."""
        return self.settings.outage_s

    def __getattr__(self, name: str) -> Any:
        """Each setting reads as an attribute (``ds.byte_budget_gb``), from :attr:`settings`."""
        settings = self.__dict__.get("settings")
        if settings is not None and name in _SETTING_NAMES:
            return getattr(settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def plan_units(self) -> Any:
        """What the plan deals: the episodes of one dataset, a mixture's units per epoch."""
        return self.feed.units

    @property
    def decoders_per_rank(self) -> int:
        """Open decoders per rank (``decoder_cache_size``; default 2 x pool x cameras)."""
        if self.settings.decoder_cache_size is not None:
            return self.settings.decoder_cache_size
        return MAX_CURSORS_PER_SLOT * self.episode_pool_size * max(1, len(self.video_keys))

    @property
    def pool_settings(self) -> dict[str, Any]:
        """Every pool knob that changes the anchor order (the pool admits by bytes too)."""
        return self.settings.pool_settings

    def rank_frames(self, epoch: int | None = None) -> int:
        """Frames this rank yields in ``epoch`` (default: the current one; see
        :meth:`~feedline.streaming.reader.StreamingReader.rank_samples`)."""
        return self.rank_samples(epoch)

    def ideal_diversity(
        self, batch_size: int, drop_last: bool = False, epoch: int | None = None, *,
        rounds: int = 4, seed: int = 0,
    ) -> DiversityReport:
        """What an ideal global shuffle of this rank's episodes of ``epoch`` would give for the
        diversity keys of :meth:`metrics`, by simulation
        (:func:`~feedline.streaming.schedule.diversity.ideal_diversity`): the figures to read the
        measured ones against, with the DataLoader's ``batch_size`` and ``drop_last``."""
        episodes = np.concatenate(self._rank_plan(epoch).parts[self.data_rank])
        due = self._due(self.epoch if epoch is None else epoch)
        lengths = [due[int(e)] for e in episodes]
        return ideal_diversity(lengths, batch_size, drop_last=drop_last, rounds=rounds, seed=seed)

    def __repr__(self) -> str:
        return (
            f"StreamingEpisodeDataset(root={redact_text(self.root_url)!r}, episodes={self.num_episodes}, "
            f"frames={self.num_frames}, rank={self.rank}/{self.world_size}, epoch={self.epoch})"
        )

    # ---- epochs and resume -------------------------------------------------------------------

    def _epoch_started(self, loader: Any, tracker: ConsumptionTracker) -> None:
        if getattr(loader, "num_workers", 0) > 0:  # before iter(loader) forks them
            for source in self.feed.sources:
                table = source.reader.episode_table
                source.reader.store.prepare_reads(table.data_files() + table.video_files())
        self._diversity.batch_size = loader.batch_size
        self._batch_size = loader.batch_size  # before iter(loader) ships the reader to workers
        report = self._rank_plan(tracker.epoch).report
        self._diversity.begin_epoch(
            report.rank_episodes[self.data_rank], report.rank_frames[self.data_rank],
            from_start=not any(tracker.position.worker_offsets),
        )

    def _batch_taken(self, batch: Any) -> None:
        episodes = batch_episodes(batch)
        if episodes is not None:
            self._diversity.record(episodes)

    # ---- metrics ------------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Counters summed over every worker of this dataset so far (all epochs).

        ``samples``, ``bytes_fetched``, ``episodes_fetched``, ``refill_stalls``,
        ``refill_stall_s`` and ``outside_fetches`` as in
        :class:`~feedline.streaming.pipeline.PipelineMetrics`;
        ``peak_reserved_bytes`` is the largest byte reservation one worker held (its budget is
        ``rank_budget_bytes / num_workers``). Decoding
        (:class:`~feedline.episodes.stream.decoded.DecodedCounters`): ``decoded_frames``
        (re-decodes included), ``redecoded_frames``, ``delivered_frames`` (distinct frames
        handed to samples while their episode was resident), ``decoded_per_delivered`` (1.0
        when each frame is decoded once), ``decoder_opens`` and ``peak_decoded_bytes`` (the
        most decoded RGB bytes one worker held; its limit is ``decoded_cache_gb / num_workers``).
        Batch diversity, counted by :meth:`track` on the batches the loop took
        (:class:`~feedline.streaming.schedule.diversity.DiversityReport`): ``diversity_batches``,
        ``batch_episodes_mean`` / ``_p5`` / ``_min`` (distinct episodes per full batch),
        ``window_episodes_mean`` (per 10 consecutive batches) and ``early_episode_share`` (of
        the rank's episodes, touched by the first 10 % of an epoch); :meth:`ideal_diversity`
        gives the same keys for a global shuffle.
        """
        values = self._board.totals()
        delivered = values["delivered_frames"]
        values["decoded_per_delivered"] = values["decoded_frames"] / delivered if delivered else 0.0
        values.update(self._diversity.report().as_dict())
        return values

    def reset_metrics(self) -> None:
        """Zero every counter of :meth:`metrics` (all workers, batch diversity too)."""
        self._board.reset_metrics()
        self._diversity.reset()

    # ---- pickling: the board's shared memory travels only to spawned/forked workers ----------

    def __getstate__(self) -> dict[str, Any]:
        if isinstance(self.feed, MixtureFeed):  # each source drops its own store
            state = self.__dict__.copy()
        else:
            state = EpisodeDatasetBase.__getstate__(self)
        state["_tracker"] = None
        return state

    # ---- iteration ------------------------------------------------------------------------------

    def _in_process(self) -> None:
        warn_in_process_threads()

    def epoch_lengths(self, epoch: int) -> Mapping[int, int]:
        return self.feed.epoch_lengths(epoch)

    @property
    def mixture_description(self) -> str:
        return self.feed.description

    @property
    def unit_bytes(self) -> Mapping[int, int]:
        """Payload bytes per unit (the floor's name for :attr:`episode_bytes`)."""
        return self.episode_bytes

    def _worker_world(self, lengths: Mapping[int, int]) -> tuple[Mapping[int, int], int, int]:
        only = self.__dict__.get("_only")
        if only is not None:  # a calibration run of `feedline plan`: these units, on this rank
            return {u: lengths[u] for u in only}, 1, 0
        return lengths, self.data_world_size, self.data_rank

    def _check_worker(self, num_workers: int) -> None:
        if self.feed.stratified and not self._batch_size:
            raise StreamingError(
                "batching='stratified' cuts each worker's batches itself: iterate with "
                "`for batch in dataset.track(loader)` so that it knows the DataLoader's batch_size"
            )

    def _pool_options(self) -> dict[str, Any]:
        return {"batch_size": self._batch_size}

    def make_pipeline(
        self, units: np.ndarray, anchors: np.ndarray, order: np.ndarray, budget: ByteBudget,
        slot: WorkerSlot,
    ) -> UnitPipeline:
        """Whole episodes fetched as mini-MP4s and Parquet rows, decoded into frames held in
        the worker's share of ``decoded_cache_gb``, image transforms on the iterating thread."""
        decoded = DecodedFrames(
            slot.share(self.settings.decoded_cache_bytes, minimum=0),
            slot.share(self.decoders_per_rank),
        )
        self.feed.prepare()  # on this thread, not on the fetch threads
        fetch = functools.partial(self.feed.fetch, decoded)
        return UnitPipeline(
            units, anchors, order, self.episode_bytes, fetch=fetch,
            assemble=self.feed.assemble, cache=budget,
            fetch_threads=self.max_num_shards, assemble_threads=self.decode_threads,
            queue_size=self.decoded_queue_size, finish=self._transform,
            counters=(decoded.counters,),  # published with the pipeline's own metrics
        )

    @property
    def batch_size(self) -> int | None:
        """The batch size of the loader :meth:`track` last ran (``None`` before any)."""
        return self._batch_size

    def record_events(self, log: EventLog | None) -> None:
        """Record every stage's events of the next passes into ``log`` (``None``: stop); set
        before iterating, so the workers are started with it (``feedline plan`` does)."""
        self.event_log = log

    @contextlib.contextmanager
    def only(self, units: Sequence[int]) -> Iterator[None]:
        """While inside, a pass reads only ``units`` of the epoch (all on this rank, shared by its
        workers as usual): ``feedline plan`` times a short real run on a few episodes. A pass
        begun inside keeps the restriction (its workers were forked with it)."""
        self.__dict__["_only"] = [int(u) for u in units]
        try:
            yield
        finally:
            self.__dict__.pop("_only", None)

    def _transform(self, item: dict[str, Any]) -> dict[str, Any]:
        if self.image_transforms is not None:
            for key in self.camera_keys:
                if key in item:
                    item[key] = self.image_transforms(item[key])
        return item

    def _serve(self, pipeline: UnitPipeline, worker_id: int) -> Iterator[Any]:
        return follow(self.event_log, pipeline, worker_id, self._batch_size)
