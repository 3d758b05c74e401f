"""A run recorded for its report, and ``feedline plan --measure``: the real reader, side by side
with the prediction.

:class:`RunRecorder` switches a reader's stage events on (:mod:`feedline.episodes.stream.events`),
times the collate in the workers, and counts in the training process each batch's wait and the
time the loop spent before asking for the next one; a thread samples the workers' PSS. From
Python::

    recorder = RunRecorder(dataset, "run-report")
    for batch in recorder.track(loader):      # dataset.track(loader), recorded
        ...
    recorder.write_report()                   # run-report/report.html (needs feedline[report])
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.errors import ForecastError
from feedline.episodes.forecast.costs import pss_of, training_loader
from feedline.episodes.stream.events import EventLog, TimedCollate, sample_key
from feedline.streaming.batches import batch_episodes
from feedline.streaming.schedule.diversity import DIVERSITY_METRICS

__all__ = ["PssSampler", "RunRecorder", "measure"]


class PssSampler:
    """Peak PSS of each child process (DataLoader worker) of this process, every 0.2 s; a
    context manager too (``bench/streaming.py`` measures its readers with it)."""

    def __init__(self) -> None:
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="feedline-pss")

    def _children(self) -> list[int]:
        pids: list[int] = []
        for task in Path(f"/proc/{os.getpid()}/task").glob("*"):
            with contextlib.suppress(OSError):
                pids += [int(p) for p in (task / "children").read_text().split()]
        return pids

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for pid in self._children():
                self.peak[pid] = max(self.peak.get(pid, 0), pss_of(pid))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> PssSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def worker_peak_mib(self) -> float:
        """The largest peak of any worker, in MiB."""
        return max(self.peak.values(), default=0) / 2**20


class RunRecorder:
    """Record one run of ``dataset`` into ``directory`` (``events/`` there; module docstring).

    Args:
        dataset: the :class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset`.
        directory: where the events, and later ``report.html``, go.
    """

    def __init__(self, dataset: Any, directory: str | os.PathLike[str]) -> None:
        self.dataset = dataset
        self.directory = Path(directory)
        self.log = EventLog(self.directory / "events")
        for old in Path(self.log.directory).glob("events-*.json"):
            old.unlink()
        dataset.record_events(self.log)
        #: per batch: requested, received (monotonic), its first sample's key, size, episodes
        self.batches: list[dict[str, Any]] = []
        self.started: float | None = None
        self._pss = PssSampler()

    def instrument(self, loader: Any) -> Any:
        """``loader`` with its collate timed in the workers (before it is iterated)."""
        if not isinstance(loader.collate_fn, TimedCollate):
            loader.collate_fn = TimedCollate(loader.collate_fn, self.log)
        return loader

    def track(self, loader: Any, seconds: float | None = None) -> Iterator[Any]:
        """``dataset.track(loader)``, each batch recorded; stops after ``seconds`` if given."""
        self.instrument(loader)
        return self.record(self.dataset.track(loader), seconds)

    def record(self, batches: Iterator[Any], seconds: float | None = None) -> Iterator[Any]:
        """Iterate ``batches`` (a tracked loader's), recording each wait and the loop's time."""
        if not self._pss._thread.is_alive() and not self._pss._stop.is_set():
            self._pss.start()
        if self.started is None:  # the first epoch recorded
            self.started = time.monotonic()
        started = time.monotonic()
        iterator = iter(batches)
        try:
            while True:
                asked = time.monotonic()
                if seconds is not None and asked - started > seconds:
                    break
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                got = time.monotonic()
                ids = batch_episodes(batch) if hasattr(batch, "get") else None
                size = len(ids) if ids is not None else 0
                unique = np.unique(np.asarray(ids)).tolist() if size else []
                self.batches.append({
                    "asked": asked, "got": got, "size": size,
                    "key": list(sample_key(batch, 0)) if size else None,
                    "episodes": len(unique), "ids": unique,
                })
                yield batch
        finally:
            with contextlib.suppress(Exception):
                close = getattr(iterator, "close", None)
                if close is not None:
                    close()

    def stop(self) -> None:
        """Stop sampling the workers' PSS (the run is over)."""
        self._pss.stop()

    def measured(self) -> dict[str, Any]:
        """What the run measured, in the prediction's terms (``compare`` sets them side by side)."""
        self.stop()
        if not self.batches or self.started is None:
            raise ForecastError("the run gave no batch to measure")
        waits = np.asarray([b["got"] - b["asked"] for b in self.batches])
        first = self.batches[0]["got"] - self.started
        samples = sum(b["size"] for b in self.batches)
        after = samples - self.batches[0]["size"]
        span = self.batches[-1]["got"] - self.batches[0]["got"]
        metrics = self.dataset.metrics()
        return {
            "batches": len(self.batches), "samples": samples,
            "seconds": round(self.batches[-1]["got"] - self.started, 3),
            "first_batch_s": round(first, 3),
            "samples_per_s": round(after / span, 1) if span > 0 and after else None,
            "wait_p50_ms": round(1e3 * float(np.percentile(waits, 50)), 2),
            "wait_p95_ms": round(1e3 * float(np.percentile(waits, 95)), 2),
            "wait_p99_ms": round(1e3 * float(np.percentile(waits, 99)), 2),
            "peak_pss_bytes": max(self._pss.peak.values(), default=0),
            "peak_payload_bytes": int(metrics["peak_reserved_bytes"]),
            "peak_decoded_bytes": int(metrics["peak_decoded_bytes"]),
            "bytes_fetched": int(metrics["bytes_fetched"]),
            "bytes_per_sample": metrics["bytes_fetched"] / max(1, metrics["samples"]),
            "decoded_per_delivered": round(float(metrics["decoded_per_delivered"]), 3),
            "diversity": {k: metrics[k] for k in DIVERSITY_METRICS},
        }

    def write_report(self, path: str | os.PathLike[str] | None = None, *,
                     prediction: dict[str, Any] | None = None,
                     doctor: Any = None, trace: str | os.PathLike[str] | None = None) -> Path:
        """``report.html`` of this run (default in :attr:`directory`), with ``prediction`` and
        the doctor's findings when given; ``trace``: also write a Perfetto trace there."""
        from feedline.episodes.forecast.report import write_report

        self.stop()
        out = write_report(self, path or self.directory / "report.html", prediction=prediction,
                           doctor=doctor)
        if trace is not None:
            from feedline.episodes.forecast.trace import write_trace

            write_trace(self, trace)
        return out


def measure(
    dataset: Any, directory: str | os.PathLike[str], *, seconds: float, num_workers: int,
    batch_size: int, drop_last: bool = False,
) -> RunRecorder:
    """Run the real reader for ``seconds`` (or one epoch, if sooner) through a DataLoader of
    lerobot-train's kind, recorded."""
    loader = training_loader(dataset, batch_size=batch_size, num_workers=num_workers,
                             drop_last=drop_last)
    recorder = RunRecorder(dataset, directory)
    for _ in recorder.track(loader, seconds=seconds):
        pass
    del loader
    return recorder
