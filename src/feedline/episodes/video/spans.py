"""Every episode's mini-MP4 span and exact size in one array pass over a video's sample table.

Opening a dataset must not cost Python work per episode: at 100,000 episodes, building each
episode's :class:`~feedline.episodes.video.minimp4.SpanPlan` (header bytes and tick arrays) up
front took 36-40 s and 420 MiB. The byte budget needs only the *size* of each mini-MP4 before
anything is fetched, and that size follows from a few counts over the span: samples, runs of
equal durations and of equal composition offsets, edits, and the payload bytes. This module
computes those counts for every episode of a video at once, with the span rule of
:func:`~feedline.episodes.video.minimp4.covering_spans` (``"gop"`` mode); the plan itself is
made when the episode is fetched, and checked against the size predicted here.

Spans the closed form does not cover (a presented frame at or before tick 0, 64-bit boxes,
spans that present nothing) fall back to :func:`~feedline.episodes.video.minimp4.plan_span`
itself, so every size is the writer's own.
"""

from __future__ import annotations

import numpy as np

from feedline.episodes.errors import SidecarError
from feedline.episodes.video.minimp4 import covering_spans, plan_span
from feedline.episodes.video.mp4.table import SampleTable

#: Bytes of a mini-MP4's fixed boxes (ftyp, moov, trak, tkhd, mdia, mdhd, hdlr, minf, vmhd,
#: dinf, stbl, stss, stsc, stco and the mdat header, version-0 forms), from
#: :func:`~feedline.episodes.video.mp4.writer.build_header`; a test holds it against the writer.
FIXED_HEADER_BYTES = 541
_I31 = 2**31 - 1


def _runs(values: np.ndarray) -> np.ndarray:
    """``changes[i]``: how many ``j <= i`` have ``values[j] != values[j - 1]`` (prefix counts)."""
    change = np.zeros(len(values), np.int64)
    if len(values) > 1:
        change[1:] = values[1:] != values[:-1]
    return np.cumsum(change)


def _range_reduce(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(values[lo[i]:hi[i]])`` for every ``i`` (each range non-empty)."""
    padded = np.concatenate([values, values[-1:]])
    idx = np.empty(2 * len(lo), np.int64)
    idx[0::2], idx[1::2] = lo, hi
    return ufunc.reduceat(padded, idx)[0::2]


def _frame_spans(table: SampleTable) -> tuple[np.ndarray, np.ndarray]:
    """Per sample, the first and last decode-order sample of :func:`frame_span` in ``"gop"``
    mode: from the keyframe at or before it whose picture does not follow it on screen, to the
    end of its GOP."""
    n = len(table)
    syncs = np.asarray(table.sync_index, np.int64)
    cts = np.asarray(table.dts, np.int64) + np.asarray(table.ctts, np.int64)
    # The last keyframe at or before each sample: a running count of keyframes (what a
    # search of every sample in the keyframe list gives, in one pass).
    after = np.cumsum(np.asarray(table.sync, bool), dtype=np.int64)
    pos = after - 1
    while True:  # open GOPs: a leading picture shown before its keyframe needs the previous GOP
        back = (pos >= 0) & (cts[syncs[np.maximum(pos, 0)]] > cts)
        if not back.any():
            break
        pos = np.where(back, pos - 1, pos)
    start = np.where(pos >= 0, syncs[np.maximum(pos, 0)], -1)
    end = np.where(after < len(syncs), syncs[np.minimum(after, len(syncs) - 1)] - 1, n - 1)
    return start, end


def span_bounds(
    table: SampleTable, t0: np.ndarray, t1: np.ndarray, tolerance_s: float, name: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """Per time range ``[t0[i], t1[i]]``, the ``(first, last)`` decode-order samples of the one
    mini-MP4 holding every presented frame in it (``covering_spans`` merged).

    A range with no frame, or one whose frames need a keyframe the file lacks, raises the
    error the per-episode path raises.
    """
    times = table.display_pts
    order = np.asarray(table.display_order, np.int64)
    lo = np.searchsorted(times, np.asarray(t0, np.float64) - tolerance_s, side="left")
    hi = np.searchsorted(times, np.asarray(t1, np.float64) + tolerance_s, side="right")
    empty = np.flatnonzero(hi <= lo)
    if len(empty):
        i = int(empty[0])
        raise SidecarError(f"{name}: no frame between {float(t0[i])!r} s and {float(t1[i])!r} s")
    start, end = _frame_spans(table)
    first = _range_reduce(np.minimum, start[order], lo, hi)
    last = _range_reduce(np.maximum, end[order], lo, hi)
    bad = np.flatnonzero(first < 0)
    if len(bad):  # the per-frame rule names the sample and the problem
        i = int(bad[0])
        covering_spans(table, order[lo[i] : hi[i]], name)
    return first, last


def span_sizes(table: SampleTable, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Exact bytes of the mini-MP4 of samples ``first[i]..last[i]`` for every ``i``: what
    :func:`~feedline.episodes.video.minimp4.plan_span` gives, without building headers."""
    first = np.asarray(first, np.int64)
    last = np.asarray(last, np.int64)
    if len(first) == 0:
        return np.zeros(0, np.int64)
    n = len(table)
    size = np.asarray(table.size, np.int64)
    payload_cum = np.concatenate([[0], np.cumsum(size)])
    payload = payload_cum[last + 1] - payload_cum[first]
    durations = table.durations(0, n - 1)
    ctts = np.asarray(table.ctts, np.int64)
    dur_runs = _runs(durations)
    ctts_runs = _runs(ctts)
    nonzero = np.concatenate([[0], np.cumsum(ctts != 0)])
    count = last - first + 1
    stts_rows = 1 + dur_runs[last] - dur_runs[first]
    ctts_rows = 1 + ctts_runs[last] - ctts_runs[first]
    has_ctts = table.info.has_ctts | ((nonzero[last + 1] - nonzero[first]) > 0)
    presented = np.asarray(table.presented, bool)
    ticks = np.where(presented, np.asarray(table.pts_ticks, np.int64), np.iinfo(np.int64).max)
    low_tick = _range_reduce(np.minimum, ticks, first, last + 1)
    sizes = (
        FIXED_HEADER_BYTES + len(table.info.stsd) + 2 * 12  # two edits: the empty one, the media one
        + 8 * stts_rows + 4 * count + np.where(has_ctts, 16 + 8 * ctts_rows, 0) + payload
    )
    wide = (
        int(np.abs(np.asarray(table.pts_ticks, np.int64)).max(initial=0)) + int(durations.sum()) > _I31
        or int(np.abs(np.asarray(table.dts, np.int64)).max(initial=0)) + int(np.abs(ctts).max(initial=0)) > _I31
    )
    exact_form = (low_tick > 0) & (low_tick != np.iinfo(np.int64).max) & (payload + 16 <= 0xFFFFFFFF)
    if wide:
        exact_form[:] = False
    for i in np.flatnonzero(~exact_form).tolist():
        sizes[i] = plan_span(table, int(first[i]), int(last[i])).size
    return sizes


__all__ = ["FIXED_HEADER_BYTES", "span_bounds", "span_sizes"]
