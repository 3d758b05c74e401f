"""LeRobot's own reader opens what feedline's bulk writer writes: lengths, rows and frames agree.

The bulk writer makes the 100,000-episode datasets of the scale benchmarks; this small instance
(several data files, MP4s and meta/episodes files over two chunk folders) is read by
``LeRobotDataset`` 0.6.1, and its samples equal feedline's map-style reader's, pixels included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot")

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

from feedline.episodes import EpisodeDataset  # noqa: E402
from feedline.episodes.synth.bulk import write_bulk_dataset  # noqa: E402
from feedline.episodes.synth.identity import decode_identity  # noqa: E402


def test_lerobot_reads_a_bulk_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "feedline"))
    root = tmp_path / "bulk"
    bulk = write_bulk_dataset(root, episodes=120, episodes_per_file=50, chunks_size=2,
                              progress=False)

    peer = LeRobotDataset("local/bulk", root=root, return_uint8=True)
    assert peer.meta.total_episodes == 120 and len(peer) == bulk.total_frames
    assert list(peer.meta.episodes["length"]) == bulk.episode_lengths.tolist()
    ours = EpisodeDataset(root=root, return_uint8=True)
    assert len(ours) == len(peer)

    starts = bulk.episode_from_index
    for episode in (0, 49, 50, 99, 100, 119):  # both sides of every file boundary
        for frame in range(int(bulk.episode_lengths[episode])):
            index = int(starts[episode]) + frame
            expected, got = peer[index], ours[index]
            assert int(expected["episode_index"]) == episode
            assert int(expected["frame_index"]) == frame
            for camera, key in enumerate(bulk.camera_keys):
                assert decode_identity(expected[key]) == bulk.expected_identity(camera, episode, frame)
            for key, value in expected.items():
                if isinstance(value, torch.Tensor):
                    assert torch.equal(got[key], value), f"episode {episode} frame {frame} {key}"
                else:
                    assert got[key] == value, key
    rows = np.asarray(peer.hf_dataset["episode_index"])
    assert np.bincount(rows).tolist() == bulk.episode_lengths.tolist()
