"""``feedline demo``: the main job end to end on an embedded default, with no setup.

It writes a small synthetic LeRobot v3 dataset (real AV1 MP4s, real Parquet) under
``$FEEDLINE_HOME/demo``, serves it over HTTP from 127.0.0.1 (Range + ETag), opens it *remotely*
with :class:`~feedline.episodes.EpisodeDataset` — so every frame is read by byte ranges through
the MP4 sidecar, never by downloading a video — with the episode-aware streaming reader
:class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset` (whole episodes fetched under a byte
budget into exact-coverage pools, decoded on threads), and trains a tiny policy for a few steps
through a real multi-worker ``DataLoader``. Because the synthetic pixels encode (camera, episode,
frame), the demo also checks that every decoded frame is the one the sample claims, and says so;
it reports samples/s, the training loop's batch wait (p50/p95) and the bytes fetched.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from feedline.io import feedline_home
from feedline.io.serve import StaticServer
from feedline.run.progress import human_bytes

log = logging.getLogger(__name__)

DEMO_DATASET = "synthetic-v3-av1-1"
DEMO_SHAPE = {"episodes": 8, "frames_per_episode": 40, "cameras": 2, "fps": 10, "width": 96, "height": 72}


def ensure_demo_dataset(base: Path) -> Path:
    """Write the demo dataset once; later runs reuse it (the writer installs it atomically)."""
    from feedline.episodes.synth.writer import write_synthetic_dataset

    root = base / DEMO_DATASET
    if not (root / "meta" / "info.json").exists():
        print(f"writing a synthetic LeRobot v3 dataset to {root} ...", flush=True)
        write_synthetic_dataset(root, vcodec="libsvtav1", **DEMO_SHAPE)
    return root


def run_demo(args: argparse.Namespace) -> int:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from feedline.episodes.stream.dataset import StreamingEpisodeDataset
    from feedline.episodes.synth.writer import decode_identity

    torch.manual_seed(args.seed)
    base = Path(args.home) if args.home else feedline_home() / "demo"
    root = ensure_demo_dataset(base)
    camera = "observation.images.cam_0"
    with StaticServer(root) as server:
        print(f"serving {root.name} at {server.url} (HTTP Range + ETag, 127.0.0.1 only)", flush=True)
        began = time.perf_counter()
        dataset = StreamingEpisodeDataset(
            root=server.url,
            delta_timestamps={camera: [-0.1, 0.0], "action": [0.0, 0.1, 0.2]},
            return_uint8=True,
            seed=args.seed,
            episode_pool_size=4,
            byte_budget_gb=args.byte_budget_mb / 1024,
        )
        print(
            f"opened remotely: {dataset.num_episodes} episodes, {dataset.num_frames} frames, "
            f"cameras {dataset.camera_keys} ({time.perf_counter() - began:.1f} s incl. sidecar build); "
            f"streaming whole episodes ({human_bytes(sum(dataset.episode_bytes.values()), 2)} of "
            f"payload) through pools of 4 under a {args.byte_budget_mb:g} MiB byte budget",
            flush=True,
        )
        loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers)
        state_dim = int(dataset.features["observation.state"]["shape"][-1])
        action_dim = int(dataset.features["action"]["shape"][-1])
        policy = nn.Sequential(
            nn.Conv2d(6, 16, 5, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
            nn.Linear(16 * 16, 64), nn.ReLU(), nn.Linear(64, 3 * action_dim),
        )
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
        # Normalise targets with the dataset's own stats (meta/stats.json), as LeRobot policies do.
        stats = (dataset.meta.stats or {}).get("action", {})
        mean = torch.as_tensor(stats.get("mean", 0.0), dtype=torch.float32)
        std = torch.as_tensor(stats.get("std", 1.0), dtype=torch.float32).clamp_min(1e-6)
        step, samples, checked, wrong, losses, waits = 0, 0, 0, 0, [], []
        began = time.perf_counter()
        while step < args.steps:
            batches = dataset.track(loader)  # one epoch; counts consumed batches for resume
            while step < args.steps:
                waited = time.perf_counter()
                batch = next(batches, None)
                if batch is None:
                    break
                waits.append(time.perf_counter() - waited)
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
                    print(
                        f"step {step:4d}  epoch {dataset.epoch}  loss {loss.item():.4f}  "
                        f"{rate:6.1f} samples/s",
                        flush=True,
                    )
            if hasattr(batches, "close"):
                batches.close()
        elapsed = time.perf_counter() - began
        checkpoint = dataset.state_dict()
    metrics = dataset.metrics()
    waits_ms = sorted(w * 1000 for w in waits)
    p50 = waits_ms[len(waits_ms) // 2]
    p95 = waits_ms[min(len(waits_ms) - 1, int(0.95 * len(waits_ms)))]
    print(
        f"done: {step} steps, {samples} samples in {elapsed:.1f} s ({samples / elapsed:.1f} samples/s); "
        f"batch wait p50 {p50:.1f} ms, p95 {p95:.1f} ms; fetched {human_bytes(metrics['bytes_fetched'], 2)} "
        f"in {metrics['episodes_fetched']} episode fetches (peak reserved "
        f"{human_bytes(metrics['peak_reserved_bytes'], 2)} in a worker; budget "
        f"{args.byte_budget_mb:g} MiB per rank, 1/{max(1, args.num_workers)} per worker), "
        f"{metrics['refill_stalls']} refill stalls; loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
        f"frame identity checked on {checked} samples, {wrong} wrong (state dim {state_dim}); "
        f"resume checkpoint: epoch {checkpoint['epoch']}, "
        f"{checkpoint['batches_consumed_on_rank']} batches consumed",
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
    p.add_argument(
        "--byte-budget-mb", type=float, default=1.0,
        help="streaming byte budget of the rank (MiB of whole-episode payload held at once)",
    )
    p.add_argument("--home", help="where the demo dataset lives (default $FEEDLINE_HOME/demo)")
    p.set_defaults(func=run_demo)
