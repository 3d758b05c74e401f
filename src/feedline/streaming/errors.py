"""Errors of the streaming floor, all under :class:`StreamingError`, which roots at ``FeedlineError``.

Why their own root: the plan, pools, byte budget and resume serve the episode reader and the
token reader alike, so a scheduling error belongs to neither reader's part. ``except
FeedlineError`` catches them as before; ``except EpisodesError`` no longer does (catch
``StreamingError`` too, or ``FeedlineError``). Messages name a setting by the keyword the Python
caller used; a command line swaps in its flags
(:func:`feedline.episodes.settings.cli_message`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from feedline.errors import FeedlineError
from feedline.run.progress import human_bytes

__all__ = [
    "EPISODE_UNIT",
    "MixtureError",
    "PlanError",
    "ResumeMismatchError",
    "StreamingError",
    "UnitKind",
    "UnitTooLargeError",
]


class StreamingError(FeedlineError):
    """A streaming problem the user can fix by changing settings or data."""


class PlanError(StreamingError):
    """The shard plan cannot be built (e.g. more ranks than units to deal)."""


class MixtureError(StreamingError):
    """A mixture of sources cannot be built as given (counts, schema, offsets); names the
    sources involved."""


class ResumeMismatchError(StreamingError):
    """A checkpoint's data-order settings differ from the current run's."""


@dataclass(frozen=True)
class UnitKind:
    """How messages name a reader's unit and the settings that bound it.

    Args:
        unit: what a unit is (``"episode"``, ``"chunk"``).
        payload: what its fetched bytes are.
        shrink: how to make one smaller.
        budget_setting: the byte budget's keyword. Default ``"byte_budget_gb"``.
        pool_setting: the pool size's keyword. Default ``"pool_size"``.
    """

    unit: str
    payload: str
    shrink: str
    budget_setting: str = "byte_budget_gb"
    pool_setting: str = "pool_size"


#: The episode reader's unit, the default where the floor is used without a reader.
EPISODE_UNIT = UnitKind(
    "episode", "MP4+Parquet payload",
    "split long episodes, fewer or smaller cameras, a lower bitrate",
    pool_setting="episode_pool_size",
)


class UnitTooLargeError(StreamingError):
    """One unit's payload can never fit the byte budget; raised before anything is fetched.

    Args:
        episode_index: the unit (an episode, a token chunk, a mixture's unit id).
        episode_bytes: its exact payload size.
        budget_bytes: the budget it does not fit (one worker's share, or the rank's).
        rank_budget_bytes: the whole rank's budget, named by its setting. Default ``None``:
            ``budget_bytes``.
        parts: DataLoader workers sharing the rank budget, at least 1 (a
            :class:`~feedline.streaming.schedule.slot.WorkerSlot`'s ``parts``; >1: the message
            says the worker's share is 1/N). Default 1.
        kind: how the message names the unit and its settings. Default :data:`EPISODE_UNIT`.
    """

    def __init__(
        self,
        episode_index: int,
        episode_bytes: int,
        budget_bytes: int,
        *,
        rank_budget_bytes: int | None = None,
        parts: int = 1,
        kind: UnitKind = EPISODE_UNIT,
    ) -> None:
        self.episode_index = episode_index
        self.episode_bytes = episode_bytes
        self.budget_bytes = budget_bytes
        self.kind = kind
        setting = kind.budget_setting
        rank_budget = budget_bytes if rank_budget_bytes is None else rank_budget_bytes
        workers = parts
        if workers > 1:
            where = (
                f"the byte budget of one DataLoader worker ({human_bytes(budget_bytes, 3)}, 1/{workers} "
                f"of the rank budget {setting}={_gb_setting(rank_budget)})"
            )
        else:
            where = f"the rank byte budget {setting}={_gb_setting(rank_budget)}"
        super().__init__(
            f"{kind.unit} {episode_index} needs {human_bytes(episode_bytes, 3)} of {kind.payload}, more "
            f"than {where}; fixes: (1) raise {setting} to at least "
            f"{_gb_at_least(episode_bytes * workers)}, "
            f"(2) use a smaller pool (fewer num_workers / {kind.pool_setting}) so each "
            f"worker's share is larger, or (3) make the {kind.unit}'s payload smaller "
            f"({kind.shrink})"
        )


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
