"""Persistent decoders: a fetched span's samples go straight to a reused codec context.

Opening a container on a mini-MP4 (``av.open``, probing, the first frame) costs about 1 ms, more
than decoding two 96x128 AV1 frames, and the map-style reader used to pay it for every GOP span
it decoded. The sample table already knows everything the demuxer would find: each sample's
bytes, decode and presentation ticks, and the codec configuration box inside ``stsd``. A
:class:`SpanDecoder` therefore keeps one codec context per video open and feeds it a span's
samples as packets (flushing between spans), which decodes the same frames - bit for bit, B-frame
reordering included - at about half the cost per span at 96x128.

Only codecs whose configuration box FFmpeg reads verbatim as extradata are handled (AV1's
``av1C``, H.264's ``avcC``, HEVC's ``hvcC``); anything else, or a span that yields fewer frames
than planned, goes through the container path (:func:`~feedline.episodes.video.minimp4.decode_span`),
which names the file and the missing frames if it fails too.
"""

from __future__ import annotations

import struct
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import av
import numpy as np

from feedline.episodes.video.fork import park_in_forked_child
from feedline.episodes.video.minimp4 import MiniMp4, decode_span
from feedline.episodes.video.mp4.table import SampleTable, TrackInfo

__all__ = ["SpanDecoder", "codec_config", "open_codec_context", "span_packets"]

#: Configuration box -> FFmpeg decoder. FFmpeg's mov demuxer hands these boxes' payloads to the
#: decoder as extradata unchanged, so the same bytes configure a bare codec context (the three
#: formats are bit-exact by specification, so any conformant decoder gives the same frames).
_DECODERS = {b"av1C": ("libdav1d", "libaom-av1"), b"avcC": ("h264",), b"hvcC": ("hevc",)}
_VISUAL_SAMPLE_ENTRY = 8 + 78  # box header + VisualSampleEntry fields before the child boxes

# A codec context owns codec threads: a forked worker parks the ones it inherited (video.fork).
_LIVE: weakref.WeakSet[SpanDecoder] = weakref.WeakSet()


def _detach(decoder: SpanDecoder) -> object:
    context, decoder._context = decoder._context, None  # later spans go through a container
    decoder._lock = threading.Lock()
    return context


park_in_forked_child(_LIVE, _detach)


def codec_config(info: TrackInfo) -> tuple[tuple[str, ...], bytes] | None:
    """``(decoder names to try, extradata)`` from the track's ``stsd``, or ``None`` when the
    sample entry has no configuration box a bare codec context can take."""
    stsd = info.stsd
    if len(stsd) < 16 + 8:
        return None
    entry_size = struct.unpack_from(">I", stsd, 16)[0]
    entry = stsd[16 : 16 + entry_size]
    pos = _VISUAL_SAMPLE_ENTRY
    while pos + 8 <= len(entry):
        size, kind = struct.unpack_from(">I4s", entry, pos)
        if size < 8 or pos + size > len(entry):
            return None
        if kind in _DECODERS:
            return _DECODERS[kind], bytes(entry[pos + 8 : pos + size])
        pos += size
    return None


def _open_context(names: tuple[str, ...], extradata: bytes) -> Any | None:
    for name in names:
        try:
            context = av.CodecContext.create(name, "r")
        except (av.error.FFmpegError, ValueError):
            continue  # this FFmpeg build lacks that decoder: try the next
        context.extradata = extradata
        # One thread: a span is a GOP or two, too short for frame threads, and readers run in
        # DataLoader workers that already use every core (0.35 vs 0.49 ms per 96x128 AV1 span
        # with FFmpeg's automatic threading; equal at 480x640).
        context.thread_count = 1
        return context
    return None


def open_codec_context(table: SampleTable) -> Any | None:
    """A bare single-threaded codec context for ``table``'s video, configured from its sample
    entry; ``None`` when the codec is not one a bare context can take (use a container)."""
    config = codec_config(table.info)
    return None if config is None else _open_context(*config)


def span_packets(table: SampleTable, mini: MiniMp4) -> Iterator[av.Packet]:
    """``mini``'s samples as packets, in decode order, stamped with the original pts/dts ticks
    (so decoded frames carry the ticks the sample table knows)."""
    plan = mini.plan
    header = len(plan.layout.header)
    sizes = np.asarray(table.size[plan.first : plan.last + 1], dtype=np.int64)
    ends = (header + np.cumsum(sizes)).tolist()
    pts = table.pts_ticks[plan.first : plan.last + 1].tolist()
    dts = table.dts[plan.first : plan.last + 1].tolist()
    data = memoryview(mini.data)
    start = header
    for end, p, d in zip(ends, pts, dts, strict=True):
        packet = av.Packet(data[start:end])
        packet.pts, packet.dts = int(p), int(d)
        start = end
        yield packet


class SpanDecoder:
    """One video's persistent decoder: decodes fetched spans without opening a container.

    Thread-safe (one span at a time). Not picklable state: a DataLoader worker builds its own.

    Args:
        table: the video's sample table.
        name: the video's URL, for errors.
    """

    def __init__(self, table: SampleTable, name: str) -> None:
        self._table = table
        self._name = name
        config = codec_config(table.info)
        self._context = None if config is None else _open_context(*config)
        self._lock = threading.Lock()
        self.fallbacks = 0  # spans decoded through a container instead
        _LIVE.add(self)

    def decode(self, mini: MiniMp4) -> dict[int, av.VideoFrame]:
        """``{original presentation tick: frame}`` for exactly ``mini``'s planned frames."""
        with self._lock:
            frames = None if self._context is None else self._decode_packets(mini)
        if frames is None:
            self.fallbacks += 1
            return decode_span(mini, self._name)
        return frames

    def _decode_packets(self, mini: MiniMp4) -> dict[int, av.VideoFrame] | None:
        context = self._context
        wanted = set(mini.plan.pts_ticks.tolist())
        frames: dict[int, av.VideoFrame] = {}
        try:
            context.flush_buffers()
            for packet in span_packets(self._table, mini):
                for frame in context.decode(packet):
                    if frame.pts is not None and frame.pts in wanted:
                        frames[int(frame.pts)] = frame
            for frame in context.decode(None):
                if frame.pts is not None and frame.pts in wanted:
                    frames[int(frame.pts)] = frame
        except av.error.FFmpegError:
            return None  # the container path decodes it or names what is wrong
        return frames if len(frames) == len(wanted) else None

    def close(self) -> None:
        """Release the codec context (a later :meth:`decode` goes through a container)."""
        with self._lock:
            self._context = None
