"""Mini-MP4 synthesis: the few samples a set of frames needs, fetched by range and re-wrapped.

For wanted frames the span starts at the sync sample at/before the first one in decode order
whose *presentation* is not after it (open GOP: a later keyframe's leading pictures need the
previous GOP) and ends with the GOP holding the last one, so reordered frames decode and the
decoded frame indices stay contiguous. The file size is known from the index alone
(:func:`plan_span`), which is what byte-budget admission reserves before any fetch.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import av
import numpy as np

from feedline.episodes.errors import FrameTimestampError, Mp4Error, VideoChangedError
from feedline.episodes.video.mp4.table import SampleTable
from feedline.episodes.video.mp4.writer import MiniLayout, build_header
from feedline.io import ObjectChangedError, ObjectInfo, Store

#: Ranges closer than this are fetched as one request (interleaved audio chunks, tiny gaps).
MERGE_GAP_BYTES = 4096


@dataclass(frozen=True)
class SpanPlan:
    """Samples ``first..last`` (decode order, inclusive) and the file built from them.

    Args:
        first: first sample, in decode order.
        last: last sample, inclusive.
        layout: the mini-MP4's header and payload size.
        pts_ticks: original presentation ticks of every frame the mini-MP4 presents, ascending.
        tick_offset: ``decoded frame.pts - original ticks`` (0 unless the video's timeline
            starts below 0).
    """

    first: int
    last: int
    layout: MiniLayout
    pts_ticks: np.ndarray
    tick_offset: int

    @property
    def size(self) -> int:
        """Exact bytes of the synthesized file (what the byte budget reserves)."""
        return self.layout.total_size


@dataclass(frozen=True)
class MiniMp4:
    """A synthesized, self-contained MP4 holding one span.

    Args:
        plan: the span it holds.
        data: the file's bytes (``plan.size`` of them).
        fetched_bytes: bytes read from the store to build it (merged sample ranges).
    """

    plan: SpanPlan
    data: bytes
    fetched_bytes: int


def nearest_samples(
    table: SampleTable, name: str, timestamps_s: Sequence[float], tolerance_s: float
) -> np.ndarray:
    """Decode-order sample index of the presented frame nearest each timestamp (within tolerance)."""
    times = table.display_pts
    wanted = np.asarray(timestamps_s, dtype=np.float64).reshape(-1)
    best, within = _nearest_display(table, wanted, tolerance_s)
    bad = ~within
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FrameTimestampError(
            f"{name}: no frame within {tolerance_s:g} s of t={float(wanted[i])!r} s; the nearest frame is at "
            f"{float(times[best[i]])!r} s (video covers {float(times[0])!r}..{float(times[-1])!r} s); "
            "check the episode's from_timestamp and the fps, or raise tolerance_s"
        )
    return table.display_order[best]


def nearest_samples_within(
    table: SampleTable, timestamps_s: np.ndarray, tolerance_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`nearest_samples` for many timestamps at once, without raising: ``(samples,
    within)``, where ``within`` is false for a timestamp with no frame within tolerance (its
    sample is then meaningless)."""
    wanted = np.asarray(timestamps_s, dtype=np.float64).reshape(-1)
    best, within = _nearest_display(table, wanted, tolerance_s)
    return table.display_order[best], within


def _nearest_display(
    table: SampleTable, wanted: np.ndarray, tolerance_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Display position of the frame nearest each time (ties to the earlier), and whether it is
    within tolerance."""
    times = table.display_pts
    # np.minimum/np.maximum: the same as np.clip here, without its per-call overhead (every sample)
    right = np.minimum(np.maximum(np.searchsorted(times, wanted), 1), len(times) - 1) if len(times) > 1 else None
    if right is None:
        best = np.zeros(len(wanted), dtype=np.int64)
    else:
        left = right - 1
        pick_left = np.abs(wanted - times[left]) <= np.abs(times[right] - wanted)
        best = np.where(pick_left, left, right)
    return best, np.abs(times[best] - wanted) <= tolerance_s


def samples_between(table: SampleTable, t0: float, t1: float, tolerance_s: float = 1e-4) -> np.ndarray:
    """Decode-order indices of the presented frames with ``t0 <= pts <= t1`` (± tolerance)."""
    times = table.display_pts
    lo = int(np.searchsorted(times, t0 - tolerance_s, side="left"))
    hi = int(np.searchsorted(times, t1 + tolerance_s, side="right"))
    return np.sort(table.display_order[lo:hi])


#: Span end rules: ``"gop"`` runs to the end of the GOP holding the frame (decoded frame indices
#: stay contiguous, so one decode serves every frame of the GOP); ``"minimal"`` stops at the frame
#: itself in decode order (every reference precedes its user there), half the decode work on
#: average for one random frame of a long-GOP video.
SPAN_MODES = ("gop", "minimal")


def frame_span(table: SampleTable, sample: int, name: str = "", mode: str = "gop") -> tuple[int, int]:
    """``(first, last)`` decode-order samples needed to decode ``sample`` (see :data:`SPAN_MODES`)."""
    syncs = table.sync_index
    target = table.cts(sample)
    pos = int(np.searchsorted(syncs, sample, side="right")) - 1
    while pos >= 0 and table.cts(int(syncs[pos])) > target:
        pos -= 1
    if pos < 0:
        raise Mp4Error(f"{name}: sample {sample} has no keyframe at or before it that precedes it on screen")
    if mode == "minimal":
        return int(syncs[pos]), int(sample)
    if mode != "gop":
        raise ValueError(f"span mode {mode!r} is not one of {SPAN_MODES}")
    after = int(np.searchsorted(syncs, sample, side="right"))
    last = int(syncs[after]) - 1 if after < len(syncs) else len(table) - 1
    return int(syncs[pos]), last


def covering_spans(
    table: SampleTable, samples: np.ndarray, name: str = "", mode: str = "gop"
) -> list[tuple[int, int]]:
    """Per-frame spans of ``samples``, merged where they overlap or touch."""
    spans = sorted({frame_span(table, int(s), name, mode) for s in np.unique(samples)})
    merged: list[list[int]] = []
    for first, last in spans:
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return [(a, b) for a, b in merged]


def plan_span(table: SampleTable, first: int, last: int) -> SpanPlan:
    """The exact mini-MP4 layout for samples ``first..last``, from the index alone."""
    layout, pts_ticks, offset = build_header(table, first, last)
    return SpanPlan(first, last, layout, np.sort(pts_ticks), offset)


def merge_ranges(starts: np.ndarray, ends: np.ndarray, gap: int = MERGE_GAP_BYTES) -> list[tuple[int, int]]:
    order = np.argsort(starts, kind="stable")
    out: list[list[int]] = []
    for s, e in zip(starts[order].tolist(), ends[order].tolist(), strict=True):
        if out and s <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def _changed(store: Store, path: str, exc: ObjectChangedError) -> VideoChangedError:
    return VideoChangedError(
        f"{store.url(path)}: changed since the dataset was opened ({exc.what or 'another object'}); "
        "its index no longer describes it: reopen the dataset"
    )


def _pin(path: str, table: SampleTable) -> ObjectInfo | None:
    if table.origin is None:
        return None
    size, fingerprint = table.origin
    return ObjectInfo(path=path, size=int(size), fingerprint=fingerprint)


def check_unchanged(store: Store, path: str, table: SampleTable) -> None:
    """Raise :class:`VideoChangedError` unless a fresh stat of ``path`` shows the object
    ``table`` indexes (``table.origin``: size, and the fingerprint where the store has one)."""
    pin = _pin(path, table)
    if pin is None:
        return
    try:
        store.check_pin(path, pin)
    except ObjectChangedError as exc:
        raise _changed(store, path, exc) from None


def read_sample_ranges(
    store: Store, path: str, table: SampleTable, ranges: list[tuple[int, int]]
) -> list[bytes]:
    """Byte ranges of the video ``table`` indexes, pinned to it (``table.origin``).

    A video replaced since its index was made is a :class:`VideoChangedError`: bytes read from
    another object are never used. Over HTTP the reads carry the pin themselves (``If-Match``
    and the answer's size and ETag), so checking costs no request; elsewhere a stat follows the
    reads (:meth:`~feedline.io.store.Store.read_ranges_pinned`). A store without fingerprints
    can only show a change of size.
    """
    pin = _pin(path, table)
    if pin is None:
        return store.read_ranges(path, ranges)
    try:
        return store.read_ranges_pinned(path, ranges, pin)
    except ObjectChangedError as exc:
        raise _changed(store, path, exc) from None


def fetch_span(store: Store, path: str, table: SampleTable, plan: SpanPlan) -> MiniMp4:
    """Fetch the span's sample bytes with ranged reads and assemble the mini-MP4 in memory."""
    sel = slice(plan.first, plan.last + 1)
    starts = np.asarray(table.offset[sel], dtype=np.int64)
    sizes = np.asarray(table.size[sel], dtype=np.int64)
    ranges = merge_ranges(starts, starts + sizes)
    blobs = read_sample_ranges(store, path, table, ranges)
    out = bytearray(plan.layout.header)
    range_starts = np.array([r[0] for r in ranges], dtype=np.int64)
    where = np.searchsorted(range_starts, starts, side="right") - 1
    for start, size, idx in zip(starts.tolist(), sizes.tolist(), where.tolist(), strict=True):
        blob = blobs[idx]
        lo = start - ranges[idx][0]
        if lo + size > len(blob):
            raise Mp4Error(f"{store.url(path)}: short read for sample bytes [{start}, {start + size})")
        out += blob[lo : lo + size]
    if len(out) != plan.size:
        raise Mp4Error(f"{store.url(path)}: mini-MP4 is {len(out)} bytes, predicted {plan.size}")
    return MiniMp4(plan, bytes(out), sum(e - s for s, e in ranges))


def decode_span(mini: MiniMp4, name: str) -> dict[int, av.VideoFrame]:
    """Decode a mini-MP4; ``{original presentation tick: frame}`` for exactly the planned frames.

    Frames are filtered against the exact ticks from the index: some decoders let extra frames
    through an edit list, and a missing one is an error rather than a silent shift.
    """
    expected = mini.plan.pts_ticks
    wanted = set(expected.tolist())
    frames: dict[int, av.VideoFrame] = {}
    try:
        with av.open(io.BytesIO(mini.data), format="mp4") as container:
            stream = container.streams.video[0]
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                tick = int(frame.pts) - mini.plan.tick_offset
                if tick in wanted:
                    frames[tick] = frame
    except av.error.FFmpegError as exc:
        raise Mp4Error(f"{name}: decoding samples {mini.plan.first}..{mini.plan.last} failed: {exc}") from exc
    if len(frames) != len(wanted):
        missing = sorted(wanted - frames.keys())[:5]
        raise Mp4Error(
            f"{name}: decoding samples {mini.plan.first}..{mini.plan.last} gave {len(frames)} of "
            f"{len(wanted)} expected frames (missing ticks {missing})"
        )
    return frames
