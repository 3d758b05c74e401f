"""Decode each resident frame once: persistent decoders per (episode, camera), decoded RGB kept.

A resident episode's camera is one fetched mini-MP4 (or a few). :class:`CameraFrames` decodes
it forward with one persistent decoder, converting every decoded frame to RGB once and keeping
it, so the 2-3 samples whose windows share a frame (and the GOP neighbours a span decode used
to repeat) gather it from memory. What is kept is bounded per worker by :class:`DecodedFrames`:

* decoded bytes stay within ``limit_bytes`` (``decoded_cache_gb`` per rank, 1/N per worker). A
  frame the limit cannot hold is not kept; if a later sample needs it, its GOP is decoded again
  (counted in ``redecoded_frames``) - slower, never over the limit;
* open decoders (a single-threaded codec context fed the span's samples as packets) stay
  within ``decoder_cache_size``, least recently used closed first; a closed decoder reopens at the keyframe before the next frame
  it must produce (counted in ``decoder_opens``). A span has at most two open at once: the
  first sample asked of a newly resident episode is decoded from its own keyframe (a worker's
  first batch waits for a GOP per episode, not for half of each), and a second decoder fills
  the frames before it when they are asked for.

A frame is released once the last of its episode's samples that needs it has been assembled
(:meth:`CameraFrames.release`, driven by the payload's per-frame use counts), and whatever is
left when the episode's last sample is done (:meth:`CameraFrames.close`). Releasing early keeps
a worker's decoded memory near what its in-progress samples still need instead of its resident
episodes' whole length, and lets new frames reuse freed memory instead of touching new pages.
Stored frames are numpy arrays over the colour converter's own output, never decoder frames, so
nothing here holds a decoder buffer a forked DataLoader worker could block on.

Metrics: ``decoded_frames`` counts every frame a decoder produced; ``delivered_frames`` counts
distinct frames handed to samples while their episode was resident. Their ratio is 1.0 when
every frame is decoded once.
"""

from __future__ import annotations

import bisect
import io
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np

from feedline.episodes.errors import FrameReleasedError, Mp4Error, SidecarError
from feedline.episodes.video.codec import open_codec_context, span_packets
from feedline.episodes.video.fork import park_in_forked_child
from feedline.episodes.video.frames import rgb_array
from feedline.episodes.video.minimp4 import MiniMp4, frame_span, plan_span
from feedline.episodes.video.mp4.table import SampleTable

__all__ = ["MAX_CURSORS_PER_SLOT", "CameraFrames", "DecodedCounters", "DecodedFrames", "cut_mini"]

# An open decoder owns codec threads: a forked worker parks the ones it inherited (video.fork).
_LIVE_DECODERS: weakref.WeakSet[_Decoder] = weakref.WeakSet()


def _detach(decoder: _Decoder) -> object:
    held = (decoder.container, decoder.context, decoder._frames)
    decoder.container = decoder.context = decoder._frames = None  # a closed decoder from now on
    return held


park_in_forked_child(_LIVE_DECODERS, _detach)


def cut_mini(table: SampleTable, mini: MiniMp4, first: int, last: int) -> MiniMp4:
    """Samples ``first..last`` of ``mini``'s span as their own mini-MP4 (no I/O)."""
    plan = mini.plan
    if (first, last) == (plan.first, plan.last):
        return mini
    sub = plan_span(table, first, last)
    header = len(plan.layout.header)
    sizes = np.asarray(table.size[plan.first : last + 1], dtype=np.int64)
    start = header + int(sizes[: first - plan.first].sum())
    end = header + int(sizes.sum())
    return MiniMp4(sub, sub.layout.header + mini.data[start:end], 0)


@dataclass
class DecodedCounters:
    """What the decoders of one worker did (see the module docstring); all start at 0.

    Args:
        decoded_frames: frames produced by a decoder, re-decodes included.
        redecoded_frames: of those, frames decoded again while their episode was resident.
        delivered_frames: distinct frames handed to samples while their episode was resident.
        decoder_opens: decoders opened (codec contexts, or containers for other codecs).
        decoded_bytes: decoded RGB bytes held now (a level, not a count: not shared between
            workers).
        peak_decoded_bytes: the most decoded RGB bytes held at once.
    """

    decoded_frames: int = 0
    redecoded_frames: int = 0
    delivered_frames: int = 0
    decoder_opens: int = 0
    decoded_bytes: int = field(default=0, metadata={"level": True})
    peak_decoded_bytes: int = 0


class DecodedFrames:
    """One worker's decoded-frame memory and its LRU of open decoders (thread-safe).

    Args:
        limit_bytes: most decoded RGB bytes held at once; 0 keeps none (every frame is decoded
            for the sample that needs it, its GOP again for the next).
        decoder_cache_size: most decoders open at once (at least 1); the least recently used is
            closed first, unless another thread is decoding with it.
    """

    def __init__(self, limit_bytes: int, decoder_cache_size: int) -> None:
        self.limit_bytes = max(0, int(limit_bytes))
        self.decoder_cache_size = max(1, int(decoder_cache_size))
        self.counters = DecodedCounters()
        self._lock = threading.Lock()
        self._open: OrderedDict[tuple[int, int], CameraFrames] = OrderedDict()
        self._frame_nbytes = 1  # the largest frame seen (what "room for one more" means)

    def has_room(self) -> bool:
        """Whether one more frame would be kept (decoding ahead pays only then)."""
        with self._lock:
            return self.counters.decoded_bytes + self._frame_nbytes <= self.limit_bytes

    def admit(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` for a kept frame; False (nothing reserved) if over the limit."""
        with self._lock:
            counters = self.counters
            self._frame_nbytes = max(self._frame_nbytes, nbytes)
            if counters.decoded_bytes + nbytes > self.limit_bytes:
                return False
            counters.decoded_bytes += nbytes
            counters.peak_decoded_bytes = max(counters.peak_decoded_bytes, counters.decoded_bytes)
            return True

    def free(self, nbytes: int) -> None:
        with self._lock:
            self.counters.decoded_bytes -= nbytes

    def count(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.counters, name, getattr(self.counters, name) + delta)

    def opened(self, owner: CameraFrames, key: int) -> None:
        """Record a newly opened decoder (``owner``'s ``key``) and close the least recently used
        beyond the bound."""
        with self._lock:
            self.counters.decoder_opens += 1
            self._open[(id(owner), key)] = owner
            self._open.move_to_end((id(owner), key))
            victims = [key for key in self._open if self._open[key] is not owner]
            excess = len(self._open) - self.decoder_cache_size
            for key in victims:
                if excess <= 0:
                    break
                if self._open[key].drop_decoder(key[1], blocking=False):
                    del self._open[key]
                    excess -= 1

    def used(self, owner: CameraFrames, key: int) -> None:
        with self._lock:
            if (id(owner), key) in self._open:
                self._open.move_to_end((id(owner), key))

    def closed(self, owner: CameraFrames, key: int) -> None:
        with self._lock:
            self._open.pop((id(owner), key), None)

    @property
    def open_decoders(self) -> int:
        """Decoders open now."""
        with self._lock:
            return len(self._open)


class _Decoder:
    """One decoder producing a mini-MP4's planned frames forward, in presentation order.

    Codecs a bare context can take (AV1, H.264, HEVC) get the span's samples as packets
    straight from the fetched bytes, as the map-style reader's
    :class:`~feedline.episodes.video.codec.SpanDecoder` does: no container to open per decoder
    (about 0.4 ms less at 96x128) and no demuxer reading through Python per packet. Others, or
    a span that ends before every planned frame, go through a container on the mini-MP4, which
    produces the same frames or names what is wrong.
    """

    def __init__(self, mini: MiniMp4, name: str, table: SampleTable | None = None) -> None:
        self.mini = mini
        self.name = name
        self.wanted = set(mini.plan.pts_ticks.tolist())
        self.last_tick: int | None = None
        self.container: Any = None
        self.context: Any = None if table is None else open_codec_context(table)
        self._offset = 0  # decoded pts - original ticks (the container path's edit list)
        if self.context is not None:
            self._frames: Iterator[Any] | None = self._packet_frames(self.context, table, mini)
        else:
            self._open_container()
        _LIVE_DECODERS.add(self)

    @staticmethod
    def _packet_frames(context: Any, table: SampleTable | None, mini: MiniMp4) -> Iterator[Any]:
        assert table is not None
        for packet in span_packets(table, mini):
            yield from context.decode(packet)
        yield from context.decode(None)

    def _open_container(self) -> None:
        plan = self.mini.plan
        self.context = None
        self._offset = plan.tick_offset
        try:
            self.container = av.open(io.BytesIO(self.mini.data), format="mp4")
            stream = self.container.streams.video[0]
            # One codec thread: a worker runs several decoders at once on cores its siblings
            # share, and FFmpeg's automatic threads cost 20-30 % more CPU per frame for the
            # same output (AV1, 96x128 and 480x640; see docs/benchmarks.md).
            stream.codec_context.thread_count = 1
            self._frames = self.container.decode(stream)
        except av.error.FFmpegError as exc:
            raise Mp4Error(f"{self.name}: opening samples {plan.first}..{plan.last} failed: {exc}") from exc

    def next_frame(self) -> tuple[int, av.VideoFrame]:
        """The next planned frame and its original presentation tick."""
        plan = self.mini.plan
        while True:
            if self._frames is None:
                raise Mp4Error(f"{self.name}: decoder used after it was closed")
            try:
                for frame in self._frames:
                    if frame.pts is None:
                        continue
                    tick = int(frame.pts) - self._offset
                    # Frames come in presentation order; after a fallback to the container,
                    # the ones already produced are passed over.
                    if tick in self.wanted and (self.last_tick is None or tick > self.last_tick):
                        self.last_tick = tick
                        return tick, frame
            except av.error.FFmpegError as exc:
                if self.context is None:
                    raise Mp4Error(
                        f"{self.name}: decoding samples {plan.first}..{plan.last} failed: {exc}"
                    ) from exc
            if self.context is None:
                raise Mp4Error(
                    f"{self.name}: decoding samples {plan.first}..{plan.last} ended after tick "
                    f"{self.last_tick} before every planned frame"
                )
            self._open_container()  # the packet path fell short: the container decides

    def close(self) -> None:
        self._frames = None
        self.context = None
        if self.container is not None:
            self.container.close()
            self.container = None


class _Cursor:
    """One open decoder over a slot, moving forward from where it was opened."""

    def __init__(self, key: int, slot: int, decoder: _Decoder) -> None:
        self.key = key
        self.slot = slot
        self.decoder = decoder


#: Most decoders open at once on one slot (a fetched mini-MP4): the frontier a first request
#: jumped to, and one filling the frames before it.
MAX_CURSORS_PER_SLOT = 2

#: Frames a decoder goes on decoding past the one asked for, while they were never decoded and
#: the limit has room for them. Strategies that visit many episodes in turn (``spread``: one
#: frame per visit) otherwise pay a switch to another decoder's state for every frame; on
#: LeRobot-written 96x128 AV1 a run of 8 cut CPU per sample by 15-25 % and held 44 MiB instead
#: of 13 per worker. Every frame is still decoded once: the ones ahead are kept for the samples
#: that will ask for them, and released after their last use as any kept frame is.
DECODE_AHEAD = 8


class CameraFrames:
    """One resident episode's frames of one camera, decoded once from its fetched mini-MP4s.

    The first frame asked of a fetched span is decoded from its own keyframe, not from the
    span's start, so a newly resident episode's first sample costs a GOP, not half an episode
    (what a worker's first batch waits for). A second decoder then fills the frames before that
    keyframe when they are asked for, and stops where the first one began: every frame is still
    decoded once while the limit keeps them.

    Args:
        decoded: the worker's decoded-frame memory and decoder LRU.
        table: the video's sample table.
        minis: the camera's fetched mini-MP4s (the episode's spans).
        name: the video's URL, for errors.
    """

    def __init__(
        self, decoded: DecodedFrames, table: SampleTable, minis: Sequence[MiniMp4], name: str
    ) -> None:
        self._decoded = decoded
        self._table = table
        self._minis = tuple(minis)
        self._name = name
        self._slot_of: dict[int, int] = {}
        self._sample_of: dict[int, int] = {}
        # Per slot: its ticks (ascending), which of them are kept or were released after their
        # last use (a byte each: "any kept frame in this run" is a C-level scan), which were ever
        # decoded, and whether any was. Every tick knows its (slot, position) pairs, so keeping
        # or decoding a frame updates these in O(1).
        self._ticks: list[list[int]] = []
        self._kept: list[bytearray] = []
        self._done: list[bytearray] = []
        self._touched: set[int] = set()
        self._where: dict[int, list[tuple[int, int]]] = {}
        for slot, mini in enumerate(self._minis):
            slot_ticks = [int(t) for t in mini.plan.pts_ticks.tolist()]
            self._ticks.append(slot_ticks)
            self._kept.append(bytearray(len(slot_ticks)))
            self._done.append(bytearray(len(slot_ticks)))
            for pos, tick in enumerate(slot_ticks):
                self._slot_of.setdefault(tick, slot)
                self._where.setdefault(tick, []).append((slot, pos))
            first, last = mini.plan.first, mini.plan.last
            ticks = np.asarray(table.pts_ticks[first : last + 1]).tolist()
            for sample, tick in enumerate(ticks, first):
                self._sample_of.setdefault(tick, sample)
        self._cursors: dict[int, _Cursor] = {}  # by key, least recently used first
        self._next_key = 0
        self._frames: dict[int, np.ndarray] = {}
        self._ever_decoded: set[int] = set()
        self._delivered: set[int] = set()
        self._lock = threading.Lock()
        self._closed = False

    def get(self, ticks: Sequence[int]) -> list[np.ndarray]:
        """``uint8 [H, W, 3]`` RGB frames at these original presentation ticks.

        Kept frames are returned as they are held, not copied: the caller copies once when it
        builds its tensor (:func:`~feedline.episodes.assemble.frames_to_tensor`) and must not
        write into them.
        """
        with self._lock:
            if self._closed:
                raise FrameReleasedError(f"{self._name}: frames read after their episode was released")
            found = {t: self._frames[t] for t in ticks if t in self._frames}
            for tick in sorted(set(ticks) - found.keys()):
                if tick not in found:
                    self._decode_to(tick, set(ticks), found)
            new = set(ticks) - self._delivered
            self._delivered |= new
        if new:
            self._decoded.count(delivered_frames=len(new))
        return [found[t] for t in ticks]

    def _decode_to(self, tick: int, needed: set[int], found: dict[int, np.ndarray]) -> None:
        slot = self._slot_of.get(tick)
        if slot is None:
            raise SidecarError(f"{self._name}: tick {tick} is not in this episode's fetched spans")
        cursor = self._cursor_for(slot, tick)
        decoder = cursor.decoder
        decoded = redecoded = past = 0
        got = None
        try:
            while True:
                got, frame = decoder.next_frame()
                decoded += 1
                if got in self._ever_decoded:
                    redecoded += 1
                else:
                    self._ever_decoded.add(got)
                    for s, pos in self._where.get(got, ()):
                        self._done[s][pos] = 1
                        self._touched.add(s)
                if got in self._frames:
                    found.setdefault(got, self._frames[got])
                else:  # convert once: only a frame kept or needed now
                    keep = self._decoded.admit(frame.width * frame.height * 3)
                    if keep or got in needed:
                        rgb = rgb_array(frame)
                        if keep:
                            self._frames[got] = rgb
                            for s, pos in self._where.get(got, ()):
                                self._kept[s][pos] = 1
                        if got in needed:
                            found[got] = rgb
                if got >= tick:
                    if tick not in found:
                        break  # skipped: said below
                    past += got > tick
                    at = bisect.bisect_right(self._ticks[slot], got)  # the next planned frame
                    if (past >= DECODE_AHEAD or at >= len(self._ticks[slot]) or self._done[slot][at]
                            or not self._decoded.has_room()):
                        break
        finally:
            self._decoded.count(decoded_frames=decoded, redecoded_frames=redecoded)
        if tick not in found:
            raise Mp4Error(f"{self._name}: the decoder skipped tick {tick} (last decoded {got})")
        after = bisect.bisect_right(self._ticks[slot], got)
        if after >= len(self._ticks[slot]) or self._kept[slot][after]:
            self._close_cursor(cursor)  # it would only decode kept frames again: retire it

    def _cursor_for(self, slot: int, tick: int) -> _Cursor:
        """The decoder that produces ``tick`` with no frame decoded twice (see the class doc)."""
        ticks, kept = self._ticks[slot], self._kept[slot]
        at = bisect.bisect_left(ticks, tick)
        room = self._decoded.has_room()
        best: _Cursor | None = None
        best_pos = -1
        for cursor in self._cursors.values():
            last = cursor.decoder.last_tick
            if cursor.slot != slot or last is None or last >= tick:
                continue
            pos = bisect.bisect_left(ticks, last)
            if pos > best_pos and 1 not in kept[pos + 1 : at]:
                best, best_pos = cursor, pos
        key_first = self._keyframe_of(tick, slot)
        if best is not None:
            # With room, going on over frames never decoded is never worse: they are kept for
            # the samples that need them, and a new decoder would start at the same frame or
            # re-decode kept ones. Otherwise (no room, or frames passed over that were decoded
            # and not kept) it goes on only while that is no longer than decoding from the
            # keyframe.
            jump_cost = at - bisect.bisect_left(ticks, self._start_tick(key_first, tick))
            fresh = room and 1 not in self._done[slot][best_pos + 1 : at]
            if fresh or at - best_pos <= jump_cost + 1:
                self._cursors[best.key] = self._cursors.pop(best.key)  # most recently used
                self._decoded.used(self, best.key)
                return best
        if slot not in self._touched or not room:
            first = key_first  # first touch: start at the wanted frame's own keyframe
        else:  # start the never-decoded run holding ``tick`` (frames decoded before and not
            # kept, for want of room, are not decoded again ahead of need)
            run = self._done[slot].rfind(1, 0, at) + 1
            first = self._keyframe_of(ticks[run], slot)
        return self._open(slot, first)

    def _keyframe_of(self, tick: int, slot: int) -> int:
        """The first sample (decode order) a decoder needs for ``tick``, inside ``slot``'s span."""
        first, _ = frame_span(self._table, self._sample_of[tick], self._name)
        return max(first, self._minis[slot].plan.first)

    def _start_tick(self, first: int, tick: int) -> int:
        """The earliest presentation tick a decoder opened at sample ``first`` outputs."""
        return min(int(np.min(self._table.pts_ticks[first : self._sample_of[tick] + 1])), tick)

    def _open(self, slot: int, first: int) -> _Cursor:
        """A new decoder over ``slot``'s mini-MP4 from sample ``first`` (decode order)."""
        mine = [c for c in self._cursors.values() if c.slot == slot]
        if len(mine) >= MAX_CURSORS_PER_SLOT:
            self._close_cursor(mine[0])  # this slot's least recently used
        mini = self._minis[slot]
        decoder = _Decoder(cut_mini(self._table, mini, first, mini.plan.last), self._name, self._table)
        cursor = _Cursor(self._next_key, slot, decoder)
        self._next_key += 1
        self._cursors[cursor.key] = cursor
        self._decoded.opened(self, cursor.key)
        return cursor

    def _close_cursor(self, cursor: _Cursor) -> None:
        self._cursors.pop(cursor.key, None)
        cursor.decoder.close()
        self._decoded.closed(self, cursor.key)

    @property
    def name(self) -> str:
        """The video's URL (what errors name)."""
        return self._name

    def covers(self, tick: int) -> bool:
        """Whether ``tick`` is one of the fetched spans' frames."""
        return tick in self._slot_of

    def drop_decoder(self, key: int, blocking: bool = True) -> bool:
        """Close the decoder ``key`` (the worker's LRU bound). ``blocking=False``: only if no
        thread is decoding with it (returns whether it was closed)."""
        if not self._lock.acquire(blocking=blocking):
            return False
        try:
            cursor = self._cursors.pop(key, None)
            if cursor is not None:
                cursor.decoder.close()
        finally:
            self._lock.release()
        return True

    def release(self, ticks: Sequence[int]) -> None:
        """Drop these kept frames before the episode ends (no sample will ask for them again).

        Their slots stay marked, as if kept, so no decoder is started or continued to produce
        them again; if one is asked for after all, it is decoded again and counted as a
        re-decode. A caller still holding a released frame keeps it alive until it lets go.
        """
        with self._lock:
            frames = [self._frames.pop(t) for t in ticks if t in self._frames]
        if frames:
            self._decoded.free(sum(frame.nbytes for frame in frames))

    def close(self) -> None:
        """Release the frames and close the decoders (the episode left the pool)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for cursor in list(self._cursors.values()):
                self._close_cursor(cursor)
            nbytes = sum(frame.nbytes for frame in self._frames.values())
            self._frames.clear()
        self._decoded.free(nbytes)
