"""Benchmark the streaming reader over nginx against the map-style reader on a local folder.

One synthetic LeRobot v3 dataset (AV1, LeRobot's default encoding) is written once, then read for
one full epoch per run through a real ``DataLoader`` (same batch size, workers and windows):

* ``map-local`` - the baseline: ``EpisodeDataset`` on the local folder, ``shuffle=True``.
* ``map-nginx`` - the same reader over nginx (its bytes on the wire, for the byte ratio).
* ``streaming-nginx`` - ``StreamingEpisodeDataset`` over nginx (pools, byte budget, threads).

Bytes fetched are what nginx sent (its access log: ``$body_bytes_sent`` of every request made
during the run), so both readers are counted the same way. Runs alternate between the readers;
medians of ``--repeats`` runs (after one warm-up run each, which also builds the sidecar).

Run: ``.venv/bin/python bench/streaming.py`` (``--episodes 8 --repeats 1`` for a quick run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/servers.py starts nginx the way the test suite does

CAMERA = "observation.images.cam_0"


def nginx_bytes(log: Path, start: int) -> tuple[int, int]:
    """(body bytes, requests) nginx logged after line ``start``."""
    lines = log.read_text().splitlines()[start:] if log.exists() else []
    total = 0
    for line in lines:
        parts = line.split('" ')
        if len(parts) >= 2:
            fields = parts[1].split()
            if len(fields) >= 2 and fields[1].isdigit():
                total += int(fields[1])
    return total, len(lines)


def log_len(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def run_epoch(kind: str, root: str, args: argparse.Namespace, epoch: int) -> int:
    import torch
    from torch.utils.data import DataLoader

    from feedline.episodes import EpisodeDataset
    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

    deltas = {CAMERA: [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}
    samples = 0
    if kind.startswith("map"):
        ds = EpisodeDataset(root=root, delta_timestamps=deltas, return_uint8=True)
        loader = DataLoader(
            ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
            generator=torch.Generator().manual_seed(epoch),
        )
        for batch in loader:
            samples += len(batch["index"])
    else:
        ds = StreamingEpisodeDataset(
            root=root, delta_timestamps=deltas, return_uint8=True,
            byte_budget_gb=args.budget_mb / 1024,
        )
        ds.set_epoch(epoch)
        loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers)
        for batch in ds.track(loader):
            samples += len(batch["index"])
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--size", default="160x120")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--budget-mb", type=float, default=64.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from tests.servers import run_nginx

    from feedline.episodes.synth.writer import write_synthetic_dataset

    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="feedline-bench-streaming-") as tmp:
        work = Path(tmp)
        import os

        os.environ["FEEDLINE_HOME"] = str(work / "home")  # cold, private sidecar cache
        local = work / "ds"
        write_synthetic_dataset(
            local, episodes=args.episodes, frames_per_episode=args.frames, cameras=2, fps=10,
            width=width, height=height, vcodec="libsvtav1",
        )
        payload = sum(f.stat().st_size for f in local.rglob("*") if f.is_file())
        print(f"dataset: {args.episodes} episodes x {args.frames} frames, 2 cameras {args.size}, "
              f"{payload / 2**20:.2f} MiB on disk", flush=True)
        with run_nginx(work / "nginx") as server:
            import shutil

            shutil.copytree(local, server.root / "ds")
            roots = {"map-local": str(local), "map-nginx": f"{server.url}/ds",
                     "streaming-nginx": f"{server.url}/ds"}
            results: dict[str, list[tuple[float, int, int]]] = {k: [] for k in roots}
            for repeat in range(args.repeats + 1):
                for kind, root in roots.items():
                    start = log_len(server.access_log)
                    began = time.perf_counter()
                    samples = run_epoch(kind, root, args, repeat)
                    elapsed = time.perf_counter() - began
                    time.sleep(0.2)  # nginx flushes its log line per request
                    sent, requests = nginx_bytes(server.access_log, start)
                    if repeat:
                        results[kind].append((samples / elapsed, sent, requests))
                    print(f"run {repeat} {kind:16s} {samples} samples {elapsed:6.2f} s "
                          f"{samples / elapsed:7.1f} samples/s {sent / 2**20:8.2f} MiB "
                          f"{requests} requests" + ("" if repeat else " (warm-up)"), flush=True)
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v),
               statistics.median(r[2] for r in v)) for k, v in results.items()}
    base_rate = med["map-local"][0]
    base_bytes = med["map-nginx"][1]
    print()
    print("| reader | samples/s | vs map-local | MiB fetched per epoch | vs map-nginx | requests |")
    print("|---|---|---|---|---|---|")
    for kind, (rate, sent, requests) in med.items():
        byte_ratio = f"x{sent / base_bytes:.2f}" if sent and base_bytes else "-"
        print(f"| {kind} | {rate:.1f} | x{rate / base_rate:.2f} | {sent / 2**20:.2f} | "
              f"{byte_ratio} | {requests:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
