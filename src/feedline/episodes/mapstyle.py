"""``EpisodeDataset``: the map-style LeRobot v3 reader, the reference the streaming reader equals.

It reproduces LeRobot 0.6.1's ``LeRobotDataset.__getitem__`` (``dataset_reader.py``) from any
root feedline's I/O layer can open: windows from ``delta_timestamps`` resolved inside the
episode with clamping and ``<key>_is_pad`` masks (padded slots repeat the edge frame/row),
frames decoded at ``from_timestamp`` + the clamped rows' ``timestamp`` within ``tolerance_s``,
float32 CHW images in [0, 1] (uint8 with ``return_uint8``), a time dimension only where a window
has more than one slot, and the ``task`` string. Video frames always go through
:class:`feedline.episodes.video.frames.VideoFrameReader`, so a remote MP4 is read by byte ranges
from its sidecar index and never downloaded whole.

Parquet rows: a small selection (at most :data:`PRELOAD_EPISODES` episodes) is read whole at
construction, one read per data file, which is the cheaper way to serve every sample of it; a
larger one is read per episode on its first sample (:mod:`feedline.episodes.rowcache`: one
ranged read of its row groups, kept in a bounded LRU per process), so the open reads footers,
not rows, and memory does not grow with the dataset.
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
from feedline.episodes.rowcache import LazyRows
from feedline.episodes.windows import PAD_SUFFIX
from feedline.io.redact import redact_text
from feedline.validate import check_int

#: ``preload_rows=None`` reads every row at the open up to this many selected episodes (see
#: docs/benchmarks.md, "Map-style reader at scale": below it the whole read costs less than a
#: second and holds little, above it the open time and memory grow with the dataset).
PRELOAD_EPISODES = 10_000
#: Episodes' rows kept per process when they are read lazily.
DEFAULT_ROW_CACHE_SIZE = 1024


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
        preload_rows: ``True`` reads every Parquet row of the selected episodes at construction
            (one read per data file; a damaged file fails the constructor); ``False`` reads an
            episode's rows on its first sample (one ranged read of its row groups) and keeps
            ``row_cache_size`` episodes per process. Default ``None``: ``True`` up to 10,000
            selected episodes (:data:`PRELOAD_EPISODES`), else ``False``.
        row_cache_size: episodes whose rows a process keeps when they are read on first use,
            least recently used dropped first (each DataLoader worker has its own). Default 1024.
    """

    def __init__(
        self,
        *args: Any,
        preload_rows: bool | None = None,
        row_cache_size: int = DEFAULT_ROW_CACHE_SIZE,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.row_cache_size = check_int(
            "row_cache_size", row_cache_size, minimum=1, error=EpisodeDatasetError
        )
        if preload_rows is None:
            preload_rows = self.num_episodes <= PRELOAD_EPISODES
        self.preload_rows = bool(preload_rows)
        self._columns: dict[str, np.ndarray] = {}
        self._lazy: LazyRows | None = None
        if self.preload_rows:
            self._columns = self._load_rows()
        elif self.num_episodes:
            self._lazy = LazyRows(
                self.store, self.episode_table, self.row_cache_size, bool(self.video_keys)
            )
        if self.video_keys:  # build or check the MP4 sidecar here, once, not in every worker
            self.frame_reader()

    def __len__(self) -> int:
        return self.num_frames

    def __repr__(self) -> str:
        return (
            f"EpisodeDataset(root={redact_text(self.root_url)!r}, episodes={self.num_episodes}, "
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
        """One selected episode's rows and video spans, for sample assembly (rows read now when
        they are read on first use; views of the preloaded rows otherwise)."""
        return self._episode_data_at(self.episode_table.position(episode_index))

    def _episode_data_at(self, pos: int) -> EpisodeData:
        if self._lazy is not None:
            columns = dict(self._lazy.columns(self.store, pos))  # the cached dict stays whole
        else:
            start, stop = int(self._episode_start[pos]), int(self._episode_start[pos + 1])
            columns = {name: values[start:stop] for name, values in self._columns.items()}
        return EpisodeData(
            episode_index=int(self.episode_table.episode_index[pos]),
            dataset_from_index=int(self.episode_table.dataset_from_index[pos]),
            columns=columns,
            video_path={key: paths[pos] for key, paths in self.episode_table.video_path.items()},
            from_timestamp={
                key: float(ts[pos]) for key, ts in self.episode_table.from_timestamp.items()
            },
        )

    def __getitem__(self, idx: int) -> dict[str, Any]:
        pos, frame = self._position_of(int(idx))
        return assemble_sample(self.sample_spec, self._episode_data_at(pos), frame, self._decode)

    def _position_of(self, idx: int) -> tuple[int, int]:
        """``(table position, frame in the episode)`` of dataset position ``idx``."""
        if idx < 0:
            idx += self.num_frames
        if not 0 <= idx < self.num_frames:
            raise IndexError(f"index {idx} out of range for {self.num_frames} frames")
        pos = int(np.searchsorted(self._episode_start, idx, side="right")) - 1
        return pos, idx - int(self._episode_start[pos])

    def _decode(self, key: str, path: str, timestamps_s: list[float]) -> np.ndarray:
        return self.frame_reader().frames_at(path, timestamps_s, tolerance_s=self.tolerance_s)


__all__ = [
    "DEFAULT_DECODER_CACHE_SIZE",
    "DEFAULT_ROW_CACHE_SIZE",
    "DEFAULT_SIDECAR_LOCK_TIMEOUT_S",
    "DEFAULT_TOLERANCE_S",
    "PAD_SUFFIX",
    "PRELOAD_EPISODES",
    "EpisodeDataset",
    "column_to_numpy",
    "resolve_root",
]
