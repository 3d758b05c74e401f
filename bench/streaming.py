"""Benchmark the streaming reader against the decode ceiling and the map-style readers.

Datasets (AV1, LeRobot's default encoding, two cameras), chosen with ``--datasets``:

* ``small`` - feedline's synth writer: 96x128, 80 episodes of 150 frames, about 6 MP4 files per
  camera;
* ``large`` - synth: 480x640 with a moving texture, about 29 KB per frame, 24 episodes;
* ``lerobot-medium`` - "LeRobot's medium dataset", written by LeRobot 0.6.1's own writer
  (``bench/lerobot_dataset.py``, run once with ``--lerobot-python`` into ``--cache-dir``):
  96x128, 80 episodes of 60-240 frames, ~6 MP4s per camera splitting at different episodes;
* ``wide`` - synth: 1,000 short episodes (12 frames) at 96x128, GOP 2.
* ``medium`` - synth in the shape of ``lerobot-medium`` (80 episodes of 60-240 frames, seeded
  alike, 96x128), for figures that need unequal episodes without LeRobot's writer.

``--ranks N`` measures only several ranks at once (``bench/ranks.py``): N spawned rank processes,
each with its own DataLoader workers, read one epoch over the same nginx, against one rank
alone in the same run; per rank samples/s, the batches each took (equal: ``even_batches``) and
the share of anchors repeated to even them out.

Every reader runs one epoch through a real ``DataLoader`` (2 workers, batch 16,
``prefetch_factor=4``) with the windows ``cam_high: [-2, -1, 0] / fps`` and
``action: [0..7] / fps``, uint8 images:

* ``sequential`` - the ceiling: a trivial IterableDataset in which each worker decodes its
  episodes' frames once, in order (one container per file, default decoder threading, one
  reused RGB converter), and yields the same windowed samples (every key the readers give,
  the task string included); no pool, no budget.
* ``sequential-1t`` - the same scan with one codec thread per decoder: with 2 workers on 2
  cores FFmpeg's automatic threads add CPU without adding cores, so this may be the faster
  simple reader, and the streaming reader is measured against it too.
* ``streaming`` - ``StreamingEpisodeDataset`` over nginx (HTTP ranges), ``persistent_workers=True``
  for two epochs: samples/s of the first, first batch, p95 batch wait over both (the epoch
  boundary included), decoded/delivered frames, peak PSS per worker. ``streaming-<strategy>``:
  the same at every other sampling strategy of the pool.
* ``map-style`` - ``EpisodeDataset`` on the local folder, ``shuffle=True``.
* ``lerobot`` - LeRobot 0.6.1's ``LeRobotDataset`` on the local folder, ``shuffle=True``, run by
  ``--lerobot-python`` (a Python 3.12 venv with ``lerobot[dataset]==0.6.1``); skipped with a
  note when not given.

On ``large`` the streaming reader also runs at several ``decoded_cache_gb`` limits.

Batch diversity, per dataset and reader (the streaming reader's own ``metrics()``, the other
readers counted here with the same :class:`~feedline.streaming.schedule.diversity.BatchDiversity`):
distinct episodes per batch (mean, p5, min), per 10 consecutive batches, and the share of the
episodes touched by 10 % of the epoch, each beside an ideal global shuffle of the same episode
lengths (:func:`~feedline.streaming.schedule.diversity.ideal_diversity`).
``--repeats N`` runs every reader N times, interleaved, and reports the median run and the median
of each round's ratios (rounds run back to back, so a load swing hits both sides of a ratio).
Run: ``.venv/bin/python bench/streaming.py [--datasets small,lerobot-medium] [--lerobot-python PATH]
[--repeats 3]`` (``--quick`` for a smoke run).

``--outage S`` measures only the streaming reader riding out a server outage instead: per
dataset, one clean epoch, then one with nginx really stopped (its port refusing connections)
for ``S`` seconds starting a third of a clean epoch in, then started again on the same port;
the figure is the outage epoch's samples/s against the clean one's, in the same run.
``--episodes-x K`` writes K times each dataset's episodes, for a longer epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.forecast.measure import (
    PssSampler,  # the library's, also used by feedline plan
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/servers.py starts nginx the way the test suite does

CAMERAS = ["observation.images.cam_high", "observation.images.cam_low"]
FPS = 30
WINDOW = {CAMERAS[0]: [-2, -1, 0], "action": list(range(8))}
DATASETS = {  # name: (width, height, episodes, frames per episode, motion, noise)
    "small": (128, 96, 80, 150, 0, 10),
    "large": (640, 480, 24, 60, 2, 4),
    "wide": (128, 96, 1000, 12, 0, 10),
    "medium": (128, 96, 80, (60, 240), 0, 10),  # LeRobot medium's shape, feedline's writer
}
LEROBOT_DATASET = "lerobot-medium"  # written by LeRobot's own writer, cached in --cache-dir


def deltas() -> dict[str, list[float]]:
    return {key: [k / FPS for k in offsets] for key, offsets in WINDOW.items()}


# ---- the sequential-scan ceiling ---------------------------------------------------------------


def _scan_dataset(root: str, codec_threads: int = 0) -> Any:
    """The ceiling reader; ``codec_threads``: 0 leaves FFmpeg's automatic decoder threading (the
    issue's definition), 1 decodes on the worker's own thread."""
    import av
    import pyarrow.parquet as pq
    import torch
    from av.video.reformatter import VideoReformatter
    from torch.utils.data import IterableDataset, get_worker_info

    from feedline.episodes.format import load_meta
    from feedline.io import open_store

    class SequentialScan(IterableDataset):
        """Each worker decodes its episodes' frames once, in order, and windows them."""

        def __iter__(self):
            info = get_worker_info()
            worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
            meta = load_meta(open_store(root))
            table, tasks = meta.episodes, meta.tasks
            converter = VideoReformatter()
            containers: dict[str, Any] = {}
            rows_of: dict[str, Any] = {}
            try:
                for i in range(worker, len(table.episode_index), workers):
                    path = table.data_path[i]
                    if path not in rows_of:
                        rows_of[path] = pq.read_table(os.path.join(root, path))
                    rows = rows_of[path]
                    lo, hi = int(table.dataset_from_index[i]), int(table.dataset_to_index[i])
                    index = rows.column("index").to_numpy()
                    sel = np.flatnonzero((index >= lo) & (index < hi))
                    length = len(sel)
                    action = np.stack(rows.column("action").to_numpy(zero_copy_only=False)[sel])
                    state = np.stack(rows.column("observation.state").to_numpy(zero_copy_only=False)[sel])
                    scalars = {name: rows.column(name).to_numpy()[sel] for name in
                               ("timestamp", "frame_index", "episode_index", "index", "task_index")}
                    frames = {}
                    for key in CAMERAS:
                        video = table.video_path[key][i]
                        if video not in containers:
                            containers[video] = av.open(os.path.join(root, video))
                            if codec_threads:
                                containers[video].streams.video[0].codec_context.thread_count = codec_threads
                        frames[key] = self._decode(containers[video], converter,
                                                   float(table.from_timestamp[key][i]), length)
                    for f in range(length):
                        cam_rows = np.clip([f + d for d in WINDOW[CAMERAS[0]]], 0, length - 1)
                        act_rows = np.clip([f + d for d in WINDOW["action"]], 0, length - 1)
                        # CHW views stacked: numpy's fastest transposing copy (see assemble.frames_to_tensor)
                        high = np.stack([frames[CAMERAS[0]][r].transpose(2, 0, 1) for r in cam_rows])
                        low = np.stack([frames[CAMERAS[1]][f].transpose(2, 0, 1)])[0]
                        yield {
                            CAMERAS[0]: torch.from_numpy(high),
                            CAMERAS[1]: torch.from_numpy(low),
                            # every key the readers' samples have, so collate does the same work
                            "observation.state": torch.from_numpy(state[f]),
                            "action": torch.from_numpy(action[act_rows]),
                            **{name: torch.tensor(values[f]) for name, values in scalars.items()},
                            "task": tasks[int(scalars["task_index"][f])],
                            f"{CAMERAS[0]}_is_pad": torch.tensor([not 0 <= f + d < length for d in WINDOW[CAMERAS[0]]]),
                            "action_is_pad": torch.tensor([not 0 <= f + d < length for d in WINDOW["action"]]),
                        }
            finally:
                for container in containers.values():
                    container.close()

        @staticmethod
        def _decode(container: Any, converter: Any, start: float, length: int) -> list[np.ndarray]:
            stream = container.streams.video[0]
            container.seek(int(start / stream.time_base), stream=stream, backward=True)
            out: list[np.ndarray] = []
            for frame in container.decode(stream):
                k = round((frame.time - start) * FPS)
                if k < 0:
                    continue
                out.append(converter.reformat(frame, format="rgb24").to_ndarray())
                if len(out) == length:
                    break
            return out

    return SequentialScan()


# ---- measuring ---------------------------------------------------------------------------------


def timed_epochs(loader: Any, epochs: int = 1, track: Any = None,
                 lengths: list[int] | None = None) -> dict[str, Any]:
    """Samples/s of the first epoch, its first batch, and every batch wait (all epochs); with
    ``lengths`` (the dataset's episode lengths) also the batches' diversity, counted here."""
    from feedline.streaming.schedule.diversity import BatchDiversity

    diversity = BatchDiversity(loader.batch_size)
    waits: list[float] = []
    per_epoch: list[tuple[int, float]] = []
    first_batch = None
    for _ in range(epochs):
        if lengths:
            diversity.begin_epoch(len(lengths), sum(lengths))
        began = last = time.perf_counter()
        samples = 0
        for batch in (track(loader) if track else loader):
            now = time.perf_counter()
            waits.append(now - last)
            if first_batch is None:
                first_batch = now - began
            samples += len(batch["index"])
            if lengths:
                diversity.record(batch["episode_index"].numpy())
            last = time.perf_counter()
        per_epoch.append((samples, time.perf_counter() - began))
    samples, seconds = per_epoch[0]
    out = {"samples": samples, "seconds": seconds, "rate": samples / seconds,
           "first_batch_s": first_batch, "p95_wait_ms": 1e3 * float(np.percentile(waits, 95)),
           "epochs": per_epoch}
    if lengths:
        out["diversity"] = diversity.report().as_dict()
    return out


def episode_lengths(local: str) -> list[int]:
    from feedline.episodes.format import load_meta
    from feedline.io import open_store

    return [int(n) for n in load_meta(open_store(local)).episodes.length]


def run_sequential(local: str, args: argparse.Namespace, codec_threads: int = 0) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    loader = DataLoader(_scan_dataset(local, codec_threads), batch_size=args.batch_size, num_workers=args.workers,
                        prefetch_factor=4)
    with PssSampler() as pss:
        out = timed_epochs(loader, lengths=episode_lengths(local))
    return {**out, "pss_mib": pss.worker_peak_mib}


def run_map(local: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader

    from feedline.episodes import EpisodeDataset

    ds = EpisodeDataset(root=local, delta_timestamps=deltas(), return_uint8=True)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        prefetch_factor=4, generator=torch.Generator().manual_seed(0))
    with PssSampler() as pss:
        out = timed_epochs(loader, lengths=episode_lengths(local))
    return {**out, "pss_mib": pss.worker_peak_mib}


def run_streaming(url: str, args: argparse.Namespace, epochs: int = 2,
                  decoded_cache_gb: float | None = None, strategy: str | None = None) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    from feedline.episodes.stream.dataset import StreamingEpisodeDataset
    from feedline.streaming.schedule.diversity import DIVERSITY_METRICS

    extra: dict[str, Any] = {} if decoded_cache_gb is None else {"decoded_cache_gb": decoded_cache_gb}
    if strategy is not None:
        extra["sampling_strategy"] = strategy
    ds = StreamingEpisodeDataset(root=url, delta_timestamps=deltas(), return_uint8=True, **extra)
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers,
                        prefetch_factor=4, persistent_workers=True)
    with PssSampler() as pss:
        out = timed_epochs(loader, epochs, track=ds.track)
    metrics = ds.metrics()
    out["diversity"] = {key: metrics[key] for key in DIVERSITY_METRICS}
    del loader
    return {**out, "pss_mib": pss.worker_peak_mib, "metrics": metrics,
            "budget_mib": ds.rank_budget_bytes / args.workers / 2**20,
            "decoded_limit_mib": ds.decoded_cache_gb * 2**30 / args.workers / 2**20}


def run_mixture(urls: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The streaming reader over ``urls`` as one mixture, every frame once (one pool per worker
    mixing the sources' episodes), timed as :func:`run_streaming` times one dataset."""
    from torch.utils.data import DataLoader

    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

    ds = StreamingEpisodeDataset(sources=urls, delta_timestamps=deltas(), return_uint8=True)
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers,
                        prefetch_factor=4, persistent_workers=True)
    with PssSampler() as pss:
        out = timed_epochs(loader, 1, track=ds.track)
    del loader
    return {**out, "pss_mib": pss.worker_peak_mib}


def mixture_figure(server: Any, args: argparse.Namespace) -> str:
    """Three sources against the same frames written as one dataset, rounds interleaved."""
    from feedline.episodes.synth.writer import write_synthetic_dataset

    width, height, episodes, frames, motion, noise = DATASETS["small"]
    if args.quick:
        episodes, frames = 12, frames // 3
    common = dict(cameras=CAMERAS, fps=FPS, width=width, height=height, motion=motion,
                  noise=noise, vcodec="libsvtav1", frames_per_episode=frames)
    parts = [episodes // 3 + (i < episodes % 3) for i in range(3)]
    for i, n in enumerate(parts):
        write_synthetic_dataset(server.root / f"mix-{i}", episodes=n, **common)
    write_synthetic_dataset(server.root / "mix-one", episodes=episodes, **common)
    urls = [f"{server.url}/mix-{i}" for i in range(3)]
    one = f"{server.url}/mix-one"
    run_streaming(one, args, epochs=1)  # warm-up: sidecars, caches
    run_mixture(urls, args)
    rounds: dict[str, list[Any]] = {"one": [], "mixture": []}
    for round_no in range(max(1, args.repeats)):
        rounds["one"].append(run_streaming(one, args, epochs=1))
        rounds["mixture"].append(run_mixture(urls, args))
        print(f"  round {round_no + 1}: one dataset {rounds['one'][-1]['rate']:.0f}, mixture "
              f"{rounds['mixture'][-1]['rate']:.0f} samples/s", flush=True)
    one_run, mix_run = _median_run(rounds["one"]), _median_run(rounds["mixture"])
    ratio = _median_ratio(rounds["mixture"], rounds["one"])
    return (f"| {width}x{height}, {episodes} episodes x {frames} frames as 3 sources "
            f"({'+'.join(map(str, parts))} episodes) | {one_run['rate']:.0f} | "
            f"{mix_run['rate']:.0f} | x{ratio:.2f} | {one_run['pss_mib']:.0f} / "
            f"{mix_run['pss_mib']:.0f} MiB |")


def run_outage(server: Any, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """A clean epoch, then one through an outage of ``args.outage`` seconds (see the docstring)."""
    clean = run_streaming(url, args, epochs=1)
    stop_at = clean["seconds"] / 3

    def outage() -> None:
        time.sleep(stop_at)
        server.stop()
        time.sleep(args.outage)
        server.start()

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    hit = run_streaming(url, args, epochs=1)
    thread.join()
    return {"clean": clean, "outage": hit, "ratio": hit["rate"] / clean["rate"],
            "stopped_at_s": stop_at}


LEROBOT_SCRIPT = """
import json, sys, time, numpy as np, torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
root, deltas, workers, batch_size = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ds = LeRobotDataset("feedline/bench", root=root, delta_timestamps=deltas, return_uint8=True)
loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                     prefetch_factor=4, generator=torch.Generator().manual_seed(0))
began = last = time.perf_counter(); first = None; samples = 0; waits = []
for batch in loader:
    now = time.perf_counter(); waits.append(now - last)
    first = now - began if first is None else first
    samples += len(batch["index"]); last = time.perf_counter()
seconds = time.perf_counter() - began
print(json.dumps({"samples": samples, "seconds": seconds, "rate": samples / seconds,
                  "first_batch_s": first, "p95_wait_ms": 1e3 * float(np.percentile(waits, 95)),
                  "backend": getattr(ds, "_video_backend", None)}))
"""


def run_lerobot(local: str, args: argparse.Namespace) -> dict[str, Any] | None:
    if not args.lerobot_python:
        print("  lerobot: skipped (give --lerobot-python, a Python 3.12 venv with "
              "lerobot[dataset]==0.6.1 and the system FFmpeg)", flush=True)
        return None
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [args.lerobot_python, "-c", LEROBOT_SCRIPT, local, json.dumps(deltas()),
         str(args.workers), str(args.batch_size)],
        capture_output=True, text=True, env=env, check=False,
    )
    if done.returncode != 0:
        print(f"lerobot run failed:\n{done.stderr[-2000:]}", flush=True)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- datasets ----------------------------------------------------------------------------------


def write_dataset(name: str, root: Path, quick: bool, scale: int = 1) -> tuple[Path, str]:
    from feedline.episodes.synth.writer import write_synthetic_dataset

    width, height, episodes, frames, motion, noise = DATASETS[name]
    episodes *= scale
    if quick:
        episodes = max(4, episodes // 10)
        frames = tuple(f // 3 for f in frames) if isinstance(frames, tuple) else frames // 3
    spread = frames if isinstance(frames, tuple) else None
    if spread is not None:  # seeded lengths, as bench/lerobot_dataset.py draws them
        frames = np.random.default_rng(0).integers(spread[0], spread[1] + 1, episodes).tolist()
    common = dict(cameras=CAMERAS, fps=FPS, width=width, height=height, motion=motion,
                  noise=noise, vcodec="libsvtav1")
    mean = int(np.mean(frames))
    probe = write_synthetic_dataset(root / f"{name}-probe", episodes=1, frames_per_episode=mean,
                                    **common)
    per_episode = sum(f.stat().st_size for f in probe.root.rglob("*.mp4")) / len(CAMERAS)
    per_episode *= (sum(frames) / episodes if spread else frames) / mean
    file_mb = per_episode * episodes / 6 / 2**20  # about 6 MP4 files per camera
    write_synthetic_dataset(root / name, episodes=episodes, frames_per_episode=frames,
                            video_files_size_in_mb=file_mb, **common)
    files = len(list((root / name / "videos" / CAMERAS[0]).rglob("*.mp4")))
    kb = per_episode * episodes / (sum(frames) if spread else frames * episodes) / 1024
    shown = f"{spread[0]}-{spread[1]}" if spread else frames
    return root / name, (f"{width}x{height}, {episodes} episodes x {shown} frames, "
                         f"{len(CAMERAS)} cameras, {files} MP4 files per camera, {kb:.1f} KB/frame")


def lerobot_dataset(root: Path, args: argparse.Namespace) -> tuple[Path, str] | None:
    """LeRobot's medium dataset, written once by LeRobot's own writer into ``--cache-dir``, then
    copied under the nginx root (``None`` with a note when it is not cached and no LeRobot
    Python is given)."""
    cached = Path(args.cache_dir) / LEROBOT_DATASET
    if not (cached / "meta" / "info.json").exists():
        if not args.lerobot_python:
            print(f"{LEROBOT_DATASET}: skipped (not in {cached}; give --lerobot-python to write it)",
                  flush=True)
            return None
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "HF_LEROBOT_HOME": str(Path(args.cache_dir) / "lerobot-home")}
        env.pop("PYTHONPATH", None)
        print(f"{LEROBOT_DATASET}: writing it with LeRobot's writer into {cached} (once)", flush=True)
        subprocess.run([args.lerobot_python, str(ROOT / "bench" / "lerobot_dataset.py"), str(cached)],
                       env=env, check=True, capture_output=True)
    target = root / LEROBOT_DATASET
    shutil.copytree(cached, target)
    lengths = episode_lengths(str(target))
    files = [len(list((target / "videos" / camera).rglob("*.mp4"))) for camera in CAMERAS]
    kb = sum(f.stat().st_size for f in (target / "videos").rglob("*.mp4")) / len(CAMERAS) / sum(lengths) / 1024
    return target, (f"LeRobot 0.6.1's writer, 128x96, {len(lengths)} episodes x {min(lengths)}-"
                    f"{max(lengths)} frames ({sum(lengths)}), {len(CAMERAS)} cameras, "
                    f"{'/'.join(map(str, files))} MP4 files per camera, {kb:.1f} KB/frame")


def diversity_rows(name: str, results: dict[str, Any], ideal: dict[str, float]) -> list[str]:
    """One Markdown row per reader that counted diversity, each figure beside the ideal's."""
    keys = ("batch_episodes_mean", "batch_episodes_p5", "batch_episodes_min",
            "window_episodes_mean", "early_episode_share")
    rows = [f"| {name} | ideal global shuffle | "
            + " | ".join(f"{ideal[k]:.2f}" for k in keys) + " | - |"]
    for kind, result in results.items():
        if result is None or "diversity" not in result:
            continue
        d = result["diversity"]
        cells = [f"{d[k]:.2f} ({d[k] / ideal[k]:.0%})" if ideal[k] else f"{d[k]:.2f}" for k in keys]
        rows.append(f"| {name} | {kind} | " + " | ".join(cells) + f" | {result['rate']:.0f} |")
    return rows


def _median_run(runs: list[Any]) -> Any:
    """The run with the median rate (``None`` when the reader was not run)."""
    done = sorted((r for r in runs if r is not None), key=lambda r: r["rate"])
    return done[len(done) // 2] if done else None


def _median_ratio(top: list[Any], bottom: list[Any]) -> float:
    """Median over rounds of ``top`` rate / ``bottom`` rate (each round's pair ran back to back)."""
    ratios = [a["rate"] / b["rate"] for a, b in zip(top, bottom, strict=True) if a and b]
    return float(np.median(ratios))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=f"small,large,{LEROBOT_DATASET},wide",
                        help=f"of {', '.join([*DATASETS, LEROBOT_DATASET])}")
    parser.add_argument("--cache-dir", default=str(Path(os.environ.get(
                            "XDG_CACHE_HOME", Path.home() / ".cache")) / "feedline-bench"),
                        help=f"where the {LEROBOT_DATASET} dataset is written once and kept")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lerobot-python", default=None,
                        help="python of a venv with lerobot[dataset]==0.6.1 (the LeRobot column)")
    parser.add_argument("--decoded-cache-gb", default="2,0.25,0.06,0",
                        help="streaming limits measured on the large dataset")
    parser.add_argument("--quick", action="store_true", help="small datasets, a smoke run")
    parser.add_argument("--outage", type=float, default=None, metavar="S",
                        help="only the outage figure: nginx stopped for S s mid-epoch")
    parser.add_argument("--mixture", action="store_true",
                        help="only the mixture figure: three sources against one dataset")
    parser.add_argument("--episodes-x", type=int, default=1, metavar="K",
                        help="K times each dataset's episodes (a longer epoch, e.g. for --outage)")
    parser.add_argument("--ranks", type=int, default=None, metavar="N",
                        help="only the ranks figure: N rank processes at once against one alone")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of every reader, interleaved; medians (and the median of "
                             "each round's ratios) are reported, which a noisy machine needs")
    args = parser.parse_args()

    from tests.servers import run_nginx

    from feedline.episodes.settings import DEFAULTS
    from feedline.streaming.schedule.diversity import ideal_diversity
    from feedline.streaming.schedule.pool import STRATEGIES

    rows: list[str] = []
    diversity: list[str] = []
    with tempfile.TemporaryDirectory(prefix="feedline-bench-streaming-") as tmp:
        work = Path(tmp)
        os.environ["FEEDLINE_HOME"] = str(work / "home")  # cold, private sidecar cache
        with run_nginx(work / "nginx") as server:
            if args.mixture:
                row = mixture_figure(server, args)
                print("\n| frames | one dataset, samples/s | three-source mixture | mixture / one "
                      "| peak PSS per worker (one / mixture) |\n|---|---|---|---|---|\n" + row)
                return 0
            for name in args.datasets.split(","):
                if name == LEROBOT_DATASET:
                    prepared = lerobot_dataset(server.root, args)
                    if prepared is None:
                        continue
                    local, shape = prepared
                else:
                    local, shape = write_dataset(name, server.root, args.quick, args.episodes_x)
                url = f"{server.url}/{name}"
                print(f"{name}: {shape}", flush=True)
                run_streaming(url, args, epochs=1)  # warm-up: builds the sidecar, warms caches
                if args.ranks:
                    from bench.ranks import ranks_row, run_ranks

                    alone = run_ranks(url, 1, args.workers, args.batch_size, deltas())[0]
                    ranks = run_ranks(url, args.ranks, args.workers, args.batch_size, deltas())
                    print(f"  alone: {json.dumps(alone)}\n  {args.ranks} ranks: {json.dumps(ranks)}",
                          flush=True)
                    rows.append(ranks_row(name, shape, alone, ranks))
                    continue
                if args.outage is not None:
                    out = run_outage(server, url, args)
                    clean, hit = out["clean"], out["outage"]
                    rows.append(
                        f"| {name}: {shape} | {clean['rate']:.0f} ({clean['seconds']:.1f} s) | "
                        f"{hit['rate']:.0f} ({hit['seconds']:.1f} s) | x{out['ratio']:.2f} |"
                    )
                    print(f"  outage {args.outage:g} s at {out['stopped_at_s']:.1f} s: "
                          f"{json.dumps(out, default=str)}", flush=True)
                    continue
                rounds: dict[str, list[Any]] = {}
                runs = {"sequential": (run_sequential, str(local)),
                        "sequential-1t": (lambda where, a: run_sequential(where, a, 1), str(local)),
                        "streaming": (run_streaming, url),
                        **{f"streaming-{strategy}": (
                            lambda where, a, strategy=strategy: run_streaming(where, a, strategy=strategy), url)
                           for strategy in STRATEGIES if strategy != DEFAULTS.sampling_strategy},
                        "map-style": (run_map, str(local)), "lerobot": (run_lerobot, str(local))}
                for round_no in range(max(1, args.repeats)):
                    for kind, (run, where) in runs.items():
                        result = run(where, args)
                        rounds.setdefault(kind, []).append(result)
                        if result is not None:
                            print(f"  {kind} (round {round_no + 1}): {json.dumps(result, default=str)}",
                                  flush=True)
                results = {kind: _median_run(runs_of) for kind, runs_of in rounds.items()}
                ideal = ideal_diversity(episode_lengths(str(local)), args.batch_size).as_dict()
                named = {(f"streaming-{DEFAULTS.sampling_strategy}" if kind == "streaming" else kind): r
                         for kind, r in results.items() if kind != "sequential-1t"}
                diversity += diversity_rows(name, named, ideal)
                seq, stream = results["sequential"], results["streaming"]
                lerobot = results["lerobot"]
                m = stream["metrics"]
                vs_scan = _median_ratio(rounds["streaming"], rounds["sequential"])
                seq1 = results["sequential-1t"]
                vs_scan1 = _median_ratio(rounds["streaming"], rounds["sequential-1t"])
                vs_lerobot = _median_ratio(rounds["streaming"], rounds["lerobot"]) if lerobot else None
                rows.append(
                    f"| {name}: {shape} | {seq['rate']:.0f} | {seq1['rate']:.0f} | {stream['rate']:.0f} "
                    f"(x{vs_scan:.2f}; x{vs_scan1:.2f} of 1 thread) | {results['map-style']['rate']:.0f} | "
                    + (f"{lerobot['rate']:.0f} | x{vs_lerobot:.2f}"
                       if lerobot else "not run (see above) | -")
                    + f" | {stream['first_batch_s']:.2f} s | {stream['p95_wait_ms']:.1f} ms | "
                    f"{m['decoded_per_delivered']:.2f} | {stream['pss_mib']:.0f} MiB "
                    f"(seq {seq['pss_mib']:.0f}, map {results['map-style']['pss_mib']:.0f}) |"
                )
                if name == "large":
                    for limit in (float(v) for v in args.decoded_cache_gb.split(",")):
                        run = run_streaming(url, args, epochs=1, decoded_cache_gb=limit)
                        m = run["metrics"]
                        print(f"  decoded_cache_gb={limit:g}: {run['rate']:.1f} samples/s, "
                              f"x{run['rate'] / seq['rate']:.2f} of sequential, decoded/delivered "
                              f"{m['decoded_per_delivered']:.2f}, peak decoded "
                              f"{m['peak_decoded_bytes'] / 2**20:.0f} MiB per worker, peak PSS "
                              f"{run['pss_mib']:.0f} MiB per worker", flush=True)
    print()
    if args.ranks:
        print(f"| dataset | one rank alone, samples/s | each of {args.ranks} ranks (vs alone) "
              f"| all {args.ranks} ranks | batches per rank | anchors repeated to even out |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            print(row)
        return 0
    if args.outage is not None:
        print(f"| dataset | streaming, clean epoch | streaming, nginx down {args.outage:g} s "
              "| outage / clean |")
        print("|---|---|---|---|")
        for row in rows:
            print(row)
        return 0
    print("| dataset | sequential scan | scan, 1 codec thread | streaming (vs scan) | map-style "
          "| LeRobot 0.6.1 map-style "
          "| streaming vs LeRobot | first batch | p95 batch wait (2 epochs) | decoded/delivered "
          "| peak PSS per worker |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    print()
    print("| dataset | reader | episodes per batch (vs ideal) | p5 | min | episodes per 10 batches "
          "| episodes seen by 10 % of the epoch | samples/s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in diversity:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
