"""One episode's payload for the streaming reader: its exact size up front, its bytes, its frames.

The byte budget admits whole episodes by their *exact* payload size, known before anything is
fetched: per camera the synthesized mini-MP4(s) of the frames from ``from_timestamp`` to its last
frame (:meth:`VideoFrameReader.span_bytes`, from the sidecar index), plus the compressed bytes of
the Parquet row groups that can hold its rows (from the file footer's statistics, the same
pruning :mod:`feedline.episodes.parquet` reads with).

Once fetched, an :class:`EpisodePayload` decodes any of its frames without I/O. A sample's frames
are decoded GOP by GOP, exactly the spans :meth:`VideoFrameReader.frames_at` would fetch, cut
out of the episode's mini-MP4 in memory; so the streaming reader decodes the very bytes the
map-style reader decodes and returns the same pixels, while decoding only what a sample needs.
No threads here: :mod:`feedline.episodes.stream.pipeline` runs these calls on its fetch and decode threads.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from feedline.episodes.assemble import EpisodeData
from feedline.episodes.base import column_to_numpy
from feedline.episodes.errors import EpisodeFormatError, SidecarError
from feedline.episodes.format import EpisodeTable
from feedline.episodes.parquet import EpisodeRows, candidate_row_groups, read_episodes_rows
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import (
    MiniMp4,
    SpanPlan,
    covering_spans,
    nearest_samples,
    plan_span,
)
from feedline.io import NotFoundError, Store

__all__ = [
    "EpisodePayload",
    "EpisodeSpans",
    "episode_spans",
    "fetch_episode",
    "parquet_episode_bytes",
]


# A decoded span's frames are shared (the reader's LRU), and PyAV keeps one scaler per frame:
# two threads converting the same frame at once use one SwsContext concurrently, which can hang
# inside FFmpeg. Conversions of one span are therefore serialised (striped locks by span);
# different spans still decode and convert in parallel.
_SPAN_LOCKS = [threading.Lock() for _ in range(64)]


def _reset_span_locks() -> None:
    _SPAN_LOCKS[:] = [threading.Lock() for _ in range(64)]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_span_locks)


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


def _unbuffered(handle: object) -> object:
    return handle.raw if isinstance(handle, io.BufferedReader) else handle


def parquet_episode_bytes(store: Store, table: EpisodeTable) -> dict[int, int]:
    """Per episode, the compressed bytes of the data row groups that can hold its rows."""
    by_file: dict[str, list[int]] = {}
    for i, path in enumerate(table.data_path):
        by_file.setdefault(path, []).append(i)
    out: dict[int, int] = {}
    for path, positions in by_file.items():
        try:
            handle = store.open(path)
        except NotFoundError:
            raise EpisodeFormatError(f"{store.url(path)}: data file not found") from None
        with handle:
            metadata = pq.ParquetFile(_unbuffered(handle)).metadata
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
        outside_fetches: frames a sample needed outside the fetched spans, read with
            :meth:`VideoFrameReader.frames_at <feedline.episodes.video.frames.VideoFrameReader.frames_at>`;
            should stay 0. Default 0.
    """

    data: EpisodeData
    minis: Mapping[str, tuple[MiniMp4, ...]]
    fetched_bytes: int
    _subplans: dict[tuple[str, int, int], SpanPlan] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    outside_fetches: int = 0

    def _sub_mini(self, reader: VideoFrameReader, key: str, first: int, last: int) -> MiniMp4 | None:
        """Samples ``first..last`` as their own mini-MP4, cut from the fetched one (no I/O)."""
        path = self.data.video_path[key]
        for mini in self.minis[key]:
            plan = mini.plan
            if not plan.first <= first <= last <= plan.last:
                continue
            if (first, last) == (plan.first, plan.last):
                return mini
            table = reader.table(path)
            with self._lock:
                sub = self._subplans.get((key, first, last))
                if sub is None:
                    sub = self._subplans[(key, first, last)] = plan_span(table, first, last)
            header = len(plan.layout.header)
            sizes = np.asarray(table.size[plan.first : last + 1], dtype=np.int64)
            start = header + int(sizes[: first - plan.first].sum())
            end = header + int(sizes.sum())
            return MiniMp4(sub, sub.layout.header + mini.data[start:end], 0)
        return None

    def frames(
        self, reader: VideoFrameReader, key: str, timestamps_s: Sequence[float], tolerance_s: float
    ) -> np.ndarray:
        """``uint8 [T, H, W, 3]`` frames nearest each timestamp, decoded GOP by GOP from memory."""
        path = self.data.video_path[key]
        table = reader.table(path)
        name = reader.store.url(path)
        samples = nearest_samples(table, name, timestamps_s, tolerance_s)
        out: list[np.ndarray | None] = [None] * len(samples)
        for first, last in covering_spans(table, samples, name, reader.span_mode):
            slots = [j for j, s in enumerate(samples.tolist()) if first <= s <= last]
            wanted = [float(timestamps_s[j]) for j in slots]
            sub = self._sub_mini(reader, key, first, last)
            with _SPAN_LOCKS[hash((path, first, last)) % len(_SPAN_LOCKS)]:
                if sub is None:
                    self.outside_fetches += 1
                    rgb = reader.frames_at(path, wanted, tolerance_s)
                else:
                    rgb = reader.frames_from(path, sub, wanted, tolerance_s)
            for j, image in zip(slots, rgb, strict=True):
                out[j] = image
        if any(image is None for image in out):
            raise SidecarError(f"{name}: frames at {list(timestamps_s)} were not all decoded")
        return np.stack(out)  # type: ignore[arg-type]


def fetch_episode(
    store: Store,
    reader: VideoFrameReader,
    table: EpisodeTable,
    spans: EpisodeSpans,
) -> EpisodePayload:
    """Read one episode's Parquet rows and every camera's mini-MP4 bytes (ranged reads)."""
    i = spans.position
    ep = spans.episode_index
    want = EpisodeRows(ep, int(table.dataset_from_index[i]), int(table.dataset_to_index[i]))
    rows = read_episodes_rows(store, table.data_path[i], [want])[ep]
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
    return EpisodePayload(data, minis, fetched)
