"""Write "LeRobot's medium dataset" with LeRobot 0.6.1's own writer, for bench/streaming.py.

Run with the Python of a venv holding ``lerobot[dataset]==0.6.1`` (feedline is not needed)::

    .venv-lerobot/bin/python bench/lerobot_dataset.py OUT [--episodes 80] [--files 6]

80 episodes of 60-240 frames (seeded), two AV1 cameras at 96x128 with LeRobot's default encoder
(libsvtav1, GOP 2), written through ``LeRobotDataset.create`` + ``add_frame`` / ``save_episode``
/ ``finalize``. Video files roll over at a small ``video_files_size_in_mb`` (measured from a probe
episode) so each camera has about ``--files`` MP4s; the cameras' frames differ in size, so their
files split at different episodes: the layout a recorder leaves and the one the streaming reader
must get right. The dataset is written to a sibling folder and renamed into place, so an
interrupted run leaves no half dataset for the benchmark to trust.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

CAMERAS = ["observation.images.cam_high", "observation.images.cam_low"]
HEIGHT, WIDTH, FPS = 96, 128, 30
TASKS = ("pick the cube", "push the block", "open the drawer")


def features() -> dict:
    image = {"dtype": "video", "shape": (HEIGHT, WIDTH, 3), "names": ["height", "width", "channels"]}
    return {
        **{camera: dict(image) for camera in CAMERAS},
        "observation.state": {"dtype": "float32", "shape": (6,), "names": None},
        "action": {"dtype": "float32", "shape": (6,), "names": None},
    }


def frame_image(camera: int, episode: int, frame: int, rng: np.random.Generator) -> np.ndarray:
    """A gradient that moves with the frame, a colour per episode, and noise (real encoder work).

    Every episode costs the encoder about the same per frame (so a probe predicts file sizes);
    the low camera is a little noisier than the high one, so its files fill up at other episodes."""
    x = np.arange(WIDTH)
    image = np.empty((HEIGHT, WIDTH, 3), np.uint8)
    image[..., 0] = (x * 2 + frame * 3) % 256
    image[..., 1] = 64 + (episode * 37) % 128
    image[..., 2] = 40 * camera + (episode * 13) % 160
    image += rng.integers(0, 12 + 3 * camera, image.shape, dtype=np.uint8)
    return image


def write(root: Path, lengths: list[int], video_mb: float | None, seed: int,
          episodes: list[int] | None = None) -> None:
    """Episodes of ``lengths`` frames whose pixels are those of episode indices ``episodes``
    (default ``0..n-1``): a probe draws a few from across the dataset."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    options = {} if video_mb is None else {"video_files_size_in_mb": video_mb}
    dataset = LeRobotDataset.create("feedline/bench-medium", fps=FPS, features=features(),
                                    root=root, robot_type="bench", use_videos=True, **options)
    rng = np.random.default_rng(seed)
    for episode, length in zip(episodes or range(len(lengths)), lengths, strict=True):
        for frame in range(length):
            dataset.add_frame({
                **{cam: frame_image(c, episode, frame, rng) for c, cam in enumerate(CAMERAS)},
                "observation.state": np.array([episode, frame, 0, 1, 2, 3], np.float32),
                "action": np.array([frame, episode, 3, 2, 1, 0], np.float32),
                "task": TASKS[episode % len(TASKS)],
            })
        dataset.save_episode()
    dataset.finalize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--episodes", type=int, default=80)
    parser.add_argument("--min-frames", type=int, default=60)
    parser.add_argument("--max-frames", type=int, default=240)
    parser.add_argument("--files", type=int, default=6, help="about this many MP4s per camera")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    lengths = np.random.default_rng(args.seed).integers(
        args.min_frames, args.max_frames + 1, args.episodes).tolist()
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as tmp:
        probe = Path(tmp) / "probe"  # three mean-length episodes from across the dataset
        picks = [0, args.episodes // 2, args.episodes - 1]
        write(probe, [int(np.mean(lengths))] * 3, None, args.seed, picks)
        per_frame = sum(f.stat().st_size for f in (probe / "videos").rglob("*.mp4")) / len(
            CAMERAS) / (3 * int(np.mean(lengths)))
        video_mb = float(per_frame * sum(lengths) / args.files / 2**20)
        staged = Path(tmp) / "dataset"
        write(staged, lengths, video_mb, args.seed)
        shutil.rmtree(out, ignore_errors=True)
        staged.rename(out)
    files = {camera: len(list((out / "videos" / camera).rglob("*.mp4"))) for camera in CAMERAS}
    print(f"{out}: {args.episodes} episodes, {sum(lengths)} frames, video files of "
          f"{video_mb:.2f} MB: {files}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
