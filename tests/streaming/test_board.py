"""The shared control block and metrics rows: one owner, counters named by their dataclasses."""

from __future__ import annotations

import multiprocessing as mp
import pickle
from dataclasses import dataclass, field, fields

from feedline.streaming.board import COUNTERS, WorkerBoard
from feedline.streaming.pipeline import PipelineMetrics
from feedline.streaming.schedule.resume import ResumePosition


@dataclass
class DecodedCounters:
    """A reader's own counters, as the episode reader registers its decoded-frame ones."""

    decoded_frames: int = 0
    decoded_bytes: int = field(default=0, metadata={"level": True})  # a level, not shared
    decode_s: float = 0.0
    peak_decoded_bytes: int = 0


def test_counters_are_the_dataclass_fields_without_levels() -> None:
    assert list(COUNTERS) == [f.name for f in fields(PipelineMetrics) if not f.metadata.get("level")]
    board = WorkerBoard(counters=(DecodedCounters,))
    board.publish(0, {}, PipelineMetrics(samples=1), DecodedCounters(decoded_frames=2, decode_s=0.5))
    totals = board.totals()
    assert list(totals) == list(COUNTERS) + ["decoded_frames", "decode_s", "peak_decoded_bytes"]
    assert totals["decode_s"] == 0.5 and totals["samples"] == 1


def test_a_board_without_the_readers_counters_reports_only_the_pipelines() -> None:
    board = WorkerBoard()
    board.publish(0, {}, PipelineMetrics(samples=2), DecodedCounters(decoded_frames=3))
    totals = board.totals()
    assert list(totals) == list(COUNTERS) and totals["samples"] == 2


def test_a_spawned_copy_keeps_the_registered_counters() -> None:
    board = WorkerBoard(counters=(DecodedCounters,))
    ctx = mp.get_context("spawn")
    process = ctx.Process(target=_publish, args=(board,))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert board.totals()["decoded_frames"] == 7


def _publish(board: WorkerBoard) -> None:
    board.publish(1, {}, DecodedCounters(decoded_frames=7))


def test_rows_sum_peaks_take_the_maximum_and_deltas_are_not_counted_twice() -> None:
    board = WorkerBoard(counters=(DecodedCounters,))
    a, b = PipelineMetrics(samples=3, refill_stall_s=0.25, peak_reserved_bytes=10), PipelineMetrics()
    decoded = DecodedCounters(decoded_frames=4, decoded_bytes=99, peak_decoded_bytes=7)
    seen_a: dict[str, int] = {}
    board.publish(1, seen_a, a, decoded)
    a.samples += 2
    board.publish(1, seen_a, a, decoded)  # only the 2 new samples are added
    b.samples, b.peak_reserved_bytes = 4, 30
    board.publish(2, {}, b)
    totals = board.totals()
    assert totals["samples"] == 9 and totals["refill_stall_s"] == 0.25
    assert totals["peak_reserved_bytes"] == 30 and totals["peak_decoded_bytes"] == 7
    assert totals["decoded_frames"] == 4 and "decoded_bytes" not in totals
    board.reset_metrics()
    assert not any(board.totals().values())


def test_control_carries_epoch_offsets_and_rotation() -> None:
    board = WorkerBoard()
    assert board.read_control() is None
    board.write_control(3, ResumePosition(3, 5, (4, 2), True, worker_rotation=1))
    got = board.read_control()
    assert got is not None and (got.epoch, got.worker_offsets, got.worker_rotation) == (3, (4, 2), 1)
    board.write_control(4, ResumePosition(3, 5, (4, 2), True))  # another epoch: no offsets
    got = board.read_control()
    assert got is not None and (got.epoch, got.worker_offsets) == (4, ())


def test_pickled_outside_a_worker_start_a_board_is_empty() -> None:
    board = WorkerBoard()
    board.publish(0, {}, PipelineMetrics(samples=5))
    board.write_control(1, None)
    copy = pickle.loads(pickle.dumps(board))
    assert copy.totals()["samples"] == 0 and copy.read_control() is None
