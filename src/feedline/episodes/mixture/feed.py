"""What the streaming reader plans over and fetches from: one dataset, or a mixture of sources.

Why: the plan, the pools, the resume arithmetic and the pipeline deal in units (an id, its
due frames, its payload bytes), so the reader asks one object for them whether it reads one
root or many. :class:`SingleFeed` is one dataset, every frame once per epoch: its units are
the episode indices, as they always were. :class:`MixtureFeed` is many sources with weights,
repeats or counts (:mod:`feedline.streaming.schedule.mixture`), one schema
(:mod:`feedline.episodes.mixture.union`) and aggregated stats.
"""

from __future__ import annotations

import logging
import os
from collections.abc import ItemsView, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.episodes.errors import MixtureError
from feedline.episodes.format import FeatureInfo
from feedline.episodes.mixture.sources import Mixture, Source
from feedline.episodes.mixture.union import SourceSchema, UnionSchema, aggregate_stats
from feedline.episodes.stream.decoded import DecodedFrames
from feedline.episodes.stream.payload import EpisodePayload
from feedline.episodes.stream.source import (
    StreamSource,
    UnitBytes,
    mixture_identity,
    open_sources,
)
from feedline.streaming.schedule.elastic import EpochUnits
from feedline.streaming.schedule.mixture import MixtureUnits, source_counts

__all__ = ["MixtureFeed", "MixtureMeta", "SingleFeed", "open_mixture"]


class SingleFeed:
    """One dataset: units are its episode indices, each frame once per epoch.

    Args:
        source: the dataset.
    """

    description = ""  # the checkpoint's ``mixture``: empty for one dataset
    stratified = False
    groups = None

    def __init__(self, source: StreamSource) -> None:
        self.sources = [source]
        self.units: Mapping[int, int] | EpochUnits = source.episode_lengths
        self.unit_bytes: Mapping[int, int] = source.episode_bytes
        self.identity = source.sampler_identity

    def epoch_lengths(self, epoch: int) -> Mapping[int, int]:
        return self.source.episode_lengths

    def prepare(self) -> None:
        """Open this process's store and frame reader before the fetch threads need them."""
        for source in self.sources:
            source.reader.frame_reader()

    @property
    def source(self) -> StreamSource:
        return self.sources[0]

    def fetch(self, decoded: DecodedFrames, unit: int) -> EpisodePayload:
        return self.source.fetch(unit, decoded)

    def assemble(self, payload: EpisodePayload, frame: int) -> dict[str, Any]:
        return payload.sample(self.source.decode_spec, frame)

    def unit_frames(self, unit: int) -> int:
        """Frames of the episode ``unit`` is (all of them, whatever part is due)."""
        return self.source.episode_lengths[unit]

    def episode_keys(self, units: np.ndarray) -> np.ndarray:
        """What the diversity counters count per unit: its episode."""
        return np.asarray(units, dtype=np.int64)


@dataclass
class MixtureMeta(FeatureInfo):
    """``ds.meta`` of a mixture: what policies read of LeRobot's metadata, for the union.

    Args:
        info: the first source's ``info.json`` with the union's features and the summed sizes.
        stats: the stats aggregated over the sources, weighted by their anchors per epoch.
        tasks: the task strings of every source, in order of first appearance.
        source_stats: every source's own stats (``None`` where it has none).
        source_info: every source's own ``info.json``.
        store: always ``None``: each source reads through its own store.
    """

    info: dict[str, Any]
    stats: dict[str, dict[str, np.ndarray]] | None
    tasks: list[str]
    source_stats: list[dict[str, dict[str, np.ndarray]] | None] = field(default_factory=list)
    source_info: list[dict[str, Any]] = field(default_factory=list)
    store: Any = None


def _renamed(mapping: Mapping[str, Any] | None, feature_map: Mapping[str, str]) -> dict[str, Any]:
    return {feature_map.get(k, k): v for k, v in (mapping or {}).items()}


class MixtureFeed:
    """Many sources in one stream (see the module docstring).

    Args:
        mixture: the sources and mixture-wide settings.
        seed: the resolved order seed.
        delta_timestamps: the mixture's windows, by the mixture's key names.
        options: reader options every source shares (``tolerance_s``, ``return_uint8``...).
        outage_s: how long each source's store may fail before reads give up.
    """

    def __init__(
        self, mixture: Mixture, *, seed: int,
        delta_timestamps: Mapping[str, Sequence[float]] | None, options: Mapping[str, Any],
        outage_s: float | None,
    ) -> None:
        self.mixture = mixture
        self.sources = open_sources(
            mixture.sources, delta_timestamps=delta_timestamps, options=options,
            outage_s=outage_s,
        )
        names = [f"source {i} ({s.name})" for i, s in enumerate(mixture.sources)]
        self.counts = source_counts(
            [s.num_frames for s in self.sources], [s.quota for s in mixture.sources],
            mixture.epoch_size, names,
        )
        self.units: MixtureUnits = MixtureUnits(
            [s.episode_lengths for s in self.sources], self.counts, seed=seed
        )
        self.unit_bytes = _MixtureBytes(self.units, self.sources)
        #: Every batch holds each source's share (one pool per source in each worker).
        self.stratified = mixture.batching == "stratified"
        self.groups = self.units.sources_of
        self.identity = mixture_identity(self.sources, self.counts)
        self.description = mixture.describe(self.counts)
        maps = [s.feature_map for s in mixture.sources]
        windows = {k: len(list(v)) for k, v in (delta_timestamps or {}).items()}
        self.schema = UnionSchema(
            [
                SourceSchema(names[i], _renamed(src.reader.features, maps[i]), maps[i])
                for i, src in enumerate(self.sources)
            ],
            windows, bool(options.get("return_uint8", False)),
        )
        self.meta = self._meta(maps)

    def _meta(self, maps: Sequence[Mapping[str, str]]) -> MixtureMeta:
        first = self.sources[0].reader.meta
        source_stats = [
            None if s.reader.meta.stats is None else _renamed(s.reader.meta.stats, maps[i])
            for i, s in enumerate(self.sources)
        ]
        widths = {
            k: int(ft["shape"][0]) for k, ft in self.schema.features.items()
            if ft.get("dtype") not in ("video", "image") and len(ft["shape"]) == 1
        }
        stats = aggregate_stats(source_stats, self.counts, widths)
        tasks = list(dict.fromkeys(t for s in self.sources for t in s.reader.meta.tasks))
        info = {
            **first.info,
            "features": self.schema.features,
            "total_episodes": sum(len(s.episode_lengths) for s in self.sources),
            "total_frames": sum(s.num_frames for s in self.sources),
            "total_tasks": len(tasks),
        }
        return MixtureMeta(
            info, stats or None, tasks, source_stats, [s.reader.meta.info for s in self.sources]
        )

    def epoch_lengths(self, epoch: int) -> Mapping[int, int]:
        return self.units.epoch(epoch).lengths

    def prepare(self) -> None:
        """Open every source's store and frame reader in this process before the fetch threads
        need them: opening loads the sidecar, and two threads must not do it at once (nor
        parse ``.npy`` headers together: CPython 3.11's parser is not thread-safe there)."""
        for source in self.sources:
            source.reader.frame_reader()

    def fetch(self, decoded: DecodedFrames, unit: int) -> EpisodePayload:
        source, episode, _ = self.units.locate(unit)
        return self.sources[source].fetch(episode, decoded)

    def assemble(self, payload: EpisodePayload, frame: int) -> dict[str, Any]:
        source = self.sources[payload.source]
        return self.schema.adapt(payload.sample(source.decode_spec, frame), payload.source)

    def unit_frames(self, unit: int) -> int:
        """Frames of the episode ``unit`` is a copy of (all of them, whatever part is due)."""
        source, episode, _ = self.units.locate(unit)
        return self.sources[source].episode_lengths[episode]

    def episode_keys(self, units: np.ndarray) -> np.ndarray:
        """What the diversity counters count per unit: its source and episode (every copy of
        an episode is the same episode)."""
        units = np.asarray(units, dtype=np.int64)
        return units % self.units.span


class _MixtureBytes(UnitBytes):
    """:class:`UnitBytes` whose walk over every copy-0 unit adds each source's offset to its
    episode indices, rather than locating unit by unit: the open's "episode larger than the
    budget" check walks all of them (0.9 s of a 110,000-episode mixture's open before)."""

    def __iter__(self) -> Iterator[int]:
        for offset, source in zip(self.units.offsets.tolist(), self.sources, strict=True):
            sizes = source.episode_bytes
            yield from (np.fromiter(sizes.keys(), np.int64, len(sizes)) + offset).tolist()

    def items(self) -> ItemsView[int, int]:
        return _MixtureItems(self)


class _MixtureItems(ItemsView[int, int]):
    def __iter__(self) -> Iterator[tuple[int, int]]:
        mapping: Any = self._mapping
        for offset, source in zip(mapping.units.offsets.tolist(), mapping.sources, strict=True):
            sizes = source.episode_bytes
            ids = np.fromiter(sizes.keys(), np.int64, len(sizes)) + offset
            yield from zip(ids.tolist(), sizes.values(), strict=True)


def open_mixture(
    reader: Any, sources: Mixture | Sequence[Source | Mapping[str, Any] | str],
    epoch_size: int | None, batching: str, options: dict[str, Any],
) -> MixtureFeed:
    """Open ``sources`` for the streaming ``reader`` and give it the mixture's metadata (the
    attributes a one-dataset reader's base sets: ``meta``, ``root_url``, ``tolerance_s``...)."""
    if options.get("root") is not None or options.get("episodes") is not None:
        raise MixtureError(
            "give the datasets either as root/episodes or as sources=[...], not both (each "
            "source takes its own episodes)"
        )
    mixture = sources if isinstance(sources, Mixture) else Mixture.of(
        sources, epoch_size=epoch_size, batching=batching
    )
    transforms = options.pop("image_transforms", None)
    if transforms is not None and not callable(transforms):
        raise MixtureError("image_transforms must be callable or None")
    deltas = options.pop("delta_timestamps", None)
    options.pop("decoder_cache_size", None)  # a rank-wide setting, not a source's
    feed = MixtureFeed(
        mixture, seed=reader.seed, delta_timestamps=deltas, options=options,
        outage_s=reader.settings.outage_s,
    )
    reader.repo_id, reader.repo_type, reader.revision = None, "dataset", None
    reader.root_url = f"mixture of {len(feed.sources)}: " + ", ".join(
        s.reader.root_url for s in feed.sources
    )
    reader.storage_options = dict(options.get("storage_options") or {})
    reader.tolerance_s = feed.sources[0].reader.tolerance_s
    reader.return_uint8 = bool(options.get("return_uint8", False))
    reader.image_transforms = transforms
    reader.delta_timestamps = {k: list(v) for k, v in deltas.items()} if deltas else None
    reader.delta_indices = None
    reader.meta = feed.meta
    reader.episodes = None
    reader._store, reader._frame_reader, reader._pid = None, None, os.getpid()
    reader.episode_lengths = {}  # copy 0 of every episode: its source's offset + its index
    for offset, source in zip(feed.units.offsets.tolist(), feed.sources, strict=True):
        lengths = source.episode_lengths
        ids = np.fromiter(lengths.keys(), np.int64, len(lengths)) + offset
        reader.episode_lengths.update(zip(ids.tolist(), lengths.values(), strict=True))
    reader._episode_start = np.asarray([0, sum(reader.episode_lengths.values())], np.int64)
    logging.getLogger("feedline.episodes.stream.dataset").info("mixture: %s", feed.description)
    return feed
