"""Hub requests per epoch for N ranks x K DataLoader workers on one node (the Hub-contract server).

Writes a synthetic LeRobot v3 dataset, serves it as a Hub dataset repository (tests/hubserver.py:
the Hub and its CDN on two ports of 127.0.0.1), then runs one epoch of StreamingEpisodeDataset in
N rank processes started together (as torchrun does), each with a DataLoader of K workers, all on
one $FEEDLINE_HOME (one node). Counts every request the server saw, by kind, for three cases: a
cold node (empty $FEEDLINE_HOME, no published sidecar), the same node again (its caches warm),
and a cold node when the sidecar is published on the ``lerobot-sidecars`` branch.

    .venv/bin/python bench/hub_requests.py [--episodes 24] [--ranks 1 2] [--workers 0 1 2 4]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hubserver import HubServer, run_hub  # noqa: E402

REPO = "bench/hub-requests"
CAM = "observation.images.cam_0"


def rank_main(rank: int, world: int, workers: int) -> None:
    from torch.utils.data import DataLoader

    from feedline.episodes import StreamingEpisodeDataset

    ds = StreamingEpisodeDataset(REPO, rank=rank, world_size=world, delta_timestamps={CAM: [0.0]})
    samples = 0
    for batch in ds.track(DataLoader(ds, batch_size=8, num_workers=workers)):
        samples += len(batch["index"])
    print(json.dumps({"rank": rank, "samples": samples}))


def kind(request: tuple[str, str, str, str | None, str | None]) -> str:
    origin, method, path, _range, _auth = request
    if origin == "cdn":
        return f"CDN {method}"
    if "/revision/" in path:
        return "Hub revision"
    if "/tree/" in path:
        return "Hub tree page"
    if "/resolve/" in path:
        return f"Hub resolve {method}"
    return f"Hub {method} other"


def epoch(hub: HubServer, home: Path, ranks: int, workers: int) -> tuple[collections.Counter[str], int]:
    hub.clear()
    env = {**os.environ, "FEEDLINE_HOME": str(home), "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1",
           "OMP_NUM_THREADS": "1"}
    env.pop("HF_TOKEN", None)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", str(r), "--world", str(ranks), "--k", str(workers)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        for r in range(ranks)
    ]
    samples = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"a rank failed (exit {proc.returncode})")
        samples += json.loads(out.strip().splitlines()[-1])["samples"]
    return collections.Counter(kind(r) for r in hub.requests), samples


def publish(hub: HubServer, home: Path) -> None:
    env = {**os.environ, "FEEDLINE_HOME": str(home), "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1",
           "HF_TOKEN": "hf_bench"}
    subprocess.run([sys.executable, "-m", "feedline", "build-sidecar", "--repo-id", REPO, "--output",
                    str(home / "published.npz"), "--push"], env=env, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.world, args.k)
        return
    from feedline.episodes.synth.writer import write_synthetic_dataset

    work = Path(tempfile.mkdtemp(prefix="feedline-hub-requests-"))
    synth = write_synthetic_dataset(
        work / "dataset", episodes=args.episodes, frames_per_episode=10, cameras=2, fps=10,
        video_files_size_in_mb=0.03, data_files_size_in_mb=0.012, episodes_per_meta_file=8,
    )
    files = sum(1 for p in synth.root.rglob("*") if p.is_file())
    videos = sum(len(v) for v in synth.video_files.values())
    print(f"{args.episodes} episodes, {files} files ({videos} videos), one epoch per case")
    with run_hub(work / "hub") as hub:
        hub.add_dataset(REPO, synth.root)
        columns = ["Hub revision", "Hub tree page", "Hub resolve HEAD", "Hub resolve GET", "CDN HEAD", "CDN GET"]
        print("| case | N x K | " + " | ".join(columns) + " | Hub total | samples |")
        print("|---|---|" + "---|" * (len(columns) + 2))
        cases = [("cold node", False, False), ("warm node", True, False), ("cold, published", False, True)]
        for name, warm, published in cases:
            if published and "lerobot-sidecars" not in hub.repos[REPO].branches:
                publish(hub, work / "publisher")
            for ranks in args.ranks:
                for workers in args.workers:
                    home = work / f"home-{name.replace(' ', '').replace(',', '')}-{ranks}-{workers}"
                    if warm:
                        epoch(hub, home, ranks, workers)  # the first epoch fills the node's caches
                    counts, samples = epoch(hub, home, ranks, workers)
                    hub_total = sum(v for k, v in counts.items() if k.startswith("Hub"))
                    row = " | ".join(str(counts.get(c, 0)) for c in columns)
                    print(f"| {name} | {ranks} x {workers} | {row} | {hub_total} | {samples} |", flush=True)


if __name__ == "__main__":
    main()
