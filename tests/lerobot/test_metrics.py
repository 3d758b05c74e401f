"""feedline's metrics in LeRobot's own MetricsTracker: its log line and the dict it gives wandb."""

from __future__ import annotations

import pytest

pytest.importorskip("lerobot")

from lerobot.utils.logging_utils import AverageMeter, MetricsTracker  # noqa: E402

from feedline.episodes.train.metrics import ReaderMetrics, tracker_class  # noqa: E402


def test_log_line_and_wandb_dict_carry_feedlines_metrics() -> None:
    counters = {"refill_stalls": 2, "bytes_fetched": 3 * 2**20, "peak_reserved_bytes": 2**20,
                "delivered_frames": 80, "decoded_frames": 80, "peak_decoded_bytes": 2**21,
                "batch_episodes_mean": 6.5, "window_episodes_mean": 31.0, "early_episode_share": 0.5}
    metrics = ReaderMetrics(lambda: counters)
    tracker = tracker_class(MetricsTracker, AverageMeter, metrics)(
        8, 131, 6, {"loss": AverageMeter("loss", ":.3f")})
    for wait in (0.01, 0.02, 0.5):
        metrics.batch_waited(wait, samples=8)
        tracker.step()
    tracker.reduce_across_ranks()  # what lerobot-train calls right before each log line
    line = str(tracker)
    for name in ("data_smp/s:", "wait_p50:", "wait_p95:", "wait_p99:", "stalls:2", "fetch_MB:3",
                 "resv_MB:1", "frames:80", "dec_frames:80", "dec_MB:2", "first_batch_s:",
                 "ep/batch:6.5", "ep/10batch:31", "ep@10%:0.5"):
        assert name in line, line
    logged = tracker.to_dict()
    assert logged["feedline/refill_stalls"] == 2
    assert logged["feedline/batch_episodes"] == 6.5
    assert logged["feedline/batch_wait_p99_s"] > 0.4
    assert logged["steps"] == 3 and "loss" in logged  # LeRobot's own entries stay
    tracker.reset_averages()

    metrics.batch_waited(0.03, samples=8)
    tracker.reduce_across_ranks()
    assert "first_batch_s" not in str(tracker)  # once
