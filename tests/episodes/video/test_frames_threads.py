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


def test_many_threads_converting_the_same_frames_neither_hang_nor_differ(tmp_path) -> None:
    """Each thread converts with its own reused converter (no lock): 8 threads converting the
    same decoded frames at once finish and give PyAV's own rgb24 conversion, bit for bit."""
    import av

    from feedline.episodes.video.frames import rgb_array

    root = tmp_path / "ds"
    synth = write_synthetic_dataset(root, episodes=1, frames_per_episode=24, cameras=1, width=96,
                                    height=64, vcodec="h264", gop=6, bframes=2)
    video = next(synth.root.rglob("*.mp4"))
    with av.open(str(video)) as container:
        frames = list(container.decode(video=0))
    expected = [frame.to_ndarray(format="rgb24") for frame in frames]

    def convert_all(_: int) -> list:
        return [rgb_array(frame) for _ in range(10) for frame in frames]

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(convert_all, n) for n in range(16)]
        results = [future.result(timeout=60) for future in futures]
    for got in results:
        for j, array in enumerate(got):
            assert array.dtype == expected[j % len(frames)].dtype
            assert (array == expected[j % len(frames)]).all(), j
