"""Benchmark the MP4 sidecar path: bytes fetched per episode, decode speed, sidecar build time.

Run: ``.venv/bin/python bench/sidecar.py [--episodes 12] [--frames 60] [--size 320x240] [--repeats 5]
[--videos 300] [--samples 334] [--open-only]``

Writes two synthetic LeRobot v3 datasets (AV1 GOP 2, LeRobot's default; H.264 GOP 30 with two
B-frames) with :mod:`feedline.episodes.synth.writer`, then per codec:

* bytes: per episode, the synthesized mini-MP4 size and the sample bytes fetched, against the
  bytes the episode's own frames occupy (the minimum any reader must fetch);
* decode: frames/s for random windows (1 frame, 1 s, 3 s) through ``VideoFrameReader`` (sidecar →
  mini-MP4 → PyAV, cold decoded-span cache) against the baseline, PyAV seeking in the full file
  (``container.seek(t0, backward=True)`` then decoding to t1, what LeRobot's pyav backend does);
* build: sidecar build time over the dataset's videos, per GB of video and per video;
* open: opening a cached sidecar of ``--videos`` videos × ``--samples`` samples (tables made up,
  written by ``write_sidecar``) with its directory-digest check, without it, and with the full
  content-id check that archives without a digest get; CPU time of the process, since an open
  is CPU-bound and wall time on shared cores is mostly other jobs. ``--open-only``: just this.

Medians over ``--repeats`` runs; ratios are ours / baseline.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np

from feedline.episodes.format import load_meta
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.episodes.video import sidecar as sidecar_module
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import samples_between
from feedline.episodes.video.mp4.table import SampleTable, TrackInfo
from feedline.episodes.video.sidecar import Sidecar, current_objects, write_sidecar
from feedline.io import ObjectInfo, Store, open_store

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


def _median_cpu_s(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        run()
        times.append(time.process_time() - started)
    return statistics.median(times)


def bench_open(videos: int, samples: int, repeats: int) -> list[str]:
    """Open time of a cached sidecar: with the directory digest, without, with the full check."""
    info = TrackInfo("av01", 640, 480, 15360, 1000, bytes(range(160)), False, None, None, 512, 10**8)
    rng = np.random.default_rng(0)

    def made_up(store: Store, path: str, obj: ObjectInfo) -> SampleTable:
        size = rng.integers(1_000, 60_000, samples)
        dts = np.arange(samples) * 512
        return SampleTable(
            info, np.cumsum(size) + 48, size, dts, np.zeros(samples, np.int64), dts, dts / 15360,
            np.arange(samples) % 2 == 0, np.ones(samples, bool),
        )

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(tmp)
        current = {
            f"videos/cam_{i % 3}/chunk-000/file-{i:03d}.mp4": ObjectInfo(f"v{i}", 10**8, fingerprint=f"f{i}")
            for i in range(videos)
        }
        path = Path(tmp) / "cached.npz"
        write_sidecar(path, store, current, revision="main", parse=made_up).close()
        recorded = Sidecar(path)
        comment, members = recorded._npz.zip.comment, recorded._npz.zip.infolist()
        recorded.close()
        digest = _median_cpu_s(lambda: sidecar_module._directory_digest(members), repeats)
        real = sidecar_module._directory_digest

        def unchecked() -> None:  # the comparison always holds: an open without the check
            sidecar_module._directory_digest = lambda members: comment
            try:
                Sidecar(path).close()
            finally:
                sidecar_module._directory_digest = real

        opens: dict[str, list[float]] = {"with": [], "without": []}
        for i in range(2 * repeats):  # interleaved ABBA, so drift hits both alike
            which = "with" if i % 4 in (0, 3) else "without"
            started = time.process_time()
            Sidecar(path).close() if which == "with" else unchecked()
            opens[which].append(time.process_time() - started)
        with_check, without = (statistics.median(opens[k]) for k in ("with", "without"))
        sidecar_module._DIGEST_TAG, tag = b"no-such-tag:", sidecar_module._DIGEST_TAG
        try:  # as for an archive without a digest: every member against the content id
            full = _median_cpu_s(lambda: Sidecar(path).close(), repeats)
        finally:
            sidecar_module._DIGEST_TAG = tag
        mib = path.stat().st_size / 2**20
    label = f"open a cached sidecar ({videos} videos, {videos * samples:,} samples, {mib:.1f} MiB)"
    return [
        f"| sidecar | {label}, no check | {without * 1000:.2f} ms | |",
        f"| sidecar | {label}, directory digest (default) | {with_check * 1000:.2f} ms | "
        f"{(with_check / without - 1) * 100:+.1f} %; the digest alone {digest * 1000:.3f} ms = "
        f"{digest / without * 100:.1f} % of the open |",
        f"| sidecar | {label}, full content-id check (no digest) | {full * 1000:.2f} ms | "
        f"{full / without:.1f}x the open |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--size", default="320x240")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--videos", type=int, default=300)
    parser.add_argument("--samples", type=int, default=334)
    parser.add_argument("--open-only", action="store_true")
    args = parser.parse_args()
    open_rows = bench_open(args.videos, args.samples, max(args.repeats, 41))
    if args.open_only:
        print("\n".join(open_rows))
        return
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
    print("\n".join(rows + open_rows))


if __name__ == "__main__":
    main()
