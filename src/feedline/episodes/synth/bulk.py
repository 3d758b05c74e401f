"""Write LeRobot-shaped v3 datasets of 100,000 to 1,000,000 short episodes in minutes.

Why a second writer: :func:`~feedline.episodes.synth.writer.write_synthetic_dataset` follows
LeRobot's recorder step by step (one encode and one concatenating remux per episode and camera),
which is right for checking quirks but costs O(episodes x file size); it stops at 2,000
episodes. Scale tests and benchmarks need DROID-sized roots (92,000 episodes and more) with the
same layout LeRobot writes: chunk/file rollover, one data row group per episode, per-episode
stats in ``meta/episodes``, many episodes per MP4.

How it stays fast: each camera's pictures are a few *templates*, one per (length, variant),
encoded once with H.264 (libx264, no B-frames, an IDR frame at each template's start). Every
episode's packets are a copy of its template's packets, muxed (not encoded) one after another
into the camera's MP4 with timestamps that run on through the file, so every episode starts on
a keyframe and decodes to real frames at ``from_timestamp + frame / fps``. Data rows, stats and
``meta/episodes`` are built with numpy per file. Files are independent, so a spawn pool writes
one file group (data file, its MP4s and its ``meta/episodes`` file) per item.

What the pixels say: a frame is ``identity_frame(camera, template_id(episode, length), frame)``,
so :func:`~feedline.episodes.synth.identity.decode_identity` gives the camera, the template (which
names the length) and the frame index. ``observation.state`` is
:func:`~feedline.episodes.synth.identity.state_vector` of ``episode % 16384`` (float32 stays exact).
Per-episode stats are ``min/max/mean/std/count`` (LeRobot also writes quantiles; they are left
out here, none of the readers needs them).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from feedline.episodes.format import (
    CODEBASE_VERSION,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_DATA_PATH,
    DEFAULT_VIDEO_PATH,
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
)
from feedline.episodes.synth.identity import STATE_DIM, SynthError, identity_frame
from feedline.episodes.synth.writer import (
    DEFAULT_TASKS,
    PAGE_CRCS,
    _features,
    _hf_features_json,
    tasks_table,
)
from feedline.run.pool import pool_map
from feedline.run.progress import Progress

__all__ = ["BulkDataset", "file_of_episode", "template_id", "write_bulk_dataset"]

#: The identity grid holds 14 bits for the "episode" field; the template id must fit in it.
MAX_FRAMES = 64
MAX_VARIANTS = 64
STATE_PERIOD = 16384  # state values repeat every this many episodes (float32 stays exact)
BULK_STATS = ("min", "max", "mean", "std", "count")
SPAWN_FROM_EPISODES = 20_000  # the default ``workers`` writes smaller datasets in this process


def file_of_episode(
    episode: int | np.ndarray, episodes_per_file: int, chunks_size: int = DEFAULT_CHUNK_SIZE
) -> tuple[Any, Any]:
    """``(chunk_index, file_index)`` of an episode's data file, MP4s and ``meta/episodes`` file.

    Files hold ``episodes_per_file`` consecutive episodes; a chunk folder holds ``chunks_size``
    files, then the next chunk starts at file 0 (LeRobot's ``update_chunk_file_indices``).
    Works on arrays too.
    """
    n = np.asarray(episode) // episodes_per_file
    chunk, file = n // chunks_size, n % chunks_size
    if np.ndim(chunk) == 0:
        return int(chunk), int(file)
    return chunk, file


def template_id(episode: int | np.ndarray, length: int | np.ndarray, variants: int) -> Any:
    """The template an episode's pictures copy: one per (length, ``episode % variants``)."""
    return np.asarray(length) * variants + np.asarray(episode) % variants


@dataclass
class BulkDataset:
    """What :func:`write_bulk_dataset` wrote; tests compare readers against it.

    Args:
        root: the dataset folder.
        fps: frames per second.
        episode_lengths: frames of each episode, by episode index.
        camera_keys: the video features.
        episodes_per_file: episodes in each data file, MP4 and ``meta/episodes`` file.
        chunks_size: files per chunk folder.
        variants: templates per length (see :func:`template_id`).
        tasks: the task strings; episode ``e`` has task ``tasks[e % len(tasks)]``.
        data_files: the data Parquet files, relative to ``root``. Default empty.
    """

    root: Path
    fps: int
    episode_lengths: np.ndarray
    camera_keys: list[str]
    episodes_per_file: int
    chunks_size: int
    variants: int
    tasks: list[str]
    data_files: list[str] = field(default_factory=list)

    @property
    def total_frames(self) -> int:
        """Frames of every episode."""
        return int(self.episode_lengths.sum())

    @property
    def episode_from_index(self) -> np.ndarray:
        """Global ``index`` of each episode's first frame."""
        return np.concatenate([[0], np.cumsum(self.episode_lengths)[:-1]]).astype(np.int64)

    def expected_identity(self, camera: int, episode: int, frame: int) -> tuple[int, int, int]:
        """What ``decode_identity`` must read from that decoded frame."""
        length = int(self.episode_lengths[episode])
        return camera, int(template_id(episode, length, self.variants)), frame


@dataclass(frozen=True)
class _Group:
    """One file group: the episodes of one data file, its MP4s and its meta/episodes file."""

    chunk: int
    file: int
    first_episode: int
    from_index: int
    lengths: np.ndarray
    stage: str
    templates: list[str]  # per camera, the templates' MP4
    camera_keys: list[str]
    fps: int
    variants: int
    n_tasks: int
    tasks: list[str]
    state_dim: int
    image_stats: dict[int, np.ndarray]  # template id -> per camera (min, max, mean, std) x 3
    meta_row_group_size: int


def _encode_templates(
    path: Path, camera: int, keys: Sequence[tuple[int, int]], fps: int, width: int, height: int,
    enc: dict[str, str], noise: int,
) -> dict[int, np.ndarray]:
    """Encode camera ``camera``'s templates into one MP4 (one encoder session: one SPS/PPS for
    the whole file, so any mix of them muxes into one stream); return each one's image stats."""
    stats: dict[int, np.ndarray] = {}
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = enc
        for length, tid in keys:
            pixels = []
            for f in range(length):
                image = identity_frame(camera, tid, f, height=height, width=width, noise=noise)
                pixels.append(image[:, :, 0])
                frame = av.VideoFrame.from_ndarray(image, format="rgb24")
                if f == 0:  # every template (so every episode) starts on an IDR frame
                    frame.pict_type = av.video.frame.PictureType.I
                for packet in stream.encode(frame):
                    container.mux(packet)
            gray = np.stack(pixels).astype(np.float64) / 255.0  # the three channels are equal
            stats[tid] = np.array([gray.min(), gray.max(), gray.mean(), gray.std()])
        for packet in stream.encode():
            container.mux(packet)
    return stats


def _template_packets(path: str) -> tuple[Any, dict[int, list[tuple[bytes, bool]]]]:
    """The opened templates' MP4 (its stream is the muxing template) and each template's packets,
    in the (template id, length) order stored beside it."""
    keys = json.loads(Path(path + ".json").read_text())
    source = av.open(path)
    stream = source.streams.video[0]
    packets = [(bytes(p), bool(p.is_keyframe)) for p in source.demux(stream) if p.dts is not None]
    out: dict[int, list[tuple[bytes, bool]]] = {}
    at = 0
    for tid, length in keys:
        out[tid] = packets[at : at + length]
        if not out[tid] or not out[tid][0][1] or len(out[tid]) != length:
            raise SynthError(f"{path}: template {tid} did not encode to {length} packets from a keyframe")
        at += length
    return source, out


def _write_video(group: _Group, camera: int, tids: np.ndarray, report: Callable[[int], None]) -> None:
    """Mux the group's episodes of one camera into one faststart MP4, template copy by copy."""
    key = group.camera_keys[camera]
    path = Path(group.stage) / DEFAULT_VIDEO_PATH.format(
        video_key=key, chunk_index=group.chunk, file_index=group.file
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    source, packets = _template_packets(group.templates[camera])
    step = Fraction(1, group.fps)
    try:
        with av.open(str(path), "w", format="mp4", options={"movflags": "faststart"}) as sink:
            stream = sink.add_stream_from_template(template=source.streams.video[0], opaque=True)
            stream.time_base = source.streams.video[0].time_base
            pts = 0
            for i, tid in enumerate(tids.tolist()):
                for data, keyframe in packets[tid]:
                    packet = av.Packet(data)
                    packet.pts = packet.dts = pts
                    packet.duration = 1
                    packet.time_base = step
                    packet.is_keyframe = keyframe
                    packet.stream = stream
                    sink.mux(packet)
                    pts += 1
                if camera == 0 and i % 1000 == 999:
                    report(1000)
    finally:
        source.close()


def _list_column(values: np.ndarray) -> pa.Array:
    """``[n, *shape]`` float64/int64 values as nested Arrow lists (LeRobot's stats columns)."""
    flat = pa.array(values.reshape(-1))
    for size in reversed(values.shape[1:]):
        n = len(flat) // size
        flat = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * size), flat)
    return flat


def _segment_stats(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Per-episode min/max/mean/std/count of ``[rows, dim]`` values, episodes back to back."""
    values = values.astype(np.float64)
    total = np.add.reduceat(values, starts, axis=0)
    squares = np.add.reduceat(values * values, starts, axis=0)
    mean = total / lengths[:, None]
    return {
        "min": np.minimum.reduceat(values, starts, axis=0),
        "max": np.maximum.reduceat(values, starts, axis=0),
        "mean": mean,
        "std": np.sqrt(np.maximum(squares / lengths[:, None] - mean * mean, 0.0)),
        "count": lengths.astype(np.int64)[:, None],
    }


def _write_group(group: _Group, report: Callable[[int], None]) -> dict[str, dict[str, np.ndarray]]:
    """Write one file group; return its features' sums for ``meta/stats.json``."""
    lengths = group.lengths.astype(np.int64)
    n_eps, rows = len(lengths), int(lengths.sum())
    episodes = group.first_episode + np.arange(n_eps, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    episode = np.repeat(episodes, lengths)
    frame = np.arange(rows, dtype=np.int64) - np.repeat(starts, lengths)
    task_index = episodes % group.n_tasks
    dim = group.state_dim
    state = ((episode % STATE_PERIOD) * 1000 + frame)[:, None] + np.arange(dim) / 8
    columns: dict[str, np.ndarray] = {
        "observation.state": state.astype(np.float32),
        "action": (state + 0.5).astype(np.float32),
        "timestamp": (frame / group.fps).astype(np.float32),
        "frame_index": frame,
        "episode_index": episode,
        "index": group.from_index + np.arange(rows, dtype=np.int64),
        "task_index": np.repeat(task_index, lengths),
    }

    def arrow(name: str, values: np.ndarray) -> pa.Array:
        if values.ndim == 2:
            return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), dim)
        return pa.array(values)

    table = pa.table({k: arrow(k, v) for k, v in columns.items()})
    table = table.replace_schema_metadata({b"huggingface": _schema_meta(group)})
    data_path = DEFAULT_DATA_PATH.format(chunk_index=group.chunk, file_index=group.file)
    (Path(group.stage) / data_path).parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(Path(group.stage) / data_path, table.schema, **PAGE_CRCS) as writer:
        for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
            writer.write_table(table.slice(start, length), row_group_size=length)  # one per episode

    tids = template_id(episodes, lengths, group.variants)
    for camera in range(len(group.camera_keys)):
        _write_video(group, camera, tids, report)

    from_ts = starts / group.fps
    meta: dict[str, pa.Array] = {
        "episode_index": pa.array(episodes),
        "tasks": pa.ListArray.from_arrays(
            pa.array(np.arange(n_eps + 1, dtype=np.int32)),
            pa.array(np.asarray(group.tasks, dtype=object)[task_index].tolist(), pa.string()),
        ),
        "length": pa.array(lengths),
        "data/chunk_index": pa.array(np.full(n_eps, group.chunk, np.int64)),
        "data/file_index": pa.array(np.full(n_eps, group.file, np.int64)),
        "dataset_from_index": pa.array(group.from_index + starts),
        "dataset_to_index": pa.array(group.from_index + starts + lengths),
    }
    for key in group.camera_keys:
        meta[f"videos/{key}/chunk_index"] = pa.array(np.full(n_eps, group.chunk, np.int64))
        meta[f"videos/{key}/file_index"] = pa.array(np.full(n_eps, group.file, np.int64))
        meta[f"videos/{key}/from_timestamp"] = pa.array(from_ts)
        meta[f"videos/{key}/to_timestamp"] = pa.array(from_ts + lengths / group.fps)
    sums: dict[str, dict[str, np.ndarray]] = {}
    for camera, key in enumerate(group.camera_keys):
        per = np.stack([group.image_stats[int(t)][camera] for t in tids.tolist()])  # [n, 4]
        for j, name in enumerate(("min", "max", "mean", "std")):
            meta[f"stats/{key}/{name}"] = _list_column(np.repeat(per[:, j, None], 3, axis=1).reshape(-1, 3, 1, 1))
        meta[f"stats/{key}/count"] = _list_column(lengths[:, None])
        mean, std = per[:, 2], per[:, 3]
        sums[key] = _sums(per[:, 0].min(), per[:, 1].max(), mean * lengths, (std**2 + mean**2) * lengths, rows)
    for name, values in columns.items():
        values2 = values.reshape(rows, -1)
        stats = _segment_stats(values2, starts, lengths)
        for stat in BULK_STATS:
            meta[f"stats/{name}/{stat}"] = _list_column(stats[stat])
        w = lengths[:, None]
        sums[name] = _sums(
            stats["min"].min(axis=0), stats["max"].max(axis=0), stats["mean"] * w,
            (stats["std"] ** 2 + stats["mean"] ** 2) * w, rows,
        )
    meta["meta/episodes/chunk_index"] = pa.array(np.full(n_eps, group.chunk, np.int64))
    meta["meta/episodes/file_index"] = pa.array(np.full(n_eps, group.file, np.int64))
    meta_path = Path(group.stage) / EPISODES_PATH.format(chunk_index=group.chunk, file_index=group.file)
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(meta), meta_path, row_group_size=group.meta_row_group_size, **PAGE_CRCS)
    report(n_eps % 1000)
    return sums


def _schema_meta(group: _Group) -> bytes:
    """The ``huggingface`` features JSON of the data files (LeRobot's ``datasets`` schema)."""
    return _hf_features_json(_features([], 1, 1, group.fps, {}, group.state_dim)).encode()


def _sums(lo: Any, hi: Any, weighted_mean: np.ndarray, weighted_square: np.ndarray, rows: int) -> dict[str, np.ndarray]:
    return {
        "min": np.atleast_1d(lo), "max": np.atleast_1d(hi),
        "sum": np.atleast_1d(weighted_mean.sum(axis=0)),
        "squares": np.atleast_1d(weighted_square.sum(axis=0)), "count": np.array([rows]),
    }


def _merge(parts: list[dict[str, dict[str, np.ndarray]]], camera_keys: list[str]) -> dict[str, dict[str, list]]:
    """``meta/stats.json`` from every group's sums: min of mins, pooled mean and std."""
    out: dict[str, dict[str, list]] = {}
    for feature in parts[0]:
        lo = np.min([p[feature]["min"] for p in parts], axis=0)
        hi = np.max([p[feature]["max"] for p in parts], axis=0)
        count = int(sum(int(p[feature]["count"][0]) for p in parts))
        mean = np.sum([p[feature]["sum"] for p in parts], axis=0) / count
        std = np.sqrt(np.maximum(np.sum([p[feature]["squares"] for p in parts], axis=0) / count - mean**2, 0))
        if feature in camera_keys:  # images: (3, 1, 1) per stat, as LeRobot stores them
            lo, hi, mean, std = (np.full((3, 1, 1), float(np.asarray(v).reshape(-1)[0])) for v in (lo, hi, mean, std))
        out[feature] = {"min": lo.tolist(), "max": hi.tolist(), "mean": mean.tolist(),
                        "std": std.tolist(), "count": [count]}
    return out


def write_bulk_dataset(
    root: str | os.PathLike[str],
    *,
    episodes: int = 100_000,
    min_frames: int = 8,
    max_frames: int = 24,
    cameras: int = 2,
    fps: int = 10,
    width: int = 64,
    height: int = 48,
    episodes_per_file: int = 5000,
    chunks_size: int = DEFAULT_CHUNK_SIZE,
    variants: int = 4,
    noise: int = 0,
    tasks: Sequence[str] = DEFAULT_TASKS,
    seed: int = 0,
    gop: int = 2,
    crf: int = 23,
    preset: str = "ultrafast",
    meta_row_group_size: int = 10,
    state_dim: int = STATE_DIM,
    robot_type: str = "synthetic",
    workers: int | None = None,
    progress: bool | None = None,
) -> BulkDataset:
    """Write a LeRobot v3 dataset of ``episodes`` short episodes under ``root`` (must not exist).

    ``gop`` is the keyframe interval (2, LeRobot's default); every episode starts on an IDR
    frame whatever it is. Episode lengths are drawn uniformly from ``[min_frames, max_frames]`` with ``seed``.
    ``episodes_per_file`` consecutive episodes share a data file (one row group each), one MP4
    per camera and a ``meta/episodes`` file (``meta_row_group_size`` rows per row group, as
    LeRobot's metadata buffer flushes ten). ``workers`` spawned processes write file groups in
    parallel (default: every core from 20,000 episodes on, else this process; a script that
    spawns must guard its entry point with ``if __name__ == "__main__":``). ``progress`` shows a bar on a terminal (default) or log lines.
    Everything is written in a sibling temporary folder and renamed into place at the end, so
    a failure never leaves a half-written dataset.
    """
    root = Path(root)
    if episodes < 1 or episodes_per_file < 1 or chunks_size < 1:
        raise SynthError("episodes, episodes_per_file and chunks_size must be positive")
    if not 1 <= min_frames <= max_frames <= MAX_FRAMES:
        raise SynthError(f"need 1 <= min_frames <= max_frames <= {MAX_FRAMES}, got {min_frames}..{max_frames}")
    if not 1 <= variants <= MAX_VARIANTS or not 1 <= cameras <= 16 or not tasks:
        raise SynthError(f"need 1..{MAX_VARIANTS} variants, 1..16 cameras and at least one task")
    if gop < 1:
        raise SynthError(f"gop must be positive, got {gop}")
    if width < 32 or height < 24 or width % 2 or height % 2:
        raise SynthError(f"frame size {width}x{height}: need even sizes of at least 32x24")
    if root.exists():
        raise SynthError(f"{root}: already exists; the bulk writer only creates new datasets")
    lengths = np.random.default_rng(seed).integers(min_frames, max_frames + 1, episodes).astype(np.int64)
    camera_keys = [f"observation.images.cam_{i}" for i in range(cameras)]
    result = BulkDataset(root, fps, lengths, camera_keys, episodes_per_file, chunks_size, variants, list(tasks))
    root.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        _write(stage, result, width, height, noise, gop, crf, preset, meta_row_group_size,
               state_dim, robot_type, workers, progress)
        os.replace(stage, root)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return result


def _write(
    stage: Path, result: BulkDataset, width: int, height: int, noise: int, gop: int, crf: int,
    preset: str,
    meta_row_group_size: int, state_dim: int, robot_type: str, workers: int | None,
    progress: bool | None,
) -> None:
    lengths, fps, variants = result.episode_lengths, result.fps, result.variants
    episodes = len(lengths)
    enc = {"g": str(gop), "bf": "0", "crf": str(crf), "preset": preset, "forced-idr": "1",
           "x264-params": "scenecut=0"}
    keys = sorted({(int(length) * variants + v, int(length)) for length in np.unique(lengths)
                   for v in range(min(variants, episodes))})
    scratch = stage / ".scratch"
    scratch.mkdir()
    templates, image_stats = [], {tid: np.zeros((len(result.camera_keys), 4)) for tid, _ in keys}
    for camera in range(len(result.camera_keys)):
        path = scratch / f"templates-{camera}.mp4"
        stats = _encode_templates(path, camera, [(n, t) for t, n in keys], fps, width, height, enc, noise)
        Path(str(path) + ".json").write_text(json.dumps(keys))
        templates.append(str(path))
        for tid, values in stats.items():
            image_stats[tid][camera] = values
    from_index = result.episode_from_index
    groups = []
    for first in range(0, episodes, result.episodes_per_file):
        chunk, file = file_of_episode(first, result.episodes_per_file, result.chunks_size)
        part = lengths[first : first + result.episodes_per_file]
        used = {int(t) for t in np.unique(template_id(np.arange(first, first + len(part)), part, variants))}
        groups.append(_Group(
            chunk, file, first, int(from_index[first]), part, str(stage), templates,
            result.camera_keys, fps, variants, len(result.tasks), result.tasks, state_dim,
            {t: image_stats[t] for t in used}, meta_row_group_size,
        ))
        result.data_files.append(DEFAULT_DATA_PATH.format(chunk_index=chunk, file_index=file))
    if workers is None:  # a spawn pool costs ~1 s of imports per worker: only worth it when large
        workers = (os.cpu_count() or 1) if episodes >= SPAWN_FROM_EPISODES else 1
    processes = min(workers, len(groups))
    with Progress("bulk write", total=episodes, unit="episode", enabled=progress) as bar:
        parts = list(pool_map(_write_group, groups, processes=processes, progress=bar.update,
                              describe=lambda g: f"file group chunk-{g.chunk:03d}/file-{g.file:03d}"))
    shutil.rmtree(scratch)
    pq.write_table(tasks_table(result.tasks), stage / TASKS_PATH, **PAGE_CRCS)
    (stage / STATS_PATH).write_text(json.dumps(_merge(parts, result.camera_keys), indent=4))
    video_info = {
        "video.height": height, "video.width": width, "video.codec": "h264",
        "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": fps,
        "video.channels": 3, "video.g": gop, "video.crf": crf, "video.preset": preset,
        "video.fast_decode": 0, "video.video_backend": "pyav",
        "video.extra_options": {"bf": 0}, "has_audio": False,
    }
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": episodes,
        "total_frames": int(lengths.sum()),
        "total_tasks": len(result.tasks),
        "chunks_size": result.chunks_size,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": DEFAULT_DATA_PATH,
        "video_path": DEFAULT_VIDEO_PATH,
        "features": _features(result.camera_keys, height, width, fps, video_info, state_dim),
    }
    (stage / INFO_PATH).write_text(json.dumps(info, indent=4))
