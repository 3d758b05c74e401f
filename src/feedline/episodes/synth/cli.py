"""``feedline synth``: write a LeRobot-shaped v3 dataset of many short episodes.

Why a command: users sizing a training job (``feedline plan``, ``feedline doctor``, their own
DataLoader) want a DROID- or million-episode-sized root to try it on without downloading one;
:func:`~feedline.episodes.synth.bulk.write_bulk_dataset` writes it in minutes, and this puts
it one command away, with a progress bar and nothing half-written on failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from feedline.errors import FeedlineError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "synth",
        help="write a LeRobot v3 dataset of many short synthetic episodes (H.264, one row group each)",
        description=(
            "Write a LeRobot-shaped v3 dataset of short episodes under ROOT (which must not exist): "
            "tiny H.264 frames, LeRobot's chunk/file layout, one data row group per episode and "
            "per-episode stats. 100,000 episodes take about a minute on 2 cores."
        ),
    )
    parser.add_argument("root", help="folder to create")
    parser.add_argument("--episodes", type=int, default=10_000, help="episodes to write (default 10000)")
    parser.add_argument("--cameras", type=int, default=2, help="video keys (default 2)")
    parser.add_argument("--min-frames", type=int, default=8, help="shortest episode (default 8)")
    parser.add_argument("--max-frames", type=int, default=24, help="longest episode (default 24)")
    parser.add_argument("--fps", type=int, default=10, help="frames per second (default 10)")
    parser.add_argument(
        "--episodes-per-file", type=int, default=5000,
        help="episodes per data file, MP4 and meta/episodes file (default 5000)",
    )
    parser.add_argument("--width", type=int, default=64, help="frame width (default 64)")
    parser.add_argument("--height", type=int, default=48, help="frame height (default 48)")
    parser.add_argument("--seed", type=int, default=0, help="episode lengths' seed (default 0)")
    parser.add_argument(
        "--workers", type=int, default=None,
        help="processes writing file groups (default: every core from 20000 episodes on)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from feedline.episodes.synth.bulk import write_bulk_dataset

    try:
        written = write_bulk_dataset(
            args.root, episodes=args.episodes, cameras=args.cameras, min_frames=args.min_frames,
            max_frames=args.max_frames, fps=args.fps, episodes_per_file=args.episodes_per_file,
            width=args.width, height=args.height, seed=args.seed, workers=args.workers,
        )
    except ValueError as exc:
        raise FeedlineError(f"{args.root}: {exc}") from None
    summary = {
        "root": str(written.root),
        "episodes": len(written.episode_lengths),
        "frames": written.total_frames,
        "cameras": written.camera_keys,
        "fps": written.fps,
    }
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0
