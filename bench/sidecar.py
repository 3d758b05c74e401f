"""Benchmark the MP4 sidecar path: bytes fetched per episode, decode speed, sidecar build time.

Run: ``.venv/bin/python bench/sidecar.py [--episodes 12] [--frames 60] [--size 320x240] [--repeats 5]``

Writes two synthetic LeRobot v3 datasets (AV1 GOP 2, LeRobot's default; H.264 GOP 30 with two
B-frames) with :mod:`feedline.episodes.synth.writer`, then per codec:

* bytes: per episode, the synthesized mini-MP4 size and the sample bytes fetched, against the
  bytes the episode's own frames occupy (the minimum any reader must fetch);
* decode: frames/s for random windows (1 frame, 1 s, 3 s) through ``VideoFrameReader`` (sidecar →
  mini-MP4 → PyAV, cold decoded-span cache) against the baseline, PyAV seeking in the full file
  (``container.seek(t0, backward=True)`` then decoding to t1, what LeRobot's pyav backend does);
* build: sidecar build time over the dataset's videos, per GB of video and per video.

Medians over ``--repeats`` runs; ratios are ours / baseline.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from feedline.episodes.format import load_meta
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import samples_between
from feedline.episodes.video.sidecar import current_objects, write_sidecar
from feedline.io import open_store

os.environ.setdefault("SVT_LOG", "1")


def pyav_seek_decode(path: str, t0: float, t1: float) -> int:
    """LeRobot's pyav backend: seek back to a keyframe, decode forward to t1, keep [t0, t1]."""
    kept = 0
    with av.open(path) as container:
        stream = container.streams.video[0]
        container.seek(int(t0 / stream.time_base), stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            if frame.time > t1 + 1e-4:
                break
            if frame.time >= t0 - 1e-4:
                frame.to_ndarray(format="rgb24")
                kept += 1
    return kept


def bench_codec(name: str, root: Path, repeats: int, seed: int) -> list[str]:
    store = open_store(str(root))
    meta = load_meta(store)
    key = meta.video_keys[0]
    table = meta.episodes
    videos = sorted(table.video_files())
    rows: list[str] = []

    # --- sidecar build time
    current = current_objects(store, videos)
    gib = sum(info.size for info in current.values()) / 2**30
    builds = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            started = time.perf_counter()
            write_sidecar(Path(tmp) / "s.npz", store, current, revision=None, workers=2).close()
            builds.append(time.perf_counter() - started)
    build = statistics.median(builds)
    rows.append(
        f"| {name} | sidecar build ({len(videos)} videos, {gib * 1024:.2f} MiB) | "
        f"{build * 1000:.1f} ms | {build / gib:.2f} s/GiB, {build / len(videos) * 1000:.1f} ms/video |"
    )

    reader = VideoFrameReader(store, video_paths=videos)
    minimal = VideoFrameReader(store, video_paths=videos, span_mode="minimal")
    fps = meta.fps

    # --- bytes fetched / needed per episode
    ratios, mini_ratios = [], []
    for i in range(len(table)):
        path = table.video_path[key][i]
        t0 = float(table.from_timestamp[key][i])
        t1 = float(table.to_timestamp[key][i]) - 1 / fps
        sample_table = reader.table(path)
        own = samples_between(sample_table, t0, t1)
        needed = int(np.asarray(sample_table.size)[own].sum())
        plans = reader.span_plans(path, t0, t1)
        fetched = sum(reader.fetch(path, plan).fetched_bytes for plan in plans)
        ratios.append(fetched / needed)
        mini_ratios.append(sum(p.size for p in plans) / needed)
    file_bytes = {p: current[p].size for p in videos}
    share = statistics.median(
        sum(p.size for p in reader.span_plans(table.video_path[key][i],
            float(table.from_timestamp[key][i]), float(table.to_timestamp[key][i]) - 1 / fps))
        / file_bytes[table.video_path[key][i]]
        for i in range(len(table))
    )
    # one random frame: what a map-style read of a single frame fetches, against its own bytes
    rng = random.Random(seed)
    single: dict[str, list[float]] = {"gop": [], "minimal": []}
    for _ in range(50):
        i = rng.randrange(len(table))
        path = table.video_path[key][i]
        t = float(table.from_timestamp[key][i]) + rng.randrange(int(table.length[i])) / fps
        sample_table = reader.table(path)
        own = int(np.asarray(sample_table.size)[samples_between(sample_table, t, t)].sum())
        for mode, which in (("gop", reader), ("minimal", minimal)):
            single[mode].append(which.span_bytes(path, t, t) / own)
    rows.append(
        f"| {name} | mini-MP4 bytes / the frame's own bytes, one random frame | "
        f"gop spans median {statistics.median(single['gop']):.1f}, minimal spans median "
        f"{statistics.median(single['minimal']):.1f} | 50 frames |"
    )
    rows.append(
        f"| {name} | bytes fetched / needed per episode ({len(table)} episodes) | "
        f"median {statistics.median(ratios):.3f} (max {max(ratios):.3f}) | "
        f"mini-MP4 size / needed: median {statistics.median(mini_ratios):.3f}; "
        f"episode mini-MP4 / whole camera file: median {share:.3f} |"
    )

    # --- decode speed: mini-MP4 path vs PyAV seek in the full file
    rng = random.Random(seed)
    for window_s in (0.0, 1.0, 3.0):
        ours, ours_min, base = [], [], []
        for _ in range(repeats):
            i = rng.randrange(len(table))
            path = table.video_path[key][i]
            start = float(table.from_timestamp[key][i])
            count = min(int(round(window_s * fps)) + 1, int(table.length[i]))
            first = rng.randrange(int(table.length[i]) - count + 1)
            times = [start + (first + k) / fps for k in range(count)]
            t0, t1 = times[0], times[-1]
            reader.clear_cache()
            started = time.perf_counter()
            frames = reader.frames_at(path, times)
            ours.append(len(frames) / (time.perf_counter() - started))
            minimal.clear_cache()
            started = time.perf_counter()
            frames = minimal.frames_at(path, times)
            ours_min.append(len(frames) / (time.perf_counter() - started))
            local = str(root / path)
            started = time.perf_counter()
            kept = pyav_seek_decode(local, t0, t1)
            base.append(kept / (time.perf_counter() - started))
        a, m, b = statistics.median(ours), statistics.median(ours_min), statistics.median(base)
        rows.append(
            f"| {name} | decode frames/s, {window_s:g} s window | gop spans {a:.0f} (x{a / b:.2f}), "
            f"minimal spans {m:.0f} (x{m / b:.2f}) | PyAV seek in full file {b:.0f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--size", default="320x240")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    os.environ.setdefault("FEEDLINE_HOME", tempfile.mkdtemp(prefix="feedline-bench-home-"))
    rows = [
        "| codec | measure | result | baseline / detail |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in (
            ("AV1 GOP 2", {"vcodec": "libsvtav1"}),
            ("H.264 GOP 30 bf 2", {"vcodec": "h264", "gop": 30, "bframes": 2}),
        ):
            root = Path(tmp) / name.split()[0].lower()
            started = time.perf_counter()
            write_synthetic_dataset(
                root, episodes=args.episodes, frames_per_episode=args.frames, cameras=1,
                width=width, height=height, noise=20, **kwargs,
            )
            print(f"wrote {name} dataset in {time.perf_counter() - started:.1f} s", flush=True)
            rows += bench_codec(name, root, args.repeats, seed=1)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
