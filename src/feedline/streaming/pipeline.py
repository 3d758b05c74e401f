"""A streaming reader's threads: fetch whole units ahead, assemble samples in parallel, in order.

One :class:`UnitPipeline` serves one worker's anchors for one epoch (the schedule comes from
:class:`~feedline.streaming.schedule.pool.EpisodePool`; this module only executes it)::

    fetch dispatcher (1 thread) ── walks the fetch order, reserve() in the byte cache
        │ (blocks while the budget is full: prefetch pauses), hands the fetch to
        ▼
    fetch pool (fetch_threads threads) ── Parquet rows + mini-MP4 byte ranges of whole episodes
        ▼                                   mark_resident()
    consumer (the iterating thread) ── takes anchors in schedule order; for a resident episode
        │ begin_decode() and submits the sample; after an episode's last anchor, release()
        ▼
    decode pool (assemble_threads threads) ── windows, pad masks, frames decoded from memory
        ▼                                   end_decode() (bytes return after the last one)
    ordered buffer (queue_size futures) ── popped in schedule order

Why it cannot deadlock: reservations are made in the order of each episode's first anchor
(:func:`~feedline.streaming.schedule.pool.fetch_order`). When the consumer waits for an episode,
every episode reserved before it has had its first anchor; those still held are resident in the
pool at that anchor, beside the waiting one, and the pool's resident set fits the budget. The
others have yielded their last anchor, whose decode was submitted (and ends) without needing the
waiting episode, so their bytes return. Why the order is exact: the buffer is a FIFO of futures
in schedule order, whatever thread finishes first.

Resume (:class:`~feedline.streaming.schedule.state.Stateful`): ``state_dict()`` counts the samples
the consumer has taken, never what the threads prepared ahead; ``load_state_dict()`` before the
first sample skips that many anchors, so the threads start at the first one still owed and never
fetch an episode whose anchors were all taken. Threads start on the first sample, not before.

Metrics (:class:`PipelineMetrics`): samples, bytes fetched, episodes fetched, refill stalls (the
consumer needed an episode that was not yet fetched) and their seconds; batch-wait is measured
by whoever consumes the batches.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from feedline.streaming.budget import ByteBudget
from feedline.streaming.errors import ResumeMismatchError, StreamingError
from feedline.streaming.schedule.pool import aligned, anchor_counts, last_anchors, positions_in
from feedline.streaming.schedule.state import Stateful
from feedline.streaming.settings import floor_default
from feedline.validate import check_int

__all__ = ["UnitPipeline", "PipelineMetrics"]

_CHUNK_BITS = 12  # anchors turned into Python ints at a time
_NO_COUNTS = np.zeros(0, dtype=np.int64)  # assemble_threads=0 counts no decodes


def _pairs(a: np.ndarray, b: np.ndarray) -> Iterator[tuple[int, int]]:
    """``zip(a, b)`` as plain ints, turned into Python objects a chunk at a time."""
    step = 1 << _CHUNK_BITS
    for start in range(0, a.size, step):
        yield from zip(a[start:start + step].tolist(), b[start:start + step].tolist(), strict=True)
_POLL_S = 1.0  # how often a waiting consumer re-checks that the fetch dispatcher is alive


@dataclass
class PipelineMetrics:
    """Counters of one pipeline (one worker, one epoch); all start at 0.

    Args:
        samples: samples handed to the consumer.
        bytes_fetched: payload bytes read (Parquet row groups and MP4 sample ranges).
        episodes_fetched: episodes whose fetch completed.
        refill_stalls: times the consumer waited for an episode still being fetched.
        refill_stall_s: seconds spent in those waits.
        peak_reserved_bytes: the most bytes the byte cache held reserved at once.
        outside_fetches: frames a sample needed outside its episode's fetched spans (read
            separately; stays 0 unless a span was planned short).
    """

    samples: int = 0
    bytes_fetched: int = 0
    episodes_fetched: int = 0
    refill_stalls: int = 0
    refill_stall_s: float = 0.0
    peak_reserved_bytes: int = 0
    outside_fetches: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The counters as a plain dict (for logs)."""
        return asdict(self)


class UnitPipeline(Stateful):
    """Samples of one worker's anchors, in schedule order (an iterator; ``close()`` stops threads).

    Args:
        episodes: episode index of each anchor still to serve, in schedule order.
        frames: frame index of each of those anchors.
        admission: the episodes they touch, in fetch order (by first anchor: ``fetch_order``).
        nbytes: each episode's exact payload size, reserved in ``cache`` before its fetch.
        fetch: ``fetch(episode) -> payload``; runs on the fetch threads.
        assemble: ``assemble(payload, frame) -> sample``; runs on the decode threads.
        cache: the worker's byte cache (admission frontier).
        fetch_threads: episodes fetched in parallel (fetch threads). Default 16.
        assemble_threads: threads running ``assemble``; 0 runs it on the consuming thread (for an
            ``assemble`` too cheap to pay a thread hand-off per sample). Default 2.
        queue_size: samples submitted for decoding ahead of the consumer. Default 8.
        finish: ``finish(sample) -> sample`` run on the consuming thread (image transforms).
            Default ``None``.
        metrics: counters to add to. Default ``None``: fresh ones (:attr:`metrics`).
        counters: the reader's own counter dataclasses (e.g. the episode reader's decoded-frame
            counters), published with :attr:`metrics` to the worker board the reader registered
            them on (:attr:`counters`). Default none.
    """

    STATE_VERSION = 1
    STATE_STAGE = "EpisodePipeline"  # the name checkpoints have always carried
    STATE_NAME = "the unit pipeline"

    def __init__(
        self,
        episodes: np.ndarray,
        frames: np.ndarray,
        admission: Sequence[int],
        nbytes: Mapping[int, int],
        *,
        fetch: Callable[[int], Any],
        assemble: Callable[[Any, int], dict[str, Any]],
        cache: ByteBudget,
        fetch_threads: int = floor_default("fetch_threads"),
        assemble_threads: int = floor_default("assemble_threads"),
        queue_size: int = floor_default("queue_size"),
        finish: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        metrics: PipelineMetrics | None = None,
        counters: Sequence[Any] = (),
    ) -> None:
        for name, value in (
            ("fetch_threads", fetch_threads),
            ("assemble_threads", assemble_threads),
            ("queue_size", queue_size),
        ):
            check_int(name, value, minimum=0 if name == "assemble_threads" else 1, error=StreamingError)
        self._anchors = (np.asarray(episodes, np.int64), np.asarray(frames, np.int64))
        self._count = self._anchors[0].size
        # anchors are read as plain ints a chunk at a time (see _anchor): a worker's millions of
        # anchors are not turned into Python objects before its first sample
        self._chunk = -1
        self._chunk_eps: list[int] = []
        self._chunk_frames: list[int] = []
        self._chunk_pos: list[int] = []
        self._chunk_last: list[int] = []
        # Per episode, tables are arrays over its sorted ids (``_distinct``), reached through
        # the position each anchor chunk carries: dicts of Python ints cost ~100 bytes an
        # episode (270 MiB for a worker owning 1,000,000 episodes) and per-anchor Python loops
        # seconds of the first sample's wait.
        distinct, last_at = last_anchors(self._anchors[0])
        self._distinct, self._last_at = distinct, last_at
        # per-sample decode counts are for the decode threads only (see _next_inline)
        self._undecoded = self._count_undecoded(0) if assemble_threads else _NO_COUNTS
        self._live: dict[int, Any] = {}  # fetched payloads whose decodes have not all ended
        order = np.asarray(admission, dtype=np.int64).reshape(-1)
        at, has_anchors = positions_in(distinct, order)
        order, at = order[has_anchors], at[has_anchors]
        admitted = np.zeros(distinct.size, dtype=bool)
        admitted[at] = True
        if not admitted.all():
            missing = distinct[~admitted][:5].tolist()
            raise StreamingError(f"episodes {missing} have anchors but no admission")
        self._admission = order
        self._admission_last = last_at[at]
        self._admission_bytes = (
            aligned(order, nbytes, "nbytes") if isinstance(nbytes, Mapping)
            else np.asarray(nbytes, dtype=np.int64)[order]
        )
        self._fetch, self._assemble, self._finish = fetch, assemble, finish
        self.cache = cache
        self.queue_size = queue_size
        self.metrics = metrics if metrics is not None else PipelineMetrics()
        #: Every counter this pipeline publishes: its own metrics, then the reader's.
        self.counters: tuple[Any, ...] = (self.metrics, *counters)
        self._threads = (fetch_threads, assemble_threads)
        self._identity: str | None = None
        self._cond = threading.Condition()
        self._fetches: dict[int, Future[Any]] = {}
        self._dispatch_error: BaseException | None = None
        self._dispatch_done = False
        self._payloads: dict[int, Any] = {}
        self._buffer: deque[Future[dict[str, Any]]] = deque()
        self._next = 0  # next anchor to submit for decoding
        self._taken = 0  # samples the consumer has taken (what state_dict reports)
        self._closed = False
        self._started = False

    def _start(self) -> None:
        """Start the threads (on the first sample, so a resume can skip anchors first)."""
        self._started = True
        fetchers, decoders = self._threads
        self._fetch_pool = ThreadPoolExecutor(fetchers, thread_name_prefix="feedline-fetch")
        self._decode_pool = (
            ThreadPoolExecutor(decoders, thread_name_prefix="feedline-decode") if decoders else None
        )
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="feedline-admission", daemon=True
        )
        self._dispatcher.start()

    # ---- fetch side ------------------------------------------------------------------------

    def _dispatch(self) -> None:
        try:
            for ep, nbytes in _pairs(self._admission, self._admission_bytes):
                if self._closed:
                    return
                self.cache.reserve(ep, nbytes)
                future = self._fetch_pool.submit(self._fetch_one, ep)
                with self._cond:
                    self._fetches[ep] = future
                    self._cond.notify_all()
        except BaseException as exc:  # surfaced to the consumer, which re-raises it
            with self._cond:
                if not self._closed:
                    self._dispatch_error = exc
        finally:
            with self._cond:
                self._dispatch_done = True
                self._cond.notify_all()

    def _fetch_one(self, ep: int) -> Any:
        try:
            payload = self._fetch(ep)
        except BaseException:
            self.cache.abandon(ep)
            raise
        self.cache.mark_resident(ep)
        with self._cond:
            self.metrics.bytes_fetched += int(getattr(payload, "fetched_bytes", 0))
            self.metrics.episodes_fetched += 1
            self.metrics.peak_reserved_bytes = max(
                self.metrics.peak_reserved_bytes, self.cache.peak_reserved_bytes
            )
        return payload

    def _fetch_future(self, ep: int, wait: bool) -> Future[Any] | None:
        with self._cond:
            while ep not in self._fetches:
                if self._dispatch_error is not None:
                    raise self._dispatch_error
                if self._dispatch_done or self._closed:
                    raise StreamingError(f"episode {ep} was never scheduled for fetching")
                if not wait:
                    return None
                self._cond.wait(_POLL_S)
            return self._fetches[ep]

    # ---- decode side -----------------------------------------------------------------------

    def _count_undecoded(self, start: int) -> np.ndarray:
        """Per position of ``_distinct``, its anchors from ``start`` on (0 for none left)."""
        distinct, counts = anchor_counts(self._anchors[0][start:])
        table = np.zeros(self._distinct.size, dtype=np.int64)
        table[positions_in(self._distinct, distinct)[0]] = counts
        return table

    def _anchor(self, i: int) -> tuple[int, int, int, bool]:
        """Anchor ``i`` as plain ints, its episode's position in ``_distinct`` and whether it is
        the episode's last anchor (consuming thread only; the anchors are read in order)."""
        chunk = i >> _CHUNK_BITS
        if chunk != self._chunk:
            start = chunk << _CHUNK_BITS
            end = start + (1 << _CHUNK_BITS)
            eps = self._anchors[0][start:end]
            pos = positions_in(self._distinct, eps)[0]
            self._chunk_eps = eps.tolist()
            self._chunk_frames = self._anchors[1][start:end].tolist()
            self._chunk_pos = pos.tolist()
            self._chunk_last = (self._last_at[pos] == np.arange(start, start + eps.size)).tolist()
            self._chunk = chunk
        j = i - (chunk << _CHUNK_BITS)
        return self._chunk_eps[j], self._chunk_frames[j], self._chunk_pos[j], self._chunk_last[j]

    def _decode_one(self, ep: int, pos: int, payload: Any, frame: int) -> dict[str, Any]:
        try:
            return self._assemble(payload, frame)
        finally:
            self.cache.end_decode(ep)
            with self._cond:
                self._undecoded[pos] -= 1
                done = self._undecoded[pos] == 0
                if done:
                    self._live.pop(ep, None)
            if done:
                self._close_payload(payload)

    def _next_inline(self) -> dict[str, Any]:
        """``assemble_threads=0``: the next sample, assembled on the consuming thread when it is
        asked for. Nothing is assembled ahead (there is no other thread to overlap it with), no
        decode is ever in flight when an episode is released, and the byte cache needs no
        per-sample decode count: the per-sample cost is a dict lookup and the assembly."""
        i = self._next
        if i >= self._count:
            raise StopIteration
        ep, frame, _, last = self._anchor(i)
        payload = self._payloads.get(ep)
        if payload is None:
            payload = self._payload(ep, block=True)
        try:
            sample = self._assemble(payload, frame)
        finally:
            if last:
                with self._cond:
                    self._live.pop(ep, None)
                self._close_payload(payload)
        if last:
            self._served(ep, payload)
        self._next = i + 1
        return sample

    def _served(self, ep: int, payload: Any) -> None:
        """``ep``'s last anchor was submitted: its bytes go back to the cache (once its decodes
        end) and the consumer lets go of its payload."""
        self.cache.release(ep)
        del self._payloads[ep]
        self.metrics.outside_fetches += int(getattr(payload, "outside_fetches", 0))

    @staticmethod
    def _close_payload(payload: Any) -> None:
        """Free what a payload holds beyond its bytes (decoded frames, open decoders)."""
        close = getattr(payload, "close", None)
        if close is not None:
            close()

    def _payload(self, ep: int, block: bool) -> Any:
        """The fetched payload of ``ep``; None if it is not ready and ``block`` is false."""
        payload = self._payloads.get(ep)
        if payload is not None:
            return payload
        future = self._fetch_future(ep, wait=False)
        if future is None or not future.done():
            if not block:
                return None
            self.metrics.refill_stalls += 1  # the consumer waits for a fetch: a refill stall
            started = time.perf_counter()
            while future is None:
                future = self._fetch_future(ep, wait=True)
            payload = future.result()
            self.metrics.refill_stall_s += time.perf_counter() - started
        else:
            payload = future.result()
        with self._cond:
            self._fetches.pop(ep, None)
            self._live[ep] = payload
        self._payloads[ep] = payload
        return payload

    def _fill(self) -> None:
        """Submit anchors in order while the buffer has room; block only when it is empty."""
        while len(self._buffer) < self.queue_size and self._next < self._count:
            ep, frame, pos, last = self._anchor(self._next)
            payload = self._payload(ep, block=not self._buffer)
            if payload is None:
                return
            self.cache.begin_decode(ep)
            self._buffer.append(self._decode_pool.submit(self._decode_one, ep, pos, payload, frame))
            if last:
                self._served(ep, payload)
            self._next += 1

    # ---- iteration -------------------------------------------------------------------------

    def __iter__(self) -> UnitPipeline:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._closed:
            raise StopIteration
        if not self._started:
            self._start()
        try:
            if self._decode_pool is None:
                sample = self._next_inline()
            else:
                self._fill()
                if not self._buffer:
                    raise StopIteration
                sample = self._buffer.popleft().result()
            self.metrics.samples += 1
            self._taken += 1
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()
            raise
        return self._finish(sample) if self._finish is not None else sample

    @property
    def remaining(self) -> int:
        """Samples not yet returned (submitted or not)."""
        return self._count - self._next + len(self._buffer)

    # ---- state ----------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        """Digest of the anchors this pipeline serves: a state applies only to the same ones."""
        if self._identity is None:
            h = hashlib.sha256(b"feedline.streaming.pipeline/v1")
            for array in self._anchors:
                h.update(array.tobytes())
            self._identity = h.hexdigest()[:32]
        return self._identity

    def state_settings(self) -> dict[str, Any]:
        """The anchors a state applies to: their count and digest."""
        return {"anchors": self._count, "identity": self.identity}

    def state_position(self) -> dict[str, Any]:
        """The samples the consumer has taken (prefetched and decoded-ahead ones are not saved)."""
        return {"samples_taken": self._taken}

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Skip the samples ``state`` says were taken; before the first sample only."""
        if self._started:
            raise StreamingError("load_state_dict() must come before the pipeline's first sample")
        taken = int(state["samples_taken"])
        if not 0 <= taken <= self._count:
            raise ResumeMismatchError(
                f"pipeline state says {taken} samples were taken of {self._count}"
            )
        self._next = self._taken = taken
        self._undecoded = self._count_undecoded(taken) if self._threads[1] else _NO_COUNTS
        # Episodes whose every anchor was taken are never fetched (nor reserved, nor released).
        keep = self._admission_last >= taken
        self._admission = self._admission[keep]
        self._admission_last = self._admission_last[keep]
        self._admission_bytes = self._admission_bytes[keep]

    def close(self) -> None:
        """Stop the dispatcher and the pools; undelivered samples are dropped (never counted)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self.metrics.peak_reserved_bytes = max(
            self.metrics.peak_reserved_bytes, self.cache.peak_reserved_bytes
        )
        self.cache.close()
        for future in self._buffer:
            future.cancel()
        self._buffer.clear()
        self._payloads.clear()
        if self._started:
            self._fetch_pool.shutdown(wait=False, cancel_futures=True)
            if self._decode_pool is not None:
                self._decode_pool.shutdown(wait=False, cancel_futures=True)
        with self._cond:
            live = list(self._live.values())
            self._live.clear()
        for payload in live:
            self._close_payload(payload)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
