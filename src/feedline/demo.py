"""``feedline demo``: the main job end to end on an embedded default, with no setup.

It writes a small synthetic LeRobot v3 dataset (real AV1 MP4s, real Parquet) under
``$FEEDLINE_HOME/demo``, serves it over HTTP from 127.0.0.1 (Range + ETag), opens it *remotely*
with :class:`~feedline.episodes.EpisodeDataset` — so every frame is read by byte ranges through
the MP4 sidecar, never by downloading a video — and trains a tiny policy for a few steps through a
real multi-worker ``DataLoader``. Because the synthetic pixels encode (camera, episode, frame), the
demo also checks that every decoded frame is the one the sample claims, and says so.

The episode-aware streaming reader replaces the map-style reader here once it lands.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from feedline.io import feedline_home
from feedline.io.serve import StaticServer

log = logging.getLogger(__name__)

DEMO_DATASET = "synthetic-v3-av1-1"
DEMO_SHAPE = {"episodes": 8, "frames_per_episode": 40, "cameras": 2, "fps": 10, "width": 96, "height": 72}


def ensure_demo_dataset(base: Path) -> Path:
    """Write the demo dataset once; later runs reuse it (the writer installs it atomically)."""
    from feedline.episodes.synth import write_synthetic_dataset

    root = base / DEMO_DATASET
    if not (root / "meta" / "info.json").exists():
        print(f"writing a synthetic LeRobot v3 dataset to {root} ...", flush=True)
        write_synthetic_dataset(root, vcodec="libsvtav1", **DEMO_SHAPE)
    return root


def run_demo(args: argparse.Namespace) -> int:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from feedline.episodes import EpisodeDataset
    from feedline.episodes.synth import decode_identity

    torch.manual_seed(args.seed)
    base = Path(args.home) if args.home else feedline_home() / "demo"
    root = ensure_demo_dataset(base)
    camera = "observation.images.cam_0"
    with StaticServer(root) as server:
        print(f"serving {root.name} at {server.url} (HTTP Range + ETag, 127.0.0.1 only)", flush=True)
        began = time.perf_counter()
        dataset = EpisodeDataset(
            root=server.url,
            delta_timestamps={camera: [-0.1, 0.0], "action": [0.0, 0.1, 0.2]},
            return_uint8=True,
        )
        print(
            f"opened remotely: {dataset.num_episodes} episodes, {dataset.num_frames} frames, "
            f"cameras {dataset.camera_keys} ({time.perf_counter() - began:.1f} s incl. sidecar build)",
            flush=True,
        )
        loader = DataLoader(
            dataset,
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=args.num_workers,
            generator=torch.Generator().manual_seed(args.seed),
            persistent_workers=args.num_workers > 0,
        )
        state_dim = int(dataset[0]["observation.state"].shape[-1])
        action_dim = int(dataset[0]["action"].shape[-1])
        policy = nn.Sequential(
            nn.Conv2d(6, 16, 5, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
            nn.Linear(16 * 16, 64), nn.ReLU(), nn.Linear(64, 3 * action_dim),
        )
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
        # Normalise targets with the dataset's own stats (meta/stats.json), as LeRobot policies do.
        stats = (dataset.meta.stats or {}).get("action", {})
        mean = torch.as_tensor(stats.get("mean", 0.0), dtype=torch.float32)
        std = torch.as_tensor(stats.get("std", 1.0), dtype=torch.float32).clamp_min(1e-6)
        step, samples, checked, wrong, losses = 0, 0, 0, 0, []
        began = time.perf_counter()
        while step < args.steps:
            for batch in loader:
                frames = batch[camera]  # [B, 2, 3, H, W] uint8
                for j in range(frames.shape[0]):
                    ep, fr = int(batch["episode_index"][j]), int(batch["frame_index"][j])
                    cam, dec_ep, dec_fr = decode_identity(frames[j, -1].permute(1, 2, 0).numpy())
                    checked += 1
                    wrong += (cam, dec_ep, dec_fr) != (0, ep, fr)
                images = frames.float().div(255).flatten(1, 2)
                target = ((batch["action"].float() - mean) / std).flatten(1)
                loss = nn.functional.mse_loss(policy(images), target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                samples += frames.shape[0]
                step += 1
                if step % 10 == 0 or step == args.steps:
                    rate = samples / (time.perf_counter() - began)
                    print(f"step {step:4d}  loss {loss.item():.4f}  {rate:6.1f} samples/s", flush=True)
                if step >= args.steps:
                    break
    print(
        f"done: {step} steps, {samples} samples in {time.perf_counter() - began:.1f} s; "
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
        f"frame identity checked on {checked} samples, {wrong} wrong (state dim {state_dim})",
        flush=True,
    )
    return 1 if wrong else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="stream a generated LeRobot v3 dataset over local HTTP into a short training run",
    )
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--home", help="where the demo dataset lives (default $FEEDLINE_HOME/demo)")
    p.set_defaults(func=run_demo)
