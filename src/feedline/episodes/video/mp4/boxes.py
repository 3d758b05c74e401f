"""An ISO-BMFF (MP4) box parser of our own, for the one video track of a LeRobot camera file.

Why our own: the sidecar must read the ``moov`` of a remote file with a few range reads (not a
download), and must *reject* what PyAV would silently misplay (repeated or non-unit-rate edit
lists, several sample descriptions, fragments). Every malformed input ends in :class:`Mp4Error`
naming the file: sizes are checked against their parent before anything is allocated, so garbage
can neither hang the walk nor make it allocate gigabytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from feedline.episodes.errors import Mp4Error

#: Top-level boxes walked before giving up (real files have 3-5: ftyp, free, mdat, moov ...).
MAX_TOP_LEVEL_BOXES = 4096
#: Largest moov accepted; a 1 h 30 fps video has a ~1.3 MB moov.
MAX_MOOV_BYTES = 256 * 2**20
#: Bytes read per request while looking for the moov (covers ftyp + a faststart moov at once).
PROBE_BYTES = 64 * 1024

ReadAt = Callable[[int, int], bytes]


@dataclass(frozen=True)
class Box:
    """One box inside a buffer: payload is ``buf[body:end]``.

    Args:
        type: the four-character box type (``"moov"``).
        start: offset of the box header.
        body: offset of its payload (after the header).
        end: offset one past its last byte.
    """

    type: str
    start: int
    body: int
    end: int


@dataclass(frozen=True)
class EditEntry:
    """One ``elst`` entry: duration in movie ticks, media time in media ticks (-1 = empty edit).

    Args:
        segment_duration: the edit's length, in movie-timescale ticks.
        media_time: where it starts in the media, in media ticks; -1 for an empty edit.
        rate_integer: integer part of the playback rate (1 is the only one accepted).
        rate_fraction: fractional part of the playback rate.
    """

    segment_duration: int
    media_time: int
    rate_integer: int
    rate_fraction: int


@dataclass
class RawTrack:
    """The raw tables of the first video track, exactly as stored (before expansion).

    Args:
        movie_timescale: ticks per second of the movie (``mvhd``), the edit list's unit.
        timescale: ticks per second of the track's media (``mdhd``).
        media_duration: the media's duration in media ticks (``mdhd``).
        codec: the sample entry's four-character code (``av01``, ``avc1``...).
        width: frame width in pixels (sample entry).
        height: frame height in pixels (sample entry).
        stsd: the whole ``stsd`` box, copied into every mini-MP4.
        stsd_entries: sample descriptions it holds (exactly one is accepted).
        edits: the ``elst`` entries, or ``None`` without an edit list.
        stts_counts: run lengths of the decode-duration table (``stts``).
        stts_deltas: the decode duration of each run, in media ticks.
        ctts_counts: run lengths of the composition-offset table, or ``None`` without ``ctts``.
        ctts_offsets: the composition offset of each run (signed in ``ctts`` version 1).
        ctts_version: the ``ctts`` box version, or ``None``.
        stss: 1-based numbers of the sync samples, or ``None`` when every sample is one.
        stsc_first_chunk: first chunk (1-based) of each sample-to-chunk run (``stsc``).
        stsc_samples_per_chunk: samples per chunk in each run.
        sample_size: the size of every sample when constant (``stsz``), else 0.
        sample_sizes: per-sample sizes when they vary, else ``None``.
        sample_count: samples in the track.
        chunk_offsets: file offset of every chunk (``stco`` / ``co64``).
    """

    movie_timescale: int
    timescale: int
    media_duration: int
    codec: str
    width: int
    height: int
    stsd: bytes
    stsd_entries: int
    edits: list[EditEntry] | None
    stts_counts: np.ndarray
    stts_deltas: np.ndarray
    ctts_counts: np.ndarray | None
    ctts_offsets: np.ndarray | None
    ctts_version: int | None
    stss: np.ndarray | None
    stsc_first_chunk: np.ndarray
    stsc_samples_per_chunk: np.ndarray
    sample_size: int
    sample_sizes: np.ndarray | None
    sample_count: int
    chunk_offsets: np.ndarray


class _Parser:
    """Bounds-checked reads over one buffer; every failure names the file."""

    def __init__(self, name: str, buf: bytes) -> None:
        self.name = name
        self.buf = buf

    def fail(self, message: str) -> Mp4Error:
        return Mp4Error(f"{self.name}: {message}")

    def need(self, offset: int, length: int, end: int, what: str) -> None:
        if offset < 0 or length < 0 or offset + length > end:
            raise self.fail(f"{what} is truncated ({length} bytes needed at {offset}, box ends at {end})")

    def unpack(self, fmt: str, offset: int, end: int, what: str) -> tuple[int, ...]:
        self.need(offset, struct.calcsize(fmt), end, what)
        return struct.unpack_from(fmt, self.buf, offset)

    def children(self, start: int, end: int, where: str) -> Iterator[Box]:
        pos = start
        while pos < end:
            if end - pos < 8:
                raise self.fail(f"{end - pos} stray bytes at the end of {where}")
            size, raw_type = struct.unpack_from(">I4s", self.buf, pos)
            header = 8
            if size == 1:
                self.need(pos, 16, end, f"large box header in {where}")
                (size,) = struct.unpack_from(">Q", self.buf, pos + 8)
                header = 16
            elif size == 0:
                size = end - pos
            box_type = raw_type.decode("latin-1")
            if size < header or pos + size > end:
                raise self.fail(
                    f"box {box_type!r} at byte {pos} in {where} has size {size}, "
                    f"outside its parent (ends at {end})"
                )
            yield Box(box_type, pos, pos + header, pos + size)
            pos += size

    def child_map(self, box: Box, where: str) -> dict[str, list[Box]]:
        found: dict[str, list[Box]] = {}
        for child in self.children(box.body, box.end, where):
            found.setdefault(child.type, []).append(child)
        return found

    def one(self, found: dict[str, list[Box]], box_type: str, where: str) -> Box:
        boxes = found.get(box_type)
        if not boxes:
            raise self.fail(f"no {box_type!r} box in {where}")
        if len(boxes) > 1:
            raise self.fail(f"{len(boxes)} {box_type!r} boxes in {where}, expected one")
        return boxes[0]

    def optional(self, found: dict[str, list[Box]], box_type: str, where: str) -> Box | None:
        return self.one(found, box_type, where) if box_type in found else None

    def array(self, offset: int, count: int, dtype: str, end: int, what: str) -> np.ndarray:
        item = np.dtype(dtype).itemsize
        if count < 0 or count * item > end - offset:
            raise self.fail(f"{what} claims {count} entries but its box holds {max(0, end - offset) // item}")
        return np.frombuffer(self.buf, dtype=dtype, count=count, offset=offset)


def locate_moov(read_at: ReadAt, file_size: int, name: str) -> bytes:
    """Walk the top-level boxes with small range reads and return the whole ``moov`` box.

    Works for a moov at the front (faststart) or at the end; reads are cached in
    :data:`PROBE_BYTES` blocks, so a faststart file costs one request and a moov at the end two
    or three.
    """
    cache: dict[int, bytes] = {}

    def read(start: int, end: int) -> bytes:
        if end - start > PROBE_BYTES:
            data = read_at(start, end)
        else:
            first = start // PROBE_BYTES
            block, parts = first, []
            while block * PROBE_BYTES < end:
                lo = block * PROBE_BYTES
                if block not in cache:
                    cache[block] = read_at(lo, min(file_size, lo + PROBE_BYTES))
                parts.append(cache[block])
                block += 1
            base = first * PROBE_BYTES
            data = b"".join(parts)[start - base : end - base]
        if len(data) != end - start:
            raise Mp4Error(f"{name}: short read at byte {start} (file shorter than its size?)")
        return data

    pos = 0
    seen: list[str] = []
    for _ in range(MAX_TOP_LEVEL_BOXES):
        if file_size - pos < 8:
            break
        header = read(pos, min(file_size, pos + 16))
        size, raw_type = struct.unpack_from(">I4s", header, 0)
        box_type = raw_type.decode("latin-1")
        head = 8
        if size == 1:
            if len(header) < 16:
                raise Mp4Error(f"{name}: truncated large box header at byte {pos}")
            (size,) = struct.unpack_from(">Q", header, 8)
            head = 16
        elif size == 0:
            size = file_size - pos
        if size < head:
            raise Mp4Error(f"{name}: box {box_type!r} at byte {pos} has invalid size {size}")
        seen.append(box_type)
        if box_type in ("moof", "mvex"):
            raise Mp4Error(f"{name}: fragmented MP4 (found {box_type!r}) is not supported")
        if box_type == "moov":
            if pos + size > file_size:
                raise Mp4Error(
                    f"{name}: moov box at byte {pos} needs {size} bytes but the file ends after "
                    f"{file_size - pos} (truncated file?)"
                )
            if size > MAX_MOOV_BYTES:
                raise Mp4Error(f"{name}: moov box of {size} bytes exceeds {MAX_MOOV_BYTES}")
            return read(pos, pos + size)
        pos += size
    else:
        raise Mp4Error(f"{name}: more than {MAX_TOP_LEVEL_BOXES} top-level boxes without a moov")
    found = ", ".join(seen[:8]) or "none"
    raise Mp4Error(f"{name}: no moov box (top-level boxes: {found}); not a complete MP4 file")


def parse_moov(moov: bytes, name: str) -> RawTrack:
    """Parse a ``moov`` box (header included) into the raw tables of its first video track."""
    p = _Parser(name, moov)
    boxes = list(p.children(0, len(moov), "the file"))
    if len(boxes) != 1 or boxes[0].type != "moov":
        raise p.fail("expected exactly one moov box")
    moov_box = boxes[0]
    top = p.child_map(moov_box, "moov")
    if "mvex" in top:
        raise p.fail("fragmented MP4 (moov/mvex) is not supported")
    mvhd = p.one(top, "mvhd", "moov")
    (version,) = p.unpack(">B", mvhd.body, mvhd.end, "mvhd")
    ts_at = mvhd.body + (20 if version == 1 else 12)
    (movie_timescale,) = p.unpack(">I", ts_at, mvhd.end, "mvhd timescale")
    if movie_timescale == 0:
        raise p.fail("mvhd timescale is 0")
    for trak in top.get("trak", []):
        trak_map = p.child_map(trak, "trak")
        mdia = p.one(trak_map, "mdia", "trak")
        mdia_map = p.child_map(mdia, "trak/mdia")
        hdlr = p.one(mdia_map, "hdlr", "trak/mdia")
        (handler,) = p.unpack(">4s", hdlr.body + 8, hdlr.end, "hdlr")
        if handler == b"vide":
            return _parse_video_trak(p, trak_map, mdia_map, movie_timescale)
    raise p.fail("no video track (no trak with handler 'vide')")


def _parse_video_trak(
    p: _Parser, trak_map: dict[str, list[Box]], mdia_map: dict[str, list[Box]], movie_timescale: int
) -> RawTrack:
    edits = None
    edts = p.optional(trak_map, "edts", "trak")
    if edts is not None:
        elst = p.optional(p.child_map(edts, "trak/edts"), "elst", "trak/edts")
        if elst is not None:
            edits = _parse_elst(p, elst)
    mdhd = p.one(mdia_map, "mdhd", "trak/mdia")
    (version,) = p.unpack(">B", mdhd.body, mdhd.end, "mdhd")
    if version == 1:
        timescale, duration = p.unpack(">IQ", mdhd.body + 20, mdhd.end, "mdhd")
    else:
        timescale, duration = p.unpack(">II", mdhd.body + 12, mdhd.end, "mdhd")
    if timescale == 0:
        raise p.fail("mdhd timescale is 0")
    minf = p.one(mdia_map, "minf", "trak/mdia")
    stbl = p.one(p.child_map(minf, "trak/mdia/minf"), "stbl", "trak/mdia/minf")
    where = "trak/mdia/minf/stbl"
    st = p.child_map(stbl, where)

    stsd = p.one(st, "stsd", where)
    (entries,) = p.unpack(">I", stsd.body + 4, stsd.end, "stsd")
    if entries != 1:
        raise p.fail(f"stsd has {entries} sample descriptions; exactly one is supported")
    entry = next(p.children(stsd.body + 8, stsd.end, "stsd"), None)
    if entry is None:
        raise p.fail("stsd holds no sample entry")
    width, height = p.unpack(">HH", entry.body + 24, entry.end, f"sample entry {entry.type!r}")

    stts = p.one(st, "stts", where)
    (count,) = p.unpack(">I", stts.body + 4, stts.end, "stts")
    pairs = p.array(stts.body + 8, 2 * count, ">u4", stts.end, "stts").reshape(-1, 2)

    ctts_counts = ctts_offsets = None
    ctts_version = None
    ctts = p.optional(st, "ctts", where)
    if ctts is not None:
        (ctts_version,) = p.unpack(">B", ctts.body, ctts.end, "ctts")
        (count,) = p.unpack(">I", ctts.body + 4, ctts.end, "ctts")
        # FFmpeg reads version 0 and 1 offsets alike as signed 32-bit; so do we.
        raw = p.array(ctts.body + 8, 2 * count, ">i4", ctts.end, "ctts").reshape(-1, 2)
        ctts_counts = raw[:, 0].astype(np.int64) & 0xFFFFFFFF
        ctts_offsets = raw[:, 1].astype(np.int64)

    stss_arr = None
    stss = p.optional(st, "stss", where)
    if stss is not None:
        (count,) = p.unpack(">I", stss.body + 4, stss.end, "stss")
        stss_arr = p.array(stss.body + 8, count, ">u4", stss.end, "stss").astype(np.int64)

    stsc = p.one(st, "stsc", where)
    (count,) = p.unpack(">I", stsc.body + 4, stsc.end, "stsc")
    stsc_rows = p.array(stsc.body + 8, 3 * count, ">u4", stsc.end, "stsc").reshape(-1, 3)

    sample_sizes = None
    if "stsz" in st:
        stsz = p.one(st, "stsz", where)
        sample_size, sample_count = p.unpack(">II", stsz.body + 4, stsz.end, "stsz")
        if sample_size == 0:
            sample_sizes = p.array(stsz.body + 12, sample_count, ">u4", stsz.end, "stsz")
    elif "stz2" in st:
        stz2 = p.one(st, "stz2", where)
        field_size, sample_count = p.unpack(">3xBI", stz2.body + 4, stz2.end, "stz2")
        sample_size = 0
        sample_sizes = _stz2_sizes(p, stz2, field_size, sample_count)
    else:
        raise p.fail(f"no 'stsz' or 'stz2' box in {where}")

    if "stco" in st and "co64" in st:
        raise p.fail("both stco and co64 present")
    if "stco" in st:
        box, dtype = p.one(st, "stco", where), ">u4"
    elif "co64" in st:
        box, dtype = p.one(st, "co64", where), ">u8"
    else:
        raise p.fail(f"no 'stco' or 'co64' box in {where}")
    (count,) = p.unpack(">I", box.body + 4, box.end, box.type)
    chunk_offsets = p.array(box.body + 8, count, dtype, box.end, box.type)
    if dtype == ">u8" and count and int(chunk_offsets.max()) >= 2**62:
        raise p.fail("co64 chunk offset out of range")

    return RawTrack(
        movie_timescale=movie_timescale,
        timescale=timescale,
        media_duration=duration,
        codec=entry.type,
        width=width,
        height=height,
        stsd=bytes(p.buf[stsd.start : stsd.end]),
        stsd_entries=entries,
        edits=edits,
        stts_counts=pairs[:, 0].astype(np.int64),
        stts_deltas=pairs[:, 1].astype(np.int64),
        ctts_counts=ctts_counts,
        ctts_offsets=ctts_offsets,
        ctts_version=ctts_version,
        stss=stss_arr,
        stsc_first_chunk=stsc_rows[:, 0].astype(np.int64),
        stsc_samples_per_chunk=stsc_rows[:, 1].astype(np.int64),
        sample_size=sample_size,
        sample_sizes=None if sample_sizes is None else sample_sizes.astype(np.int64),
        sample_count=sample_count,
        chunk_offsets=chunk_offsets.astype(np.int64),
    )


def _parse_elst(p: _Parser, elst: Box) -> list[EditEntry]:
    version, count = p.unpack(">B3xI", elst.body, elst.end, "elst")
    fmt = ">QqhH" if version == 1 else ">IihH"
    size = struct.calcsize(fmt)
    if count * size > elst.end - elst.body - 8:
        raise p.fail(f"elst claims {count} entries but its box holds fewer")
    out = []
    for i in range(count):
        duration, media_time, rate_int, rate_frac = p.unpack(
            fmt, elst.body + 8 + i * size, elst.end, "elst entry"
        )
        out.append(EditEntry(duration, media_time, rate_int, rate_frac))
    return out


def _stz2_sizes(p: _Parser, box: Box, field_size: int, count: int) -> np.ndarray:
    start = box.body + 12
    if field_size == 16:
        return p.array(start, count, ">u2", box.end, "stz2")
    if field_size == 8:
        return p.array(start, count, "u1", box.end, "stz2")
    if field_size == 4:
        packed = p.array(start, (count + 1) // 2, "u1", box.end, "stz2")
        nibbles = np.empty(2 * len(packed), dtype=np.uint8)
        nibbles[0::2] = packed >> 4
        nibbles[1::2] = packed & 0x0F
        return nibbles[:count]
    raise p.fail(f"stz2 field size {field_size} is not 4, 8 or 16")
