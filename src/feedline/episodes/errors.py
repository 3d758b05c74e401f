"""Errors of the episode reader, all under :class:`EpisodesError`.

``except EpisodesError`` catches any of them; the CLI prints each as one line. Three families:
dataset problems (``EpisodeDatasetError``: metadata, arguments, windows), MP4 index problems
(``SidecarError``: an unreadable or unsupported video, a sidecar that cannot be built, a frame
missing at a wanted time) and scheduling problems (``StreamingError``: plan, pool, byte budget,
resume). Each message names what is wrong and what to change, and names a setting by the
keyword the Python caller used (a command line swaps in its flags with
:func:`feedline.episodes.settings.cli_message`).
"""

from __future__ import annotations

import math

from feedline.errors import FeedlineError

__all__ = [
    "DeltaTimestampsError",
    "EpisodeDatasetError",
    "EpisodeFormatError",
    "EpisodesError",
    "EpisodeTooLargeError",
    "ForecastError",
    "FrameTimestampError",
    "IndexDamaged",
    "MixtureError",
    "Mp4Error",
    "ParquetDamaged",
    "PlanError",
    "ReportError",
    "ResumeMismatchError",
    "SidecarDamaged",
    "SidecarError",
    "StreamingError",
    "SynthError",
    "TrainError",
    "VideoChangedError",
]


class EpisodesError(FeedlineError):
    """Root of the episode reader's errors: catch it to handle any ``feedline.episodes`` failure."""


class EpisodeDatasetError(EpisodesError):
    """A dataset cannot be opened or read as asked (bad arguments, unreachable root)."""


class EpisodeFormatError(EpisodeDatasetError):
    """A dataset's metadata is missing, of another version, or inconsistent; names the file."""


class ParquetDamaged(EpisodeFormatError):
    """A Parquet page whose bytes fail the CRC-32 its writer stored: the file was damaged after it
    was written (on disk, in transit), so its rows are never used; names the file."""


class DeltaTimestampsError(EpisodeDatasetError):
    """``delta_timestamps`` that cannot be resolved to whole frames, or name unknown features."""


class SynthError(EpisodeDatasetError):
    """Bad arguments to the synthetic writer, or a frame whose identity cannot be read."""


class StreamingError(EpisodesError):
    """A streaming-reader problem the user can fix by changing settings or data."""


class PlanError(StreamingError):
    """The shard plan cannot be built (e.g. more ranks than selected episodes)."""


class MixtureError(StreamingError):
    """A mixture of sources cannot be built as given (counts, schema, offsets); names the
    sources involved."""


class EpisodeTooLargeError(StreamingError):
    """One episode's payload can never fit the byte budget; raised before anything is fetched.

    Args:
        episode_index: the episode.
        episode_bytes: its exact payload size.
        budget_bytes: the budget it does not fit (one worker's share, or the rank's).
        rank_budget_bytes: the whole rank's budget, named as ``byte_budget_gb``. Default
            ``None``: ``budget_bytes``.
        parts: DataLoader workers sharing the rank budget, at least 1 (a
            :class:`~feedline.episodes.schedule.slot.WorkerSlot`'s ``parts``; >1: the message
            says the worker's share is 1/N). Default 1.
    """

    def __init__(
        self,
        episode_index: int,
        episode_bytes: int,
        budget_bytes: int,
        *,
        rank_budget_bytes: int | None = None,
        parts: int = 1,
    ) -> None:
        self.episode_index = episode_index
        self.episode_bytes = episode_bytes
        self.budget_bytes = budget_bytes
        rank_budget = budget_bytes if rank_budget_bytes is None else rank_budget_bytes
        workers = parts
        if workers > 1:
            where = (
                f"the byte budget of one DataLoader worker ({_size(budget_bytes)}, 1/{workers} of "
                f"the rank budget byte_budget_gb={_gb_setting(rank_budget)})"
            )
        else:
            where = f"the rank byte budget byte_budget_gb={_gb_setting(rank_budget)}"
        super().__init__(
            f"episode {episode_index} needs {_size(episode_bytes)} of MP4+Parquet payload, more than "
            f"{where}; fixes: (1) raise byte_budget_gb to at least "
            f"{_gb_at_least(episode_bytes * workers)}, "
            f"(2) use a smaller pool (fewer num_workers / episode_pool_size) so each "
            f"worker's share is larger, or (3) make the episode's payload smaller (split long "
            f"episodes, fewer or smaller cameras, a lower bitrate)"
        )


class ResumeMismatchError(StreamingError):
    """A checkpoint's data-order settings differ from the current run's."""


def _size(nbytes: int) -> str:
    """``nbytes`` in the unit that fits: ``512 B``, ``12.500 KiB``, ``3.250 MiB``, ``5.000 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3f} {unit}"
    return f"{nbytes} B"


def _decimals(gb: float, digits: int) -> int:
    """Decimals that show ``digits`` significant digits of ``gb`` (at least ``digits``)."""
    return digits if gb >= 1 or gb <= 0 else max(digits, digits - 1 - math.floor(math.log10(gb)))


def _gb_setting(nbytes: int) -> str:
    """A byte count as a ``*_gb`` setting's value (GiB), never rounded to ``0.000``."""
    gb = nbytes / 2**30
    return f"{gb:.{_decimals(gb, 3)}f}"


def _gb_at_least(nbytes: int) -> str:
    """The smallest ``*_gb`` value (rounded up, two decimals or three significant digits) that
    holds ``nbytes``."""
    gb = nbytes / 2**30
    places = _decimals(gb, 2) if gb >= 1 else _decimals(gb, 3)
    return f"{math.ceil(gb * 10**places - 1e-9) / 10**places:.{places}f}"


class SidecarError(EpisodesError):
    """The MP4 sidecar index of a video cannot be built, loaded or used."""


class SidecarDamaged(SidecarError):
    """A sidecar archive that is not what its writer wrote (truncated, bad CRC, missing members,
    a malformed ``meta.json``): a cache of ours to rebuild, a published one to ignore."""


class IndexDamaged(SidecarError):
    """A derived-index folder that fails its checks (rebuilt by
    :func:`~feedline.episodes.video.index.derived_tables`)."""


class Mp4Error(SidecarError):
    """An MP4 file is malformed or uses something the index rejects (named in the message)."""


class FrameTimestampError(SidecarError):
    """No decoded frame lies within the tolerance of a wanted timestamp."""


class VideoChangedError(SidecarError):
    """A video file was replaced after the dataset was opened (its index no longer matches it)."""


class TrainError(EpisodesError):
    """A ``feedline train`` command that cannot run as given: a bad flag, an unreachable or missing
    dataset, a checkpoint that cannot be resumed. Its messages name flags, never Python keywords."""


class ForecastError(EpisodesError):
    """``feedline plan`` cannot predict or measure as asked: a malformed ``--link``, a topology
    the dataset cannot fill, a run that gave no batch."""


class ReportError(EpisodesError):
    """A run report cannot be written: the ``feedline[report]`` extra is missing, or the events
    it is drawn from are unreadable."""
