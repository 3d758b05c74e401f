"""feedline's streaming reader as lerobot-train sees a dataset.

lerobot-train reads ``dataset.meta`` (LeRobot's ``LeRobotDatasetMetadata``: features, fps, stats,
camera keys), ``dataset.num_frames`` and ``dataset.num_episodes``, and hands the dataset to a
``DataLoader``. :class:`LeRobotStreamingView` answers those from a
:class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset` and iterates it unchanged;
:func:`lerobot_metadata` builds LeRobot's metadata object from what feedline already read through
its own store (any root: folder, HTTP, S3, Hub), since LeRobot's constructor only reads local
folders or downloads from the Hub. Imports LeRobot (Python >= 3.12).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from feedline.episodes.stream.dataset import StreamingEpisodeDataset

__all__ = ["LeRobotStreamingView", "lerobot_metadata", "use_imagenet_stats"]


def lerobot_metadata(
    info: Mapping[str, Any],
    *,
    repo_id: str,
    repo_type: str = "dataset",
    revision: str | None = None,
    root: str | None = None,
    tasks: list[str] | None = None,
    stats: Mapping[str, Mapping[str, Any]] | None = None,
) -> Any:
    """A ``LeRobotDatasetMetadata`` holding ``info``, ``tasks`` and ``stats`` (read by feedline).

    LeRobot's constructor would load them from a local folder or the Hub; this sets the same
    attributes its loader sets (``info``, ``tasks``, ``episodes``, ``stats``), which every
    property lerobot-train and the policy factories use derives from. ``episodes`` stays
    ``None``: lerobot-train reads it only for map-style sampling and ``eval_split``.
    """
    import pandas as pd
    from lerobot.datasets.dataset_metadata import CODEBASE_VERSION, LeRobotDatasetMetadata
    from lerobot.datasets.io_utils import cast_stats_to_numpy
    from lerobot.datasets.utils import DatasetInfo

    meta = LeRobotDatasetMetadata.__new__(LeRobotDatasetMetadata)
    local = root if root is not None and "://" not in root else None
    meta.repo_id = repo_id
    meta.repo_type = repo_type
    meta.revision = revision or CODEBASE_VERSION
    meta._requested_root = Path(local) if local else None
    meta.root = Path(local) if local else Path(repo_id)
    meta._pq_writer = None
    meta.latest_episode = None
    meta._metadata_buffer = []
    meta._metadata_buffer_size = 10
    meta._finalized = True
    meta.info = DatasetInfo.from_dict(dict(info))
    meta.tasks = (
        pd.DataFrame({"task_index": np.arange(len(tasks), dtype=np.int64)}, index=pd.Index(tasks, name="task"))
        if tasks
        else None
    )
    meta.episodes = None
    meta.stats = cast_stats_to_numpy({k: dict(v) for k, v in stats.items()}) if stats else None
    return meta


def use_imagenet_stats(meta: Any) -> None:
    """Overwrite the camera stats with ImageNet's, as lerobot-train does with
    ``--dataset.use_imagenet_stats=true`` (its default)."""
    import torch
    from lerobot.utils.constants import IMAGENET_STATS

    if meta.stats is None:
        meta.stats = {}
    for key in meta.camera_keys:
        meta.stats.setdefault(key, {})
        for name, values in IMAGENET_STATS.items():
            meta.stats[key][name] = torch.tensor(values, dtype=torch.float32)


class LeRobotStreamingView(IterableDataset):
    """A :class:`StreamingEpisodeDataset` with LeRobot's dataset attributes (see the module doc).

    Args:
        dataset: the reader; iterating the view iterates it (in each DataLoader worker).
        meta: LeRobot's metadata for the same dataset (:func:`lerobot_metadata`).
    """

    def __init__(self, dataset: StreamingEpisodeDataset, meta: Any) -> None:
        self.dataset = dataset
        self.meta = meta

    @property
    def num_frames(self) -> int:
        return self.dataset.num_frames

    @property
    def num_episodes(self) -> int:
        return self.dataset.num_episodes

    @property
    def episodes(self) -> list[int] | None:
        return self.dataset.episodes

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.dataset)

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "meta": None}  # workers need the reader, not LeRobot's meta
