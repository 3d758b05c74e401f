"""Frame-exact video reads from any store: sidecar index → sample span → mini-MP4 → PyAV decode.

:class:`VideoFrameReader` is what the map-style dataset (and later the streaming reader) calls.
It never downloads a whole video: the sample index comes from the MP4 sidecar (built once per
revision, see :mod:`feedline.episodes.video.sidecar`), each request fetches only the GOPs holding its
frames, and decoded frames are checked against the exact presentation ticks from the index.
Decoded GOP spans are kept in a small LRU so neighbouring requests (consecutive samples of one
episode) decode each GOP once, and spans are decoded by one persistent decoder per video
(:class:`~feedline.episodes.video.codec.SpanDecoder`), not by a container opened per span.

Colour conversion (:func:`rgb_array`) goes through one reused
:class:`av.video.reformatter.VideoReformatter` per thread: PyAV's ``to_ndarray(format=...)``
builds a new scaler for every frame (about 7x slower at 96x128), and a frame's own scaler must
not be used by two threads at once. With one converter per thread, threads convert in parallel,
the same frame included, with no lock. Each converter scales on its own thread (``threads=1``):
swscale's automatic slice threads would belong to the converter, and a forked child (a DataLoader
worker started after frames were converted in the parent) frees the converters of the parent's
other threads at fork and waits forever for slice threads that do not exist there.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from feedline.episodes.errors import SidecarError
from feedline.episodes.video.codec import SpanDecoder
from feedline.episodes.video.fork import park_in_forked_child, parked
from feedline.episodes.video.index import IndexProvider
from feedline.episodes.video.minimp4 import (
    SPAN_MODES,
    MiniMp4,
    SpanPlan,
    covering_spans,
    fetch_span,
    nearest_samples,
    plan_span,
    samples_between,
)
from feedline.episodes.video.mp4.table import SampleTable
from feedline.io import Store

DEFAULT_TOLERANCE_S = 1e-4  # LeRobot's default tolerance_s
#: Persistent decoders kept open per reader, one per video, least recently used closed first.
#: Random access visits every video of a dataset, and closing a decoder costs more than a span's
#: decoding, so this is the number of video files a worker touches, not a handful (LeRobot keeps
#: 100 open); a single-threaded decoder holds about 1-3 MiB.
MAX_OPEN_DECODERS = 64
#: Sample tables a reader keeps mapped, least recently used dropped first. A mapped table is
#: files only (format 3 of the streaming index): what it costs is the pages read, shared with
#: every process of the node, so the cache holds every video a worker reads at random (400 MP4s
#: at 1,000,000 episodes), where a table dropped and mapped again costs its checks each time.
TABLE_CACHE_SIZE = 1024

_CONVERTERS = threading.local()


def rgb_array(frame: av.VideoFrame) -> np.ndarray:
    """``uint8 [H, W, 3]`` RGB of a decoded frame, through this thread's reused converter.

    Bit-identical to ``frame.to_ndarray(format="rgb24")``; safe to call from any number of
    threads at once, on the same frame too.
    """
    converter = getattr(_CONVERTERS, "converter", None)
    if converter is None:
        converter = _CONVERTERS.converter = VideoReformatter()
    if _THREADS_KEYWORD:
        try:
            return converter.reformat(frame, format="rgb24", threads=1).to_ndarray()
        except TypeError:  # a PyAV before ``threads=`` (LeRobot 0.6.1 pins one): its default scaler
            _no_threads_keyword()
    return converter.reformat(frame, format="rgb24").to_ndarray()


_THREADS_KEYWORD = True


def _no_threads_keyword() -> None:
    global _THREADS_KEYWORD
    _THREADS_KEYWORD = False

# Decoded frames hold FFmpeg buffers whose release can block forever in a forked child (the
# decoder threads they belong to do not exist there; seen with libdav1d in DataLoader workers
# under the fork context). A child therefore never frees what it inherited: it parks the
# inherited caches here and starts with empty ones.
_LIVE_READERS: weakref.WeakSet[VideoFrameReader] = weakref.WeakSet()


def _fresh_converters() -> None:
    global _CONVERTERS
    parked(_CONVERTERS)
    _CONVERTERS = threading.local()


def _detach(reader: VideoFrameReader) -> object:
    held = (reader._decoded, reader._decoders)
    reader._decoded = OrderedDict()
    reader._decoders = OrderedDict()
    reader._lock = threading.RLock()
    return held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_converters)
park_in_forked_child(_LIVE_READERS, _detach)


class VideoFrameReader:
    """Frames of the MP4s below one dataset root, at exact video timestamps.

    Thread-safe; picklable when its store is (a DataLoader worker maps the index its parent
    validated, without relisting).

    Args:
        store: where the videos are read from.
        revision: the dataset revision; keys the sidecar and index caches. Default ``None``.
        video_paths: the videos that will be used: only their index entries are prepared up
            front (others on first use). Default ``None``: none up front.
        lock_timeout_s: seconds to wait for another process building the same sidecar.
            Default 1800.
        decoder_cache_size: decoded GOP spans kept, least recently used dropped first; 0 keeps
            none. Default 8. (Persistent decoders, one per video, are bounded by
            :data:`MAX_OPEN_DECODERS`.)
        sidecar_workers: parallel MP4 parses when a sidecar must be built. Default 4.
        span_mode: how far each fetched span runs
            (:data:`~feedline.episodes.video.minimp4.SPAN_MODES`): ``"gop"`` (default) suits
            sequential reads, ``"minimal"`` random single frames of long-GOP (H.264) videos.
    """

    def __init__(
        self,
        store: Store,
        *,
        revision: str | None = None,
        video_paths: list[str] | None = None,
        lock_timeout_s: float = 1800.0,
        decoder_cache_size: int = 8,
        sidecar_workers: int = 4,
        span_mode: str = "gop",
    ) -> None:
        self.store = store
        self.revision = revision
        self.video_paths = None if video_paths is None else list(video_paths)
        self.lock_timeout_s = lock_timeout_s
        self.decoder_cache_size = max(0, int(decoder_cache_size))
        self.sidecar_workers = sidecar_workers
        if span_mode not in SPAN_MODES:
            raise ValueError(f"span_mode {span_mode!r} is not one of {SPAN_MODES}")
        self.span_mode = span_mode
        self._provider = IndexProvider(
            store, revision=revision, lock_timeout_s=lock_timeout_s, workers=sidecar_workers
        )
        self._init_runtime()
        if self.video_paths:
            self._provider.prepare(self.video_paths)

    # -- pickling: drop caches and mmaps; workers rebuild them on first use ----------------
    def _init_runtime(self) -> None:
        self._tables: OrderedDict[str, SampleTable] = OrderedDict()
        self._decoded: OrderedDict[tuple[str, int, int], dict[int, av.VideoFrame]] = OrderedDict()
        self._decoders: OrderedDict[str, SpanDecoder] = OrderedDict()
        self._lock = threading.RLock()
        _LIVE_READERS.add(self)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_tables", "_decoded", "_decoders", "_lock"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def detached(self) -> VideoFrameReader:
        """A copy without store and caches, to pickle beside its owner's store settings: the
        receiving process rebinds it to its own store (:meth:`rebind`)."""
        state = self.__getstate__()
        provider = copy.copy(self._provider)
        provider.store = None  # type: ignore[assignment]
        state.update(store=None, _provider=provider)
        twin = VideoFrameReader.__new__(VideoFrameReader)
        twin.__setstate__(state)
        return twin

    def forget(self, video_path: str) -> None:
        """Unmap one cached table: a pass over every video (the open's spans) keeps none of the
        pages it read, and whoever decodes maps the table again on first use."""
        with self._lock:
            self._tables.pop(video_path, None)

    def rebind(self, store: Store) -> VideoFrameReader:
        """Read through ``store`` from now on (this process's connections, after a fork or an
        unpickle); the index this reader's process validated stays, so no video is stat'ed or
        parsed again."""
        self.store = store
        self._provider.store = store
        return self

    # -- index -------------------------------------------------------------------------------
    def table(self, video_path: str) -> SampleTable:
        """The sample table of one video (mapped on first use; :data:`TABLE_CACHE_SIZE` kept)."""
        with self._lock:
            table = self._tables.get(video_path)
            if table is None:
                table = self._provider.tables([video_path])[video_path]
                self._tables[video_path] = table
                while len(self._tables) > TABLE_CACHE_SIZE:
                    self._tables.popitem(last=False)
            else:
                self._tables.move_to_end(video_path)
            return table

    def _name(self, video_path: str) -> str:
        return self.store.url(video_path)

    # -- planning ----------------------------------------------------------------------------
    def span_plans(
        self, video_path: str, t0: float, t1: float, tolerance_s: float = DEFAULT_TOLERANCE_S
    ) -> list[SpanPlan]:
        """The mini-MP4s that hold every frame with ``t0 <= pts <= t1`` (usually exactly one)."""
        table = self.table(video_path)
        samples = samples_between(table, t0, t1, tolerance_s)
        if len(samples) == 0:
            raise SidecarError(f"{self._name(video_path)}: no frame between {t0!r} s and {t1!r} s")
        return [plan_span(table, a, b) for a, b in covering_spans(table, samples, self._name(video_path), self.span_mode)]

    def span_bytes(
        self, video_path: str, t0: float, t1: float, tolerance_s: float = DEFAULT_TOLERANCE_S
    ) -> int:
        """Exact size of the synthesized mini-MP4(s) for the frames in ``[t0, t1]``.

        An episode's frames run from its ``from_timestamp`` to ``to_timestamp - 1/fps``.
        """
        return sum(plan.size for plan in self.span_plans(video_path, t0, t1, tolerance_s))

    def fetch(self, video_path: str, plan: SpanPlan) -> MiniMp4:
        """Fetch and assemble one planned mini-MP4 (exactly ``plan.size`` bytes)."""
        return fetch_span(self.store, video_path, self.table(video_path), plan)

    # -- decoding ----------------------------------------------------------------------------
    def frames_at(
        self,
        video_path: str,
        timestamps_s: Sequence[float],
        tolerance_s: float = DEFAULT_TOLERANCE_S,
    ) -> np.ndarray:
        """``uint8 [T, H, W, 3]`` RGB frames, the decoded frame nearest each timestamp.

        A timestamp with no frame within ``tolerance_s`` raises :class:`FrameTimestampError`
        naming the file, the wanted time and the nearest available one.
        """
        table = self.table(video_path)
        name = self._name(video_path)
        samples = nearest_samples(table, name, timestamps_s, tolerance_s)
        ticks = table.pts_ticks[samples].tolist()
        found: dict[int, av.VideoFrame] = {}
        pending = []
        for sample, tick in zip(samples.tolist(), ticks, strict=True):
            frame = self._cached(video_path, table, sample, tick)
            if frame is None:
                pending.append(sample)
            else:
                found[tick] = frame
        if pending:
            for first, last in covering_spans(table, np.asarray(pending), name, self.span_mode):
                plan = plan_span(table, first, last)
                decoded = self._span_decoder(video_path).decode(fetch_span(self.store, video_path, table, plan))
                found.update(decoded)
                self._remember((video_path, first, last), decoded)
        return self._to_rgb(found, ticks)

    def frames_from(
        self,
        video_path: str,
        mini: MiniMp4,
        timestamps_s: Sequence[float],
        tolerance_s: float = DEFAULT_TOLERANCE_S,
    ) -> np.ndarray:
        """Like :meth:`frames_at`, but decode an already fetched mini-MP4 (no I/O).

        For readers that fetch ahead (the byte-budgeted streaming path) and decode later; every
        timestamp must fall inside ``mini``'s span.
        """
        table = self.table(video_path)
        name = self._name(video_path)
        samples = nearest_samples(table, name, timestamps_s, tolerance_s)
        ticks = table.pts_ticks[samples].tolist()
        inside = set(mini.plan.pts_ticks.tolist())
        outside = [t for t, tick in zip(timestamps_s, ticks, strict=True) if tick not in inside]
        if outside:
            raise SidecarError(
                f"{name}: t={float(outside[0])!r} s is not inside the mini-MP4 of samples "
                f"{mini.plan.first}..{mini.plan.last}"
            )
        key = (video_path, mini.plan.first, mini.plan.last)
        with self._lock:
            decoded = self._decoded.get(key)
        if decoded is None:
            decoded = self._span_decoder(video_path).decode(mini)
            self._remember(key, decoded)
        return self._to_rgb(decoded, ticks)

    def _span_decoder(self, video_path: str) -> SpanDecoder:
        """The video's persistent decoder (opened on first use; least recently used closed)."""
        with self._lock:
            decoder = self._decoders.get(video_path)
            if decoder is None:
                decoder = self._decoders[video_path] = SpanDecoder(self.table(video_path), self._name(video_path))
                while len(self._decoders) > MAX_OPEN_DECODERS:
                    self._decoders.popitem(last=False)[1].close()
            self._decoders.move_to_end(video_path)
            return decoder

    def _to_rgb(self, frames: dict[int, av.VideoFrame], ticks: list[int]) -> np.ndarray:
        rgb: dict[int, np.ndarray] = {}
        for tick in ticks:  # no lock: each thread converts with its own converter
            if tick not in rgb:
                rgb[tick] = rgb_array(frames[tick])
        if not ticks:
            return np.empty((0, 0, 0, 3), dtype=np.uint8)
        return np.stack([rgb[tick] for tick in ticks])

    def _cached(self, video_path: str, table: SampleTable, sample: int, tick: int) -> av.VideoFrame | None:
        with self._lock:
            for key, frames in self._decoded.items():
                path, first, last = key
                if path == video_path and first <= sample <= last and tick in frames:
                    self._decoded.move_to_end(key)
                    return frames[tick]
        return None

    def _remember(self, key: tuple[str, int, int], frames: dict[int, av.VideoFrame]) -> None:
        if self.decoder_cache_size == 0:
            return
        with self._lock:
            self._decoded[key] = frames
            self._decoded.move_to_end(key)
            while len(self._decoded) > self.decoder_cache_size:
                self._decoded.popitem(last=False)

    def clear_cache(self) -> None:
        """Drop decoded spans (the index stays)."""
        with self._lock:
            self._decoded.clear()
