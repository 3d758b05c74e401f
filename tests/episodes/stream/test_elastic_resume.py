"""Elastic resume on a real dataset: a checkpoint of 4 ranks x 2 workers resumes at 3 x 1 and 2 x 3.

Ranks are simulated in one process (the dataset takes ``rank=``/``world_size=``), each reading
through a real DataLoader with worker processes; they step in lockstep, as lerobot-train does.
Every anchor of the epoch is delivered exactly once over the run before and the run after (the
shared harness's ``check_elastic``, which ``TokenDataset`` runs too).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from torch.utils.data import DataLoader

from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset, write_synthetic_dataset
from feedline.streaming.errors import PlanError
from tests.streaming.resume_harness import check_elastic

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


def _loader(workers: int, batch_size: int):
    return lambda ds: DataLoader(ds, batch_size=batch_size, num_workers=workers, timeout=120)


@pytest.mark.parametrize(("world", "workers", "batch_size"), [(3, 1, 4), (2, 3, 5)])
def test_resume_at_another_world_workers_and_batch_size_covers_the_rest_once(
    world: int, workers: int, batch_size: int, many_episodes: SyntheticDataset,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = str(many_episodes.root)
    assert min(_ranks(root, 4)[0].batches_per_rank(3, 2)) > 4
    caplog.set_level(logging.INFO)
    everything = [many_episodes.locate(i) for i in range(many_episodes.total_frames)]
    after = check_elastic(
        lambda rank, size: _ranks(root, size)[rank], (4, _loader(2, 3)),
        (world, _loader(workers, batch_size)), _keys, 4, everything,
    )
    assert "coverage stays exact" in caplog.text
    assert all(ds.epoch == 1 for ds in after)  # each rank finished the resumed epoch


def test_resume_on_more_ranks_than_remaining_episodes_says_remaining(h264_dataset: SyntheticDataset) -> None:
    """3 episodes, a checkpoint near the end of the epoch, resumed on 3 ranks: the episodes left
    are the epoch's remaining ones, and the message says so (it said "selected")."""
    ds = StreamingEpisodeDataset(root=str(h264_dataset.root))
    loader = ds.track(DataLoader(ds, batch_size=4))
    stop = sum(ds.batches_per_rank(4, 0, epoch=0)) - 1
    for n, _ in enumerate(loader, 1):
        if n == stop:
            break
    resumed = StreamingEpisodeDataset(root=str(h264_dataset.root), rank=0, world_size=3)
    resumed.load_state_dict(ds.state_dict())
    with pytest.raises(PlanError) as err:
        list(resumed.track(DataLoader(resumed, batch_size=4)))
    message = str(err.value)
    assert "remaining episode(s) of epoch 0 cannot give each of 3 ranks" in message, message
    assert "selected" not in message and message.startswith("StreamingEpisodeDataset: ")
