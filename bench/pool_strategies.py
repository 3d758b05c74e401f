"""Measure the pool strategies: batch diversity over a real DataLoader epoch, and speed.

Why a script of its own: diversity is a property of the anchor order a reader actually hands a
training loop, so it is counted here from the ``episode_index`` of every batch of a real
``DataLoader`` epoch (2 workers, batch 16, the streaming benchmark's windows, real AV1 MP4s over
nginx), next to the samples/s of the same run and of the sequential scan from
``bench/streaming.py`` (the ceiling), run in the same process so ratios share the machine's load.

The dataset: 80 episodes of varied length (``--frames``: uniform in [lo, hi), seeded), 96x128,
2 cameras, written by feedline's synth writer. Reported per configuration (strategy, rank pool
size): distinct episodes per full batch (mean, minimum), per 10 consecutive batches, episodes
seen in the first 10 % of the epoch's samples, samples/s and its ratio to the scan, peak PSS per
worker, decoded frames per delivered frame. ``ideal`` is a global uniform shuffle of the same
frames cut into batches of the same size.

Run: ``PYTHONPATH=src .venv/bin/python bench/pool_strategies.py [--configs spread:256,remaining:32]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from streaming import CAMERAS, FPS, PssSampler, deltas, run_sequential, timed_epochs  # noqa: E402

DEFAULT_CONFIGS = "remaining:32,round_robin:32,spread:32,remaining:256,spread:80,spread:256"


def diversity(batches: list[np.ndarray], batch_size: int) -> dict[str, float]:
    """The four counts of the issue, over one epoch's batches in the order the loop saw them."""
    full = [len(set(b.tolist())) for b in batches if len(b) == batch_size]
    sets = [set(b.tolist()) for b in batches]
    ten = [len(set().union(*sets[i : i + 10])) for i in range(max(1, len(sets) - 9))]
    flat = np.concatenate(batches)
    first = len(set(flat[: int(0.1 * flat.size)].tolist()))
    return {"per_batch": float(np.mean(full)), "per_batch_min": int(min(full)),
            "per_10": float(np.mean(ten)), "first_10pct": first}


def ideal(lengths: np.ndarray, batch_size: int, seed: int = 0) -> dict[str, float]:
    eps = np.repeat(np.arange(lengths.size), lengths)
    np.random.default_rng(seed).shuffle(eps)
    return diversity([eps[i : i + batch_size] for i in range(0, eps.size, batch_size)], batch_size)


def run_config(url: str, strategy: str, pool: int, args: argparse.Namespace) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    from feedline.episodes import StreamingEpisodeDataset

    ds = StreamingEpisodeDataset(root=url, delta_timestamps=deltas(), return_uint8=True,
                                 sampling_strategy=strategy, episode_pool_size=pool)
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers,
                        prefetch_factor=4, persistent_workers=True)
    batches: list[np.ndarray] = []

    def track(loader: Any) -> Any:
        for batch in ds.track(loader):
            batches.append(batch["episode_index"].numpy())
            yield batch

    with PssSampler() as pss:
        out = timed_epochs(loader, 1, track=track)
    metrics = ds.metrics()
    del loader
    return {**out, **diversity(batches, args.batch_size), "pss_mib": pss.worker_peak_mib,
            "decoded_per_delivered": metrics["decoded_per_delivered"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="strategy:rank_pool_size,...")
    parser.add_argument("--frames", default="40,400", help="episode lengths: uniform in [lo, hi)")
    parser.add_argument("--episodes", type=int, default=80)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    from tests.servers import run_nginx

    from feedline.episodes.synth.writer import write_synthetic_dataset

    lo, hi = (int(v) for v in args.frames.split(","))
    lengths = np.random.default_rng(7).integers(lo, hi, args.episodes)
    with tempfile.TemporaryDirectory(prefix="feedline-bench-pool-") as tmp:
        work = Path(tmp)
        os.environ["FEEDLINE_HOME"] = str(work / "home")
        with run_nginx(work / "nginx") as server:
            local = server.root / "varied"
            write_synthetic_dataset(local, episodes=args.episodes,
                                    frames_per_episode=lengths.tolist(), cameras=CAMERAS,
                                    fps=FPS, width=128, height=96, noise=10,
                                    video_files_size_in_mb=0.5, vcodec="libsvtav1")
            url = f"{server.url}/varied"
            print(f"80 episodes, {int(lengths.sum())} frames ({lo}..{hi - 1} per episode), "
                  f"96x128, 2 cameras", flush=True)
            run_config(url, "spread", 32, args)  # warm-up: builds the sidecar
            seq = run_sequential(str(local), args)
            rows = [("ideal (global shuffle)", ideal(lengths, args.batch_size), None)]
            for config in args.configs.split(","):
                strategy, pool = config.split(":")
                result = run_config(url, strategy, int(pool), args)
                print(f"  {config}: {result}", flush=True)
                rows.append((f"`{strategy}`, pool {pool}", result, result["rate"] / seq["rate"]))
            seq_after = run_sequential(str(local), args)
    print(f"\nsequential scan: {seq['rate']:.0f} samples/s before, {seq_after['rate']:.0f} after, "
          f"peak PSS {seq['pss_mib']:.0f} MiB per worker\n")
    print("| strategy, rank pool | per batch (min) | per 10 batches | first 10 % | samples/s "
          "(vs scan) | decoded/delivered | peak PSS per worker |")
    print("|---|---|---|---|---|---|---|")
    for name, r, ratio in rows:
        speed = "-" if ratio is None else (
            f"{r['rate']:.0f} (x{ratio:.2f}) | {r['decoded_per_delivered']:.2f} | "
            f"{r['pss_mib']:.0f} MiB")
        if ratio is None:
            speed = "- | - | -"
        print(f"| {name} | {r['per_batch']:.2f} ({r['per_batch_min']}) | {r['per_10']:.1f} | "
              f"{r['first_10pct']} / 80 | {speed} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
