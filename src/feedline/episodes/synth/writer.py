"""Write small but real LeRobot v3 datasets, the way LeRobot 0.6.x's recorder writes them.

Tests, benchmarks and the demo need datasets whose every decoded frame can be identified, written
with the same encoder settings, file layout and quirks as LeRobot's own writer: PyAV-encoded MP4s
(AV1 GOP 2 by default, or H.264 with B-frames), one temporary MP4 per episode that either starts a
new file (moov at the end) or is stream-copy concatenated onto the current one (faststart), file
rollover by size, one data Parquet row group per episode, ``meta/episodes`` with per-camera
``from/to_timestamp`` measured from the encoded durations, tasks and stats columns. One departure:
every Parquet page carries a CRC-32 (LeRobot's writer stores none), so tests cover the reader's
page checks.

Pixels carry ``(camera, episode, frame)`` as big black/white cells with a checksum, so
:func:`decode_identity` reads any decoded frame back despite lossy compression.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
from feedline.episodes.synth.identity import (
    CAMERA_BITS,
    EPISODE_BITS,
    STATE_DIM,
    SynthError,
    action_vector,
    decode_identity,
    identity_frame,
    row_identity,
    state_vector,
)
from feedline.episodes.synth.video import (
    encode_episode,
    encoder_settings,
    stream_copy_concat,
    video_duration_s,
)

STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
DEFAULT_TASKS = ("pick up the red cube", "place the cube in the bin", "open the drawer")
#: Every Parquet file written stores a CRC-32 per page, which the reader verifies.
PAGE_CRCS = {"write_page_checksum": True}

# --------------------------------------------------------------------------------------------
# The writer
# --------------------------------------------------------------------------------------------


@dataclass
class SyntheticDataset:
    """What :func:`write_synthetic_dataset` wrote; tests compare readers against it.

    Args:
        root: the dataset folder.
        fps: frames per second.
        episode_lengths: frames of each episode, by episode index.
        camera_keys: the video features.
        episode_tasks: each episode's task string.
        vcodec: the encoder used (``libsvtav1`` or ``h264``).
        data_files: the data Parquet files, relative to ``root``. Default empty.
        video_files: per camera key, its MP4 files, relative to ``root``. Default empty.
        episodes_files: the ``meta/episodes/`` Parquet files. Default empty.
    """

    root: Path
    fps: int
    episode_lengths: list[int]
    camera_keys: list[str]
    episode_tasks: list[str]
    vcodec: str
    data_files: list[str] = field(default_factory=list)
    video_files: dict[str, list[str]] = field(default_factory=dict)
    episodes_files: list[str] = field(default_factory=list)

    @property
    def total_frames(self) -> int:
        """Frames of every episode."""
        return sum(self.episode_lengths)

    @property
    def episode_from_index(self) -> list[int]:
        """Global ``index`` of each episode's first frame."""
        return [int(x) for x in np.cumsum([0, *self.episode_lengths[:-1]])]

    def locate(self, index: int) -> tuple[int, int]:
        """``(episode, frame)`` of a global frame index."""
        starts = self.episode_from_index
        episode = int(np.searchsorted(starts, index, side="right")) - 1
        return episode, index - starts[episode]


@dataclass
class _OpenFile:
    chunk: int
    file: int
    size: int
    path: str


def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    file += 1
    if file == chunks_size:
        return chunk + 1, 0
    return chunk, file


def _numeric_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's per-feature stats over axis 0 (min/max/mean/std/count/quantiles)."""
    values = values.astype(np.float64)
    stats = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "count": np.array([len(values)], dtype=np.int64),
    }
    for q in (1, 10, 50, 90, 99):
        stats[f"q{q:02d}"] = np.quantile(values, q / 100, axis=0)
    return stats


def _image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of uint8 ``[T, H, W, 3]`` frames in [0, 1], shaped ``(3, 1, 1)``."""
    per_channel = (frames.reshape(-1, 3) / 255.0)[:: max(1, frames.shape[1])]
    stats = _numeric_stats(per_channel)
    return {k: (v.reshape(3, 1, 1) if k != "count" else v) for k, v in stats.items()}


def _stats_columns(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, list]:
    return {
        f"stats/{feat}/{name}": [value.tolist()]
        for feat, per in stats.items()
        for name, value in per.items()
    }


def _features(
    camera_keys: Sequence[str], height: int, width: int, fps: int, video_info: dict,
    state_dim: int = STATE_DIM,
) -> dict:
    features: dict[str, dict] = {}
    for key in camera_keys:
        features[key] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": dict(video_info),
        }
    names = [f"joint_{j}" for j in range(state_dim)]
    features["observation.state"] = {"dtype": "float32", "shape": [state_dim], "names": names}
    features["action"] = {"dtype": "float32", "shape": [state_dim], "names": names}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def _hf_features_json(features: dict) -> str:
    """The ``huggingface`` schema metadata LeRobot's data files carry (Value / Sequence types)."""
    hf: dict[str, dict] = {}
    for key, ft in features.items():
        if ft["dtype"] == "video":
            continue
        if ft["shape"] == [1]:
            hf[key] = {"dtype": ft["dtype"], "_type": "Value"}
        else:
            hf[key] = {
                "feature": {"dtype": ft["dtype"], "_type": "Value"},
                "length": ft["shape"][0],
                "_type": "Sequence",
            }
    return json.dumps({"info": {"features": hf}})


def _episode_table(
    episode: int, length: int, from_index: int, fps: int, task_index: int,
    state_dim: int = STATE_DIM,
) -> pa.Table:
    frames = np.arange(length)
    state = np.stack([state_vector(episode, f, state_dim) for f in frames])
    action = np.stack([action_vector(episode, f, state_dim) for f in frames])

    def vectors(arr: np.ndarray) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1), pa.float32()), state_dim)

    return pa.table(
        {
            "observation.state": vectors(state),
            "action": vectors(action),
            "timestamp": pa.array((frames / fps).astype(np.float32), pa.float32()),
            "frame_index": pa.array(frames, pa.int64()),
            "episode_index": pa.array(np.full(length, episode), pa.int64()),
            "index": pa.array(from_index + frames, pa.int64()),
            "task_index": pa.array(np.full(length, task_index), pa.int64()),
        }
    )


def write_synthetic_dataset(
    root: str | os.PathLike[str],
    *,
    episodes: int = 3,
    frames_per_episode: int | Sequence[int] = 20,
    cameras: int | Sequence[str] = 2,
    fps: int = 10,
    vcodec: str = "libsvtav1",
    gop: int | None = None,
    bframes: int = 0,
    crf: int | None = None,
    preset: str | int | None = None,
    width: int = 64,
    height: int = 48,
    noise: int = 10,
    motion: int = 0,
    tasks: Sequence[str] = DEFAULT_TASKS,
    video_files_size_in_mb: float = 200.0,
    data_files_size_in_mb: float = 100.0,
    chunks_size: int = DEFAULT_CHUNK_SIZE,
    episodes_per_meta_file: int | None = None,
    robot_type: str = "synthetic",
    state_dim: int = STATE_DIM,
) -> SyntheticDataset:
    """Write a LeRobot v3 dataset under ``root`` (must not exist yet) and describe what was written.

    ``frames_per_episode`` is one length for all or one per episode. ``vcodec`` is ``libsvtav1``
    (LeRobot's default: GOP 2, crf 30, preset 12) or ``h264`` (libx264; ``gop`` and ``bframes``
    configurable, b-adapt off so ``bframes >= 2`` really reorders). Small ``video_files_size_in_mb``
    / ``data_files_size_in_mb`` force LeRobot's rollover (a new file per episode, moov at the end).
    ``state_dim`` is the width of ``observation.state`` and ``action`` (robots differ in it).
    ``motion`` > 0 moves a fixed texture that many pixels per frame (camera motion for the
    encoder, see :func:`~feedline.episodes.synth.identity.identity_frame`).
    Everything is built in a sibling temporary folder and renamed into place at the end, so a
    failure never leaves a half-written dataset.
    """
    root = Path(root)
    lengths = (
        [int(frames_per_episode)] * episodes
        if isinstance(frames_per_episode, int)
        else [int(n) for n in frames_per_episode]
    )
    if len(lengths) != episodes or any(n < 1 for n in lengths):
        raise SynthError(
            f"frames_per_episode must give {episodes} positive lengths, got {frames_per_episode!r}"
        )
    camera_keys = (
        [f"observation.images.cam_{i}" for i in range(cameras)]
        if isinstance(cameras, int)
        else list(cameras)
    )
    if (
        len(camera_keys) > 1 << CAMERA_BITS
        or episodes > 1 << EPISODE_BITS
        or max(lengths) > 1000
        or episodes > 2000
    ):
        raise SynthError(
            f"at most {1 << CAMERA_BITS} cameras, 2000 episodes and 1000 frames per episode"
        )
    if width < 32 or height < 24 or width % 2 or height % 2:
        raise SynthError(
            f"frame size {width}x{height}: need even sizes of at least 32x24 for the identity grid"
        )
    if not tasks:
        raise SynthError("tasks must name at least one task")
    if root.exists():
        raise SynthError(f"{root}: already exists; the synthetic writer only creates new datasets")
    enc = encoder_settings(vcodec, gop, bframes, crf, preset)
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner to stderr otherwise

    root.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        result = _write(
            stage,
            root,
            lengths,
            camera_keys,
            fps,
            enc,
            width,
            height,
            noise,
            motion,
            list(tasks),
            video_files_size_in_mb,
            data_files_size_in_mb,
            chunks_size,
            episodes_per_meta_file,
            robot_type,
            state_dim=int(state_dim),
        )
        os.replace(stage, root)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return result


def _write(
    stage: Path,
    root: Path,
    lengths: list[int],
    camera_keys: list[str],
    fps: int,
    enc: dict,
    width: int,
    height: int,
    noise: int,
    motion: int,
    tasks: list[str],
    video_mb: float,
    data_mb: float,
    chunks_size: int,
    episodes_per_meta_file: int | None,
    robot_type: str,
    *,
    state_dim: int = STATE_DIM,
) -> SyntheticDataset:
    episode_tasks = [tasks[e % len(tasks)] for e in range(len(lengths))]
    task_order = list(dict.fromkeys(episode_tasks))
    scratch = stage / ".scratch"
    scratch.mkdir()
    result = SyntheticDataset(root, fps, lengths, camera_keys, episode_tasks, enc["codec"])
    video_info = {
        "video.height": height,
        "video.width": width,
        "video.codec": "av1" if enc["codec"] == "libsvtav1" else "h264",
        "video.pix_fmt": "yuv420p",
        "video.is_depth_map": False,
        "video.fps": fps,
        "video.channels": 3,
        "video.g": enc["g"],
        "video.crf": enc["crf"],
        "video.preset": enc["preset"],
        "video.fast_decode": 0,
        "video.video_backend": "pyav",
        "video.extra_options": {"bf": enc["bf"]} if "bf" in enc else {},
        "has_audio": False,
    }
    features = _features(camera_keys, height, width, fps, video_info, state_dim)
    schema_meta = {b"huggingface": _hf_features_json(features).encode()}

    open_video: dict[str, _OpenFile | None] = dict.fromkeys(camera_keys)
    video_to_ts: dict[str, float] = {}
    data_file: _OpenFile | None = None
    data_writer: pq.ParquetWriter | None = None
    episode_rows: list[dict] = []
    all_tables: list[pa.Table] = []
    all_frames: dict[str, list[np.ndarray]] = {k: [] for k in camera_keys}
    from_index = 0
    for episode, length in enumerate(lengths):
        row: dict = {
            "episode_index": [episode],
            "tasks": [[episode_tasks[episode]]],
            "length": [length],
        }
        task_index = task_order.index(episode_tasks[episode])
        table = _episode_table(
            episode, length, from_index, fps, task_index, state_dim
        ).replace_schema_metadata(schema_meta)
        all_tables.append(table)

        # Data parquet: one row group per episode, rollover like dataset_writer.py:476-479.
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **PAGE_CRCS)
        ep_data_bytes = sink.getvalue().size
        if data_file is None or (data_file.size + ep_data_bytes) / 2**20 >= data_mb:
            if data_writer is not None:
                data_writer.close()
            chunk, file = (
                (0, 0)
                if data_file is None
                else _next_file(data_file.chunk, data_file.file, chunks_size)
            )
            path = DEFAULT_DATA_PATH.format(chunk_index=chunk, file_index=file)
            (stage / path).parent.mkdir(parents=True, exist_ok=True)
            data_file = _OpenFile(chunk, file, 0, path)
            data_writer = pq.ParquetWriter(stage / path, table.schema, **PAGE_CRCS)
            result.data_files.append(path)
        assert data_writer is not None
        data_writer.write_table(table)
        data_file.size += ep_data_bytes
        row["data/chunk_index"], row["data/file_index"] = [data_file.chunk], [data_file.file]
        row["dataset_from_index"], row["dataset_to_index"] = [from_index], [from_index + length]

        stats: dict[str, dict[str, np.ndarray]] = {}
        for cam_id, key in enumerate(camera_keys):
            frames = np.stack(
                [
                    identity_frame(
                        cam_id, episode, f, height=height, width=width, noise=noise, motion=motion
                    )
                    for f in range(length)
                ]
            )
            all_frames[key].append(frames[:: max(1, length // 4)])
            stats[key] = _image_stats(frames)
            tmp = scratch / f"{cam_id}-{episode}.mp4"
            encode_episode(tmp, frames, fps, enc)
            duration = video_duration_s(tmp)
            current = open_video[key]
            ep_bytes = tmp.stat().st_size
            # New file for the first episode or on size rollover (dataset_writer.py:549).
            if current is None or (current.size + ep_bytes) / 2**20 >= video_mb:
                chunk, file = (
                    (0, 0)
                    if current is None
                    else _next_file(current.chunk, current.file, chunks_size)
                )
                path = DEFAULT_VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
                (stage / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(tmp, stage / path)
                current = open_video[key] = _OpenFile(chunk, file, 0, path)
                result.video_files.setdefault(key, []).append(path)
                from_ts = 0.0
            else:
                joined = scratch / "joined.mp4"
                stream_copy_concat([stage / current.path, tmp], joined)
                os.replace(joined, stage / current.path)
                tmp.unlink()
                from_ts = video_to_ts[key]
            current.size = (stage / current.path).stat().st_size
            video_to_ts[key] = from_ts + duration
            row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"] = (
                [current.chunk],
                [current.file],
            )
            row[f"videos/{key}/from_timestamp"], row[f"videos/{key}/to_timestamp"] = (
                [from_ts],
                [from_ts + duration],
            )

        for col in (
            "observation.state",
            "action",
            "timestamp",
            "frame_index",
            "episode_index",
            "index",
            "task_index",
        ):
            values = (
                table.column(col).to_numpy()
                if col not in ("observation.state", "action")
                else np.stack(table.column(col).to_numpy(zero_copy_only=False))
            )
            stats[col] = _numeric_stats(values.reshape(length, -1))
        row.update(_stats_columns(stats))
        episode_rows.append(row)
        from_index += length
    if data_writer is not None:
        data_writer.close()
    shutil.rmtree(scratch)

    _write_episodes_meta(stage, result, episode_rows, episodes_per_meta_file, chunks_size)
    pq.write_table(tasks_table(task_order), stage / TASKS_PATH, **PAGE_CRCS)
    _write_stats_json(stage, all_tables, all_frames)
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": len(lengths),
        "total_frames": sum(lengths),
        "total_tasks": len(task_order),
        "chunks_size": chunks_size,
        "data_files_size_in_mb": data_mb,
        "video_files_size_in_mb": video_mb,
        "fps": fps,
        "splits": {"train": f"0:{len(lengths)}"},
        "data_path": DEFAULT_DATA_PATH,
        "video_path": DEFAULT_VIDEO_PATH if camera_keys else None,
        "features": features,
    }
    (stage / INFO_PATH).write_text(json.dumps(info, indent=4))
    return result


def tasks_table(tasks: Sequence[str]) -> pa.Table:
    """``meta/tasks.parquet`` as LeRobot's pandas writes it: column ``task_index`` and the
    ``task`` index, named in the ``pandas`` schema metadata. LeRobot reads a task as
    ``tasks.iloc[task_index].name``; without that metadata the index is a row number and
    every task string reads back as ``0, 1, ...``."""
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
             "numpy_type": "int64", "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode",
             "numpy_type": "object", "metadata": None},
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()),
                      "task": pa.array(list(tasks), pa.string())})
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _write_episodes_meta(
    stage: Path, result: SyntheticDataset, rows: list[dict], per_file: int | None, chunks_size: int
) -> None:
    """``meta/episodes`` files, flushed ten rows per row group like LeRobot's metadata buffer."""
    per_file = per_file or len(rows)
    chunk, file = 0, 0
    for start in range(0, len(rows), per_file):
        path = EPISODES_PATH.format(chunk_index=chunk, file_index=file)
        (stage / path).parent.mkdir(parents=True, exist_ok=True)
        group = rows[start : start + per_file]
        tables = []
        for r in group:
            r = dict(r)
            r["meta/episodes/chunk_index"], r["meta/episodes/file_index"] = [chunk], [file]
            tables.append(pa.table(r))
        table = pa.concat_tables(tables)
        pq.write_table(table, stage / path, row_group_size=10, **PAGE_CRCS)
        result.episodes_files.append(path)
        chunk, file = _next_file(chunk, file, chunks_size)


def _write_stats_json(
    stage: Path, tables: list[pa.Table], frames: dict[str, list[np.ndarray]]
) -> None:
    table = pa.concat_tables(tables)
    stats: dict[str, dict[str, list]] = {}
    for key, parts in frames.items():
        stats[key] = {k: v.tolist() for k, v in _image_stats(np.concatenate(parts)).items()}
    for col in table.column_names:
        arr = table.column(col).to_numpy(zero_copy_only=False)
        values = np.stack(arr) if arr.dtype == object else arr.reshape(-1, 1)
        stats[col] = {k: v.tolist() for k, v in _numeric_stats(values).items()}
    (stage / STATS_PATH).write_text(json.dumps(stats, indent=4))


__all__ = [
    "DEFAULT_TASKS",
    "SynthError",
    "SyntheticDataset",
    "action_vector",
    "decode_identity",
    "identity_frame",
    "row_identity",
    "state_vector",
    "write_synthetic_dataset",
]
