"""feedline.episodes: LeRobot v3 datasets read from any store, map-style or streamed.

Names load on first use so the planning and format modules stay usable (and fast to import)
without torch. ``except EpisodesError`` catches every error of this part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "EpisodeDataset": "feedline.episodes.dataset",
    "StreamingEpisodeDataset": "feedline.episodes.stream.dataset",
    "EpisodesError": "feedline.episodes.errors",
}

__all__ = [
    "EpisodeDataset",
    "EpisodesError",
    "StreamingEpisodeDataset",
]

if TYPE_CHECKING:
    from feedline.episodes.dataset import EpisodeDataset
    from feedline.episodes.errors import EpisodesError
    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
