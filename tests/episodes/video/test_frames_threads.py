"""The map-style reader used from several threads of one process (a thread-pool loader)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from feedline.episodes import EpisodeDataset
from feedline.episodes.synth.writer import decode_identity, write_synthetic_dataset


def test_threads_share_one_reader_without_hanging(tmp_path) -> None:
    root = tmp_path / "ds"
    write_synthetic_dataset(root, episodes=2, frames_per_episode=30, cameras=1, vcodec="h264", gop=30, bframes=2)
    key = "observation.images.cam_0"
    ds = EpisodeDataset(root=root, delta_timestamps={key: [-0.2, -0.1, 0.0]}, return_uint8=True)
    indices = list(range(len(ds))) * 3  # repeats hit frames cached by other threads
    with ThreadPoolExecutor(4) as pool:
        samples = list(pool.map(ds.__getitem__, indices))
    for index, sample in zip(indices, samples, strict=True):
        frames: torch.Tensor = sample[key]
        _cam, episode, frame = decode_identity(frames[-1].permute(1, 2, 0).numpy())
        assert (episode, frame) == (int(sample["episode_index"]), int(sample["frame_index"])), index
