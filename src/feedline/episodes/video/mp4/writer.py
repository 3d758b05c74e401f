"""Build a minimal MP4 (ftyp + moov + mdat) around a run of samples copied from a bigger file.

The moov depends only on the sample table, never on payload bytes, so :func:`build_header`
gives the exact file size before anything is fetched. Choices that matter (all measured, see the
MP4 sidecar notes):

* ``ctts`` is written as version 0 with offsets shifted to be non-negative; negative offsets
  with an edit list came out a frame or two early in FFmpeg;
* the edit list keeps FFmpeg's timeline: an empty edit up to the first kept frame's original
  presentation tick, then one media edit, so PyAV reports the *original* timestamps; its
  duration is never 0 (PyAV then returns no frame);
* movie timescale = media timescale, so edit durations are exact;
* only the first sample is a sync sample, so no reader can seek past the real start;
* one chunk; ``co64`` and a 64-bit ``mdat`` header only when offsets need them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from feedline.episodes.errors import Mp4Error
from feedline.episodes.video.mp4.table import SampleTable

_MATRIX = struct.pack(">9I", 0x00010000, 0, 0, 0, 0x00010000, 0, 0, 0, 0x40000000)
_U32 = 0xFFFFFFFF


def box(kind: bytes, *payload: bytes) -> bytes:
    body = b"".join(payload)
    if len(body) + 8 > _U32:
        return struct.pack(">I4sQ", 1, kind, len(body) + 16) + body
    return struct.pack(">I4s", len(body) + 8, kind) + body


def full_box(kind: bytes, version: int, flags: int, *payload: bytes) -> bytes:
    return box(kind, struct.pack(">I", (version << 24) | flags), *payload)


@dataclass(frozen=True)
class MiniLayout:
    """The header of a mini-MP4 and where its payload goes.

    Args:
        header: ``ftyp`` + ``moov`` + the ``mdat`` box header; the samples follow it.
        payload_size: bytes of the samples.
    """

    header: bytes
    payload_size: int

    @property
    def total_size(self) -> int:
        """The whole file's size."""
        return len(self.header) + self.payload_size


def _rle(values: np.ndarray) -> list[tuple[int, int]]:
    """Run-length encode as ``[(count, value), ...]``."""
    if len(values) == 0:
        return []
    change = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate(([0], change))
    counts = np.diff(np.concatenate((starts, [len(values)])))
    return list(zip(counts.tolist(), values[starts].tolist(), strict=True))


def _table(kind: bytes, rows: Sequence[tuple[int, int]]) -> bytes:
    """A version-0 ``(count, value)`` table box (stts, ctts with non-negative offsets)."""
    packed = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    body = struct.pack(">I", len(rows)) + packed.astype(">u4").tobytes()
    return full_box(kind, 0, 0, body)


def build_header(
    table: SampleTable,
    first: int,
    last: int,
    *,
    force_large: bool = False,
) -> tuple[MiniLayout, np.ndarray, int]:
    """Header for samples ``first..last`` (decode order, inclusive) of ``table``.

    Returns the layout, the presentation ticks (original timeline) of the frames the file
    presents, and the tick offset ``reported - original`` (0 unless the original timeline
    starts below zero).
    """
    info = table.info
    sel = slice(first, last + 1)
    sizes = np.asarray(table.size[sel], dtype=np.int64)
    durations = table.durations(first, last)
    ctts = np.asarray(table.ctts[sel], dtype=np.int64)
    cts = np.asarray(table.dts[sel], dtype=np.int64) + ctts
    count = last - first + 1

    # Frames this span can decode: presented, and not before the span's first sample (open-GOP
    # leading pictures of the first keyframe reference the previous GOP).
    start_cts = int(cts[0])
    keep = np.asarray(table.presented[sel], dtype=bool) & (cts >= start_cts)
    if not keep.any():
        raise Mp4Error(f"samples {first}..{last} present no decodable frame")
    kept_cts = cts[keep]
    lo_cts, hi_cts = int(kept_cts.min()), int(kept_cts.max())
    later = cts[cts > hi_cts]
    hi_end = int(later.min()) if len(later) else hi_cts + int(durations[np.flatnonzero(cts == hi_cts)[0]])
    hi_end = max(hi_end, hi_cts + 1)
    pts_ticks = np.asarray(table.pts_ticks[sel], dtype=np.int64)[keep]
    first_pts = int(pts_ticks.min())
    empty = max(first_pts, 0)
    offset = empty - first_pts

    shift = max(0, -int(ctts.min()))
    new_dts0 = int(table.dts[first])
    media_time = lo_cts - new_dts0 + shift
    edit_duration = hi_end - lo_cts
    total_duration = int(durations.sum())
    edits = ([(empty, -1)] if empty > 0 else []) + [(edit_duration, media_time)]
    movie_duration = empty + edit_duration

    payload = int(sizes.sum())
    large = force_large or payload + 16 > _U32
    stbl_parts = [
        info.stsd,
        _table(b"stts", _rle(durations)),
    ]
    if info.has_ctts or shift or (ctts != 0).any():
        stbl_parts.append(_table(b"ctts", _rle(ctts + shift)))
    stbl_parts += [
        full_box(b"stss", 0, 0, struct.pack(">II", 1, 1)),
        full_box(b"stsc", 0, 0, struct.pack(">IIII", 1, 1, count, 1)),
        full_box(b"stsz", 0, 0, struct.pack(">II", 0, count), sizes.astype(">u4").tobytes()),
    ]

    def assemble(chunk_offset: int) -> bytes:
        if large:
            co = full_box(b"co64", 0, 0, struct.pack(">IQ", 1, chunk_offset))
        else:
            co = full_box(b"stco", 0, 0, struct.pack(">II", 1, chunk_offset))
        stbl = box(b"stbl", *stbl_parts, co)
        return _ftyp(info.codec) + _moov(table, stbl, edits, movie_duration, total_duration)

    mdat_header = struct.pack(">I4sQ", 1, b"mdat", payload + 16) if large else struct.pack(
        ">I4s", payload + 8, b"mdat"
    )
    head = assemble(0)
    head = assemble(len(head) + len(mdat_header))
    return MiniLayout(head + mdat_header, payload), pts_ticks + offset, offset


def _ftyp(codec: str) -> bytes:
    brand = codec.encode("latin-1")[:4].ljust(4, b" ")
    return box(b"ftyp", b"isom", struct.pack(">I", 0x200), b"isom", b"iso2", brand, b"mp41")


def _moov(
    table: SampleTable,
    stbl: bytes,
    edits: list[tuple[int, int]],
    movie_duration: int,
    media_duration: int,
) -> bytes:
    ti = table.info
    ts = ti.timescale
    wide = max(movie_duration, media_duration) > _U32 or any(abs(v) > 2**31 - 1 for e in edits for v in e)
    v = 1 if wide else 0
    if v:
        mvhd_times = struct.pack(">QQIQ", 0, 0, ts, movie_duration)
        tkhd_times = struct.pack(">QQI4xQ", 0, 0, 1, movie_duration)
        mdhd_body = struct.pack(">QQIQHH", 0, 0, ts, media_duration, 0x55C4, 0)
        elst_rows = b"".join(struct.pack(">QqhH", d, m, 1, 0) for d, m in edits)
    else:
        mvhd_times = struct.pack(">IIII", 0, 0, ts, movie_duration)
        tkhd_times = struct.pack(">III4xI", 0, 0, 1, movie_duration)
        mdhd_body = struct.pack(">IIIIHH", 0, 0, ts, media_duration, 0x55C4, 0)
        elst_rows = b"".join(struct.pack(">IihH", d, m, 1, 0) for d, m in edits)
    mvhd = full_box(
        b"mvhd", v, 0, mvhd_times, struct.pack(">IH10x", 0x00010000, 0x0100), _MATRIX, bytes(24),
        struct.pack(">I", 2),
    )
    tkhd = full_box(
        b"tkhd",
        v,
        3,
        tkhd_times,
        bytes(8),
        struct.pack(">hhhH", 0, 0, 0, 0),
        _MATRIX,
        struct.pack(">II", ti.width << 16, ti.height << 16),
    )
    mdhd = full_box(b"mdhd", v, 0, mdhd_body)
    elst = full_box(b"elst", v, 0, struct.pack(">I", len(edits)), elst_rows)
    hdlr = full_box(b"hdlr", 0, 0, struct.pack(">I4s12x", 0, b"vide"), b"VideoHandler\x00")
    vmhd = full_box(b"vmhd", 0, 1, bytes(8))
    dinf = box(b"dinf", full_box(b"dref", 0, 0, struct.pack(">I", 1), full_box(b"url ", 0, 1)))
    minf = box(b"minf", vmhd, dinf, stbl)
    mdia = box(b"mdia", mdhd, hdlr, minf)
    trak = box(b"trak", tkhd, box(b"edts", elst), mdia)
    return box(b"moov", mvhd, trak)
