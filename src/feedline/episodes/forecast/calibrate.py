"""Two short real runs on a few episodes, accounted in CPU seconds and PSS: what ``feedline
plan`` scales to the whole epoch for its samples/s, first batch and PSS.

A sample costs more than its decode. A worker's own thread takes it from the pipeline, collates
the batch and hands it to the training process through shared memory; the fetch threads parse
Parquet and cut mini-MP4s; the training process maps every batch it receives. On small frames
these are most of a sample's price, and no one-thread decode sample sees them. A worker's memory
is more than the bytes it holds, too: each open decoder keeps a codec context, reference frames
and buffer pools (hundreds of KiB even at 96x128; a probe worker measures it:
:func:`~feedline.episodes.forecast.costs.measure_decoder_bytes`), and threads keep allocator arenas.

So the plan runs the real reader, with the run's workers and settings, through a real
DataLoader, on ``k`` episodes of median length per worker, twice (``k = 2`` and ``k = 8``), each
for at most a second or two, and reads every process's CPU time and PSS from ``/proc``. The two
runs give each cost at two working-set sizes, and the plan extrapolates to the run's own: CPU
per sample grows with the episodes a worker holds open (the decoders' state leaves the caches),
about as the log of their number; PSS is the runs' floor plus the decoders; the first batch
adds, to the larger run's, the CPU of the further episodes fetched and started before it. CPU
time, unlike wall time, barely moves when other jobs share the cores, so the bound holds for
the machine rather than for the moment measured.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.errors import ForecastError
from feedline.episodes.forecast.costs import (
    measure_decoder_bytes,
    pss_of,
    sample_units,
    training_loader,
)
from feedline.streaming.batches import batch_len

__all__ = ["PipelineCost", "RunCost", "cpu_seconds", "measure_pipeline", "measure_run"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: Episodes per worker of the two calibration runs.
SIZES = (2, 8)


def cpu_seconds(pid: int, *, thread: bool = False) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads), or of its main thread
    alone with ``thread=True``; ``None`` where ``/proc`` does not say."""
    path = f"/proc/{pid}/task/{pid}/stat" if thread else f"/proc/{pid}/stat"
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def _idle_seconds() -> float:
    """Idle CPU seconds of the whole machine so far (``/proc/stat``: idle + iowait)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return (int(fields[4]) + int(fields[5])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class RunCost:
    """One calibration run: per delivered sample after its first batch, CPU seconds of...

    Args:
        per_worker: episodes each worker held (all resident at once).
        cpu_s: every process of the rank together (its workers and the training process).
        serial_s: a worker's own thread (takes samples, collates, hands batches over): a
            worker delivers at most ``1 / serial_s`` samples per second. In process
            (``num_workers=0``): the training process's own thread.
        threads_s: the workers' fetch and decode threads.
        loop_s: the training process's thread receiving batches (0 in process).
        busy: the share of the CPU left idle by other jobs that the run used (1.0: every core
            busy; below it the pipeline waited on itself).
        samples: samples in the measured stretch.
        seconds: its wall time.
        episodes_per_sample: episodes started per sample delivered.
        first_batch_s: from ``iter(loader)`` to the first batch.
        worker_extra_bytes: a worker's peak PSS beyond the payload and decoded frames it held.
        decoders: decoders a worker opened.
        bytes_read: payload bytes the run fetched.
        units: the units run.
    """

    per_worker: int
    cpu_s: float
    serial_s: float
    threads_s: float
    loop_s: float
    busy: float
    samples: int
    seconds: float
    episodes_per_sample: float
    first_batch_s: float
    worker_extra_bytes: int
    decoders: float
    bytes_read: int
    units: list[int]


def _snapshot(workers: list[int]) -> tuple[float, ...] | None:
    """(training process, its thread, workers' own threads, workers in all, machine idle)."""
    own = [cpu_seconds(pid, thread=True) for pid in workers]
    every = [cpu_seconds(pid) for pid in workers]
    if any(v is None for v in own + every):
        return None
    return (time.process_time(), time.thread_time(), sum(own), sum(every),  # type: ignore[arg-type]
            _idle_seconds())


def measure_run(
    dataset: Any, units: list[int], *, num_workers: int, batch_size: int, seconds: float = 1.5,
) -> RunCost | None:
    """Run ``dataset`` on ``units`` through a DataLoader like lerobot-train's for up to
    ``seconds`` after its first batch (or until the units are done). ``None`` where ``/proc``
    cannot be read (not Linux), or when nothing came after the first batch. The dataset's
    metrics are reset afterwards."""
    if cpu_seconds(os.getpid()) is None:
        return None
    loader = training_loader(dataset, batch_size=batch_size, num_workers=num_workers)
    samples = batches = 0
    peak_pss: dict[int, int] = {}
    dataset.reset_metrics()
    try:
        with dataset.only(units):
            started = time.monotonic()
            iterator = iter(loader)
            try:
                next(iterator)
            except StopIteration:
                raise ForecastError("the calibration run gave no batch") from None
            first_batch_s = time.monotonic() - started
            pids = [w.pid for w in getattr(iterator, "_workers", [])] if num_workers else []
            before, t0 = _snapshot(pids), time.monotonic()
            after = before
            for batch in iterator:
                samples += batch_len(batch)
                batches += 1
                after = _snapshot(pids)  # while the workers live
                if batches % 4 == 1:
                    for pid in pids or [os.getpid()]:
                        peak_pss[pid] = max(peak_pss.get(pid, 0), pss_of(pid))
                if time.monotonic() - t0 > seconds:
                    break
            elapsed = time.monotonic() - t0
            del iterator
        metrics = dataset.metrics()
    finally:
        dataset.reset_metrics()
    if before is None or after is None or samples == 0:
        return None
    main, main_thread, own, every, idle = (a - b for a, b in zip(after, before, strict=True))
    ours = main + every
    lengths = dataset.feed.epoch_lengths(0)
    frames = sum(int(lengths[u]) for u in units)
    parts = max(1, num_workers)
    held = metrics["peak_reserved_bytes"] + metrics["peak_decoded_bytes"]
    extra_bytes = max(0, max(peak_pss.values(), default=0) - held)
    if not num_workers:
        own, every, main_thread, main = main_thread, main, 0.0, 0.0
    return RunCost(
        per_worker=-(-len(units) // parts), cpu_s=ours / samples, serial_s=own / samples,
        threads_s=(every - own) / samples, loop_s=main_thread / samples,
        busy=min(1.0, ours / (ours + idle)) if ours + idle > 0 else 1.0, samples=samples,
        seconds=elapsed, episodes_per_sample=len(units) / max(1, frames),
        first_batch_s=first_batch_s, worker_extra_bytes=int(extra_bytes),
        decoders=metrics["decoder_opens"] / parts, bytes_read=int(metrics["bytes_fetched"]),
        units=[int(u) for u in units],
    )


@dataclass
class PipelineCost:
    """The calibration runs (smallest first), and the costs at any working-set size.

    ``*_at`` take the episodes a worker holds at once, the episodes it fetches and starts
    before its first batch, or its open decoders, and interpolate between the runs (extrapolate
    beyond them: module docstring). With one run, its own values.

    Args:
        runs: the calibration runs.
        per_decoder_bytes: PSS one open decoder adds (the probe worker's measure).
        seconds: wall seconds the runs and the probe took.
    """

    runs: list[RunCost]
    per_decoder_bytes: float = 0.0
    seconds: float = 0.0

    def _two(self) -> tuple[RunCost, RunCost]:
        return self.runs[0], self.runs[-1]

    def cpu_at(self, resident: float) -> float:
        a, b = self._two()
        if a.per_worker == b.per_worker:
            return b.cpu_s
        slope = max(0.0, (b.cpu_s - a.cpu_s) / math.log2(b.per_worker / a.per_worker))
        return b.cpu_s + slope * math.log2(max(1.0, resident) / b.per_worker)

    def first_batch_at(self, fetched: float, started: float, fetch_s: float, start_s: float,
                       cores_per_worker: float) -> float:
        """The first batch when a worker fetches ``fetched`` episodes before it and starts
        (decodes the first sample of) ``started`` of them: the larger run's first batch, which
        holds the worker's start and ``k`` of each, plus the CPU of the rest (``fetch_s`` per
        fetch, ``start_s`` per start, measured on one thread) on the worker's cores."""
        b = self.runs[-1]
        more = (max(0.0, fetched - b.per_worker) * fetch_s
                + max(0.0, started - b.per_worker) * start_s)
        return b.first_batch_s + more / max(1.0, cores_per_worker)

    def extra_bytes_at(self, decoders: float) -> float:
        """A worker's PSS beyond its payload and decoded frames with ``decoders`` open: the
        runs' floor (what they held beyond that and their own decoders) plus the decoders."""
        per = self.per_decoder_bytes
        floor = float(np.mean([max(0.0, r.worker_extra_bytes - per * r.decoders) for r in self.runs]))
        return floor + per * decoders

    def as_dict(self) -> dict[str, Any]:
        return {"runs": [asdict(r) for r in self.runs],
                "per_decoder_bytes": int(self.per_decoder_bytes),
                "worker_floor_bytes": int(self.extra_bytes_at(0.0)),
                "bytes_read": sum(r.bytes_read for r in self.runs), "seconds": round(self.seconds, 2)}


def measure_pipeline(
    dataset: Any, *, num_workers: int, batch_size: int, sizes: tuple[int, ...] = SIZES,
    seconds: float = 1.5,
) -> PipelineCost | None:
    """The calibration runs, on ``k`` median-length units per worker for each ``k`` of
    ``sizes`` (fewer where the dataset has fewer units); ``None`` off Linux."""
    parts = max(1, num_workers)
    available = len(dataset.feed.epoch_lengths(0))
    started = time.monotonic()
    runs = []
    for k in sorted({min(k, max(1, available // parts)) for k in sizes}):
        run = measure_run(dataset, sample_units(dataset, k * parts), num_workers=num_workers,
                          batch_size=batch_size, seconds=seconds)
        if run is None:
            return None
        runs.append(run)
    per_decoder = float(measure_decoder_bytes(dataset))
    return PipelineCost(runs, per_decoder, time.monotonic() - started)

