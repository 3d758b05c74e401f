"""Batch diversity as the reader counts it equals an offline count of the same batches.

A real DataLoader with two workers over a small AV1 dataset: the batches the loop took are
collected, their distinct episodes counted here by hand, and compared with ``metrics()``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from torch.utils.data import DataLoader

from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.streaming.schedule.diversity import DIVERSITY_METRICS

LENGTHS = [9, 14, 6, 21, 11, 17, 8, 25, 12, 10, 16, 7, 19, 13]
BATCH = 5


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory):
    return write_synthetic_dataset(
        tmp_path_factory.mktemp("diversity") / "ds", episodes=len(LENGTHS),
        frames_per_episode=LENGTHS, cameras=1, fps=10, video_files_size_in_mb=0.02,
    )


def offline(batches: list[list[int]], episodes: int, anchors: int) -> dict[str, float]:
    """The diversity figures of one epoch's batches, counted the plain way."""
    full = [len(set(b)) for b in batches if len(b) == BATCH]
    ranked = sorted(full)
    windows = [len(set().union(*batches[i : i + 10])) for i in range(len(batches) - 9)]
    mark = math.ceil(0.1 * anchors)
    early = [e for b in batches for e in b][:mark]
    return {
        "diversity_batches": len(full),
        "batch_episodes_mean": sum(full) / len(full),
        "batch_episodes_p5": ranked[math.ceil(0.05 * len(ranked)) - 1],
        "batch_episodes_min": ranked[0],
        "window_episodes_mean": sum(windows) / len(windows),
        "early_episode_share": len(set(early)) / episodes,
    }


@pytest.mark.parametrize("strategy", ["remaining", "round_robin"])
def test_counters_equal_an_offline_count_of_the_same_batches(dataset, strategy) -> None:
    ds = StreamingEpisodeDataset(root=str(dataset.root), episode_pool_size=4,
                                 sampling_strategy=strategy)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=2, timeout=120)
    batches = [batch["episode_index"].tolist() for batch in ds.track(loader)]
    assert sum(map(len, batches)) == sum(LENGTHS)
    assert any(len(b) < BATCH for b in batches)  # the workers' short last batches are there
    expected = offline(batches, len(LENGTHS), sum(LENGTHS))
    measured = ds.metrics()
    assert {k: measured[k] for k in DIVERSITY_METRICS} == pytest.approx(expected)

    ideal = ds.ideal_diversity(BATCH)
    assert set(ideal.as_dict()) == set(DIVERSITY_METRICS)
    assert ideal.batch_episodes_mean >= measured["batch_episodes_mean"] - 0.5
    assert ideal.early_episode_share >= measured["early_episode_share"]

    # A second epoch adds its batches and its own early share; reset_metrics zeroes them all.
    second = [batch["episode_index"].tolist() for batch in ds.track(loader)]
    both = offline(second, len(LENGTHS), sum(LENGTHS))
    measured = ds.metrics()
    assert measured["diversity_batches"] == expected["diversity_batches"] + both["diversity_batches"]
    assert measured["early_episode_share"] == pytest.approx(
        (expected["early_episode_share"] + both["early_episode_share"]) / 2)
    ds.reset_metrics()
    assert all(ds.metrics()[k] == 0 for k in DIVERSITY_METRICS)


def test_a_resumed_epoch_counts_no_early_share(dataset) -> None:
    """Resumed inside an epoch, the anchors before the resume point are not this run's to count."""
    def make() -> StreamingEpisodeDataset:
        return StreamingEpisodeDataset(root=str(dataset.root), episode_pool_size=4)

    ds = make()
    loader = DataLoader(ds, batch_size=BATCH, num_workers=2, timeout=120)
    for k, _ in enumerate(ds.track(loader), 1):
        if k == 3:
            state = ds.state_dict()
            break
    resumed = make()
    resumed.load_state_dict(state)
    rest = [b["episode_index"].tolist()
            for b in resumed.track(DataLoader(resumed, batch_size=BATCH, num_workers=2, timeout=120))]
    metrics = resumed.metrics()
    assert metrics["early_episode_share"] == 0
    assert metrics["diversity_batches"] == sum(len(b) == BATCH for b in rest)
    assert metrics["batch_episodes_mean"] == pytest.approx(
        np.mean([len(set(b)) for b in rest if len(b) == BATCH]))
