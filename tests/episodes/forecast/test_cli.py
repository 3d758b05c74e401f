"""``feedline plan`` as a user runs it: the prediction, --json, --measure, one-line bad input."""

from __future__ import annotations

import json

import pytest

from tests.cli import run_feedline

from .conftest import LENGTHS, WINDOW


def test_json_prediction(plan_dataset) -> None:
    proc = run_feedline("plan", str(plan_dataset.root), "--json", "--workers", "2",
                        "--batch-size", "4", "--link", "50MB/s,10ms",
                        "--dataset.streaming_episode_pool_size=4", check=True)
    plan = json.loads(proc.stdout)
    assert plan["format"] == "feedline-plan" and plan["settings"]["episode_pool_size"] == 4
    rank = plan["ranks"][0]
    assert rank["samples"] == sum(LENGTHS) and len(rank["workers"]) == 2
    assert rank["samples_per_s"]["fetch_bound"] > 0
    runs = plan["measured"]["pipeline"]["runs"]
    assert [r["per_worker"] for r in runs] == [2, 5]  # 10 episodes: 8 per worker do not exist


def test_no_calibration_reads_only_the_decode_sample(plan_dataset) -> None:
    proc = run_feedline("plan", str(plan_dataset.root), "--json", "--no-calibration", check=True)
    plan = json.loads(proc.stdout)
    assert plan["measured"]["pipeline"] is None
    assert plan["ranks"][0]["samples_per_s"]["decode_bound"] > 0


def test_measure_prints_both_columns(plan_dataset) -> None:
    proc = run_feedline("plan", str(plan_dataset.root), "--workers", "0", "--batch-size", "8",
                        "--delta-timestamps", json.dumps(WINDOW), "--measure", "30", check=True)
    assert "predicted" in proc.stdout and "measured/predicted" in proc.stdout
    assert "episodes per batch" in proc.stdout and "of payload" in proc.stdout
    assert "calibrated on real runs of 2 and 8 episodes per worker" in proc.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["--link", "fast"], "--link 'fast'"),
    (["--dataset.streaming_episode_pool_size=0"], "--dataset.streaming_episode_pool_size"),
    (["--measure", "0"], "--measure"),
])
def test_bad_input_is_one_line(plan_dataset, args: list[str], says: str) -> None:
    proc = run_feedline("plan", str(plan_dataset.root), *args)
    assert proc.returncode != 0
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_missing_root_is_one_line(tmp_path) -> None:
    proc = run_feedline("plan", str(tmp_path / "nowhere"))
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert run_feedline("plan").returncode != 0
