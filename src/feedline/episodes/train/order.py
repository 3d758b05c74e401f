"""The data order of a ``feedline train`` run, saved inside LeRobot's checkpoint.

LeRobot writes ``<checkpoint>/pretrained_model/`` and ``<checkpoint>/training_state/``; feedline
adds :data:`ORDER_FILE` beside them, installed atomically (a crash mid-write leaves the previous
file or none, never half of one). It holds every rank's reader state (a handful of integers:
what the loop consumed, under which order settings) and the feedline flags the run used, so
``--resume=true`` rebuilds the same reader without the flags being repeated, and each rank
continues sample-exactly. Pure JSON, no LeRobot import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from feedline.episodes.errors import TrainError
from feedline.io.atomic import atomic_write

__all__ = ["ORDER_FILE", "DataOrder", "load_data_order", "save_data_order"]

ORDER_FILE = "feedline_data_order.json"
FORMAT = 1


class DataOrder:
    """A saved data order: per-rank reader states and the feedline settings of the run.

    Args:
        ranks: ``StreamingEpisodeDataset.state_dict()`` of every rank, by rank.
        settings: the feedline flags given to the run, by keyword (JSON values).
        step: the training step the states were taken at.
    """

    def __init__(self, ranks: Sequence[Mapping[str, Any]], settings: Mapping[str, Any], step: int) -> None:
        self.ranks = [dict(r) for r in ranks]
        self.settings = dict(settings)
        self.step = int(step)

    @property
    def world_size(self) -> int:
        """Ranks that wrote the checkpoint."""
        return len(self.ranks)

    def rank_state(self, rank: int) -> dict[str, Any]:
        """Rank ``rank``'s state; with fewer saved ranks, rank 0's: ranks step in lockstep, so
        any rank's state resumes every rank of another world size mid-epoch (elastic resume)."""
        return self.ranks[rank] if rank < len(self.ranks) else self.ranks[0]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "step": self.step, "settings": self.settings, "ranks": self.ranks}


def save_data_order(checkpoint_dir: str | os.PathLike[str], order: DataOrder) -> Path:
    """Install ``order`` as ``checkpoint_dir/ORDER_FILE`` atomically; returns the path."""
    path = Path(checkpoint_dir) / ORDER_FILE
    with atomic_write(path, "w", encoding="utf-8") as handle:
        json.dump(order.to_json(), handle, indent=1, sort_keys=True)
    return path


def load_data_order(checkpoint_dir: str | os.PathLike[str]) -> DataOrder | None:
    """The order saved in ``checkpoint_dir``, or ``None`` when the checkpoint has none (a
    map-style run, or one written by lerobot-train itself)."""
    path = Path(checkpoint_dir) / ORDER_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TrainError(f"{path}: unreadable data order ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or not raw.get("ranks"):
        raise TrainError(f"{path}: not a feedline data order of format {FORMAT}")
    return DataOrder(raw["ranks"], raw.get("settings") or {}, raw.get("step", 0))
