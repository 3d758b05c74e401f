"""One worker's slot: its rank of the world, its DataLoader worker of the rank, its share of limits.

Why one value: limits are given per rank (pool size, byte budget, decoded-frame memory, open
decoders) and split between the rank's DataLoader workers; ``num_workers=0`` still reads with
one (in-process) worker. Each split used to write ``max(1, num_workers)`` itself, so "how many
parts" and "what is one part's share" are answered here once, and the one "episode too large"
check (:func:`check_episode_sizes`) compares an episode with the share it must fit.

With ``replication=N`` (tensor or context parallelism) N consecutive ranks read the same
samples: the plan, the pools and resume see ``world_size // N`` *data ranks* and this rank's
``rank // N`` (:func:`data_parallel_group`), so ownership and exact coverage count groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from feedline.streaming.errors import EPISODE_UNIT, StreamingError, UnitKind, UnitTooLargeError
from feedline.validate import check_int

__all__ = [
    "WorkerSlot",
    "check_episode_size_arrays",
    "check_episode_sizes",
    "data_parallel_group",
    "mapping_columns",
    "worker_parts",
]


def worker_parts(num_workers: int) -> int:
    """How many parts a rank's work is split into: its DataLoader workers, or one in process."""
    return max(1, num_workers)


def data_parallel_group(rank: int, world_size: int, replication: int) -> tuple[int, int]:
    """(data rank, data world size): ``rank``'s group of ``replication`` consecutive ranks and
    the number of groups; the planner deals to groups, so the ranks of one group read alike."""
    check_int("replication", replication, minimum=1, error=StreamingError)
    if world_size % replication:
        raise StreamingError(
            f"world_size {world_size} is not divisible by replication {replication}: "
            "every data-parallel group needs replication whole ranks"
        )
    return rank // replication, world_size // replication


@dataclass(frozen=True)
class WorkerSlot:
    """Where one worker stands: rank ``rank`` of ``world_size``, worker ``worker_id`` of its rank.

    Args:
        rank: the rank. Default 0.
        world_size: the number of ranks. Default 1.
        num_workers: the rank's DataLoader workers (0: one worker, in process). Default 0.
        worker_id: the DataLoader worker (0 in process). Default 0.
        replication: consecutive ranks that read the same samples. Default 1.
    """

    rank: int = 0
    world_size: int = 1
    num_workers: int = 0
    worker_id: int = 0
    replication: int = 1

    def __post_init__(self) -> None:
        for name, minimum in (("world_size", 1), ("rank", 0), ("num_workers", 0), ("worker_id", 0)):
            check_int(name, getattr(self, name), minimum=minimum, error=StreamingError)
        if self.rank >= self.world_size:
            raise StreamingError(f"rank {self.rank} is not in range for world_size {self.world_size}")
        if self.worker_id >= self.parts:
            raise StreamingError(
                f"worker {self.worker_id} is not in range for num_workers {self.num_workers}"
            )
        data_parallel_group(self.rank, self.world_size, self.replication)

    @property
    def data_rank(self) -> int:
        """The data-parallel group this rank reads for: the rank the plan and resume see."""
        return data_parallel_group(self.rank, self.world_size, self.replication)[0]

    @property
    def data_world_size(self) -> int:
        """Data-parallel groups: the world size the plan and resume see."""
        return data_parallel_group(self.rank, self.world_size, self.replication)[1]

    @property
    def parts(self) -> int:
        """Workers sharing the rank's limits (at least 1)."""
        return worker_parts(self.num_workers)

    def share(self, per_rank: int, *, minimum: int = 1) -> int:
        """This worker's share of a per-rank limit: 1/N of it (rounded down), at least ``minimum``.

        ``minimum=1`` for limits a worker cannot do without (pool size, byte budget, decoders);
        ``minimum=0`` for one that may be 0 (decoded-frame memory).
        """
        return max(minimum, per_rank // self.parts)

    def check_fits(
        self, episode_bytes: Mapping[int, int] | Iterable[tuple[int, int]], rank_budget_bytes: int,
        *, kind: UnitKind = EPISODE_UNIT,
    ) -> None:
        """Fail, before anything is fetched, if one episode alone exceeds this worker's share of
        ``rank_budget_bytes`` (the message names the episode, both budgets and the fixes)."""
        check_episode_sizes(
            episode_bytes, self.share(rank_budget_bytes), rank_budget_bytes=rank_budget_bytes,
            parts=self.parts, kind=kind,
        )


def check_episode_sizes(
    episode_bytes: Mapping[int, int] | Iterable[tuple[int, int]],
    budget_bytes: int,
    *,
    rank_budget_bytes: int | None = None,
    parts: int = 1,
    kind: UnitKind = EPISODE_UNIT,
) -> None:
    """The one "unit too large" check: every episode must fit ``budget_bytes`` alone.

    A mapping is checked with arrays (one comparison over a million episodes, not a Python
    step per episode); the first too-large episode in iteration order is the one named.

    Args:
        episode_bytes: each episode's exact payload size (a mapping or ``(episode, bytes)`` pairs).
        budget_bytes: the budget each must fit (a worker's share, or the rank's).
        rank_budget_bytes: the rank's budget the message names. Default ``None``: ``budget_bytes``.
        parts: workers sharing the rank budget. Default 1.
        kind: how the error names the unit and its settings. Default the episode reader's.
    """
    if isinstance(episode_bytes, Mapping):
        arrays = mapping_columns(episode_bytes)
        if arrays is not None:
            check_episode_size_arrays(
                *arrays, budget_bytes, rank_budget_bytes=rank_budget_bytes, parts=parts, kind=kind
            )
            return
    items = episode_bytes.items() if isinstance(episode_bytes, Mapping) else episode_bytes
    for episode, nbytes in items:
        if nbytes > budget_bytes:
            raise UnitTooLargeError(
                int(episode), int(nbytes), budget_bytes, rank_budget_bytes=rank_budget_bytes,
                parts=parts, kind=kind,
            )


def check_episode_size_arrays(
    episodes: np.ndarray,
    nbytes: np.ndarray,
    budget_bytes: int,
    *,
    rank_budget_bytes: int | None = None,
    parts: int = 1,
    kind: UnitKind = EPISODE_UNIT,
) -> None:
    """:func:`check_episode_sizes` of parallel arrays: the first too-large episode is named."""
    over = np.flatnonzero(np.asarray(nbytes) > budget_bytes)
    if over.size:
        i = int(over[0])
        raise UnitTooLargeError(
            int(episodes[i]), int(nbytes[i]), budget_bytes, rank_budget_bytes=rank_budget_bytes,
            parts=parts, kind=kind,
        )


def mapping_columns(mapping: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """(keys, values) of an integer mapping as int64 arrays in iteration order; ``None`` when
    they are not all integers (the caller then walks the items as before)."""
    if not isinstance(mapping, dict):  # other mappings compute their values one by one anyway
        return None
    try:
        keys = np.fromiter(mapping.keys(), np.int64, len(mapping))
        values = np.fromiter(mapping.values(), np.int64, len(mapping))
    except (TypeError, ValueError, OverflowError):
        return None
    return keys, values
