"""``TokenDataset``: fixed windows of token files, streamed under a byte budget on the streaming floor.

The windows are datatrove's (:mod:`feedline.text.windows`); the schedule is the streaming floor's
(:mod:`feedline.streaming`, the episode reader's too), with chunks of consecutive windows as
units: the shard plan deals whole chunks to ranks and DataLoader workers
(:func:`~feedline.streaming.schedule.plan.plan_shards_arrays`),
each worker's exact-coverage :class:`~feedline.streaming.schedule.pool.EpisodePool` mixes up to its
share of ``pool_size`` chunks from across the corpus and yields every window once per epoch, the
:class:`~feedline.streaming.pipeline.UnitPipeline` fetches chunk byte ranges ahead under the
:class:`~feedline.streaming.budget.ByteBudget`, and the checkpoint is the
:class:`~feedline.streaming.schedule.resume.ConsumptionTracker`'s: sample-exact, and elastic across
world size, workers and batch size. Sources with ``weight``/``repeat``/``choose`` become
:class:`~feedline.streaming.schedule.mixture.MixtureUnits`, whose per-epoch units the plan, pools and
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

from feedline.streaming.budget import ByteBudget
from feedline.streaming.errors import PlanError, StreamingError, UnitKind
from feedline.streaming.pipeline import UnitPipeline
from feedline.streaming.reader import StreamingReader
from feedline.streaming.schedule.elastic import PoolMaker
from feedline.streaming.schedule.mixture import MixtureUnits, source_counts
from feedline.streaming.schedule.plan import plan_shards_arrays, resolve_rank_and_world
from feedline.streaming.schedule.slot import WorkerSlot
from feedline.text.boundaries import document_starts, segments, window_loss_mask
from feedline.text.corpus import TokenCorpus
from feedline.text.errors import TextError
from feedline.text.packing import (
    BEST_FIT_BUFFER,
    READ_GAP_BYTES,
    PackedFile,
    merged_ranges,
    pack_file,
)
from feedline.text.settings import DEFAULTS, TextSettings, renamed_keywords
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
    """One fetched chunk: its tokens, its loss bytes (``None``: no ``.ds.loss`` or none asked
    for) and what boundaries need (the file's document ends)."""

    tokens: np.ndarray
    start: int  # the chunk's first token in its file
    doc_ends: np.ndarray
    fetched_bytes: int
    first_window: int  # the chunk's first window in its source (files in order)
    source: int
    loss: np.ndarray | None = None


@dataclass(frozen=True)
class _Fields:
    """What a window's sample holds besides its tokens (the keywords of the same names)."""

    labels: bool = False
    positions: bool = False
    index: bool = False
    sequence_id: bool = False
    cu_seqlens: bool = False
    loss_mask: bool = False
    boundary: str = "eos"
    mask_after_eos: bool = False
    mask_document_start: bool = False
    ignore_index: int | None = None

    @property
    def segments(self) -> bool:
        return self.sequence_id or self.cu_seqlens or (self.positions and self.boundary != "eos")

    @property
    def masking(self) -> bool:
        return self.loss_mask or self.ignore_index is not None


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
    loss = corpus.read_loss(file, start, end) if corpus.with_loss else None
    first = int(file_windows[source][file]) + int(table.first[chunk])
    fetched = tokens.nbytes + (0 if loss is None else loss.nbytes)
    return _Chunk(tokens, start, corpus.boundary_ends[file], fetched, first, source, loss)


def _fetch_packed(corpora: list[TokenCorpus], tables: list[ChunkTable], file_windows: list[np.ndarray],
                  units: MixtureUnits, packs: list[list[PackedFile]], span: int, pad_id: int,
                  unit: int) -> _Chunk:
    """A chunk of packed rows: its documents read as a few merged ranges, laid out row by row
    (padding after them), with the rows' document ends in the chunk's own token numbering."""
    source, chunk, _ = units.locate(unit)
    table, corpus = tables[source], corpora[source]
    file, first, count = int(table.file[chunk]), int(table.first[chunk]), int(table.count[chunk])
    pack = packs[source][file]
    lo, hi = int(pack.row_first[first]), int(pack.row_first[first + count])
    starts, lengths = pack.piece_start[lo:hi], pack.piece_length[lo:hi]
    ranges, offset_of = merged_ranges(starts, lengths, READ_GAP_BYTES // corpus.token_bytes)
    flat = corpus.read_token_ranges(file, ranges)
    flat_loss = corpus.read_loss_ranges(file, ranges) if corpus.with_loss else None
    tokens = np.full(count * span, pad_id, dtype=flat.dtype)
    loss = np.zeros(count * span, dtype=bool)  # padding: never a loss
    ends: list[int] = [0]  # every row follows a boundary, the chunk's first one too
    for row in range(count):
        at = row * span
        for piece in range(int(pack.row_first[first + row]) - lo, int(pack.row_first[first + row + 1]) - lo):
            n, source_at = int(lengths[piece]), int(offset_of[piece])
            tokens[at : at + n] = flat[source_at : source_at + n]
            loss[at : at + n] = True if flat_loss is None else flat_loss[source_at : source_at + n]
            at += n
            ends.append(at)
        ends.append((row + 1) * span)  # the padding is a segment of its own
    fetched = flat.nbytes + (0 if flat_loss is None else flat_loss.nbytes)
    first_window = int(file_windows[source][file]) + first
    return _Chunk(tokens, 0, np.unique(np.asarray(ends, np.int64)), fetched, first_window, source, loss)


def _assemble(span: int, fields: _Fields, chunk: _Chunk, window: int) -> dict[str, Any]:
    at = window * span
    tokens = chunk.tokens[at : at + span].astype(np.int64)
    ids = torch.from_numpy(tokens)
    item: dict[str, Any]
    item = {"input_ids": ids[:-1], "labels": ids[1:]} if fields.labels else {"input_ids": ids}
    length = span - 1 if fields.labels else span  # the boundaries are the input tokens'
    first = chunk.start + at  # the window's first token in its file
    if fields.segments:
        starts = document_starts(chunk.doc_ends, first, length, fields.boundary)
        pos, sequence_id, cu = segments(starts, length)
        if fields.positions:
            item["positions"] = torch.from_numpy(pos)
        if fields.sequence_id:
            item["sequence_id"] = torch.from_numpy(sequence_id)
        if fields.cu_seqlens:
            item["cu_seqlens"] = torch.from_numpy(cu)
            item["cu_seqlens_count"] = int(starts.size) + 1
    elif fields.positions:
        item["positions"] = torch.from_numpy(positions(chunk.doc_ends, first, length))
    if fields.masking:
        target = at + 1 if fields.labels else at  # the loss is taken on the labels' tokens
        stored = None if chunk.loss is None else chunk.loss[target : at + span]
        mask = window_loss_mask(
            stored, chunk.doc_ends, chunk.start + target, length, boundary=fields.boundary,
            after_eos=fields.mask_after_eos, document_start=fields.mask_document_start)
        if fields.loss_mask:
            item["loss_mask"] = torch.from_numpy(mask)
        if fields.ignore_index is not None:
            labels = tokens[1:].copy()
            labels[~mask] = fields.ignore_index
            item["labels"] = torch.from_numpy(labels)
    if fields.index:
        item["window_index"] = chunk.first_window + window
        item["source_index"] = chunk.source
    return item


class TokenDataset(StreamingReader, IterableDataset):
    """Windows of ``seq_len + 1`` tokens from token folders, each exactly once per epoch.

    Args:
        root_or_sources: a ``feedline tokenize`` output folder (path, ``http(s)://`` or ``s3://``
            URL), or a list of :class:`TokenSource` (dicts of its fields) for a weighted mixture.
        seq_len: ``L``: windows hold ``L + 1`` tokens (datatrove's ``seq_len``).
        labels: yield ``input_ids`` and ``labels`` of ``L`` tokens each (shifted by one) instead
            of ``input_ids`` of ``L + 1``. Default ``False``.
        return_positions: also yield ``positions``, restarting after every document end
            (datatrove's). Default ``False``.
        boundary: which side of a document boundary the separator token is on: ``"eos"``
            (documents end with it, datatrove's) or ``"bos"`` (it starts the document after it,
            GPT-2's ``<|endoftext|>`` read as BOS); it places the document starts of
            ``positions``, ``sequence_id``, ``cu_seqlens`` and ``mask_document_start``. Default ``"eos"``.
        return_sequence_id: also yield ``sequence_id``, each token's document in the window
            from 0 (llm-foundry's), for :func:`~feedline.text.boundaries.document_mask`. Default ``False``.
        return_cu_seqlens: also yield ``cu_seqlens``, the window's cumulative document starts
            (int32, padded with the length to length + 1 entries) and ``cu_seqlens_count``, how
            many are real. Default ``False``.
        return_loss_mask: also yield ``loss_mask`` (bool, aligned with ``labels``, else with
            ``input_ids``): the ``.ds.loss`` bytes where the files have them (else all true),
            less what the two options below drop. Default ``False``.
        mask_after_eos: the loss mask drops the token after every document end (Megatron's
            ``eod_mask_loss``). Default ``False``.
        mask_document_start: the loss mask drops every document's first token. Default ``False``.
        ignore_index: with ``labels=True``, labels the loss mask drops take this value (``-100``
            is ``cross_entropy``'s default). Default ``None``: labels are left whole.
        packing: ``"cut"``: datatrove's windows across documents, the tail dropped;
            ``"best_fit"``: rows of ``L + 1`` that each start at a document, documents packed
            best-fit (:mod:`feedline.text.packing`); its rows are the units of exact coverage
            and resume, and :meth:`packing_stats` counts the tokens padded and dropped. Default ``"cut"``.
        remainder: what fills a ``best_fit`` row when no document fits its room: ``"pad"``
            (``pad_id`` tokens, dropped from the loss mask, a segment of their own) or ``"crop"``
            (the head of a document, its rest dropped). Default ``"pad"``.
        pad_id: the token id of padding. Default 0.
        return_index: also yield ``window_index``, the window's number in its source (files in
            order, as ``DatatroveFolderDataset`` numbers them), and ``source_index``. Default ``False``.
        seed: with the epoch, seeds the plan, the pools and a mixture's cycles. Default 1000;
            ``None`` uses the fixed streaming seed 42.
        rank, world_size: this process's rank and the number of ranks. Default ``None``: from
            ``torch.distributed`` when initialised, else ``RANK``/``WORLD_SIZE``, else 0 and 1.
        chunk_windows: consecutive windows fetched as one chunk (one ranged read). Default
            ``None``: about 1 MiB of tokens.
        pool_size: chunks mixed at once per rank (each worker's pool holds 1/N). Default 64.
        byte_budget_gb: GiB of fetched tokens held per rank (1/N per worker), as the episode
            reader's ``byte_budget_gb``. Default 0.5 (the old ``byte_budget_mb=512``).
        prefetch_chunks: chunks each worker fetches ahead of what its pool needs. Default 8.
        fetch_threads: ranged reads in flight per worker. Default 8.
        assemble_threads: threads per worker cutting windows; 0 cuts them on the thread iterating
            the dataset (cheaper: a window is one slice). Default 0.
        queue_size: windows each worker holds ready ahead. Default 64.
        sampling_strategy: the pool's strategy (``"remaining"``, ``"round_robin"`` or
            ``"spread"``). Default ``"remaining"``.
        epoch_size: windows per epoch over all sources, with ``weight`` sources. Default
            ``None``: the sum of the sources' windows.
        allow_order_change: resume a checkpoint of other order settings at the nearest epoch
            boundary instead of refusing it. Default ``False``.
        outage_s: seconds the store may fail transiently while reads are retried; past it the
            epoch stops with one line naming the store. Default 60.
        replication: N consecutive ranks read identical windows (tensor or context
            parallelism); the plan and the checkpoint count ``world_size // N`` groups. Default 1.
        even_batches: how every rank comes to the same number of batches in each epoch, for
            any batch size: ``"pad"`` (each worker repeats a few of its own windows, counted
            by :meth:`evened_anchors`), ``"drop"`` (it stops before its last ones) or
            ``"none"``. Default ``"pad"``.
        storage_options: for the store of a root given as a path or URL. Default ``None``.
        token_size: bytes per token of a folder with neither a manifest nor ``.ds.metadata``.
            Default ``None``: the manifest's or ``.ds.metadata``'s.
        **renamed: ``byte_budget_mb`` and ``strategy``, the keywords of earlier releases
            (accepted with a ``DeprecationWarning``).
    """

    PUBLISH_EVERY = 256
    READER_NAME = "the dataset"
    LOOP_ERROR = TextError
    UNIT_KIND = UnitKind("chunk", "tokens", "a smaller chunk_windows")

    def __init__(
        self,
        root_or_sources: Any,
        seq_len: int,
        *,
        labels: bool = False,
        return_positions: bool = False,
        return_index: bool = False,
        seed: int | None = DEFAULTS.seed,
        rank: int | None = None,
        world_size: int | None = None,
        chunk_windows: int | None = None,
        pool_size: int = DEFAULTS.pool_size,
        byte_budget_gb: float | None = None,
        prefetch_chunks: int = DEFAULTS.prefetch_chunks,
        fetch_threads: int = DEFAULTS.fetch_threads,
        assemble_threads: int = DEFAULTS.assemble_threads,
        queue_size: int = DEFAULTS.queue_size,
        sampling_strategy: str | None = None,
        epoch_size: int | None = None,
        allow_order_change: bool = DEFAULTS.allow_order_change,
        outage_s: float = DEFAULTS.outage_s,
        replication: int = DEFAULTS.replication,
        even_batches: str = DEFAULTS.even_batches,
        boundary: str = DEFAULTS.boundary,
        return_sequence_id: bool = DEFAULTS.return_sequence_id,
        return_cu_seqlens: bool = DEFAULTS.return_cu_seqlens,
        return_loss_mask: bool = DEFAULTS.return_loss_mask,
        mask_after_eos: bool = DEFAULTS.mask_after_eos,
        mask_document_start: bool = DEFAULTS.mask_document_start,
        ignore_index: int | None = DEFAULTS.ignore_index,
        packing: str = DEFAULTS.packing,
        remainder: str = DEFAULTS.remainder,
        pad_id: int = DEFAULTS.pad_id,
        storage_options: Mapping[str, Any] | None = None,
        token_size: int | None = None,
        **renamed: Any,
    ) -> None:
        self.seq_len = check_int("seq_len", seq_len, minimum=1, error=TextError)
        given = {k: v for k, v in (("byte_budget_gb", byte_budget_gb),
                                   ("sampling_strategy", sampling_strategy)) if v is not None}
        self.settings = TextSettings(  # settings first: no I/O yet
            pool_size=pool_size, prefetch_chunks=prefetch_chunks, fetch_threads=fetch_threads,
            assemble_threads=assemble_threads, queue_size=queue_size, seed=seed,
            allow_order_change=allow_order_change, outage_s=outage_s, replication=replication,
            even_batches=even_batches,
            boundary=boundary, return_sequence_id=return_sequence_id, return_cu_seqlens=return_cu_seqlens,
            return_loss_mask=return_loss_mask, mask_after_eos=mask_after_eos,
            mask_document_start=mask_document_start, ignore_index=ignore_index, packing=packing,
            remainder=remainder, pad_id=pad_id, **renamed_keywords(renamed, given),
        )
        self.labels, self.return_positions = bool(labels), bool(return_positions)
        self.return_index = bool(return_index)
        self.fields = self._fields()
        if rank is None and world_size is None:
            rank, world_size = resolve_rank_and_world()
        self.slot = WorkerSlot(rank=rank or 0, world_size=world_size or 1,
                               replication=self.settings.replication)
        self.sources: list[TokenSource] = as_sources(root_or_sources, storage_options)
        self.corpora = [TokenCorpus(s.root, dict(s.storage_options), token_size,
                                    outage_s=self.settings.outage_s, with_loss=self.fields.masking)
                        for s in self.sources]
        widths = {c.token_bytes for c in self.corpora}
        self.chunk_windows = chunk_windows or default_chunk_windows(seq_len, max(widths))
        check_int("chunk_windows", self.chunk_windows, minimum=1, error=TextError)
        #: Each source's files packed into rows (``packing="best_fit"``), else ``None``.
        self.packs = self._pack()
        rows = self._rows_per_file()
        self.tables = [chunk_table(r, self.chunk_windows) for r in rows]
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
        self.file_windows = [np.concatenate(([0], np.cumsum(r, dtype=np.int64))) for r in rows]
        counts = source_counts(windows, [s.quota for s in self.sources], epoch_size, names=names)
        self.units = MixtureUnits([dict(enumerate(t.count.tolist())) for t in self.tables], counts,
                                  seed=self.seed)
        self.counts = counts
        span_bytes = [(seq_len + 1) * c.held_bytes for c in self.corpora]
        self.unit_bytes = _UnitBytes(self.units, [t.count * b for t, b in zip(self.tables, span_bytes, strict=True)])
        self.pool_maker = PoolMaker(self.settings.sampling_strategy, self.settings.pool_size, self.seed,
                                    self.units.epoch(0).lengths, self.rank_budget_bytes, self.unit_bytes)
        largest = [int(np.argmax(t.count)) for t in self.tables]
        self.slot.check_fits(  # before any fetch: one chunk alone over the rank's budget
            {0: max(int(t.count[i]) * b for t, i, b in zip(self.tables, largest, span_bytes, strict=True))},
            self.rank_budget_bytes, kind=self.UNIT_KIND)
        self.sampler_identity = self._identity()
        self.mixture = "" if self.units.plain else "; ".join(
            f"{name}: {s.quota.describe()} = {c} windows"
            for name, s, c in zip(names, self.sources, counts, strict=True))
        try:
            plan_shards_arrays(self.units.epoch(0).lengths, world_size=self.data_world_size, num_workers=0,
                               seed=self.seed, epoch=0)
        except PlanError as exc:
            raise PlanError(f"{exc} (here: chunks of {self.chunk_windows} windows; a smaller chunk_windows "
                            "gives more chunks)") from None
        self._init_loop()

    def _fields(self) -> _Fields:
        """What a sample holds, with the combinations that could not mean anything refused."""
        t = self.settings
        if t.ignore_index is not None and not self.labels:
            raise TextError("ignore_index masks labels: give labels=True too (or use loss_mask, "
                            "return_loss_mask=True, with input_ids of L + 1)")
        if (t.mask_after_eos or t.mask_document_start) and not (t.return_loss_mask or t.ignore_index is not None):
            raise TextError("mask_after_eos and mask_document_start shape the loss mask: give "
                            "return_loss_mask=True or ignore_index (e.g. -100) too")
        if t.packing == "best_fit":
            if t.boundary != "eos":
                raise TextError("packing='best_fit' packs the index's documents as they are: boundary='bos' "
                                "is for packing='cut'")
            if t.remainder == "pad" and not (t.return_loss_mask or t.ignore_index is not None):
                raise TextError("packing='best_fit' with remainder='pad' pads rows: give return_loss_mask=True "
                                "or ignore_index (e.g. -100) so the padding is not trained on, or remainder='crop'")
        return _Fields(self.labels, self.return_positions, self.return_index, t.return_sequence_id,
                       t.return_cu_seqlens, t.return_loss_mask, t.boundary, t.mask_after_eos,
                       t.mask_document_start, t.ignore_index)

    def _pack(self) -> list[list[PackedFile]] | None:
        if self.settings.packing != "best_fit":
            return None
        for corpus in self.corpora:
            if self.settings.pad_id > np.iinfo(corpus.dtype).max:
                raise TextError(f"pad_id={self.settings.pad_id} does not fit the {corpus.dtype.itemsize * 8}-bit "
                                f"tokens of {corpus.where()}")
        span = self.seq_len + 1
        return [[pack_file(ends, span, self.settings.remainder) for ends in c.doc_ends] for c in self.corpora]

    def _rows_per_file(self) -> list[list[int]]:
        """Windows (cut) or packed rows (best_fit) of every file of every source."""
        if self.packs is None:
            return [[windows_in(n, self.seq_len) for n in c.tokens] for c in self.corpora]
        return [[p.rows for p in packs] for packs in self.packs]

    def packing_stats(self, epoch: int | None = None) -> dict[str, int]:
        """What ``packing="best_fit"`` makes of ``epoch`` (default: the current one) over every
        rank: ``rows``, ``documents`` (pieces, a cropped one included), ``tokens`` (of documents),
        ``padded`` and ``dropped`` (crops) in its rows, and ``dropped_tails``, the files' last
        partial rows (``crop``), which no epoch holds. Empty for ``packing="cut"``."""
        if self.packs is None:
            return {}
        out = dict.fromkeys(("rows", "documents", "tokens", "padded", "dropped"), 0)
        due = self.units.epoch(self.epoch if epoch is None else epoch)
        span = self.seq_len + 1
        for unit, length in due.lengths.items():
            source, chunk, _ = self.units.locate(int(unit))
            table = self.tables[source]
            pack = self.packs[source][int(table.file[chunk])]
            rows = int(table.first[chunk]) + (due.frames[unit] if unit in due.frames
                                              else np.arange(int(length), dtype=np.int64))
            out["rows"] += int(rows.size)
            out["documents"] += int((pack.row_first[rows + 1] - pack.row_first[rows]).sum())
            out["tokens"] += int(rows.size * span - pack.row_padded[rows].sum())
            out["padded"] += int(pack.row_padded[rows].sum())
            out["dropped"] += int(pack.row_dropped[rows].sum())
        out["dropped_tails"] = sum(p.dropped_tail for packs in self.packs for p in packs)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The floor's checkpoint; with ``packing="best_fit"`` also ``packing``, the epoch's
        :meth:`packing_stats` (for the record: a restore reads only the floor's keys)."""
        state = super().state_dict()
        if self.packs is not None:
            state["packing"] = self.packing_stats(int(state.get("epoch", self.epoch)))
        return state

    # ---- facts -------------------------------------------------------------------------------
    @property
    def windows(self) -> int:
        """Windows per epoch over every rank (a mixture's counts added up)."""
        return int(sum(self.counts))

    def __getattr__(self, name: str) -> Any:
        """Each setting reads as an attribute (``ds.byte_budget_gb``), from :attr:`settings`."""
        settings = self.__dict__.get("settings")
        if settings is not None and name in _SETTING_NAMES:
            return getattr(settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def check_budget(self, num_workers: int) -> None:
        """Fail before any fetch when one chunk alone exceeds a worker's share of the budget."""
        slot = WorkerSlot(num_workers=num_workers)
        span_bytes = [(self.seq_len + 1) * c.held_bytes for c in self.corpora]
        largest = max(int(t.count.max()) * b for t, b in zip(self.tables, span_bytes, strict=True))
        slot.check_fits({0: largest}, self.rank_budget_bytes, kind=self.UNIT_KIND)

    def _identity(self) -> str:
        h = hashlib.sha256(b"feedline.text.dataset/v1")
        h.update(f"{self.seq_len}\0{self.chunk_windows}\0".encode())
        if self.packs is not None:  # other rows: a cut checkpoint must not resume them
            h.update(f"best_fit\0{self.settings.remainder}\0{BEST_FIT_BUFFER}\0".encode())
        for corpus, count in zip(self.corpora, self.units.counts, strict=True):
            h.update(f"{corpus.identity()}\0{count}\0".encode())
        return h.hexdigest()[:32]

    @property
    def mixture_description(self) -> str:
        return self.mixture

    def epoch_lengths(self, epoch: int) -> Mapping[int, int]:
        return self.units.epoch(epoch).lengths

    def rank_windows(self, epoch: int | None = None) -> int:
        """Windows this rank yields in ``epoch`` (default: the current one; see
        :meth:`~feedline.streaming.reader.StreamingReader.rank_samples`)."""
        return self.rank_samples(epoch)

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
        except StreamingError as exc:  # the scheduler's refusal, naming this reader
            raise type(exc)(f"TokenDataset checkpoint: {exc}") from None

    def metrics(self) -> dict[str, Any]:
        """Counters over every worker so far: ``samples`` (windows), ``bytes_fetched``,
        ``episodes_fetched`` (chunks), ``refill_stalls``/``refill_stall_s`` and
        ``peak_reserved_bytes`` (the most fetched bytes one worker held)."""
        return self._board.totals()

    # ---- iteration -----------------------------------------------------------------------------
    def make_pipeline(self, units: np.ndarray, anchors: np.ndarray, order: np.ndarray, budget: ByteBudget,
                      slot: WorkerSlot) -> UnitPipeline:
        """Chunks fetched as one ranged read each, windows cut as slices of them."""
        return UnitPipeline(
            units, anchors, order, self.unit_bytes,
            fetch=functools.partial(_fetch, self.corpora, self.tables, self.file_windows, self.units,
                                    self.seq_len) if self.packs is None else
            functools.partial(_fetch_packed, self.corpora, self.tables, self.file_windows, self.units,
                              self.packs, self.seq_len + 1, self.settings.pad_id),
            assemble=functools.partial(_assemble, self.seq_len + 1, self.fields),
            cache=budget, fetch_threads=self.settings.fetch_threads,
            assemble_threads=self.settings.assemble_threads, queue_size=self.settings.queue_size,
        )


_SETTING_NAMES = frozenset(row.keyword for row in TextSettings.rows())
