"""Sample tables → per-sample numpy arrays on FFmpeg's presentation timeline.

The arrays are what the sidecar stores and what the mini-MP4 writer rebuilds tables from. The
timeline is FFmpeg's (PyAV's ``frame.time``), not ISO's: with an edit list, libavformat shifts the
video so its first presented frame sits at the end of any leading empty edit, whatever the
edit's ``media_time`` says. LeRobot's timestamps follow that timeline, so ``pts`` here is
bit-identical to PyAV's ``frame.time`` (``float(pts_ticks) * 1 / timescale``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.episodes.errors import Mp4Error
from feedline.episodes.video.mp4.boxes import EditEntry, RawTrack, locate_moov, parse_moov

#: Most samples one track may claim (~2,500 h at 30 fps); garbage counts must not allocate.
MAX_SAMPLES = 2**28
#: Integer per-sample columns, all int64 in the canonical (sidecar) form.
INT_COLUMNS = ("offset", "size", "dts", "ctts", "pts_ticks", "sync", "presented")


@dataclass(frozen=True)
class TrackInfo:
    """Per-file facts the mini-MP4 writer and the frame reader need besides the sample arrays.

    Args:
        codec: the sample entry's four-character code.
        width: frame width in pixels.
        height: frame height in pixels.
        timescale: media ticks per second.
        movie_timescale: movie ticks per second (the edit list's unit).
        stsd: the ``stsd`` box, copied into every mini-MP4.
        has_ctts: whether samples carry composition offsets (B-frames reorder).
        ctts_version: the ``ctts`` box version, or ``None``.
        edits: the ``elst`` as stored, ``((segment_duration, media_time), ...)`` (rates are
            always 1), or ``None``.
        last_duration: duration of the last sample in decode order (the others follow from
            ``dts``).
        file_size: the MP4's size in bytes.
    """

    codec: str
    width: int
    height: int
    timescale: int
    movie_timescale: int
    stsd: bytes
    has_ctts: bool
    ctts_version: int | None
    edits: tuple[tuple[int, int], ...] | None
    last_duration: int
    file_size: int

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (the sidecar's ``meta.json`` form); :meth:`from_json` reads it back."""
        return {
            "codec": self.codec,
            "width": self.width,
            "height": self.height,
            "timescale": self.timescale,
            "movie_timescale": self.movie_timescale,
            "stsd": base64.b64encode(self.stsd).decode("ascii"),
            "has_ctts": self.has_ctts,
            "ctts_version": self.ctts_version,
            "edits": None if self.edits is None else [list(e) for e in self.edits],
            "last_duration": self.last_duration,
            "file_size": self.file_size,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrackInfo:
        """Read back what :meth:`to_json` wrote."""
        edits = data["edits"]
        return cls(
            codec=str(data["codec"]),
            width=int(data["width"]),
            height=int(data["height"]),
            timescale=int(data["timescale"]),
            movie_timescale=int(data["movie_timescale"]),
            stsd=base64.b64decode(data["stsd"]),
            has_ctts=bool(data["has_ctts"]),
            ctts_version=data["ctts_version"],
            edits=None if edits is None else tuple((int(a), int(b)) for a, b in edits),
            last_duration=int(data["last_duration"]),
            file_size=int(data["file_size"]),
        )


@dataclass
class SampleTable:
    """One video track, one entry per sample in decode order.

    Args:
        info: the track's codec configuration, timescales and edit list.
        offset: each sample's byte offset in the file.
        size: each sample's size in bytes.
        dts: decode time, in media ticks.
        ctts: composition offset (``cts = dts + ctts``).
        pts_ticks: presentation time PyAV reports, in media ticks (after the edit list).
        pts: the same in seconds, float64, bit-identical to PyAV's ``frame.time``.
        sync: whether the sample is a keyframe.
        presented: ``False`` for samples the edit list hides (still decoded when they are
            references).
        origin: ``(size, fingerprint)`` of the video file the table was built from, when known;
            payload reads check the file still is that object. Default ``None``: not checked.
    """

    info: TrackInfo
    offset: np.ndarray
    size: np.ndarray
    dts: np.ndarray
    ctts: np.ndarray
    pts_ticks: np.ndarray
    pts: np.ndarray
    sync: np.ndarray
    presented: np.ndarray
    origin: tuple[int, str | None] | None = None
    _sync_index: np.ndarray | None = field(default=None, repr=False)
    _display: np.ndarray | None = field(default=None, repr=False)
    _display_pts: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.offset)

    @property
    def sync_index(self) -> np.ndarray:
        """Decode-order indices of the sync samples, ascending."""
        if self._sync_index is None:
            self._sync_index = np.flatnonzero(self.sync)
        return self._sync_index

    @property
    def display_order(self) -> np.ndarray:
        """Decode-order indices of the presented samples, sorted by presentation time."""
        if self._display is None:
            presented = np.flatnonzero(self.presented)
            self._display = presented[np.argsort(self.pts[presented], kind="stable")]
        return self._display

    @property
    def display_pts(self) -> np.ndarray:
        """``pts`` of :attr:`display_order` (ascending float64 seconds)."""
        if self._display_pts is None:
            self._display_pts = np.asarray(self.pts[self.display_order], dtype=np.float64)
        return self._display_pts

    def cts(self, index: int) -> int:
        """Composition time of one sample (``dts + ctts``) as a Python int."""
        return int(self.dts[index]) + int(self.ctts[index])

    def durations(self, first: int = 0, last: int | None = None) -> np.ndarray:
        """int64 decode durations (``stts`` expanded) of samples ``first..last`` (inclusive)."""
        last = len(self) - 1 if last is None else last
        stop = min(last + 2, len(self))
        dts = np.asarray(self.dts[first:stop], dtype=np.int64)
        out = np.empty(last - first + 1, dtype=np.int64)
        out[: len(dts) - 1] = np.diff(dts)
        if stop == len(self):
            out[-1] = self.info.last_duration
        return out


def av_rescale(value: int, to_scale: int, from_scale: int) -> int:
    """FFmpeg's ``av_rescale`` (round to nearest, halves away from zero) on Python ints."""
    num = value * to_scale
    if num >= 0:
        return (num + from_scale // 2) // from_scale
    return -((-num + from_scale // 2) // from_scale)


def read_table(read_at: Any, file_size: int, name: str) -> SampleTable:
    """Find and parse the moov of one file (through ``read_at(start, end)``) into a table."""
    moov = locate_moov(read_at, file_size, name)
    return build_table(parse_moov(moov, name), file_size, name)


def build_table(raw: RawTrack, file_size: int, name: str) -> SampleTable:
    """Expand the raw tables, check them against each other and the file, apply the edit list."""
    n = raw.sample_count

    def fail(message: str) -> Mp4Error:
        return Mp4Error(f"{name}: {message}")

    if n == 0:
        raise fail("the video track has no samples")
    if n > MAX_SAMPLES or n > file_size:
        raise fail(f"stsz claims {n} samples, impossible for a {file_size}-byte file")
    if raw.sample_sizes is not None:
        size = raw.sample_sizes.astype(np.int64)
        if len(size) != n:
            raise fail(f"stsz lists {len(size)} sizes for {n} samples")
    else:
        size = np.full(n, raw.sample_size, dtype=np.int64)

    counts, deltas = raw.stts_counts, raw.stts_deltas
    if int(counts.sum()) != n:
        raise fail(f"stts covers {int(counts.sum())} samples, stsz has {n}")
    if (deltas >= 2**31).any():
        raise fail("stts has a negative sample duration")
    durations = np.repeat(deltas, counts)
    dts = np.zeros(n, dtype=np.int64)
    np.cumsum(durations[:-1], out=dts[1:])

    if raw.ctts_counts is not None and raw.ctts_offsets is not None:
        if int(raw.ctts_counts.sum()) != n:
            raise fail(f"ctts covers {int(raw.ctts_counts.sum())} samples, stsz has {n}")
        ctts = np.repeat(raw.ctts_offsets, raw.ctts_counts)
    else:
        ctts = np.zeros(n, dtype=np.int64)

    if raw.stss is None:
        sync = np.ones(n, dtype=bool)
    else:
        if len(raw.stss) and (raw.stss.min() < 1 or raw.stss.max() > n):
            raise fail(f"stss names a sample outside 1..{n}")
        sync = np.zeros(n, dtype=bool)
        sync[raw.stss - 1] = True
    if not sync[0]:
        raise fail("the first sample is not a sync sample (keyframe)")

    offset = _sample_offsets(raw, size, fail)
    if int((offset + size).max()) > file_size:
        last = int(np.argmax(offset + size > file_size))
        raise fail(
            f"sample {last} lies at bytes [{int(offset[last])}, {int(offset[last] + size[last])}) "
            f"past the end of the file ({file_size} bytes; truncated?)"
        )

    cts = dts + ctts
    presented, pts_ticks = _apply_edits(raw, cts, fail)
    pts = pts_ticks.astype(np.float64) * 1 / raw.timescale
    info = TrackInfo(
        codec=raw.codec,
        width=raw.width,
        height=raw.height,
        timescale=raw.timescale,
        movie_timescale=raw.movie_timescale,
        stsd=raw.stsd,
        has_ctts=raw.ctts_counts is not None,
        ctts_version=raw.ctts_version,
        edits=None if raw.edits is None else tuple((e.segment_duration, e.media_time) for e in raw.edits),
        last_duration=int(durations[-1]),
        file_size=file_size,
    )
    return SampleTable(info, offset, size, dts, ctts, pts_ticks, pts, sync, presented)


def _sample_offsets(raw: RawTrack, size: np.ndarray, fail: Any) -> np.ndarray:
    n = len(size)
    chunks = raw.chunk_offsets
    n_chunks = len(chunks)
    first, per_chunk = raw.stsc_first_chunk, raw.stsc_samples_per_chunk
    if n_chunks == 0 or len(first) == 0:
        raise fail("the sample-to-chunk tables are empty")
    if first[0] != 1 or (np.diff(first) <= 0).any() or first[-1] > n_chunks:
        raise fail("stsc first_chunk values are not increasing from 1 within the chunk count")
    if (per_chunk > n).any():
        raise fail("stsc claims more samples per chunk than the track has")
    runs = np.diff(np.append(first, n_chunks + 1))
    chunk_samples = np.repeat(per_chunk, runs)
    if int(chunk_samples.sum()) != n:
        raise fail(f"stsc/stco place {int(chunk_samples.sum())} samples, stsz has {n}")
    chunk_of_sample = np.repeat(np.arange(n_chunks), chunk_samples)
    ends = np.cumsum(size)
    starts = ends - size
    chunk_first = np.cumsum(chunk_samples) - chunk_samples
    nonempty = chunk_samples > 0
    base = np.zeros(n_chunks, dtype=np.int64)
    base[nonempty] = starts[chunk_first[nonempty]]
    return chunks[chunk_of_sample] + starts - base[chunk_of_sample]


def _apply_edits(raw: RawTrack, cts: np.ndarray, fail: Any) -> tuple[np.ndarray, np.ndarray]:
    """Which samples the edit list presents, and their presentation ticks (FFmpeg's timeline).

    Supported: no edit list, or at most one leading empty edit followed by exactly one media
    edit at rate 1. FFmpeg plays repeated edits twice and ignores non-unit rates, so anything
    else would silently misalign frames and is rejected.
    """
    edits: list[EditEntry] = raw.edits or []
    if not edits:
        return np.ones(len(cts), dtype=bool), cts.copy()
    for edit in edits:
        if (edit.rate_integer, edit.rate_fraction) != (1, 0):
            rate = edit.rate_integer + edit.rate_fraction / 65536
            raise fail(f"edit list with media rate {rate:g}; only rate 1 is supported")
        if edit.media_time < -1:
            raise fail(f"edit list with invalid media_time {edit.media_time}")
    media = [e for e in edits if e.media_time != -1]
    if len(media) != 1:
        raise fail(f"edit list with {len(media)} media edits (repeated or split timeline); exactly one is supported")
    if edits[-1] is not media[0] or any(e.media_time != -1 for e in edits[:-1]) or len(edits) > 2:
        raise fail("edit list shape not supported (only one leading empty edit, then one media edit)")
    empty = sum(e.segment_duration for e in edits[:-1])
    empty_ticks = av_rescale(empty, raw.timescale, raw.movie_timescale)
    media_time = media[0].media_time
    duration = av_rescale(media[0].segment_duration, raw.timescale, raw.movie_timescale)
    if duration <= 0:
        raise fail("edit list media edit has zero duration (it would present no frame)")
    presented = (cts >= media_time) & (cts < media_time + duration)
    if not presented.any():
        raise fail(f"edit list (media_time {media_time}, duration {duration}) presents no sample")
    first_cts = int(cts[presented].min())
    return presented, cts - first_cts + empty_ticks
