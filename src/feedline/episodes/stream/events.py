"""An optional recorder of the streaming reader's stage events: off by default, nothing when off.

Why: a batch's wait is the sum of stages that run on other threads and, with DataLoader workers,
in other processes (a fetch, a decode, the collate of the batch). To say where it went, and to
draw a trace of it, each stage's start and end must be kept. :class:`EventLog` keeps them in a
plain list per process (one tuple per event, no lock: ``list.append`` is atomic) and writes them
to its folder when the worker's pass ends; the training process reads every file afterwards.

How it is switched on: a reader's ``event_log`` is ``None`` by default (no recorder, and the
pipeline runs exactly as without this module). Given an :class:`EventLog` before iterating
(``dataset.record_events(log)``),
:func:`follow` wraps each worker pipeline's fetch and decode calls (:meth:`EventLog.timed`),
follows each sample the
worker takes (:meth:`EventLog.follow`: the wait, the refill stall inside it, the bytes reserved
and resident in the worker's byte budget) and writes the file at the end of the pass
(:meth:`EventLog.flush`). :class:`TimedCollate` times a DataLoader's collate in the worker too.
Clocks are ``time.monotonic()``: one clock for every process of a machine.

A file is one JSON object: ``{"pid", "worker", "events": [[kind, name, start, end, thread,
args], ...]}`` with ``kind`` ``"X"`` (a span) or ``"C"`` (a counter sample, ``end`` unused).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["EventLog", "TimedCollate", "follow", "read_events", "sample_key"]

_FILES = itertools.count()
_FLUSH_EVENTS = 20_000  # events a process holds before it writes them
#: The log each folder's samples are followed with in this process: a worker's collate records
#: into the same one as its reader (the loader's and the reader's copies are unpickled apart).
_CURRENT: dict[str, EventLog] = {}


def sample_key(sample: Mapping[str, Any], row: int | None = None) -> tuple[int, int, int]:
    """``(dataset_index, episode_index, frame_index)`` of a sample (``row`` of a batch): what
    ties a batch the training process took to the worker that made it."""

    def value(key: str) -> int:
        item = sample.get(key)
        if item is None:
            return 0
        if row is not None:
            item = item[row]
        return int(item)

    return value("dataset_index"), value("episode_index"), value("frame_index")


class EventLog:
    """Stage events of one process, written to ``directory`` (see the module docstring).

    Args:
        directory: the folder every process writes its events file into (made if missing).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = str(directory)
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        self.worker: int | None = None
        self._events: list[tuple[Any, ...]] = []
        self.finished = False  # the pass ended: a late collate writes its own file

    def __getstate__(self) -> dict[str, Any]:  # a worker starts empty
        return {"directory": self.directory, "worker": None, "_events": [], "finished": False}

    @property
    def current(self) -> EventLog:
        """The log this process follows samples with for the same folder (else this one)."""
        return _CURRENT.get(self.directory, self)

    # ---- recording -------------------------------------------------------------------------

    def span(self, name: str, start: float, end: float, **args: Any) -> None:
        """One stage that ran from ``start`` to ``end`` on this thread."""
        self._events.append(("X", name, start, end, threading.get_ident(), args))

    def counter(self, name: str, at: float, **values: float) -> None:
        """Counter values at ``at`` (bytes reserved, resident)."""
        self._events.append(("C", name, at, at, 0, values))

    def timed(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        """``call`` recording a ``name`` span per call (its first argument as ``unit``)."""

        def timed_call(*args: Any) -> Any:
            start = time.monotonic()
            try:
                return call(*args)
            finally:
                unit = args[-1] if name == "fetch" else getattr(args[0], "data", None)
                unit = getattr(unit, "episode_index", unit)
                self.span(name, start, time.monotonic(), unit=int(unit) if unit is not None else -1)

        return timed_call

    def follow(self, pipeline: Any, worker: int, batch_size: int) -> Iterator[dict[str, Any]]:
        """``pipeline``'s samples, each take recorded: a ``take`` span (the worker waiting for its
        next sample), the refill stall inside it (waiting on a fetch), and every ``batch_size``
        samples a ``worker_batch`` span keyed by its first sample; plus the byte budget's
        reserved and resident bytes after each take."""
        self.worker = worker
        self.finished = False
        _CURRENT[self.directory] = self
        metrics, cache = pipeline.metrics, pipeline.cache
        batch: dict[str, Any] | None = None
        n = 0
        iterator = iter(pipeline)
        try:
            while True:
                stalled = metrics.refill_stall_s
                start = time.monotonic()
                try:
                    sample = next(iterator)
                except StopIteration:
                    break
                end = time.monotonic()
                stall = metrics.refill_stall_s - stalled
                self.span("take", start, end, stall=stall)
                self.counter("bytes", end, reserved=cache.reserved_bytes,
                             resident=cache.resident_bytes)
                if batch is None:
                    batch = {"key": list(sample_key(sample)), "start": start, "fetch": 0.0,
                             "decode": 0.0}
                batch["fetch"] += stall
                batch["decode"] += max(0.0, end - start - stall)
                n += 1
                if n % batch_size == 0:
                    self._end_batch(batch, end)
                    batch = None
                if len(self._events) >= _FLUSH_EVENTS:  # bounded memory; a killed worker loses little
                    self.flush()
                    self.finished = False
                yield sample
            if batch is not None:
                self._end_batch(batch, time.monotonic())
        finally:  # the pass ended, or its consumer stopped: write what was recorded
            self.flush()

    def _end_batch(self, batch: dict[str, Any], end: float) -> None:
        self.span("worker_batch", batch.pop("start"), end, **batch)

    # ---- writing and reading ------------------------------------------------------------------

    def flush(self) -> Path | None:
        """Write this process's events so far to a new file of the folder (None: there were none)."""
        self.finished = True
        events, self._events = self._events, []
        if not events:
            return None
        path = Path(self.directory) / f"events-{os.getpid()}-{next(_FILES)}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "worker": self.worker, "events": events}))
        os.replace(tmp, path)
        return path


class TimedCollate:
    """A DataLoader ``collate_fn`` that records each collate as an ``assemble`` span in ``log``
    (picklable, so it runs in the workers; the log writes with the worker's next flush).

    Args:
        collate: the loader's own collate function.
        log: the reader's event log.
    """

    def __init__(self, collate: Callable[[Any], Any], log: EventLog) -> None:
        self.collate = collate
        self.log = log

    def __call__(self, samples: Any) -> Any:
        start = time.monotonic()
        out = self.collate(samples)
        key = sample_key(samples[0]) if isinstance(samples, list) and samples and isinstance(
            samples[0], Mapping) else (0, 0, 0)
        log = self.log.current
        log.span("assemble", start, time.monotonic(), key=list(key))
        if log.finished:  # the pass's last (partial) batch, collated after the reader ended
            log.flush()
        return out


def follow(
    log: EventLog | None, pipeline: Any, worker: int, batch_size: int | None
) -> Iterator[dict[str, Any]]:
    """``pipeline`` itself when ``log`` is ``None`` (the default: nothing recorded, nothing
    wrapped); else its fetch and decode calls timed (before its threads start) and its samples
    followed by :meth:`EventLog.follow`."""
    if log is None:
        return pipeline
    pipeline._fetch = log.timed("fetch", pipeline._fetch)
    pipeline._assemble = log.timed("decode", pipeline._assemble)
    return log.follow(pipeline, worker, batch_size or 1)


def read_events(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every events file of ``directory``, oldest first (one dict per file)."""
    out = []
    for path in sorted(Path(directory).glob("events-*.json"), key=lambda p: p.stat().st_mtime):
        out.append(json.loads(path.read_text()))
    return out
