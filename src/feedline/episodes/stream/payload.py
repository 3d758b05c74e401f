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
No threads here: :mod:`feedline.episodes.stream.pipeline` runs these calls on its fetch and decode threads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from feedline.episodes.assemble import EpisodeData, EpisodeWindows, SampleSpec, assemble_sample
from feedline.episodes.base import column_to_numpy
from feedline.episodes.errors import StreamingError
from feedline.episodes.format import EpisodeTable
from feedline.episodes.parquet import (
    EpisodeRows,
    candidate_row_groups,
    read_episodes_rows,
    read_footer,
)
from feedline.episodes.stream.decoded import CameraFrames, DecodedFrames
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import (
    MiniMp4,
    SpanPlan,
    nearest_samples,
    nearest_samples_within,
)
from feedline.episodes.video.mp4.table import SampleTable
from feedline.io import Store

__all__ = [
    "EpisodePayload",
    "EpisodeSpans",
    "episode_spans",
    "fetch_episode",
    "parquet_episode_bytes",
    "parquet_footers",
]


@dataclass(frozen=True)
class EpisodeSpans:
    """What fetching one episode reads: per camera its mini-MP4 plans, plus its Parquet bytes.

    Args:
        episode_index: the episode.
        position: its row in the :class:`~feedline.episodes.format.EpisodeTable`.
        video: per camera key, the mini-MP4 plans covering every frame the episode can ask for.
        parquet_bytes: compressed bytes of the data row groups that can hold its rows.
    """

    episode_index: int
    position: int
    video: Mapping[str, tuple[SpanPlan, ...]]
    parquet_bytes: int

    @property
    def video_bytes(self) -> int:
        """Bytes of every camera's synthesized mini-MP4s."""
        return sum(plan.size for plans in self.video.values() for plan in plans)

    @property
    def nbytes(self) -> int:
        """The exact payload the byte budget reserves for this episode."""
        return self.video_bytes + self.parquet_bytes


def parquet_footers(store: Store, table: EpisodeTable) -> dict[str, pq.FileMetaData]:
    """Every data file's footer, read once (fetches reuse it: no footer read per episode); a
    damaged file is an ``EpisodeFormatError`` naming it."""
    return {path: read_footer(store, path) for path in dict.fromkeys(table.data_path)}


def parquet_episode_bytes(
    store: Store, table: EpisodeTable, footers: Mapping[str, pq.FileMetaData] | None = None
) -> dict[int, int]:
    """Per episode, the compressed bytes of the data row groups that can hold its rows
    (``footers``: from :func:`parquet_footers`, else read here)."""
    if footers is None:
        footers = parquet_footers(store, table)
    by_file: dict[str, list[int]] = {}
    for i, path in enumerate(table.data_path):
        by_file.setdefault(path, []).append(i)
    out: dict[int, int] = {}
    for path, positions in by_file.items():
        metadata = footers[path]
        group_bytes = [
            sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
            for rg in (metadata.row_group(g) for g in range(metadata.num_row_groups))
        ]
        for i in positions:
            want = EpisodeRows(
                int(table.episode_index[i]),
                int(table.dataset_from_index[i]),
                int(table.dataset_to_index[i]),
            )
            out[want.episode_index] = sum(
                group_bytes[g] for g in candidate_row_groups(metadata, want)
            )
    return out


def episode_spans(
    table: EpisodeTable,
    reader: VideoFrameReader,
    fps: float,
    parquet_bytes: Mapping[int, int],
    tolerance_s: float,
) -> dict[int, EpisodeSpans]:
    """Every selected episode's fetch plan and exact payload size (index only, no payload I/O).

    A camera's span runs from ``from_timestamp`` to the later of ``to_timestamp - 1/fps`` and
    the episode's last row time (``(length - 1) / fps``), so every frame a sample can ask for is
    inside it even when ``to_timestamp`` was measured short.
    """
    out: dict[int, EpisodeSpans] = {}
    for i, ep in enumerate(table.episode_index.tolist()):
        video: dict[str, tuple[SpanPlan, ...]] = {}
        for key, paths in table.video_path.items():
            t0 = float(table.from_timestamp[key][i])
            last = max(
                float(table.to_timestamp[key][i]) - 1.0 / fps,
                t0 + (int(table.length[i]) - 1) / fps,
            )
            video[key] = tuple(reader.span_plans(paths[i], t0, last, tolerance_s))
        out[ep] = EpisodeSpans(ep, i, video, int(parquet_bytes.get(ep, 0)))
    return out


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
                raise StreamingError(f"episode {self.data.episode_index}: frames read after its release")
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
    footers: Mapping[str, pq.FileMetaData] | None = None,
    *,
    decoded: DecodedFrames,
    tolerance_s: float,
) -> EpisodePayload:
    """Read one episode's Parquet rows and every camera's mini-MP4 bytes (ranged reads).

    ``footers`` (:func:`parquet_footers`): the data files' footers, so only the episode's row
    groups are read; without them each fetch reads its file's footer first. ``decoded``: the
    worker's decoded-frame memory the payload decodes into; ``tolerance_s``: as for the spans.
    """
    i = spans.position
    ep = spans.episode_index
    want = EpisodeRows(ep, int(table.dataset_from_index[i]), int(table.dataset_to_index[i]))
    path = table.data_path[i]
    footer = None if footers is None else footers.get(path)
    rows = read_episodes_rows(store, path, [want], metadata=footer)[ep]
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
