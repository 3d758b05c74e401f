"""Elastic resume on a real dataset: a checkpoint of 4 ranks x 2 workers resumes at 3 x 1 and 2 x 3.

Ranks are simulated in one process (the dataset takes ``rank=``/``world_size=``), each reading
through a real DataLoader with worker processes; they step in lockstep, as lerobot-train does.
Every anchor of the epoch is delivered exactly once over the run before and the run after.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from torch.utils.data import DataLoader

from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset, write_synthetic_dataset

Anchor = tuple[int, int]
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def many_episodes(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDataset:
    lengths = [5 + (7 * i) % 11 for i in range(24)]
    return write_synthetic_dataset(
        tmp_path_factory.mktemp("elastic") / "ds", episodes=len(lengths),
        frames_per_episode=lengths, cameras=1, width=32, height=24,
    )


def _ranks(root: str, world: int) -> list[StreamingEpisodeDataset]:
    return [StreamingEpisodeDataset(root=root, rank=r, world_size=world, episode_pool_size=4,
                                    seed=11) for r in range(world)]


def _keys(batch: dict[str, Any]) -> list[Anchor]:
    return [(int(e), int(f)) for e, f in zip(batch["episode_index"], batch["frame_index"],
                                             strict=True)]


def _run(ranks: list[StreamingEpisodeDataset], workers: int, batch_size: int,
         batches: int | None = None) -> list[Anchor]:
    """Every rank takes ``batches`` batches (``None``: its whole epoch), rank after rank."""
    seen: list[Anchor] = []
    for ds in ranks:
        loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, timeout=120)
        iterator = ds.track(loader)
        for n, batch in enumerate(iterator, 1):
            seen += _keys(batch)
            if n == batches:
                break
        iterator.close()  # type: ignore[attr-defined]
    return seen


@pytest.mark.parametrize(("world", "workers", "batch_size"), [(3, 1, 4), (2, 3, 5)])
def test_resume_at_another_world_workers_and_batch_size_covers_the_rest_once(
    world: int, workers: int, batch_size: int, many_episodes: SyntheticDataset,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = str(many_episodes.root)
    before = _ranks(root, 4)
    assert min(before[0].batches_per_rank(3, 2)) > 4
    consumed = _run(before, 2, 3, batches=4)
    assert len(consumed) == 4 * 4 * 3
    state = before[1].state_dict()  # any rank's checkpoint resumes every rank
    caplog.set_level(logging.INFO)
    after = _ranks(root, world)
    for ds in after:
        ds.load_state_dict(state)
    # the resumed epoch's length is what is left of it, on every rank
    assert sum(len(ds) for ds in after) == many_episodes.total_frames - len(consumed)
    rest = _run(after, workers, batch_size)
    assert "coverage stays exact" in caplog.text
    everything = sorted(many_episodes.locate(i) for i in range(many_episodes.total_frames))
    assert not set(consumed) & set(rest), "a consumed anchor came again"
    assert len(set(rest)) == len(rest)
    assert sorted(consumed + rest) == everything
    assert all(ds.epoch == 1 for ds in after)  # each rank finished the resumed epoch
