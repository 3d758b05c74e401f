"""``TokenDataset``: fixed windows of token files, streamed under a byte budget on the episode scheduler.

The windows are datatrove's (:mod:`feedline.text.windows`); the schedule is the episode
reader's, with chunks of consecutive windows in place of episodes: the shard plan deals whole
chunks to ranks and DataLoader workers (:func:`~feedline.episodes.schedule.plan.plan_shards_arrays`),
each worker's exact-coverage :class:`~feedline.episodes.schedule.pool.EpisodePool` mixes up to its
share of ``pool_size`` chunks from across the corpus and yields every window once per epoch, the
:class:`~feedline.episodes.stream.pipeline.EpisodePipeline` fetches chunk byte ranges ahead under the
:class:`~feedline.episodes.schedule.admission.EpisodeByteCache`, and the checkpoint is the
:class:`~feedline.episodes.schedule.resume.ConsumptionTracker`'s: sample-exact, and elastic across
world size, workers and batch size. Sources with ``weight``/``repeat``/``choose`` become
:class:`~feedline.episodes.schedule.mixture.MixtureUnits`, whose per-epoch units the plan, pools and
resume take as they are::

    ds = TokenDataset("s3://bucket/tokens", seq_len=2048, storage_options={...})
    loader = DataLoader(ds, batch_size=8, num_workers=2)
    ds.load_state_dict(checkpoint["dataset"])       # optional, before iterating
    for batch in ds.track(loader):                  # one epoch; the next call runs the next one
        ...
        checkpoint["dataset"] = ds.state_dict()
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset

from feedline.episodes.errors import EpisodesError
from feedline.episodes.schedule.admission import EpisodeByteCache
from feedline.episodes.schedule.elastic import PoolMaker
from feedline.episodes.schedule.mixture import MixtureUnits, source_counts
from feedline.episodes.schedule.plan import plan_shards_arrays, resolve_rank_and_world
from feedline.episodes.schedule.pool import fetch_order
from feedline.episodes.schedule.resume import (
    ResumePosition,
    ResumeSettings,
    rank_batch_counts,
)
from feedline.episodes.schedule.slot import WorkerSlot
from feedline.episodes.settings import DEFAULT_SEED, gib_bytes, resolve_seed
from feedline.episodes.stream.loop import TrackedReader
from feedline.episodes.stream.pipeline import EpisodePipeline
from feedline.text.corpus import TokenCorpus
from feedline.text.errors import TextError
from feedline.text.sources import TokenSource, as_sources
from feedline.text.windows import (
    ChunkTable,
    chunk_table,
    default_chunk_windows,
    positions,
    windows_in,
)
from feedline.validate import check_int

__all__ = ["TokenDataset", "TokenSource"]

log = logging.getLogger(__name__)


@dataclass
class _Chunk:
    """One fetched chunk: its tokens and what positions need (the file's document ends)."""

    tokens: np.ndarray
    start: int  # the chunk's first token in its file
    doc_ends: np.ndarray
    fetched_bytes: int
    first_window: int  # the chunk's first window in its source (files in order)
    source: int


class _UnitBytes(Mapping[int, int]):
    """Payload bytes of every unit id (a chunk of some source in some copy), computed on demand."""

    def __init__(self, units: MixtureUnits, bytes_of: list[np.ndarray]) -> None:
        self.units, self.bytes_of = units, bytes_of

    def __getitem__(self, unit: int) -> int:
        source, chunk, _ = self.units.locate(int(unit))
        return int(self.bytes_of[source][chunk])

    def __iter__(self) -> Iterator[int]:
        return iter(self.units.epoch(0).lengths)

    def __len__(self) -> int:
        return len(self.units.epoch(0).lengths)


def _fetch(corpora: list[TokenCorpus], tables: list[ChunkTable], file_windows: list[np.ndarray],
           units: MixtureUnits, seq_len: int, unit: int) -> _Chunk:
    source, chunk, _ = units.locate(unit)
    table, corpus = tables[source], corpora[source]
    file = int(table.file[chunk])
    start, end = table.token_range(chunk, seq_len)
    tokens = corpus.read_tokens(file, start, end)
    first = int(file_windows[source][file]) + int(table.first[chunk])
    return _Chunk(tokens, start, corpus.doc_ends[file], tokens.nbytes, first, source)


def _assemble(span: int, labels: bool, with_positions: bool, with_index: bool, chunk: _Chunk,
              window: int) -> dict[str, Any]:
    at = window * span
    ids = torch.from_numpy(chunk.tokens[at : at + span].astype(np.int64))
    item: dict[str, Any]
    item = {"input_ids": ids[:-1], "labels": ids[1:]} if labels else {"input_ids": ids}
    if with_positions:
        pos = torch.from_numpy(positions(chunk.doc_ends, chunk.start + at, span))
        item["positions"] = pos[:-1] if labels else pos
    if with_index:
        item["window_index"] = chunk.first_window + window
        item["source_index"] = chunk.source
    return item


class TokenDataset(TrackedReader, IterableDataset):
    """Windows of ``seq_len + 1`` tokens from token folders, each exactly once per epoch.

    Args:
        root_or_sources: a ``feedline tokenize`` output folder (path, ``http(s)://`` or ``s3://``
            URL), or a list of :class:`TokenSource` (dicts of its fields) for a weighted mixture.
        seq_len: ``L``: windows hold ``L + 1`` tokens (datatrove's ``seq_len``).
        labels: yield ``input_ids`` and ``labels`` of ``L`` tokens each (shifted by one) instead
            of ``input_ids`` of ``L + 1``. Default ``False``.
        return_positions: also yield ``positions``, restarting after every document end
            (datatrove's). Default ``False``.
        return_index: also yield ``window_index``, the window's number in its source (files in
            order, as ``DatatroveFolderDataset`` numbers them), and ``source_index``. Default ``False``.
        seed: with the epoch, seeds the plan, the pools and a mixture's cycles. Default 1000.
        rank, world_size: this process's rank and the number of ranks. Default: from
            ``torch.distributed`` when initialised, else ``RANK``/``WORLD_SIZE``, else 0 and 1.
        chunk_windows: consecutive windows fetched as one chunk (one ranged read). Default: about
            1 MiB of tokens.
        pool_size: chunks mixed at once per rank (each worker's pool holds 1/N). Default 64.
        byte_budget_mb: MiB of fetched tokens held per rank (1/N per worker). Default 512.
        prefetch_chunks: chunks each worker fetches ahead of what its pool needs. Default 8.
        fetch_threads: ranged reads in flight per worker. Default 8.
        assemble_threads: threads per worker cutting windows; 0 cuts them on the thread iterating the dataset (cheaper: a window is one slice). Default 0.
        queue_size: windows each worker holds ready ahead. Default 64.
        strategy: the pool's strategy (``"remaining"`` or ``"round_robin"``). Default ``"remaining"``.
        epoch_size: windows per epoch over all sources, with ``weight`` sources. Default: the
            sum of the sources' windows.
        allow_order_change: resume a checkpoint of other order settings at the nearest epoch
            boundary instead of refusing it. Default ``False``.
        storage_options: for the store of a root given as a path or URL. Default none.
        token_size: bytes per token of a folder with neither a manifest nor ``.ds.metadata``.
    """

    PUBLISH_EVERY = 256
    READER_NAME = "the dataset"
    LOOP_ERROR = TextError

    def __init__(
        self,
        root_or_sources: Any,
        seq_len: int,
        *,
        labels: bool = False,
        return_positions: bool = False,
        return_index: bool = False,
        seed: int | None = DEFAULT_SEED,
        rank: int | None = None,
        world_size: int | None = None,
        chunk_windows: int | None = None,
        pool_size: int = 64,
        byte_budget_mb: float = 512,
        prefetch_chunks: int = 8,
        fetch_threads: int = 8,
        assemble_threads: int = 0,
        queue_size: int = 64,
        strategy: str = "remaining",
        epoch_size: int | None = None,
        allow_order_change: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        token_size: int | None = None,
    ) -> None:
        self.seq_len = check_int("seq_len", seq_len, minimum=1, error=TextError)
        for name, value, minimum in (("pool_size", pool_size, 1), ("prefetch_chunks", prefetch_chunks, 0),
                                     ("fetch_threads", fetch_threads, 1), ("assemble_threads", assemble_threads, 0),
                                     ("queue_size", queue_size, 1)):
            check_int(name, value, minimum=minimum, error=TextError)
        if not byte_budget_mb > 0:
            raise TextError(f"byte_budget_mb must be > 0, not {byte_budget_mb!r}")
        self.labels, self.return_positions = bool(labels), bool(return_positions)
        self.return_index = bool(return_index)
        try:
            self.seed = resolve_seed(seed)
        except EpisodesError as exc:
            raise TextError(str(exc)) from None
        if rank is None and world_size is None:
            rank, world_size = resolve_rank_and_world()
        self.slot = WorkerSlot(rank=rank or 0, world_size=world_size or 1)
        self.pool_size, self.prefetch_chunks = pool_size, prefetch_chunks
        self.fetch_threads, self.assemble_threads, self.queue_size = fetch_threads, assemble_threads, queue_size
        self.strategy, self.allow_order_change = strategy, allow_order_change
        self.byte_budget_gb = float(byte_budget_mb) / 1024
        self.sources: list[TokenSource] = as_sources(root_or_sources, storage_options)
        self.corpora = [TokenCorpus(s.root, dict(s.storage_options), token_size) for s in self.sources]
        widths = {c.token_bytes for c in self.corpora}
        self.chunk_windows = chunk_windows or default_chunk_windows(seq_len, max(widths))
        check_int("chunk_windows", self.chunk_windows, minimum=1, error=TextError)
        self.tables = [chunk_table([windows_in(n, seq_len) for n in c.tokens], self.chunk_windows)
                       for c in self.corpora]
        for source, table, corpus in zip(self.sources, self.tables, self.corpora, strict=True):
            if len(table) == 0:
                raise TextError(f"{corpus.where()}: {int(corpus.tokens.sum())} tokens hold no window of "
                                f"seq_len + 1 = {seq_len + 1} tokens (source {source.label})")
        windows = [table.windows for table in self.tables]
        names = [s.label for s in self.sources]
        if len(set(names)) < len(names):  # two roots with the same last folder name
            names = [f"{i}:{name}" for i, name in enumerate(names)]
        #: How messages, the mixture line and the checkpoint name each source.
        self.source_names = names
        self.file_windows = [np.concatenate(([0], np.cumsum([windows_in(n, seq_len) for n in c.tokens])))
                             for c in self.corpora]
        try:
            counts = source_counts(windows, [s.quota for s in self.sources], epoch_size, names=names)
            self.units = MixtureUnits([dict(enumerate(t.count.tolist())) for t in self.tables], counts,
                                      seed=self.seed)
        except EpisodesError as exc:
            raise TextError(str(exc)) from None
        self.counts = counts
        span_bytes = [(seq_len + 1) * c.token_bytes for c in self.corpora]
        self.unit_bytes = _UnitBytes(self.units, [t.count * b for t, b in zip(self.tables, span_bytes, strict=True)])
        self.pool_maker = PoolMaker(strategy, pool_size, self.seed, self.units.epoch(0).lengths,
                                    gib_bytes(self.byte_budget_gb), self.unit_bytes)
        self._largest_chunk = max(int(t.count.max()) * b for t, b in zip(self.tables, span_bytes, strict=True))
        self.check_budget(0)
        self.sampler_identity = self._identity()
        self.mixture = "" if self.units.plain else "; ".join(
            f"{name}: {s.quota.describe()} = {c} windows"
            for name, s, c in zip(names, self.sources, counts, strict=True))
        try:
            plan_shards_arrays(self.units.epoch(0).lengths, world_size=self.world_size, num_workers=0,
                               seed=self.seed, epoch=0)
        except EpisodesError as exc:
            raise TextError(f"{exc} (here: chunks of {self.chunk_windows} windows; a smaller chunk_windows "
                            "gives more chunks)") from None
        self._init_loop()

    # ---- facts -------------------------------------------------------------------------------
    @property
    def windows(self) -> int:
        """Windows per epoch over every rank (a mixture's counts added up)."""
        return int(sum(self.counts))

    def check_budget(self, num_workers: int) -> None:
        """Fail before any fetch when one chunk alone exceeds a worker's share of the budget."""
        slot = WorkerSlot(num_workers=num_workers)
        rank_budget = gib_bytes(self.byte_budget_gb)
        share = slot.share(rank_budget)
        if self._largest_chunk > share:
            whose = f"one worker's share (1/{slot.parts}) of" if slot.parts > 1 else "the"
            raise TextError(
                f"a chunk of {self.chunk_windows} windows of {self.seq_len + 1} tokens is {self._largest_chunk:,} "
                f"bytes, more than {whose} byte budget ({share:,} of byte_budget_mb={rank_budget / 2**20:g}); "
                "lower chunk_windows or raise byte_budget_mb")

    def _identity(self) -> str:
        h = hashlib.sha256(b"feedline.text.dataset/v1")
        h.update(f"{self.seq_len}\0{self.chunk_windows}\0".encode())
        for corpus, count in zip(self.corpora, self.units.counts, strict=True):
            h.update(f"{corpus.identity()}\0{count}\0".encode())
        return h.hexdigest()[:32]

    def resume_settings(self, batch_size: int, num_workers: int, drop_last: bool) -> ResumeSettings:
        return ResumeSettings(
            seed=self.seed, strategy=self.strategy,
            pool_settings={"pool_size": self.pool_size, "byte_budget": gib_bytes(self.byte_budget_gb)},
            world_size=self.world_size, batch_size=int(batch_size), num_workers=int(num_workers),
            drop_last=bool(drop_last), sampler_identity=self.sampler_identity, mixture=self.mixture,
        )

    def _rank_plan(self, epoch: int | None) -> Any:
        epoch = self.epoch if epoch is None else epoch
        return plan_shards_arrays(self.units.epoch(epoch).lengths, world_size=self.world_size, num_workers=0,
                                  seed=self.seed, epoch=epoch)

    def rank_windows(self, epoch: int | None = None) -> int:
        """Windows this rank yields in ``epoch`` (default: the current one)."""
        return self._rank_plan(epoch).report.rank_frames[self.rank]

    def batches_per_rank(self, batch_size: int, num_workers: int, drop_last: bool = False,
                         epoch: int | None = None) -> list[int]:
        """Batches every rank's DataLoader yields in ``epoch``: a DDP loop stops all at the min."""
        return rank_batch_counts(self.units, self.resume_settings(batch_size, num_workers, drop_last),
                                 epoch=self.epoch if epoch is None else epoch)

    def __len__(self) -> int:
        return self.rank_windows()

    def __repr__(self) -> str:
        roots = ", ".join(c.where() for c in self.corpora)
        return (f"TokenDataset({roots}, seq_len={self.seq_len}, windows={self.windows}, "
                f"rank={self.rank}/{self.world_size}, epoch={self.epoch})")

    # ---- epochs and resume ---------------------------------------------------------------------
    @property
    def plan_units(self) -> MixtureUnits:
        return self.units

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Restore a checkpoint taken by :meth:`state_dict`; call before iterating."""
        try:
            super().restore_state(state)
        except EpisodesError as exc:  # the scheduler's refusal, under the text part's root
            raise TextError(f"TokenDataset checkpoint: {exc}") from None

    def metrics(self) -> dict[str, Any]:
        """Counters over every worker so far: ``samples`` (windows), ``bytes_fetched``,
        ``episodes_fetched`` (chunks), ``refill_stalls``/``refill_stall_s`` and
        ``peak_reserved_bytes`` (the most fetched bytes one worker held)."""
        return self._board.totals()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tracker"] = None
        return state

    # ---- iteration -----------------------------------------------------------------------------
    def worker_pipeline(self, position: ResumePosition, num_workers: int, worker_id: int) -> EpisodePipeline | None:
        """The pipeline DataLoader worker ``worker_id`` runs (None when the plan leaves it idle)."""
        due = position.remainder(self.units, self.pool_maker)
        assert due is not None  # mixture units always come as a remainder
        plan = plan_shards_arrays(due.lengths, world_size=self.world_size, num_workers=num_workers,
                                  seed=self.seed, epoch=position.epoch).parts[self.rank]
        part = position.part_for_worker(worker_id)
        if part >= len(plan):
            return None
        order = [int(u) for u in plan[part]]
        self.check_budget(num_workers)
        cache = EpisodeByteCache.for_worker(byte_budget_gb=self.byte_budget_gb, pool_size=self.pool_size,
                                            prefetch_episodes=self.prefetch_chunks, num_workers=num_workers)
        cache.check_sizes({u: self.unit_bytes[u] for u in order})
        pool = self.pool_maker(order, epoch=position.epoch, rank=self.rank, part=part,
                               num_workers=num_workers, remainder=due)
        pool.skip(position.offset_for_worker(worker_id))
        units, windows = pool.take(pool.anchors_remaining)
        return EpisodePipeline(
            units, windows, fetch_order(units).tolist(), self.unit_bytes,
            fetch=functools.partial(_fetch, self.corpora, self.tables, self.file_windows, self.units,
                                    self.seq_len),
            assemble=functools.partial(_assemble, self.seq_len + 1, self.labels, self.return_positions,
                                       self.return_index),
            cache=cache, max_num_shards=self.fetch_threads, decode_threads=self.assemble_threads,
            decoded_queue_size=self.queue_size,
        )
