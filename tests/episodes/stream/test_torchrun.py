"""A real DDP job over the streaming episode reader: ``torchrun`` with 2 and 3 processes (gloo,
CPU), two epochs, a mid-epoch checkpoint and its resume, and two "nodes" rendezvousing on
127.0.0.1. Every rank must take the same number of steps (else the job hangs in an all-reduce)
and the ranks together must read every frame, repeated only as counted."""

from __future__ import annotations

from collections import Counter

import pytest

from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from tests.ddp_loop import torchrun


def _frames(dataset) -> Counter:
    return Counter(dataset.locate(i) for i in range(dataset.total_frames))


def _check_epoch(records: list[dict], epoch_at: int, every: Counter) -> None:
    epochs = [r["epochs"][epoch_at] for r in records]
    assert len({e["steps"] for e in epochs}) == 1, [e["steps"] for e in epochs]
    read = Counter(tuple(k) for e in epochs for k in e["keys"])
    extra = read - every
    assert not every - read  # every frame read
    assert sum(extra.values()) == sum(e["evened"]["repeated"] for e in epochs)


@pytest.mark.parametrize("nproc", [2, 3])
def test_a_ddp_job_finishes_both_epochs_on_every_rank(av1_dataset, av1_http, tmp_path, nproc):
    plain = StreamingEpisodeDataset(root=av1_http, rank=0, world_size=nproc, episode_pool_size=2,
                                    even_batches="none").batches_per_rank(4, 1)
    assert len(set(plain)) > 1  # without evening out, this job's ranks would differ (and hang)
    records = torchrun(tmp_path / "run", "--reader", "episodes", "--root", av1_http, nproc=nproc)
    every = _frames(av1_dataset)
    for epoch_at in range(2):
        _check_epoch(records, epoch_at, every)


def test_a_mid_epoch_checkpoint_resumes_on_every_rank(av1_dataset, av1_http, tmp_path):
    first = torchrun(tmp_path / "first", "--reader", "episodes", "--root", av1_http,
                     "--stop-after", "5", nproc=2)
    state = tmp_path / "first" / "state.json"
    rest = torchrun(tmp_path / "rest", "--reader", "episodes", "--root", av1_http,
                    "--resume", str(state), "--epochs", "1", nproc=2)
    steps = [a["epochs"][0]["steps"] + b["epochs"][0]["steps"] for a, b in zip(first, rest, strict=True)]
    assert len(set(steps)) == 1
    read = Counter(tuple(k) for run in (first, rest) for r in run for k in r["epochs"][0]["keys"])
    every = _frames(av1_dataset)
    assert not every - read
    assert sum((read - every).values()) == sum(r["epochs"][0]["evened"]["repeated"] for r in first)


def test_two_nodes_with_their_own_caches(av1_dataset, av1_http, tmp_path):
    records = torchrun(tmp_path / "nodes", "--reader", "episodes", "--root", av1_http,
                       "--epochs", "1", nproc=1, nnodes=2)
    _check_epoch(records, 0, _frames(av1_dataset))
    assert (tmp_path / "nodes" / "home-0").is_dir() and (tmp_path / "nodes" / "home-1").is_dir()
