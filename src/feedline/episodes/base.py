"""``EpisodeDatasetBase``: what the map-style and the streaming reader share about one dataset.

Both readers open the same root the same way (repo id or URL, storage options), read the same
metadata, select the same episodes, resolve the same ``delta_timestamps`` and shape samples with
the same :class:`~feedline.episodes.assemble.SampleSpec`; only how rows and frames are fetched
and in what order differs. Keeping this in one base class is what makes "streaming equals
map-style" cheap to keep true. It holds no Parquet rows: the map-style reader loads them all up
front, the streaming reader per episode, under its byte budget.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from feedline.episodes.assemble import SampleSpec
from feedline.episodes.errors import EpisodeDatasetError
from feedline.episodes.format import DatasetMeta, EpisodeTable, load_meta
from feedline.episodes.settings import setting
from feedline.episodes.windows import delta_indices
from feedline.errors import FeedlineError
from feedline.io import Store, open_store
from feedline.io.errors import is_transport_error
from feedline.io.redact import redact_text
from feedline.validate import check_int

DEFAULT_TOLERANCE_S = 1e-4  # LeRobot's default frame-timestamp tolerance
DEFAULT_DECODER_CACHE_SIZE = 8  # map-style, per process; streaming derives its own from the pool
DEFAULT_SIDECAR_LOCK_TIMEOUT_S: float = setting("sidecar_lock_timeout_s").default


def resolve_root(
    repo_id: str | None, root: str | os.PathLike[str] | None, repo_type: str, revision: str | None
) -> str:
    """The URL a dataset is read from: ``root`` when given, else the Hub location of ``repo_id``."""
    if root is not None:
        return os.fspath(root)
    if repo_id is None:
        raise EpisodeDatasetError(
            "give repo_id='OWNER/NAME' or root=<folder or URL> to open a dataset"
        )
    if repo_id.count("/") != 1 or repo_id.startswith("/") or repo_id.endswith("/"):
        raise EpisodeDatasetError(f"repo_id {repo_id!r} must look like 'OWNER/NAME'")
    if repo_type == "dataset":
        return f"hf://datasets/{repo_id}" + (f"@{revision}" if revision else "")
    if repo_type == "bucket":
        return f"hf://buckets/{repo_id}"
    raise EpisodeDatasetError(
        f"repo_type {repo_type!r} is not supported; use 'dataset' or 'bucket'"
    )


def _load_meta(store: Store, root_url: str) -> DatasetMeta:
    """:func:`load_meta`, with network-library exceptions that escape the store made one line."""
    try:
        return load_meta(store)
    except FeedlineError:
        raise
    except Exception as exc:
        if not isinstance(exc, OSError) and not is_transport_error(exc):
            raise
        raise EpisodeDatasetError(
            f"{root_url}: cannot read the dataset metadata ({type(exc).__name__}: {exc}); "
            "check the URL, network access and credentials (storage_options)"
        ) from exc


def column_to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    """A Parquet column as an array with rows on axis 0 (fixed-size lists become extra axes)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    shape: list[int] = []
    values = array
    while pa.types.is_fixed_size_list(values.type):
        shape.append(values.type.list_size)
        values = values.flatten()
    if shape:
        return values.to_numpy(zero_copy_only=False).reshape(len(array), *shape)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return np.array(array.to_pylist(), dtype=object)
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        rows = array.to_pylist()
        numeric = pa.types.is_integer(array.type.value_type) or pa.types.is_floating(
            array.type.value_type
        ) or pa.types.is_boolean(array.type.value_type)
        if numeric:
            try:
                return np.array(rows)
            except ValueError:
                pass  # ragged: one list per row, as below
        out = np.empty(len(rows), dtype=object)  # lists of structs, strings or lists: Python rows
        out[:] = rows
        return out
    if pa.types.is_struct(array.type) or pa.types.is_map(array.type):
        out = np.empty(len(array), dtype=object)
        out[:] = array.to_pylist()
        return out
    return array.to_numpy(zero_copy_only=False)


class EpisodeDatasetBase:
    """One LeRobot v3 dataset root, opened and resolved (metadata, selection, windows, frames).

    Takes every argument of :class:`~feedline.episodes.mapstyle.EpisodeDataset`, documented
    there (on the class users construct), with the same defaults.
    """

    def __init__(
        self,
        repo_id: str | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        repo_type: str = "dataset",
        revision: str | None = None,
        episodes: Iterable[int] | None = None,
        delta_timestamps: Mapping[str, Iterable[float]] | None = None,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        return_uint8: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        decoder_cache_size: int = DEFAULT_DECODER_CACHE_SIZE,
        sidecar_lock_timeout_s: float = DEFAULT_SIDECAR_LOCK_TIMEOUT_S,
    ) -> None:
        self.repo_id = repo_id
        self.repo_type = repo_type
        self.revision = revision
        #: What reopens the store (in memory and pickled to DataLoader workers, never shown):
        #: it may carry user:password; ``root_url`` is the same URL as messages show it.
        self.store_url = resolve_root(repo_id, root, repo_type, revision)
        self.root_url = redact_text(self.store_url)
        self.storage_options = dict(storage_options or {})
        self.tolerance_s = float(tolerance_s)
        self.return_uint8 = bool(return_uint8)
        self.image_transforms = image_transforms
        self.decoder_cache_size = check_int(
            "decoder_cache_size", decoder_cache_size, minimum=0, error=EpisodeDatasetError
        )
        self.sidecar_lock_timeout_s = float(sidecar_lock_timeout_s)
        if image_transforms is not None and not callable(image_transforms):
            raise EpisodeDatasetError("image_transforms must be callable or None")

        self._pid = os.getpid()
        self._store: Store | None = self._open_store()
        self._frame_reader: Any = None
        self.meta: DatasetMeta = _load_meta(self._store, self.root_url)
        if self.meta.image_keys:
            raise EpisodeDatasetError(
                f"{self._store.url('meta/info.json')}: image features stored in Parquet "
                f"({self.meta.image_keys}) are not supported; feedline reads video features"
            )
        self.episodes: list[int] | None = (
            sorted({int(e) for e in episodes}) if episodes is not None else None
        )
        self.episode_table: EpisodeTable = self.meta.episodes.select(self.episodes)
        self.delta_timestamps = (
            {k: list(v) for k, v in delta_timestamps.items()} if delta_timestamps else None
        )
        self.delta_indices: dict[str, np.ndarray] | None = (
            delta_indices(self.delta_timestamps, self.fps, self.tolerance_s, self.meta.features)
            if self.delta_timestamps
            else None
        )
        lengths = self.episode_table.length
        self._episode_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    # ---------------------------------------------------------------- metadata ---

    @property
    def fps(self) -> int:
        return self.meta.fps

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.meta.features

    @property
    def camera_keys(self) -> list[str]:
        return self.meta.camera_keys

    @property
    def video_keys(self) -> list[str]:
        return self.meta.video_keys

    @property
    def num_frames(self) -> int:
        return int(self._episode_start[-1])

    @property
    def num_episodes(self) -> int:
        return len(self.episode_table)

    # ------------------------------------------------------- process-local state ---

    #: How long the store may fail before reads give up (``None``: the io default, 60 s); the
    #: streaming reader sets it from its ``outage_s``.
    store_outage_s: float | None = None

    #: The URL a DataLoader worker reopens: a Hub root at the commit the opening process
    #: resolved (its branch may move meanwhile; a worker must read the metadata's commit).
    _reopen_url: str | None = None

    def _open_store(self) -> Store:
        store = open_store(self._reopen_url or self.store_url, **self.storage_options)
        if self._reopen_url is None:
            self._reopen_url = getattr(store, "pinned_url", None)
        if self.store_outage_s is not None:
            store.set_outage_s(self.store_outage_s)
        return store

    @property
    def store(self) -> Store:
        """This process's store (reopened in a DataLoader worker: connections are not shared).

        The frame reader comes along, rebound to the new store: the MP4 index the opening
        process built and checked is the worker's too (mapped, not relisted: no request per
        video and worker)."""
        if self._store is None or self._pid != os.getpid():
            self._store = self._open_store()
            if self._frame_reader is not None:
                self._frame_reader.rebind(self._store)
            self._pid = os.getpid()
            self.meta.store = self._store
        return self._store

    def frame_reader(self) -> Any:
        """This process's :class:`~feedline.episodes.video.frames.VideoFrameReader` (sidecar-backed)."""
        store = self.store
        if self._frame_reader is None:
            from feedline.episodes.video.frames import VideoFrameReader

            self._frame_reader = VideoFrameReader(
                store,
                revision=self.revision,
                video_paths=self.episode_table.video_files(),
                lock_timeout_s=self.sidecar_lock_timeout_s,
                decoder_cache_size=self.decoder_cache_size,
            )
        return self._frame_reader

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        if self._frame_reader is not None:  # its validated index goes along, not its store
            state["_frame_reader"] = self._frame_reader.detached()
        state["meta"] = DatasetMeta(**{**self.meta.__dict__, "store": None})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def locate(self, idx: int) -> tuple[int, int, int]:
        """``(episode_index, frame_index_in_episode, global index)`` of dataset position ``idx``."""
        if idx < 0:
            idx += self.num_frames
        if not 0 <= idx < self.num_frames:
            raise IndexError(f"index {idx} out of range for {self.num_frames} frames")
        pos = int(np.searchsorted(self._episode_start, idx, side="right")) - 1
        offset = idx - int(self._episode_start[pos])
        return (
            int(self.episode_table.episode_index[pos]),
            offset,
            int(self.episode_table.dataset_from_index[pos]) + offset,
        )

    @property
    def sample_spec(self) -> SampleSpec:
        """The shape of this dataset's samples (shared with the streaming reader)."""
        return SampleSpec(
            video_keys=tuple(self.video_keys),
            camera_keys=tuple(self.camera_keys),
            delta_indices=self.delta_indices,
            tasks=tuple(self.meta.tasks),
            return_uint8=self.return_uint8,
            image_transforms=self.image_transforms,
        )


__all__ = [
    "DEFAULT_DECODER_CACHE_SIZE",
    "DEFAULT_SIDECAR_LOCK_TIMEOUT_S",
    "DEFAULT_TOLERANCE_S",
    "EpisodeDatasetBase",
    "column_to_numpy",
    "resolve_root",
]
