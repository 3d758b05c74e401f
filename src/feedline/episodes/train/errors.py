"""``TrainError``: a ``feedline train`` command that cannot run as given.

It derives from :class:`~feedline.episodes.errors.EpisodesError`, so ``except EpisodesError`` still
catches every failure of the episodes part; the CLI prints it as one line. Its messages name
flags (``--dataset.streaming_byte_budget_gb``), never Python keywords.
"""

from __future__ import annotations

from feedline.episodes.errors import EpisodesError

__all__ = ["TrainError"]


class TrainError(EpisodesError):
    """A bad flag, an unreachable or missing dataset, a checkpoint that cannot be resumed."""
