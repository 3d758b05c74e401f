"""The calibration runs of ``feedline plan``: a pass restricted to a few units reads exactly those,
the CPU and PSS accounting reads real processes, and the scaling arithmetic is the documented one."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from torch.utils.data import DataLoader

from feedline.episodes.forecast.calibrate import (
    PipelineCost,
    RunCost,
    cpu_seconds,
    measure_pipeline,
    measure_run,
)
from feedline.episodes.forecast.costs import measure_decoder_bytes, sample_units
from feedline.episodes.forecast.model import predict

from .conftest import LENGTHS, open_reader


@pytest.mark.parametrize("workers", [0, 2])
def test_a_restricted_pass_reads_exactly_its_units(plan_dataset, workers: int) -> None:
    reader = open_reader(plan_dataset.root)
    units = [1, 3, 8]
    loader = DataLoader(reader, batch_size=None, num_workers=workers)
    with reader.only(units):
        seen = [(int(s["episode_index"]), int(s["frame_index"])) for s in loader]
    assert sorted(seen) == sorted((u, f) for u in units for f in range(LENGTHS[u]))
    assert "_only" not in reader.__dict__  # the next pass reads the whole epoch again
    assert sum(1 for _ in DataLoader(reader, batch_size=None, num_workers=0)) == sum(LENGTHS)


def test_cpu_seconds_follow_real_work() -> None:
    import os

    before, thread_before = cpu_seconds(os.getpid()), cpu_seconds(os.getpid(), thread=True)
    if before is None:
        pytest.skip("no /proc here")
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.2
    assert cpu_seconds(os.getpid(), thread=True) - thread_before >= 0.2
    assert cpu_seconds(2**22 + 12345) is None  # no such process


@pytest.mark.parametrize("workers", [0, 2])
def test_a_calibration_run_accounts_its_processes(plan_dataset, workers: int) -> None:
    reader = open_reader(plan_dataset.root)
    units = sample_units(reader, 4)
    run = measure_run(reader, units, num_workers=workers, batch_size=4, seconds=5.0)
    assert run is not None
    assert run.samples == sum(LENGTHS[u] for u in units) - 4  # every batch after the first
    assert run.per_worker == -(-len(units) // max(1, workers)) and run.units == units
    assert run.cpu_s > 0 and run.serial_s > 0 and 0 < run.busy <= 1
    parts = run.serial_s + run.threads_s + run.loop_s
    assert parts <= run.cpu_s * 1.0001  # the parts are within the whole
    assert (run.loop_s > 0) == (workers > 0)
    assert run.decoders >= 2  # at least one per camera of its episodes
    assert run.bytes_read == pytest.approx(sum(reader.episode_bytes[u] for u in units), rel=0.1)
    assert run.episodes_per_sample == pytest.approx(len(units) / sum(LENGTHS[u] for u in units))
    metrics = reader.metrics()
    assert metrics["samples"] == 0 and metrics["decoder_opens"] == 0  # reset for the real run


def test_an_open_decoder_costs_memory_in_a_fresh_worker(plan_dataset) -> None:
    reader = open_reader(plan_dataset.root)
    per = measure_decoder_bytes(reader, episodes=8)
    if per == 0 and cpu_seconds(1) is None:
        pytest.skip("no /proc here")
    frame = 48 * 64 * 3
    assert frame < per < 64 * 2**20  # more than one RGB frame, less than a GOP of them at 1080p


def _run(k: int, cpu: float, first: float, extra: int, decoders: float) -> RunCost:
    return RunCost(per_worker=k, cpu_s=cpu, serial_s=cpu / 4, threads_s=cpu / 2, loop_s=cpu / 8,
                   busy=0.9, samples=100, seconds=1.0, episodes_per_sample=0.01,
                   first_batch_s=first, worker_extra_bytes=extra, decoders=decoders,
                   bytes_read=0, units=[])


def test_the_costs_scale_as_documented() -> None:
    cost = PipelineCost([_run(2, 1.0e-3, 0.1, 100 << 20, 4), _run(8, 1.2e-3, 0.2, 110 << 20, 16)],
                        per_decoder_bytes=float(1 << 20))
    # CPU per sample grows with the log of the episodes held: +0.1 ms per doubling here
    assert cost.cpu_at(8) == pytest.approx(1.2e-3)
    assert cost.cpu_at(32) == pytest.approx(1.2e-3 + 0.1e-3 * math.log2(4))
    assert cost.cpu_at(2) == pytest.approx(1.0e-3)
    # the first batch: the larger run's, plus the CPU of the further fetches and starts
    assert cost.first_batch_at(8, 8, 0.002, 0.005, 1.0) == pytest.approx(0.2)
    assert cost.first_batch_at(20, 12, 0.002, 0.005, 1.0) == pytest.approx(0.2 + 12 * 0.002 + 4 * 0.005)
    assert cost.first_batch_at(20, 12, 0.002, 0.005, 2.0) == pytest.approx(0.2 + (0.024 + 0.02) / 2)
    # PSS: the runs' floor (96 and 94 MiB beyond their decoders) plus 1 MiB per decoder
    assert cost.extra_bytes_at(0) == pytest.approx(95 << 20)
    assert cost.extra_bytes_at(100) == pytest.approx((95 + 100) << 20)
    # a slower large run never makes a larger working set cheaper
    flat = PipelineCost([_run(2, 1.2e-3, 0.1, 0, 0), _run(8, 1.0e-3, 0.2, 0, 0)])
    assert flat.cpu_at(64) == pytest.approx(1.0e-3)


def test_the_plan_prices_the_calibrated_pipeline(plan_dataset) -> None:
    reader = open_reader(plan_dataset.root, episode_pool_size=4, prefetch_episodes=1)
    cost = measure_pipeline(reader, num_workers=2, batch_size=8)
    assert cost is not None and [r.per_worker for r in cost.runs] == [2, 5]  # 10 units, 2 workers
    plan = predict(reader, num_workers=2, batch_size=8, pipeline=cost)
    rank = plan["ranks"][0]
    rate = rank["samples_per_s"]
    resident = rank["samples_per_s"]["resident_per_worker"]
    assert rate["cpu_per_sample_s"] == pytest.approx(
        cost.cpu_at(resident) + (plan["measured"]["decode"]["first_sample_s"]
                                 - plan["measured"]["decode"]["per_sample_s"])
        * (len(LENGTHS) / sum(LENGTHS) - cost.runs[-1].episodes_per_sample), rel=1e-6)
    busy = cost.runs[-1].busy
    assert rate["decode_bound"] <= busy * plan["topology"]["cores"] / rate["cpu_per_sample_s"] + 0.1
    assert rate["decode_limited_by"] in ("cpu", "decode threads", "worker thread", "training process")
    for w in rank["workers"]:
        assert w["peak_pss_bytes"] == pytest.approx(
            w["peak_payload_bytes"] + w["peak_decoded_bytes"] + cost.extra_bytes_at(w["peak_decoders"]),
            abs=1)
    assert plan["measured"]["pipeline"]["per_decoder_bytes"] == int(cost.per_decoder_bytes)
    uncalibrated = predict(reader, num_workers=2, batch_size=8, pipeline=False)
    assert uncalibrated["measured"]["pipeline"] is None
    assert np.isfinite(uncalibrated["ranks"][0]["samples_per_s"]["decode_bound"])
