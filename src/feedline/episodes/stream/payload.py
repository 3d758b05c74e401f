"""One episode's payload for the streaming reader: its exact size up front, its bytes, its frames.

The byte budget admits whole episodes by their *exact* payload size, known before anything is
fetched: per camera the synthesized mini-MP4(s) of the frames from ``from_timestamp`` to its last
frame (:meth:`VideoFrameReader.span_bytes`, from the sidecar index), plus the compressed bytes of
the Parquet row groups that can hold its rows (from the file footer's statistics, the same
pruning :mod:`feedline.episodes.parquet` reads with).

Once fetched, an :class:`EpisodePayload` decodes any of its frames without I/O: each camera's
mini-MP4 is decoded forward once by a persistent decoder and its RGB frames kept within the
worker's decoded-frame limit (:mod:`feedline.episodes.stream.decoded`); the bytes decoded are
the very samples the map-style reader decodes, so the pixels are the same.
No threads here: :mod:`feedline.streaming.pipeline` runs these calls on its fetch and decode threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.episodes.assemble import EpisodeData, EpisodeWindows, SampleSpec, assemble_sample
from feedline.episodes.base import column_to_numpy
from feedline.episodes.errors import FrameReleasedError, StreamingError
from feedline.episodes.footer import DataFooter
from feedline.episodes.format import EpisodeTable
from feedline.episodes.metacache import cached_footer
from feedline.episodes.parquet import EpisodeRows, RowGroupIndex, read_episodes_rows
from feedline.episodes.stream.decoded import CameraFrames, DecodedFrames
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import (
    MiniMp4,
    SpanPlan,
    nearest_samples,
    nearest_samples_within,
    plan_span,
)
from feedline.episodes.video.mp4.table import SampleTable
from feedline.episodes.video.spans import span_bounds, span_sizes
from feedline.io import Store

__all__ = [
    "EpisodePayload",
    "EpisodeSpans",
    "ParquetLayout",
    "SpanIndex",
    "episode_spans",
    "fetch_episode",
    "parquet_episode_bytes",
    "parquet_footers",
    "parquet_layout",
]

FOOTER_READERS = 4  # data-file footers read at once at the open


@dataclass(frozen=True)
class EpisodeSpans:
    """What fetching one episode reads: per camera its mini-MP4 plans, plus its Parquet bytes.

    Args:
        episode_index: the episode.
        position: its row in the :class:`~feedline.episodes.format.EpisodeTable`.
        video: per camera key, the mini-MP4 plans covering every frame the episode can ask for.
        parquet_bytes: compressed bytes of the data row groups that can hold its rows.
        row_groups: those row groups (``None``: pruned from the footer at fetch).
    """

    episode_index: int
    position: int
    video: Mapping[str, tuple[SpanPlan, ...]]
    parquet_bytes: int
    row_groups: tuple[int, ...] | None = None

    @property
    def video_bytes(self) -> int:
        """Bytes of every camera's synthesized mini-MP4s."""
        return sum(plan.size for plans in self.video.values() for plan in plans)

    @property
    def nbytes(self) -> int:
        """The exact payload the byte budget reserves for this episode."""
        return self.video_bytes + self.parquet_bytes


@dataclass
class ParquetLayout:
    """Per selected episode (by table position), its candidate data row groups and their bytes.

    Pruned for every episode of a file at once (:class:`~feedline.episodes.parquet.RowGroupIndex`);
    fetches pass an episode's groups to the read, so no worker walks a footer per episode.
    Footers are kept as bytes (:class:`~feedline.episodes.footer.DataFooter`) and cut to the
    episode's groups at fetch, so no process holds every footer parsed.

    Args:
        footers: every data file's footer bytes and group positions.
        indexes: every data file's row-group pruning arrays.
        ptr: episode at position ``i`` has groups ``groups[ptr[i]:ptr[i + 1]]`` (``None``: only
            the bytes are known).
        groups: candidate row groups, concatenated (``None`` with ``ptr``).
        nbytes: per position, the compressed bytes of its candidate groups.
    """

    footers: dict[str, DataFooter]
    indexes: dict[str, RowGroupIndex]
    ptr: np.ndarray | None
    groups: np.ndarray | None
    nbytes: np.ndarray

    def groups_of(self, position: int) -> tuple[int, ...] | None:
        """The candidate groups of the episode at ``position`` (``None``: not pruned yet)."""
        if self.ptr is None or self.groups is None:
            return None
        return tuple(self.groups[self.ptr[position] : self.ptr[position + 1]].tolist())


def parquet_layout(
    store: Store, table: EpisodeTable, footers: Mapping[str, DataFooter] | None = None
) -> ParquetLayout:
    """Every selected episode's candidate row groups and bytes (``footers``: from
    :func:`parquet_footers`, else read here)."""
    footers = dict(footers) if footers is not None else parquet_footers(store, table)
    indexes = {path: footer.index for path, footer in footers.items()}
    n = len(table)
    counts = np.zeros(n, np.int64)
    found = []
    for path, positions in table.positions_by_data_file().items():
        ptr, groups = _candidates(indexes[path], table, positions)
        lost = (np.diff(ptr) == 0) & (table.length[positions] > 0)
        if lost.any() and getattr(footers[path], "cached_at", ""):
            # A cached footer that cannot hold an episode the metadata puts in its file is
            # not this file's (a fingerprint that is no content hash): read the file again.
            footers[path] = cached_footer(store, path, refresh=True)
            indexes[path] = footers[path].index
            ptr, groups = _candidates(indexes[path], table, positions)
        index = indexes[path]
        counts[positions] = np.diff(ptr)
        found.append((positions, ptr, groups, index.nbytes[groups]))
    ptr_all = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=ptr_all[1:])
    groups_all = np.zeros(int(ptr_all[-1]), np.int64)
    nbytes = np.zeros(n, np.int64)
    for positions, ptr, groups, group_bytes in found:
        owner = np.repeat(np.arange(len(positions)), np.diff(ptr))
        slot = ptr_all[positions[owner]] + (np.arange(len(groups)) - ptr[owner])
        groups_all[slot] = groups
        np.add.at(nbytes, positions[owner], group_bytes)
    return ParquetLayout(footers, indexes, ptr_all, groups_all, nbytes)


def _candidates(
    index: RowGroupIndex, table: EpisodeTable, positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    return index.candidates(
        table.episode_index[positions], table.dataset_from_index[positions],
        table.dataset_to_index[positions],
    )


def parquet_footers(store: Store, table: EpisodeTable) -> dict[str, DataFooter]:
    """Every data file's footer, read once per node (:mod:`feedline.episodes.metacache`; fetches
    reuse it: no footer read per episode); a damaged file is an ``EpisodeFormatError`` naming it."""
    paths = table.data_files()
    if len(paths) <= 1:
        return {path: cached_footer(store, path) for path in paths}
    # A few at once: over HTTP each missing footer is one or two round trips, and pyarrow
    # parses it without the GIL.
    with ThreadPoolExecutor(min(FOOTER_READERS, len(paths)), "feedline-footers") as pool:
        return dict(zip(paths, pool.map(lambda path: cached_footer(store, path), paths), strict=True))


def parquet_episode_bytes(
    store: Store, table: EpisodeTable, footers: Mapping[str, DataFooter] | None = None
) -> dict[int, int]:
    """Per episode, the compressed bytes of the data row groups that can hold its rows
    (``footers``: from :func:`parquet_footers`, else read here)."""
    layout = parquet_layout(store, table, footers)
    return dict(zip(table.episode_index.tolist(), layout.nbytes.tolist(), strict=True))


class SpanIndex(Mapping[int, EpisodeSpans]):
    """Every selected episode's payload size, as arrays; its :class:`EpisodeSpans` on demand.

    The open computes, per camera and episode, the one mini-MP4 span and its exact size
    (:mod:`feedline.episodes.video.spans`) with array operations over each video's sample
    table; the plans themselves (header bytes, tick arrays) are made when an episode is asked
    for, i.e. fetched, and must come out at the size the byte budget reserved.

    Args:
        table: the selected episodes.
        first: per camera key, each position's first span sample (decode order).
        last: per camera key, each position's last span sample.
        video_bytes: per position, the mini-MP4 bytes of every camera.
        parquet: the episodes' Parquet row groups and bytes.
        reader: the frame reader the plans are made with (not pickled: a worker binds its own).
    """

    def __init__(
        self, table: EpisodeTable, first: dict[str, np.ndarray], last: dict[str, np.ndarray],
        video_bytes: np.ndarray, parquet: ParquetLayout | None,
        reader: VideoFrameReader | None = None,
    ) -> None:
        self.table = table
        self.first, self.last = first, last
        self.video_bytes = np.asarray(video_bytes, np.int64)
        self.parquet = parquet
        self.parquet_bytes = (
            parquet.nbytes if parquet is not None else np.zeros(len(table), np.int64)
        )
        self.reader = reader

    @property
    def nbytes(self) -> np.ndarray:
        """Per position, the exact payload the byte budget reserves."""
        return self.video_bytes + self.parquet_bytes

    def unit_bytes(self) -> dict[int, int]:
        return dict(zip(self.table.episode_index.tolist(), self.nbytes.tolist(), strict=True))

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[int]:
        return iter(self.table.episode_index.tolist())

    def __contains__(self, episode: object) -> bool:
        return episode in self.table

    def __getitem__(self, episode: int) -> EpisodeSpans:
        if self.reader is None:
            raise StreamingError("SpanIndex: no frame reader bound (use spans.get_with(ep, reader))")
        return self.get_with(episode, self.reader)

    def get_with(self, episode: int, reader: VideoFrameReader) -> EpisodeSpans:
        """Episode ``episode``'s plans, made now with ``reader``'s sample tables."""
        try:
            i = self.table.position(episode)
        except KeyError:
            raise KeyError(episode) from None
        video: dict[str, tuple[SpanPlan, ...]] = {}
        for key, paths in self.table.video_path.items():
            path = paths[i]
            video[key] = (plan_span(reader.table(path), int(self.first[key][i]), int(self.last[key][i])),)
        made = sum(plans[0].size for plans in video.values())
        if made != int(self.video_bytes[i]):
            raise StreamingError(
                f"episode {episode}: its mini-MP4s are {made} bytes but {int(self.video_bytes[i])} "
                "were reserved for them; the sample index changed since the dataset was opened: reopen it"
            )
        groups = self.parquet.groups_of(i) if self.parquet is not None else None
        return EpisodeSpans(episode, i, video, int(self.parquet_bytes[i]), groups)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["reader"] = None
        return state


def episode_spans(
    table: EpisodeTable,
    reader: VideoFrameReader,
    fps: float,
    parquet_bytes: Mapping[int, int] | ParquetLayout | None,
    tolerance_s: float,
) -> SpanIndex:
    """Every selected episode's exact payload size (index only, no payload I/O), its fetch
    plans made on demand.

    A camera's span runs from ``from_timestamp`` to the later of ``to_timestamp - 1/fps`` and
    the episode's last row time (``(length - 1) / fps``), so every frame a sample can ask for is
    inside it even when ``to_timestamp`` was measured short.
    """
    n = len(table)
    first = {key: np.zeros(n, np.int64) for key in table.video_path}
    last = {key: np.zeros(n, np.int64) for key in table.video_path}
    video_bytes = np.zeros(n, np.int64)
    for key in table.video_path:
        t0_all = np.asarray(table.from_timestamp[key], np.float64)
        t1_all = np.maximum(
            np.asarray(table.to_timestamp[key], np.float64) - 1.0 / fps,
            t0_all + (np.asarray(table.length, np.float64) - 1) / fps,
        )
        for path, positions in table.positions_by_video_file(key).items():
            sample_table = reader.table(path)
            a, b = span_bounds(
                sample_table, t0_all[positions], t1_all[positions], tolerance_s,
                reader.store.url(path),
            )
            first[key][positions], last[key][positions] = a, b
            video_bytes[positions] += span_sizes(sample_table, a, b)
            # every page of the table was read: at 1,000,000 episodes, 400 of them held ~1 GiB
            reader.forget(path)
    if parquet_bytes is None or isinstance(parquet_bytes, ParquetLayout):
        layout = parquet_bytes
    else:  # per-episode bytes given as a mapping (no row groups known)
        nbytes = np.array([int(parquet_bytes.get(int(e), 0)) for e in table.episode_index], np.int64)
        layout = ParquetLayout({}, {}, None, None, nbytes)
    return SpanIndex(table, first, last, video_bytes, layout, reader)


@dataclass
class EpisodePayload:
    """A fetched episode: its rows and, per camera, its mini-MP4s; decodes frames without I/O.

    Args:
        data: the episode's rows and video spans.
        minis: per camera key, the fetched mini-MP4s (in plan order).
        fetched_bytes: bytes read to fetch it (Parquet row groups and MP4 sample ranges).
        decoded: the worker's decoded-frame memory and decoder LRU its frames are decoded into.
        reader: the worker's frame reader (sample tables; frames outside the fetched spans).
        tolerance_s: how far a frame may lie from a wanted time.
        outside_fetches: frames a sample needed outside the fetched spans, read with
            :meth:`VideoFrameReader.frames_at <feedline.episodes.video.frames.VideoFrameReader.frames_at>`;
            should stay 0. Default 0.
        source: the ``dataset_index`` of the source it came from (a mixture's). Default 0.
    """

    data: EpisodeData
    minis: Mapping[str, tuple[MiniMp4, ...]]
    fetched_bytes: int
    decoded: DecodedFrames
    reader: VideoFrameReader
    tolerance_s: float
    _cameras: dict[str, CameraFrames] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    outside_fetches: int = 0
    source: int = 0
    _closed: bool = field(default=False, repr=False)
    _windows: EpisodeWindows | None = field(default=None, repr=False)
    _tick_of: dict[tuple[str, float], dict[float, int]] = field(default_factory=dict, repr=False)
    _row_ticks: dict[tuple[str, float], list[int | None]] = field(default_factory=dict, repr=False)
    _uses: dict[tuple[str, float], dict[int, int]] = field(default_factory=dict, repr=False)

    def windows(self, spec: SampleSpec) -> EpisodeWindows:
        """Every sample's windows of this episode, computed once (on its first sample)."""
        windows = self._windows
        if windows is None:
            with self._lock:
                if self._windows is None:
                    self._windows = EpisodeWindows(spec, self.data)
                windows = self._windows
        return windows

    def _ticks_by_time(
        self, table: SampleTable, camera: CameraFrames, key: str, tolerance_s: float
    ) -> dict[float, int]:
        """``{video time: presentation tick}`` for every row's time of this camera.

        A sample asks for ``from_timestamp + timestamp`` of its window's rows (float64, the same
        expression as :func:`~feedline.episodes.assemble.video_timestamps`, so the same floats),
        which makes the per-sample nearest-frame search a dict lookup. Times with no frame within
        tolerance, or outside the fetched spans, are left out: a sample asking for one takes the
        general path, which reads it separately or names the problem. Each row's tick (or
        ``None``) is kept too, for :meth:`_uses_of`.
        """
        lookup = self._tick_of.get((key, tolerance_s))
        if lookup is None:
            stamps = self.data.columns["timestamp"]
            times = float(self.data.from_timestamp[key]) + np.asarray(stamps).astype(np.float64)
            samples, within = nearest_samples_within(table, times, tolerance_s)
            row_ticks = [
                tick if ok and camera.covers(tick) else None
                for tick, ok in zip(table.pts_ticks[samples].tolist(), within.tolist(), strict=True)
            ]
            lookup = {
                t: tick for t, tick in zip(times.tolist(), row_ticks, strict=True) if tick is not None
            }
            with self._lock:
                self._row_ticks[(key, tolerance_s)] = row_ticks
                self._tick_of[(key, tolerance_s)] = lookup
        return lookup

    def _uses_of(self, key: str, tolerance_s: float) -> dict[int, int] | None:
        """Per presentation tick, how many of this episode's samples will still ask for it.

        Counted from every sample's window (:meth:`windows`; ``None`` before it was computed):
        a window position is a row, and a row's time maps to the tick :meth:`_ticks_by_time`
        found for it, as the sample's lookup does. Anchors a worker never serves (a
        resumed epoch's delivered ones) leave their frames' counts above 0: those frames stay
        until :meth:`close`, as every frame did before. A frame can be released before a
        sample still asks for it only if that sample asks twice or takes the general path (a
        time off the rows' grid, not counted here): it is then decoded again and counted as a
        re-decode, never wrong.
        """
        uses = self._uses.get((key, tolerance_s))
        if uses is None and self._windows is not None:
            row_ticks = self._row_ticks[(key, tolerance_s)]
            counts: dict[int, int] = {}
            for row in self._windows.rows(key).ravel().tolist():
                tick = row_ticks[row]
                if tick is not None:
                    counts[tick] = counts.get(tick, 0) + 1
            with self._lock:
                uses = self._uses.setdefault((key, tolerance_s), counts)
        return uses

    def _used(self, camera: CameraFrames, uses: dict[int, int], ticks: Sequence[int]) -> None:
        """Count one sample's use of ``ticks``; release the frames no later sample needs."""
        done = []
        with self._lock:
            for tick in ticks:
                left = uses.get(tick)
                if left is not None:
                    uses[tick] = left - 1
                    if left == 1:
                        done.append(tick)
        if done:
            camera.release(done)

    def _camera(self, key: str) -> CameraFrames:
        with self._lock:
            if self._closed:
                raise FrameReleasedError(f"episode {self.data.episode_index}: frames read after their release")
            camera = self._cameras.get(key)
            if camera is None:
                path = self.data.video_path[key]
                camera = self._cameras[key] = CameraFrames(
                    self.decoded, self.reader.table(path), self.minis[key],
                    self.reader.store.url(path),
                )
            return camera

    def sample(self, spec: SampleSpec, frame: int) -> dict[str, Any]:
        """The sample at ``frame``, assembled as the map-style reader does, its frames from here."""
        return assemble_sample(spec, self.data, frame, self.decode, self.windows(spec))

    def decode(self, key: str, path: str, timestamps_s: Sequence[float]) -> list[np.ndarray]:
        """:meth:`frames` as :func:`~feedline.episodes.assemble.assemble_sample` asks for them
        (``path`` is this episode's video of ``key``)."""
        return self.frames(key, timestamps_s)

    def frames(self, key: str, timestamps_s: Sequence[float]) -> list[np.ndarray]:
        """``uint8 [H, W, 3]`` frames nearest each timestamp, each decoded once from memory
        (shared with the decoded-frame memory: read them, never write into them)."""
        reader, tolerance_s = self.reader, self.tolerance_s
        path = self.data.video_path[key]
        table = reader.table(path)
        camera = self._camera(key)
        lookup = self._ticks_by_time(table, camera, key, tolerance_s)
        try:
            known = [lookup[t] for t in timestamps_s]
        except KeyError:  # a time off the rows' grid, or outside the fetched spans
            known = None
        if known is not None:
            out = camera.get(known)
            uses = self._uses_of(key, tolerance_s)
            if uses is not None:
                self._used(camera, uses, known)
            return out
        samples = nearest_samples(table, camera.name, timestamps_s, tolerance_s)
        ticks = table.pts_ticks[samples].tolist()
        inside = [j for j, tick in enumerate(ticks) if camera.covers(tick)]
        if len(inside) == len(ticks):
            return camera.get(ticks)
        outside = [j for j in range(len(ticks)) if not camera.covers(ticks[j])]
        with self._lock:
            self.outside_fetches += 1
        out: list[np.ndarray] = [None] * len(ticks)  # type: ignore[list-item]
        read = reader.frames_at(path, [float(timestamps_s[j]) for j in outside], tolerance_s)
        for j, image in zip(outside, read, strict=True):
            out[j] = image
        if inside:
            for j, image in zip(inside, camera.get([ticks[j] for j in inside]), strict=True):
                out[j] = image
        return out

    def close(self) -> None:
        """Release every camera's decoded frames and decoders (the episode's last sample is done)."""
        with self._lock:
            self._closed = True
            cameras = list(self._cameras.values())
            self._cameras.clear()
        for camera in cameras:
            camera.close()


def fetch_episode(
    store: Store,
    reader: VideoFrameReader,
    table: EpisodeTable,
    spans: EpisodeSpans,
    footers: Mapping[str, DataFooter] | None = None,
    *,
    decoded: DecodedFrames,
    tolerance_s: float,
) -> EpisodePayload:
    """Read one episode's Parquet rows and every camera's mini-MP4 bytes (ranged reads).

    ``footers`` (:func:`parquet_footers`): the data files' footers, cut to the episode's row
    groups, so only those are read; without them each fetch reads its file's footer first. ``decoded``: the
    worker's decoded-frame memory the payload decodes into; ``tolerance_s``: as for the spans.
    """
    i = spans.position
    ep = spans.episode_index
    want = EpisodeRows(ep, int(table.dataset_from_index[i]), int(table.dataset_to_index[i]))
    path = table.data_path[i]
    footer = None if footers is None else footers.get(path)
    if footer is None:
        rows = read_episodes_rows(store, path, [want])[ep]
    else:
        groups = spans.row_groups
        if groups is None:  # not pruned at the open: prune now, with the footer's arrays
            ptr, found = footer.index.candidates(
                np.array([ep]), np.array([want.from_index]), np.array([want.to_index])
            )
            groups = tuple(found[ptr[0] : ptr[1]].tolist())
        cut = footer.subset(list(groups), store.url(path))
        rows = read_episodes_rows(
            store, path, [want], metadata=cut, row_groups={ep: range(len(groups))}
        )[ep]
    columns = {name: column_to_numpy(rows.column(name)) for name in rows.column_names}
    minis: dict[str, tuple[MiniMp4, ...]] = {}
    fetched = spans.parquet_bytes
    for key, plans in spans.video.items():
        path = table.video_path[key][i]
        minis[key] = tuple(reader.fetch(path, plan) for plan in plans)
        fetched += sum(m.fetched_bytes for m in minis[key])
    data = EpisodeData(
        episode_index=ep,
        dataset_from_index=want.from_index,
        columns=columns,
        video_path={key: paths[i] for key, paths in table.video_path.items()},
        from_timestamp={key: float(ts[i]) for key, ts in table.from_timestamp.items()},
    )
    return EpisodePayload(data, minis, fetched, decoded, reader, tolerance_s)
