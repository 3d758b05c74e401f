"""LeRobot as the oracle: on datasets written by LeRobot's own writer, feedline's samples equal
``LeRobotDataset``'s, every key, pixels included (AV1, LeRobot's default, and H.264)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot")

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset  # noqa: E402

HEIGHT, WIDTH = 48, 64
FEATURES = {
    "observation.images.front": {"dtype": "video", "shape": (HEIGHT, WIDTH, 3),
                                 "names": ["height", "width", "channels"]},
    "observation.state": {"dtype": "float32", "shape": (3,), "names": None},
    "action": {"dtype": "float32", "shape": (3,), "names": None},
}
LENGTHS = (12, 17, 9)
DELTA_TIMESTAMPS = {
    "observation.images.front": [-0.2, -0.1, 0.0],
    "observation.state": [-0.1, 0.0],
    "action": [0.0, 0.1, 0.2, 0.3],
}


def _write_with_lerobot(root: Path, vcodec: str | None) -> None:
    """Three episodes through ``LeRobotDataset.create`` + ``add_frame`` / ``save_episode``."""
    options = {}
    if vcodec is not None:
        from lerobot.configs.video import RGBEncoderConfig

        options["rgb_encoder"] = RGBEncoderConfig(vcodec=vcodec)
    dataset = LeRobotDataset.create("local/oracle", fps=10, features=FEATURES, root=root,
                                    robot_type="test", use_videos=True, **options)
    rng = np.random.default_rng(0)
    for episode, length in enumerate(LENGTHS):
        for frame in range(length):
            image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
            image[:, : WIDTH // 2] = 20 + 5 * frame
            image[:, WIDTH // 2 :] = 30 + 35 * episode
            image += rng.integers(0, 20, image.shape, dtype=np.uint8)
            dataset.add_frame({
                "observation.images.front": image,
                "observation.state": np.array([episode, frame, 1], np.float32),
                "action": np.array([frame, episode, 2], np.float32),
                "task": f"task {episode % 2}",
            })
        dataset.save_episode()
    dataset.finalize()


def _assert_same(expected: dict, actual: dict, where: str) -> None:
    assert set(actual) == set(expected), f"{where}: keys differ: {sorted(set(actual) ^ set(expected))}"
    for key, value in expected.items():
        got = actual[key]
        if isinstance(value, torch.Tensor):
            assert got.dtype == value.dtype and got.shape == value.shape, f"{where} {key}"
            assert torch.equal(got, value), f"{where} {key}: max diff {(got.float() - value.float()).abs().max()}"
        else:
            assert got == value, f"{where} {key}: {got!r} != {value!r}"


@pytest.mark.parametrize("vcodec", [None, "h264"], ids=["av1", "h264"])
def test_samples_equal_lerobot_datasets(
    vcodec: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = tmp_path / "dataset"
    _write_with_lerobot(root, vcodec)

    peer = LeRobotDataset("local/oracle", root=root, delta_timestamps=DELTA_TIMESTAMPS, return_uint8=True)
    mapped = EpisodeDataset(root=root, delta_timestamps=DELTA_TIMESTAMPS, return_uint8=True)
    assert len(mapped) == len(peer) == sum(LENGTHS)
    for index in range(len(peer)):
        _assert_same(peer[index], mapped[index], f"map-style index {index}")

    streamed = StreamingEpisodeDataset(root=root, delta_timestamps=DELTA_TIMESTAMPS, return_uint8=True)
    seen = set()
    for sample in streamed:  # in process: every frame once, in feedline's order
        index = int(sample["index"])
        seen.add(index)
        _assert_same(peer[index], sample, f"streamed index {index}")
    assert seen == set(range(len(peer)))
