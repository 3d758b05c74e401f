"""A dataset the plan tests predict and run: 10 AV1 episodes of uneven length, two cameras."""

from __future__ import annotations

import pytest

from feedline.episodes.synth.writer import SyntheticDataset, write_synthetic_dataset

LENGTHS = [30, 40, 20, 50, 30, 30, 25, 35, 40, 30]
WINDOW = {"observation.images.cam_0": [-0.2, -0.1, 0.0], "action": [0.0, 0.1]}


@pytest.fixture(scope="session")
def plan_dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDataset:
    return write_synthetic_dataset(
        tmp_path_factory.mktemp("plan") / "ds", episodes=len(LENGTHS), frames_per_episode=LENGTHS,
        cameras=2, fps=10, width=64, height=48, video_files_size_in_mb=0.05,
    )


def open_reader(root, **kwargs):
    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

    return StreamingEpisodeDataset(root=str(root), delta_timestamps=WINDOW, return_uint8=True,
                                   rank=0, world_size=kwargs.pop("world_size", 1), **kwargs)
