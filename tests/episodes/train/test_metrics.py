"""Batch waits and the reader's counters, one value per log window."""

from __future__ import annotations

import pytest

from feedline.episodes.train.metrics import ReaderMetrics


def test_window_percentiles_counters_and_first_batch_once() -> None:
    counters = {"refill_stalls": 3, "bytes_fetched": 2 * 2**20, "peak_reserved_bytes": 2**20,
                "delivered_frames": 40, "decoded_frames": 50, "not_a_metric": 1,
                "batch_episodes_mean": 7.5, "early_episode_share": 0.25}
    metrics = ReaderMetrics(lambda: counters)
    for wait in [0.01] * 98 + [1.0, 2.0]:
        metrics.batch_waited(wait, samples=8)
    window = metrics.window()
    assert window["batch_wait_p50_s"][0] == pytest.approx(0.01)
    assert window["batch_wait_p99_s"][0] > 0.9
    assert window["batch_wait_p95_s"][1:] == ("wait_p95", "max")
    assert window["refill_stalls"][0] == 3
    assert window["fetched_mib"][0] == pytest.approx(2.0)
    assert window["reserved_mib"][0] == pytest.approx(1.0)
    assert window["delivered_frames"][0] == 40 and window["decoded_frames"][0] == 50
    assert window["data_samples_per_s"][0] > 0
    assert "first_batch_s" in window and metrics.first_batch_s is not None
    assert "not_a_metric" not in window
    assert window["batch_episodes"] == (7.5, "ep/batch", "mean")
    assert window["early_episode_share"] == (0.25, "ep@10%", "mean")

    metrics.batch_waited(0.5, samples=8)
    later = metrics.window()
    assert "first_batch_s" not in later  # said once
    assert later["batch_wait_p50_s"][0] == pytest.approx(0.5)  # a new window


def test_every_logged_counter_is_one_the_reader_shares() -> None:
    """The log line names counters by the fields of the reader's counter dataclasses."""
    from feedline.episodes.stream.decoded import DecodedCounters
    from feedline.streaming.board import WorkerBoard
    from feedline.streaming.schedule.diversity import DIVERSITY_METRICS

    SHARED = list(WorkerBoard(counters=(DecodedCounters,)).totals())
    from feedline.episodes.train.metrics import COUNTERS

    assert set(COUNTERS) <= set(SHARED) | set(DIVERSITY_METRICS)
    assert set(DIVERSITY_METRICS) - {"diversity_batches"} <= set(COUNTERS)  # all in the line
