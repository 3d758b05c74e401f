"""feedline.episodes: LeRobot v3 datasets read from any store, map-style or streamed.

Names load on first use so the planning and format modules stay usable (and fast to import)
without torch. ``except EpisodesError`` catches the dataset's own errors (metadata, Parquet,
sidecar, frames, the commands); the scheduler's (``MixtureError`` and the other
:class:`~feedline.streaming.errors.StreamingError` subclasses) root at ``FeedlineError``, so catch
that to handle both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "EpisodeDataset": "feedline.episodes.mapstyle",
    "StreamingEpisodeDataset": "feedline.episodes.stream.dataset",
    "EpisodesError": "feedline.episodes.errors",
    "Mixture": "feedline.episodes.mixture.sources",
    "MixtureError": "feedline.episodes.errors",
    "Source": "feedline.episodes.mixture.sources",
}

__all__ = [
    "EpisodeDataset",
    "EpisodesError",
    "Mixture",
    "MixtureError",
    "Source",
    "StreamingEpisodeDataset",
]

if TYPE_CHECKING:
    from feedline.episodes.errors import EpisodesError, MixtureError
    from feedline.episodes.mapstyle import EpisodeDataset
    from feedline.episodes.mixture.sources import Mixture, Source
    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
