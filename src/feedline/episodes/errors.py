"""Errors of the episode reader, all under :class:`EpisodesError`.

``except EpisodesError`` catches the reader's own; the CLI prints each as one line. Three families:
dataset problems (``EpisodeDatasetError``: metadata, arguments, windows), MP4 index problems
(``SidecarError``: an unreadable or unsupported video, a sidecar that cannot be built, a frame
missing at a wanted time) and the reader's own commands (``TrainError``, ``ForecastError``,
``ReportError``). Scheduling problems (plan, pool, byte budget, resume, mixtures) are the
streaming floor's :class:`~feedline.streaming.errors.StreamingError`, re-exported here under
their old names; they root at ``FeedlineError``, not at ``EpisodesError``. Each message names what is wrong and what to change, and names a setting by the
keyword the Python caller used (a command line swaps in its flags with
:func:`feedline.episodes.settings.cli_message`).
"""

from __future__ import annotations

from feedline.errors import FeedlineError
from feedline.streaming.errors import (
    MixtureError,
    PlanError,
    ResumeMismatchError,
    StreamingError,
    UnitTooLargeError,
)

#: The floor's error for a unit too large for the byte budget, under the name it has always had.
EpisodeTooLargeError = UnitTooLargeError

__all__ = [
    "DeltaTimestampsError",
    "EpisodeDatasetError",
    "EpisodeFormatError",
    "EpisodesError",
    "EpisodeTooLargeError",
    "ForecastError",
    "FrameReleasedError",
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


class FrameReleasedError(EpisodesError):
    """An episode's frames were asked for after the pipeline released them: a bug in the order
    of the reader's own stages, never a damaged file (so not a :class:`SidecarError`)."""


class TrainError(EpisodesError):
    """A ``feedline train`` command that cannot run as given: a bad flag, an unreachable or missing
    dataset, a checkpoint that cannot be resumed. Its messages name flags, never Python keywords."""


class ForecastError(EpisodesError):
    """``feedline plan`` cannot predict or measure as asked: a malformed ``--link``, a topology
    the dataset cannot fill, a run that gave no batch."""


class ReportError(EpisodesError):
    """A run report cannot be written: the ``feedline[report]`` extra is missing, or the events
    it is drawn from are unreadable."""
