"""What the training process reads off a batch it took: its size and its episodes.

Why a module of its own: the tracker counts samples and the diversity counters count episodes
on every batch the loop consumes, whatever collate built it (LeRobot's, a dict of tensors, a
user's own), and a mixture's episodes are told apart by their ``dataset_index``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["batch_episodes", "batch_len"]


def _numpy(value: Any) -> Any:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def batch_episodes(batch: Any) -> Any:
    """A batch's episodes (``None`` when a custom collate left them out); in a mixture, the
    pair (source, episode) as one integer, since sources share episode indices."""
    if isinstance(batch, Mapping) and "episode_index" in batch:
        episodes = _numpy(batch["episode_index"]).astype(np.int64)
        if "dataset_index" in batch:
            episodes = episodes + (_numpy(batch["dataset_index"]).astype(np.int64) << 32)
        return episodes
    return None


def batch_len(batch: Any) -> int:
    if isinstance(batch, Mapping):
        for value in batch.values():
            if isinstance(value, torch.Tensor | list | tuple):
                return len(value)
    return len(batch)
