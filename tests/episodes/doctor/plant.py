"""Planting one defect in a copy of a real synthetic dataset: each helper breaks one thing the way
it breaks in the wild (a lost frame, an edited timestamp, a half-uploaded file)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from feedline.episodes.synth.identity import identity_frame
from feedline.episodes.synth.video import encode_episode, encoder_settings
from feedline.episodes.synth.writer import SyntheticDataset
from tests.episodes.mp4_factory import find_box

CAM0, CAM1 = "observation.images.cam_0", "observation.images.cam_1"


def video(key: str, file: int) -> str:
    return f"videos/{key}/chunk-000/file-{file:03d}.mp4"


def data(file: int) -> str:
    return f"data/chunk-000/file-{file:03d}.parquet"


def copy(synth: SyntheticDataset, tmp_path: Path, name: str = "ds") -> Path:
    target = tmp_path / name
    shutil.copytree(synth.root, target)
    return target


def reencode(root: Path, path: str, camera: int, episode: int, frames: int, fps: int = 10) -> None:
    """Replace a single-episode video with one of ``frames`` frames (frames lost in recording)."""
    images = np.stack([identity_frame(camera, episode, f, height=48, width=64) for f in range(frames)])
    encode_episode(root / path, images, fps, encoder_settings("libsvtav1", None, 0, None, None))


def edit_episodes(root: Path, episode: int, column: str, change) -> str:
    """Apply ``change(value)`` to one cell of meta/episodes; returns the file edited."""
    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        table = pq.read_table(path)
        rows = table.column("episode_index").to_pylist()
        if episode in rows:
            values = table.column(column).to_pylist()
            values[rows.index(episode)] = change(values[rows.index(episode)])
            i = table.column_names.index(column)
            table = table.set_column(i, column, pa.array(values, table.schema.field(column).type))
            pq.write_table(table, path)
            return path.relative_to(root).as_posix()
    raise KeyError(episode)


def rewrite_data(root: Path, path: str, change) -> None:
    """Rewrite a data file with ``change(table)``, one row group per episode as LeRobot writes."""
    table = change(pq.read_table(root / path))
    with pq.ParquetWriter(root / path, table.schema) as writer:
        for episode in sorted(set(table.column("episode_index").to_pylist())):
            mask = np.asarray(table.column("episode_index").to_numpy() == episode)
            writer.write_table(table.filter(pa.array(mask)))


def add_orphan_rows(root: Path, path: str, count: int) -> None:
    def change(table: pa.Table) -> pa.Table:
        extra = table.slice(0, count).to_pydict()
        extra["index"] = [100_000 + i for i in range(count)]
        extra["episode_index"] = [999] * count
        return pa.concat_tables([table, pa.table(extra, schema=table.schema)])

    rewrite_data(root, path, change)


def swap_timestamps(root: Path, path: str, episode: int, a: int, b: int) -> None:
    def change(table: pa.Table) -> pa.Table:
        stamps = table.column("timestamp").to_pylist()
        rows = [i for i, e in enumerate(table.column("episode_index").to_pylist()) if e == episode]
        stamps[rows[a]], stamps[rows[b]] = stamps[rows[b]], stamps[rows[a]]
        i = table.column_names.index("timestamp")
        return table.set_column(i, "timestamp", pa.array(stamps, pa.float32()))

    rewrite_data(root, path, change)


def cut(root: Path, path: str, keep: int | None = None, drop: int = 0) -> None:
    """Truncate a file to ``keep`` bytes, or by its last ``drop`` bytes (a half-finished upload)."""
    data = (root / path).read_bytes()
    (root / path).write_bytes(data[: keep if keep is not None else len(data) - drop])


def patch_moov(root: Path, path: str, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (same length) inside the file's moov box only."""
    data = bytearray((root / path).read_bytes())
    _, start, end = find_box(bytes(data), ["moov"])
    moov = bytes(data[start:end])
    assert old in moov and len(old) == len(new)
    data[start:end] = moov.replace(old, new)
    (root / path).write_bytes(bytes(data))


def set_elst_rate(root: Path, path: str, rate: int) -> None:
    """Give the first edit a media rate the readers refuse (FFmpeg would ignore it)."""
    data = bytearray((root / path).read_bytes())
    _, start, _ = find_box(bytes(data), ["moov", "trak", "edts", "elst"])
    version = data[start + 8]
    field = start + 16 + (16 if version == 1 else 8)
    struct.pack_into(">h", data, field, rate)
    (root / path).write_bytes(bytes(data))


def edit_stats(root: Path, change) -> None:
    path = root / "meta" / "stats.json"
    stats = json.loads(path.read_text())
    change(stats)
    path.write_text(json.dumps(stats))  # json writes NaN as NaN, as Python's LeRobot would
