"""feedline's reader metrics in lerobot-train's log line and wandb dict.

LeRobot logs a ``MetricsTracker`` every ``--log_freq`` steps, after reducing its meters across
ranks; :func:`tracker_class` returns a subclass that first refreshes feedline's meters from a
:class:`ReaderMetrics`, so the same line (and ``to_dict()`` for wandb) carries them:

=================  ==============================================================  =========
meter (log name)   what                                                            ranks
=================  ==============================================================  =========
``data_smp/s``     samples the reader delivered per second of wall time (window)   sum
``wait_p50/95/99`` seconds the loop waited for a batch, percentiles (window)       max
``stalls``         refill stalls: waits for an episode still being fetched (total)  sum
``fetch_MB``       payload bytes fetched, MiB (total)                              sum
``resv_MB``        most payload bytes one worker held reserved, MiB                max
``frames``         frames delivered (total); ``dec_frames``: frames decoded         sum
``dec_MB``         most decoded-frame bytes one worker held, MiB                   max
``first_batch_s``  seconds from the start of the run to its first batch (once)     max
``ep/batch``       distinct episodes per batch, mean (run so far); ``ep/batch_p5``,  mean
                   ``ep/batch_min``: its 5th percentile and minimum
``ep/10batch``     distinct episodes per 10 consecutive batches, mean (run so far)   mean
``ep@10%``         share of the rank's episodes the first 10 % of an epoch touched   mean
=================  ==============================================================  =========

The last three read against an ideal global shuffle of the same episodes, which ``feedline
train`` logs once at the start (``StreamingEpisodeDataset.ideal_diversity``).

Only this module's :func:`tracker_class` touches LeRobot's types, and it gets them passed in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["ReaderMetrics", "tracker_class"]

log = logging.getLogger(__name__)

_MIB = 2**20

#: Reader counter (``StreamingEpisodeDataset.metrics()`` key: a field of the pipeline's or the
#: decoders' counter dataclasses, :data:`feedline.streaming.board.COUNTERS`, or of the
#: batch diversity report, :data:`feedline.streaming.schedule.diversity.DIVERSITY_METRICS`) ->
#: (meter key, log name, scale, reduction).
COUNTERS: dict[str, tuple[str, str, float, str]] = {
    "refill_stalls": ("refill_stalls", "stalls", 1.0, "sum"),
    "bytes_fetched": ("fetched_mib", "fetch_MB", 1 / _MIB, "sum"),
    "peak_reserved_bytes": ("reserved_mib", "resv_MB", 1 / _MIB, "max"),
    "peak_decoded_bytes": ("decoded_mib", "dec_MB", 1 / _MIB, "max"),
    "decoded_frames": ("decoded_frames", "dec_frames", 1.0, "sum"),
    "delivered_frames": ("delivered_frames", "frames", 1.0, "sum"),
    "batch_episodes_mean": ("batch_episodes", "ep/batch", 1.0, "mean"),
    "batch_episodes_p5": ("batch_episodes_p5", "ep/batch_p5", 1.0, "mean"),
    "batch_episodes_min": ("batch_episodes_min", "ep/batch_min", 1.0, "mean"),
    "window_episodes_mean": ("window_episodes", "ep/10batch", 1.0, "mean"),
    "early_episode_share": ("early_episode_share", "ep@10%", 1.0, "mean"),
}


class ReaderMetrics:
    """Batch waits measured by the training loop plus the reader's own counters, per log window.

    Args:
        counters: returns the reader's cumulative counters (``StreamingEpisodeDataset.metrics``).
        started: ``time.perf_counter()`` at the start of the run (for time to first batch).
    """

    def __init__(self, counters: Callable[[], Mapping[str, Any]], started: float | None = None) -> None:
        self.counters = counters
        self.started = time.perf_counter() if started is None else started
        self.first_batch_s: float | None = None
        self._first_reported = False
        self._waits: list[float] = []
        self._samples = 0
        self._window_start = time.perf_counter()

    def batch_waited(self, seconds: float, samples: int) -> None:
        """Record one batch: how long the loop waited for it and how many samples it held."""
        if self.first_batch_s is None:
            self.first_batch_s = time.perf_counter() - self.started
            log.info("feedline: first batch after %.2f s", self.first_batch_s)
        self._waits.append(seconds)
        self._samples += samples

    def window(self) -> dict[str, tuple[float, str, str]]:
        """Meter key -> (value, log name, reduction) for the window since the last call."""
        now = time.perf_counter()
        elapsed = max(now - self._window_start, 1e-9)
        out: dict[str, tuple[float, str, str]] = {
            "data_samples_per_s": (self._samples / elapsed, "data_smp/s", "sum"),
        }
        if self._waits:
            p50, p95, p99 = np.percentile(np.asarray(self._waits), [50, 95, 99]).tolist()
            out["batch_wait_p50_s"] = (p50, "wait_p50", "max")
            out["batch_wait_p95_s"] = (p95, "wait_p95", "max")
            out["batch_wait_p99_s"] = (p99, "wait_p99", "max")
        for name, value in self.counters().items():
            if name in COUNTERS:
                key, shown, scale, reduction = COUNTERS[name]
                out[key] = (float(value) * scale, shown, reduction)
        if self.first_batch_s is not None and not self._first_reported:
            out["first_batch_s"] = (self.first_batch_s, "first_batch_s", "max")
            self._first_reported = True
        self._waits.clear()
        self._samples = 0
        self._window_start = now
        return out


def tracker_class(base: type, meter: type, metrics: ReaderMetrics) -> type:
    """A subclass of LeRobot's ``MetricsTracker`` (``base``) whose log line and ``to_dict()``
    also carry ``metrics``, as ``meter`` (LeRobot's ``AverageMeter``) entries.

    LeRobot calls ``reduce_across_ranks()`` on every rank right before each log line, so the
    meters are refreshed there (one value per window), then reduced with LeRobot's own code.
    """

    class FeedlineMetricsTracker(base):  # type: ignore[misc, valid-type]
        def reduce_across_ranks(self) -> None:
            window = metrics.window()
            for key in [k for k in self.metrics if k.startswith("feedline/")]:
                if key.removeprefix("feedline/") not in window:
                    del self.metrics[key]  # a once-only meter (first_batch_s) leaves the line
            for key, (value, shown, reduction) in window.items():
                full = f"feedline/{key}"
                if full not in self.metrics:
                    self.metrics[full] = meter(shown, ":.3g", reduction=reduction)
                self.metrics[full].reset()
                self.metrics[full].update(value)
            super().reduce_across_ranks()

    return FeedlineMetricsTracker
