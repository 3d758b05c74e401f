"""``EpisodeDataset``: the map-style LeRobot v3 reader, the reference the streaming reader equals.

It reproduces LeRobot 0.6.1's ``LeRobotDataset.__getitem__`` (``dataset_reader.py``) from any
root feedline's I/O layer can open: windows from ``delta_timestamps`` resolved inside the
episode with clamping and ``<key>_is_pad`` masks (padded slots repeat the edge frame/row),
frames decoded at ``from_timestamp`` + the clamped rows' ``timestamp`` within ``tolerance_s``,
float32 CHW images in [0, 1] (uint8 with ``return_uint8``), a time dimension only where a window
has more than one slot, and the ``task`` string. Non-video columns of the selected episodes are
read once at construction (row-group pruned); video frames always go through
:class:`feedline.episodes.video.frames.VideoFrameReader`, so a remote MP4 is read by byte ranges from its
sidecar index and never downloaded whole.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from torch.utils.data import Dataset

from feedline.episodes.assemble import EpisodeData, assemble_sample
from feedline.episodes.base import (
    DEFAULT_DECODER_CACHE_SIZE,
    DEFAULT_SIDECAR_LOCK_TIMEOUT_S,
    DEFAULT_TOLERANCE_S,
    EpisodeDatasetBase,
    column_to_numpy,
    resolve_root,
)
from feedline.episodes.errors import EpisodeDatasetError
from feedline.episodes.parquet import read_file_episodes
from feedline.episodes.windows import PAD_SUFFIX


class EpisodeDataset(EpisodeDatasetBase, Dataset):
    """Map-style LeRobot v3 dataset over a local folder, HTTP(S), S3 or the Hugging Face Hub.

    ``len(ds)`` frames; ``ds[i]`` is the sample of the i-th selected frame (episodes in storage
    order), exactly LeRobot's ``LeRobotDataset.__getitem__``.

    Args:
        repo_id: ``OWNER/NAME`` of a Hub dataset repo (or bucket, see ``repo_type``), read from
            ``hf://datasets/<repo_id>`` (``@revision`` when given). Default ``None``: give
            ``root``.
        root: a local folder or any URL feedline's I/O layer opens (``s3://``, ``http(s)://``,
            ``hf://datasets/OWNER/NAME@REV``, ``hf://buckets/OWNER/BUCKET``); takes precedence
            over ``repo_id``. Default ``None``.
        repo_type: ``"dataset"`` or ``"bucket"`` (``hf://buckets/<repo_id>``). Default
            ``"dataset"``.
        revision: branch, tag or commit of a Hub dataset repo; keys the MP4 sidecar cache.
            Default ``None``: the default branch.
        episodes: indices of the episodes to read, in storage order. Default ``None``: all.
        delta_timestamps: per feature key, the offsets in seconds (multiples of 1/fps) of the
            frames or rows a sample holds around its own (history and future windows), resolved
            inside the episode with edge padding and ``<key>_is_pad`` masks. Default ``None``:
            the frame itself only.
        image_transforms: called on every camera image tensor of a sample. Default ``None``.
        tolerance_s: most seconds a decoded frame may lie from the wanted time before it is an
            error. Default ``1e-4`` (LeRobot's).
        return_uint8: images as ``uint8`` instead of ``float32`` in [0, 1]. Default ``False``.
        storage_options: options for the store: credentials, S3 endpoint, HTTP connection
            limits. Default ``None``.
        decoder_cache_size: decoded GOP spans kept per process, least recently used dropped
            first, so neighbouring samples decode a GOP once; 0 keeps none. Default 8.
        sidecar_lock_timeout_s: seconds to wait while another process builds the same MP4
            sidecar index before failing. Default 1800.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._columns = self._load_rows()
        if self.video_keys:  # build or check the MP4 sidecar here, once, not in every worker
            self.frame_reader()

    def __len__(self) -> int:
        return self.num_frames

    def __repr__(self) -> str:
        return (
            f"EpisodeDataset(root={self.root_url!r}, episodes={self.num_episodes}, "
            f"frames={self.num_frames}, fps={self.fps}, cameras={self.camera_keys})"
        )

    # ------------------------------------------------------------------- rows ---

    def _load_rows(self) -> dict[str, np.ndarray]:
        """Every Parquet column of the selected episodes, episode after episode, rows on axis 0
        (each data file read once, its episodes found with array operations)."""
        table = self.episode_table
        if not len(table):
            return {}
        parts: list[tuple[np.ndarray, pa.Table, str]] = []
        for path, positions in table.positions_by_data_file().items():
            rows = read_file_episodes(
                self.store, path, table.episode_index[positions],
                table.dataset_from_index[positions], table.dataset_to_index[positions],
            )
            parts.append((positions, rows, path))
        parts.sort(key=lambda part: int(part[0][0]))
        schema = parts[0][1].schema
        for positions, rows, path in parts:
            if rows.schema.names != schema.names:
                raise EpisodeDatasetError(
                    f"{self.store.url(path)}: episode {int(table.episode_index[positions[0]])} has "
                    f"columns {rows.schema.names}, others have {schema.names}"
                )
        combined = pa.concat_tables([rows for _, rows, _ in parts], promote_options="permissive")
        positions = np.concatenate([p for p, _, _ in parts])
        if np.any(np.diff(positions) < 0):  # files interleave episodes: put them in table order
            lengths = table.length[positions]
            starts = np.cumsum(lengths) - lengths
            order = np.argsort(positions, kind="stable")
            take = np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in order])
            combined = combined.take(pa.array(take, pa.int64()))
        if self.video_keys and "timestamp" not in combined.column_names:
            raise EpisodeDatasetError(
                f"{self.store.url(table.data_path[0])}: no 'timestamp' column for video lookup"
            )
        return {name: column_to_numpy(combined.column(name)) for name in combined.column_names}

    # ------------------------------------------------------------------- items ---

    def episode_data(self, episode_index: int) -> EpisodeData:
        """One selected episode's rows and video spans (views, no copy), for sample assembly."""
        pos = self.episode_table.position(episode_index)
        start, stop = int(self._episode_start[pos]), int(self._episode_start[pos + 1])
        return EpisodeData(
            episode_index=int(episode_index),
            dataset_from_index=int(self.episode_table.dataset_from_index[pos]),
            columns={name: values[start:stop] for name, values in self._columns.items()},
            video_path={key: paths[pos] for key, paths in self.episode_table.video_path.items()},
            from_timestamp={
                key: float(ts[pos]) for key, ts in self.episode_table.from_timestamp.items()
            },
        )

    def __getitem__(self, idx: int) -> dict[str, Any]:
        episode_index, frame, _ = self.locate(int(idx))
        return assemble_sample(
            self.sample_spec, self.episode_data(episode_index), frame, self._decode
        )

    def _decode(self, key: str, path: str, timestamps_s: list[float]) -> np.ndarray:
        return self.frame_reader().frames_at(path, timestamps_s, tolerance_s=self.tolerance_s)


__all__ = [
    "DEFAULT_DECODER_CACHE_SIZE",
    "DEFAULT_SIDECAR_LOCK_TIMEOUT_S",
    "DEFAULT_TOLERANCE_S",
    "PAD_SUFFIX",
    "EpisodeDataset",
    "column_to_numpy",
    "resolve_root",
]
