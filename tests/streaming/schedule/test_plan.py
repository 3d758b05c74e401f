"""Shard plan: whole episodes, exact partition, stated balance, determinism across processes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from feedline.episodes.errors import PlanError
from feedline.streaming.schedule.plan import plan_report, plan_shards, resolve_rank_and_world
from tests.streaming.sched_data import Selection, make_selection, selections

WORLD = st.integers(1, 16)
WORKERS = st.integers(0, 8)


@settings(max_examples=60, deadline=None)
@given(sel=selections(max_total=2_000_000), world=WORLD, workers=WORKERS,
       seed=st.integers(0, 2**31), epoch=st.integers(0, 50))
def test_plan_partitions_whole_episodes_with_stated_balance(
    sel: Selection, world: int, workers: int, seed: int, epoch: int
) -> None:
    assume(len(sel.lengths) >= world)
    plan = plan_shards(sel.lengths, world_size=world, num_workers=workers, seed=seed, epoch=epoch)
    report = plan_report(sel.lengths, world_size=world, num_workers=workers, seed=seed,
                         epoch=epoch)
    assert len(plan) == world
    owned = [e for rank in plan for part in rank for e in part]
    assert sorted(owned) == sorted(sel.lengths)  # every selected episode exactly once
    rank_frames = []
    for r, rank in enumerate(plan):
        n_eps = sum(len(p) for p in rank)
        assert len(rank) == (1 if workers == 0 else min(workers, n_eps))
        assert all(rank), "no empty worker part"
        part_frames = [sum(sel.lengths[e] for e in p) for p in rank]
        assert max(part_frames) - min(part_frames) <= sel.max_len
        assert tuple(part_frames) == report.worker_frames[r]
        rank_frames.append(sum(part_frames))
    assert max(rank_frames) - min(rank_frames) <= sel.max_len  # the stated balance bound
    assert tuple(rank_frames) == report.rank_frames
    assert report.rank_spread <= report.max_episode_frames == sel.max_len
    assert "spread" in report.describe()
    # deterministic: same inputs, same plan
    again = plan_shards(dict(reversed(sel.lengths.items())), world_size=world,
                        num_workers=workers, seed=seed, epoch=epoch)
    assert again == plan


@settings(max_examples=30, deadline=None)
@given(sel=selections(max_total=500_000), world=st.integers(1, 4), workers=st.integers(0, 4),
       seed=st.integers(0, 2**31))
def test_other_seed_or_epoch_gives_other_order(
    sel: Selection, world: int, workers: int, seed: int
) -> None:
    assume(len(sel.lengths) >= 12)
    kw = {"world_size": world, "num_workers": workers}
    base = plan_shards(sel.lengths, seed=seed, epoch=0, **kw)
    assert plan_shards(sel.lengths, seed=seed + 1, epoch=0, **kw) != base
    assert plan_shards(sel.lengths, seed=seed, epoch=1, **kw) != base


def test_same_plan_in_another_process() -> None:
    sel = make_selection(1500, 3000, "heavy", 7, subset=True, max_total=10**9)
    configs = [(1, 0), (3, 2), (16, 8)]
    local = [plan_shards(sel.lengths, world_size=w, num_workers=n, seed=None, epoch=3)
             for w, n in configs]
    code = (
        "import json,sys\n"
        "from feedline.streaming.schedule.plan import plan_shards\n"
        "lengths={int(k): v for k, v in json.loads(sys.stdin.read()).items()}\n"
        f"print(json.dumps([plan_shards(lengths, world_size=w, num_workers=n, seed=None, "
        f"epoch=3) for w, n in {configs!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(sel.lengths),
                         capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "123"})
    assert json.loads(out.stdout) == local


def test_seed_none_is_the_fixed_streaming_seed() -> None:
    lengths = list(range(1, 60))
    assert plan_shards(lengths, world_size=2, num_workers=2, seed=None, epoch=0) == plan_shards(
        lengths, world_size=2, num_workers=2, seed=42, epoch=0)


def test_worker_count_is_lowered_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="feedline.streaming.schedule.plan")
    plan = plan_shards({5: 10, 9: 20, 11: 30}, world_size=1, num_workers=8, seed=1, epoch=0)
    assert len(plan[0]) == 3 and sorted(e for p in plan[0] for e in p) == [5, 9, 11]
    assert "using 3 of 8 DataLoader workers" in caplog.text
    zero = plan_shards({5: 10, 9: 20}, world_size=2, num_workers=0, seed=1, epoch=0)
    assert [len(r) for r in zero] == [1, 1]


def test_rank_without_episodes_is_an_error_saying_reduce_ranks() -> None:
    with pytest.raises(PlanError, match="reduce the number of ranks to at most 3"):
        plan_shards([4, 5, 6], world_size=4, num_workers=1, seed=0, epoch=0)


@pytest.mark.parametrize("bad, match", [
    ({}, "no episodes"), ({3: 0}, "episode 3 has 0 frames"), ([1, -2], "episode 1 has -2"),
])
def test_bad_lengths(bad: object, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        plan_shards(bad, world_size=1, num_workers=0, seed=0, epoch=0)  # type: ignore[arg-type]


def test_bad_arguments() -> None:
    with pytest.raises(PlanError, match="world_size"):
        plan_shards([1], world_size=0, num_workers=0, seed=0, epoch=0)
    with pytest.raises(PlanError, match="num_workers"):
        plan_shards([1], world_size=1, num_workers=-1, seed=0, epoch=0)
    with pytest.raises(PlanError, match="world_size must be an integer >= 1, got True"):
        plan_shards([1], world_size=True, num_workers=0, seed=0, epoch=0)
    with pytest.raises(PlanError, match=r"epoch must be an integer >= 0, got 1\.0"):
        plan_shards([1], world_size=1, num_workers=0, seed=0, epoch=1.0)  # type: ignore[arg-type]
    # numpy integers (epochs and sizes often come from arrays) are integers
    assert plan_shards([1, 2], world_size=np.int64(2), num_workers=np.int32(0), seed=0,
                       epoch=np.int64(3)) == plan_shards([1, 2], world_size=2, num_workers=0,
                                                         seed=0, epoch=3)


def test_equal_lengths_balance_exactly() -> None:
    report = plan_report(np.full(64, 10), world_size=8, num_workers=2, seed=3, epoch=0)
    assert report.rank_frames == (80,) * 8 and report.worker_spread == 0


def test_resolve_rank_and_world_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_rank_and_world() == (0, 1)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert resolve_rank_and_world() == (3, 4)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(PlanError, match="RANK=4"):
        resolve_rank_and_world()


def test_resolve_rank_and_world_from_process_group(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed as dist

    monkeypatch.setenv("RANK", "5")  # an initialised process group wins over the environment
    monkeypatch.setenv("WORLD_SIZE", "9")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        assert resolve_rank_and_world() == (0, 1)
    finally:
        dist.destroy_process_group()
