"""One source of the streaming reader: an opened dataset root and what its workers fetch from it.

Why a module of its own: a mixture streams from many roots at once, each with its own store,
sidecar, Parquet footers and episode byte sizes, while the plan, pools and pipeline see only
units. :class:`StreamSource` holds one root's part (read once in the training process and
shipped to the workers); :class:`UnitBytes` gives the pools a unit's payload size, whatever
source and copy it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from feedline.episodes.base import EpisodeDatasetBase
from feedline.episodes.errors import DeltaTimestampsError, MixtureError, StreamingError
from feedline.episodes.mixture.sources import Source
from feedline.episodes.stream.decoded import DecodedFrames
from feedline.episodes.stream.payload import (
    EpisodePayload,
    EpisodeSpans,
    episode_spans,
    fetch_episode,
    parquet_layout,
)
from feedline.io import ObjectChangedError, ObjectInfo, PinnedStore, Store
from feedline.streaming.schedule.mixture import MixtureUnits
from feedline.streaming.schedule.resume import sampler_identity

__all__ = ["SourceReader", "StreamSource", "UnitBytes", "mixture_identity", "open_sources"]


class SourceReader(EpisodeDatasetBase):
    """One source's dataset root, its store riding out outages for ``outage_s``.

    Args:
        args: :class:`~feedline.episodes.base.EpisodeDatasetBase`'s positional arguments.
        outage_s: seconds the store may fail before reads give up. Default ``None``: 60.
        kwargs: its keyword arguments.
    """

    def __init__(self, *args: Any, outage_s: float | None = None, **kwargs: Any) -> None:
        self.store_outage_s = outage_s  # before the base opens the store
        super().__init__(*args, **kwargs)


class StreamSource:
    """What the streaming reader needs of one root: lengths, byte sizes, spans and its fetch.

    Args:
        reader: the opened root (the reader itself for a single dataset).
        index: the source's ``dataset_index``. Default 0.
    """

    def __init__(self, reader: EpisodeDatasetBase, index: int = 0) -> None:
        self.reader = reader
        self.index = int(index)
        table = reader.episode_table
        self.episode_lengths: dict[int, int] = {
            int(e): int(n) for e, n in zip(table.episode_index, table.length, strict=True)
        }
        #: Each data file as the open's footer read saw it: fetches read row groups pinned to
        #: it, with no stat per episode (over HTTP: no HEAD), and a replaced file still fails.
        self.data_pins: dict[str, ObjectInfo] = {}
        # Footers read once, shipped along; on a thread of their own while this one builds (or
        # checks) the MP4 index: the two are independent, and cold at 1,000,000 episodes each
        # took a quarter of the open when run one after the other.
        with ThreadPoolExecutor(1, "feedline-layout") as pool:
            layout = pool.submit(parquet_layout, PinnedStore(reader.store, self.data_pins), table)
            try:
                frames, failure = reader.frame_reader(), None
            except Exception as exc:  # the footers' own failure, if any, is the one reported
                frames, failure = None, exc
            self.parquet = layout.result()
        if failure is not None:
            raise failure
        self.parquet_footers = self.parquet.footers
        self.spans = episode_spans(table, frames, reader.fps, self.parquet, reader.tolerance_s)
        self.episode_bytes: dict[int, int] = self.spans.unit_bytes()
        self.sampler_identity = sampler_identity(self.episode_lengths, self.episode_bytes)
        #: The spec its samples are assembled with (transforms run on the consuming thread).
        self.decode_spec = replace(reader.sample_spec, image_transforms=None)

    @property
    def num_frames(self) -> int:
        return sum(self.episode_lengths.values())

    def spans_of(self, episode: int) -> EpisodeSpans:
        """One episode's fetch plans, made now with this process's frame reader."""
        return self.spans.get_with(episode, self.reader.frame_reader())

    def pinned_store(self) -> Store:
        """This process's store, each data file pinned to what the open saw (no re-stat)."""
        return PinnedStore(self.reader.store, self.data_pins)

    def fetch(self, episode: int, decoded: DecodedFrames) -> EpisodePayload:
        """One episode's payload, decoding into the worker's frame memory."""
        reader = self.reader
        try:
            payload = fetch_episode(
                self.pinned_store(), reader.frame_reader(), reader.episode_table,
                self.spans_of(episode), self.parquet_footers, decoded=decoded,
                tolerance_s=reader.tolerance_s,
            )
        except ObjectChangedError as exc:  # a data file replaced since the open
            raise StreamingError(
                f"{exc.url}: changed since the dataset was opened ({exc.what}); its footer no "
                "longer describes it: reopen the dataset"
            ) from None
        payload.source = self.index
        return payload


def _source_deltas(
    source: Source, delta_timestamps: Mapping[str, Sequence[float]] | None,
    features: Sequence[str],
) -> dict[str, list[float]] | None:
    """The mixture's ``delta_timestamps`` under the source's own key names (keys it has)."""
    if not delta_timestamps:
        return None
    inverse = {mixed: own for own, mixed in source.feature_map.items()}
    own = {inverse.get(key, key): list(deltas) for key, deltas in delta_timestamps.items()}
    return {key: deltas for key, deltas in own.items() if key in features} or None


def open_sources(
    sources: Sequence[Source], *, delta_timestamps: Mapping[str, Sequence[float]] | None,
    options: Mapping[str, Any], outage_s: float | None,
) -> list[StreamSource]:
    """Open every source of a mixture (metadata, Parquet footers, MP4 indexes).

    ``options`` are the reader options every source shares (``tolerance_s``, ``return_uint8``,
    ``storage_options``...). A source that cannot be opened fails with one line naming it; a
    ``delta_timestamps`` offset that is not a whole frame at some source's fps names that source
    and one it suits.
    """
    shared = {k: v for k, v in options.items() if k != "storage_options"}
    opened: list[StreamSource] = []
    fits: list[str] = []
    for i, source in enumerate(sources):
        storage = {**dict(options.get("storage_options") or {}), **source.storage_options}
        try:
            reader = SourceReader(
                **{**source.reader_options(), "storage_options": storage}, outage_s=outage_s,
                **shared,
            )
        except Exception as exc:
            raise MixtureError(f"source {i} ({source.name}) cannot be opened: {exc}") from None
        deltas = _source_deltas(source, delta_timestamps, list(reader.features))
        if deltas:
            try:
                _with_deltas(reader, deltas)
            except DeltaTimestampsError as exc:
                other = f"; they are whole frames at {fits[0]}" if fits else ""
                raise MixtureError(
                    f"delta_timestamps do not suit source {i} ({source.name}, {reader.fps} fps): "
                    f"{exc}{other}. Choose offsets that are whole frames at every source's fps, "
                    "or a larger tolerance_s"
                ) from None
            fits.append(f"source {i} ({source.name}, {reader.fps} fps)")
        try:
            opened.append(StreamSource(reader, i))
        except Exception as exc:
            raise MixtureError(f"source {i} ({source.name}) cannot be read: {exc}") from None
    return opened


def _with_deltas(reader: SourceReader, deltas: Mapping[str, Sequence[float]]) -> SourceReader:
    """``reader`` with windows for ``deltas`` (checked at its fps), without reopening it."""
    from feedline.episodes.windows import delta_indices

    reader.delta_timestamps = {k: list(v) for k, v in deltas.items()}
    reader.delta_indices = delta_indices(
        reader.delta_timestamps, reader.fps, reader.tolerance_s, reader.meta.features
    )
    return reader


class UnitBytes(Mapping[int, int]):
    """A unit's payload size (its episode's, whatever the copy): the pools admit by it.

    Iterating gives the copy-0 units (every episode of every source once), which is what the
    "episode larger than the budget" check needs.

    Args:
        units: the mixture's units.
        sources: its sources, in ``dataset_index`` order.
    """

    def __init__(self, units: MixtureUnits, sources: Sequence[StreamSource]) -> None:
        self.units = units
        self.sources = list(sources)

    def __getitem__(self, unit: int) -> int:
        source, episode, _ = self.units.locate(unit)
        try:
            return self.sources[source].episode_bytes[episode]
        except (KeyError, IndexError):
            raise KeyError(unit) from None

    def __iter__(self) -> Iterator[int]:
        for s, source in enumerate(self.sources):
            for episode in source.episode_bytes:
                yield self.units.unit(s, episode)

    def __len__(self) -> int:
        return sum(len(s.episode_bytes) for s in self.sources)


def mixture_identity(sources: Sequence[StreamSource], counts: Sequence[int]) -> str:
    """Digest of every source's selection, sizes and count: the mixture's data identity."""
    h = hashlib.sha256(b"feedline.episodes.mixture/v1")
    for source, count in zip(sources, counts, strict=True):
        h.update(source.sampler_identity.encode())
        h.update(int(count).to_bytes(8, "little"))
    return h.hexdigest()[:32]
