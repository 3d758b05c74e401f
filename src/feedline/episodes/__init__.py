"""feedline.episodes: LeRobot v3 datasets read from any store, map-style or streamed.

``EpisodeDataset`` is imported lazily so that the planning and format modules stay usable
(and fast to import) without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feedline.episodes.dataset import EpisodeDataset
    from feedline.episodes.streaming import StreamingEpisodeDataset

__all__ = ["EpisodeDataset", "StreamingEpisodeDataset"]


def __getattr__(name: str) -> Any:
    if name == "EpisodeDataset":
        from feedline.episodes.dataset import EpisodeDataset

        return EpisodeDataset
    if name == "StreamingEpisodeDataset":
        from feedline.episodes.streaming import StreamingEpisodeDataset

        return StreamingEpisodeDataset
    raise AttributeError(f"module 'feedline.episodes' has no attribute {name!r}")
