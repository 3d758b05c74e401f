"""The shard plan: which rank and which DataLoader worker owns which whole episodes, per epoch.

The plan is a pure function of ``(episode lengths, world_size, num_workers, seed, epoch)``: every
process computes the same plan locally, with no communication, so resume needs only a few
integers (MosaicML Streaming's lesson).

Algorithm: one seeded permutation of the selected episodes per (seed, epoch); walking it, each
episode goes to the currently least-loaded rank (ties: lowest rank). This greedy list scheduling
bounds the spread of rank loads by the longest episode: ``max - min <= max_episode_frames``, and
every rank gets at least one episode whenever there are at least as many episodes as ranks.
Inside a rank the same walk (in the rank's seeded order) deals episodes to the least-loaded
worker, with the same bound. A worker's list keeps the seeded order: it is the worker's
*admission order*, the order its exact-coverage pool admits episodes.

Ranks are re-dealt every epoch: the reader keeps no disk cache to stay warm, so a fresh deal
costs no I/O and mixes episodes across ranks between epochs.

How the pipeline calls it::

    rank, world = resolve_rank_and_world()
    plan = plan_shards(lengths, world_size=world, num_workers=num_workers, seed=seed, epoch=epoch)
    parts = plan[rank]                  # len(parts) = effective worker count of this rank
    order = parts[worker_id] if worker_id < len(parts) else []   # idle worker: yields nothing
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from feedline.streaming.errors import PlanError
from feedline.validate import check_int

__all__ = [
    "PlanReport",
    "ShardPlan",
    "episode_arrays",
    "plan_report",
    "plan_shards",
    "plan_shards_arrays",
    "resolve_rank_and_world",
]

log = logging.getLogger(__name__)

_PLAN_STREAM = 0x504C414E  # "PLAN": keeps the plan's random stream apart from the pools'
_INT64_MAX = np.iinfo(np.int64).max
_DEAL_CHUNK = 1 << 16  # items per chunk of the greedy deal's Python ints

EpisodeLengths = Mapping[int, int] | Sequence[int] | np.ndarray


def episode_arrays(episode_lengths: EpisodeLengths) -> tuple[np.ndarray, np.ndarray]:
    """Normalise ``episode_lengths`` to (sorted episode indices, frames) int64 arrays.

    A mapping gives episode index -> frames (any subset of a dataset); a sequence or array gives
    the frames of episodes ``0..n-1``.
    """
    if isinstance(episode_lengths, Mapping):
        indices = np.fromiter(episode_lengths.keys(), dtype=np.int64, count=len(episode_lengths))
        lengths = np.fromiter(episode_lengths.values(), dtype=np.int64, count=len(episode_lengths))
        order = np.argsort(indices, kind="stable")
        indices, lengths = indices[order], lengths[order]
    else:
        lengths = np.asarray(episode_lengths, dtype=np.int64).reshape(-1)
        indices = np.arange(lengths.size, dtype=np.int64)
    if lengths.size == 0:
        raise PlanError("no episodes selected: the shard plan needs at least one episode")
    if indices.size > 1 and np.any(indices[1:] == indices[:-1]):
        raise PlanError("episode indices must be unique in episode_lengths")
    if indices[0] < 0:
        raise PlanError(f"episode index {int(indices[0])} is negative")
    bad = np.flatnonzero(lengths < 1)
    if bad.size:
        i = int(bad[0])
        raise PlanError(
            f"episode {int(indices[i])} has {int(lengths[i])} frames; streaming needs at least "
            "one frame per selected episode (leave empty episodes out of the selection)"
        )
    return indices, lengths


@dataclass(frozen=True)
class PlanReport:
    """How balanced a plan is; ``describe()`` is the log line.

    Args:
        world_size: ranks planned for.
        requested_workers: the DataLoader's ``num_workers`` (0: one in-process part).
        rank_frames: frames each rank owns.
        rank_episodes: episodes each rank owns.
        worker_frames: per rank, frames each of its effective workers owns.
        max_episode_frames: the longest episode: the bound on the rank (and worker) spread.
    """

    world_size: int
    requested_workers: int
    rank_frames: tuple[int, ...]
    rank_episodes: tuple[int, ...]
    worker_frames: tuple[tuple[int, ...], ...]
    max_episode_frames: int

    @property
    def rank_spread(self) -> int:
        """Largest minus smallest rank load in frames (bounded by ``max_episode_frames``)."""
        return max(self.rank_frames) - min(self.rank_frames)

    @property
    def rank_imbalance(self) -> float:
        """``rank_spread`` relative to the mean rank load."""
        mean = sum(self.rank_frames) / len(self.rank_frames)
        return self.rank_spread / mean

    @property
    def effective_workers(self) -> tuple[int, ...]:
        """Workers each rank really uses (never more than its episodes)."""
        return tuple(len(w) for w in self.worker_frames)

    @property
    def worker_spread(self) -> int:
        """Largest within-rank spread of worker loads, in frames."""
        return max(max(w) - min(w) for w in self.worker_frames)

    def describe(self) -> str:
        return (
            f"plan: {sum(self.rank_episodes)} episodes / {sum(self.rank_frames)} frames over "
            f"{self.world_size} rank(s); frames per rank {min(self.rank_frames)}..."
            f"{max(self.rank_frames)} (spread {self.rank_spread}, {self.rank_imbalance:.2%} of "
            f"the mean, bound {self.max_episode_frames}); workers per rank "
            f"{min(self.effective_workers)}..{max(self.effective_workers)} "
            f"(requested {self.requested_workers}), worker spread {self.worker_spread} frames"
        )


@dataclass(frozen=True)
class ShardPlan:
    """The plan as numpy arrays: ``parts[rank][worker]`` holds episode indices in admission order.

    Args:
        parts: per rank, per effective worker, an int64 array of episode indices.
        report: the plan's balance.
    """

    parts: list[list[np.ndarray]]
    report: PlanReport

    def to_lists(self) -> list[list[list[int]]]:
        """The same plan as plain lists (what :func:`plan_shards` returns)."""
        return [[part.tolist() for part in rank] for rank in self.parts]


def _greedy_deal(lengths: np.ndarray, bins: int) -> np.ndarray:
    """Deal items (in the given order) to the least-loaded of ``bins`` bins; returns bin ids.

    Each item depends on every deal before it, so the walk stays sequential; it is kept lean
    instead: a bin is the integer ``load * bins + bin`` (least load, then lowest bin, is the
    least integer), so one step is a heap replace of integers, with no tuple per item.
    """
    if bins == 1:
        return np.zeros(lengths.size, dtype=np.int64)
    if lengths.size == 0:
        return np.zeros(0, dtype=np.int64)
    if bins == 2:  # two bins: the lighter one is the sign of their difference, no heap
        return _two_bin_deal(lengths)
    if int(lengths.sum()) * bins + bins > _INT64_MAX:
        return _greedy_deal_tuples(lengths, bins)
    heap = list(range(bins))  # load 0 in every bin: already a heap
    out = np.empty(lengths.size, dtype=np.int64)
    replace = heapq.heapreplace
    for start in range(0, lengths.size, _DEAL_CHUNK):  # a chunk's ints at a time, not all
        steps = (lengths[start : start + _DEAL_CHUNK] * bins).tolist()
        keys = [0] * len(steps)
        for i, step in enumerate(steps):
            key = heap[0]
            keys[i] = key
            replace(heap, key + step)
        out[start : start + len(keys)] = keys
    return out % bins


def _two_bin_deal(lengths: np.ndarray) -> np.ndarray:
    """:func:`_greedy_deal` into two bins: bin 1 when it is strictly lighter (``load0 - load1
    > 0``), else bin 0 (ties to the lowest), one comparison per item."""
    out = bytearray(lengths.size)
    difference = 0  # load of bin 0 minus load of bin 1
    for i, n in enumerate(lengths.tolist()):
        if difference <= 0:
            difference += n
        else:
            difference -= n
            out[i] = 1
    return np.frombuffer(bytes(out), dtype=np.uint8).astype(np.int64)


def _greedy_deal_tuples(lengths: np.ndarray, bins: int) -> np.ndarray:
    """:func:`_greedy_deal` with ``(load, bin)`` tuples, for loads past what int64 holds."""
    heap = [(0, b) for b in range(bins)]
    out = [0] * lengths.size
    replace = heapq.heapreplace
    for i, n in enumerate(lengths.tolist()):
        load, b = heap[0]
        out[i] = b
        replace(heap, (load + n, b))
    return np.asarray(out, dtype=np.int64)


def _grouped_deal(lengths: np.ndarray, groups: np.ndarray, bins: int) -> np.ndarray:
    """Deal each group's items (in the given order) to the bin with the least of that group,
    ties to the least loaded in all, then the lowest: every bin gets its share of every group
    within the group's longest item, and small groups go to empty bins first.

    As in :func:`_greedy_deal`, a bin is one integer, ``(group load * span + load) * bins +
    bin`` with ``span`` above any load, whose order is that of the ``(group load, load, bin)``
    it encodes (Python integers, so it never overflows)."""
    out = np.zeros(lengths.size, dtype=np.int64)
    if bins == 1:
        return out
    span = int(lengths.sum()) + 1
    total = [0] * bins
    replace = heapq.heapreplace
    for g in np.unique(groups).tolist():
        members = np.flatnonzero(groups == g)
        heap = [total[b] * bins + b for b in range(bins)]
        heapq.heapify(heap)
        step = bins * (span + 1)  # one frame more in the group and in all
        keys = [0] * members.size
        for i, n in enumerate(lengths[members].tolist()):
            key = heap[0]
            keys[i] = key
            replace(heap, key + n * step)
        out[members] = (
            np.asarray(keys, dtype=np.int64) % bins if span * (span + 1) * bins < _INT64_MAX
            else [key % bins for key in keys]
        )
        for key in heap:
            total[key % bins] = (key // bins) % span
    return out


def plan_shards_arrays(
    episode_lengths: EpisodeLengths, *, world_size: int, num_workers: int, seed: int | None,
    epoch: int, groups: Callable[[np.ndarray], np.ndarray] | None = None,
) -> ShardPlan:
    """Vectorised form of :func:`plan_shards` returning numpy arrays and the balance report.

    ``groups`` maps episode indices to a group (a stratified mixture's sources): then every
    rank and worker gets its share of each group, within the group's longest episode.
    """
    from feedline.streaming.schedule.pool import (
        resolve_seed,  # the seed constants live with the pool
    )

    world_size = check_int("world_size", world_size, minimum=1, error=PlanError)
    num_workers = check_int("num_workers", num_workers, minimum=0, error=PlanError)
    epoch = check_int("epoch", epoch, minimum=0, error=PlanError)
    seed = resolve_seed(seed)
    indices, lengths = episode_arrays(episode_lengths)
    if indices.size < world_size:
        raise PlanError(
            f"{indices.size} selected episode(s) cannot give each of {world_size} ranks a whole "
            f"episode; reduce the number of ranks to at most {indices.size} (or select more "
            "episodes)"
        )
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, _PLAN_STREAM])))
    order = rng.permutation(indices.size)
    ordered_lengths = lengths[order]
    group_of = None if groups is None else np.asarray(groups(indices[order]), dtype=np.int64)

    def deal(members: np.ndarray | None, bins: int) -> np.ndarray:
        chosen = ordered_lengths if members is None else ordered_lengths[members]
        if group_of is None:
            return _greedy_deal(chosen, bins)
        return _grouped_deal(chosen, group_of if members is None else group_of[members], bins)

    rank_of = deal(None, world_size)
    parts: list[list[np.ndarray]] = []
    worker_frames: list[tuple[int, ...]] = []
    rank_frames = np.bincount(rank_of, weights=ordered_lengths, minlength=world_size)
    rank_episodes = np.bincount(rank_of, minlength=world_size)
    for rank in range(world_size):
        members = np.flatnonzero(rank_of == rank)
        workers = 1 if num_workers == 0 else min(num_workers, members.size)
        if 0 < workers < num_workers:
            log.info(
                "rank %d owns %d episode(s): using %d of %d DataLoader workers (the others idle)",
                rank, members.size, workers, num_workers,
            )
        worker_of = deal(members, workers)
        rank_parts = [indices[order[members[worker_of == w]]] for w in range(workers)]
        parts.append(rank_parts)
        worker_frames.append(
            tuple(int(x) for x in np.bincount(worker_of, ordered_lengths[members], workers))
        )
    report = PlanReport(
        world_size=world_size,
        requested_workers=num_workers,
        rank_frames=tuple(int(x) for x in rank_frames),
        rank_episodes=tuple(int(x) for x in rank_episodes),
        worker_frames=tuple(worker_frames),
        max_episode_frames=int(lengths.max()),
    )
    return ShardPlan(parts=parts, report=report)


def plan_shards(
    episode_lengths: EpisodeLengths, *, world_size: int, num_workers: int, seed: int | None,
    epoch: int,
) -> list[list[list[int]]]:
    """``plan[rank][worker]`` -> the episode indices that worker owns, in admission order.

    ``episode_lengths`` maps episode index -> frames for the selected episodes only.
    ``num_workers=0`` means one in-process part; a rank never gets more parts than episodes, so
    ``len(plan[rank])`` is its effective worker count. Raises :class:`PlanError` when some rank
    would get no episode.
    """
    return plan_shards_arrays(
        episode_lengths, world_size=world_size, num_workers=num_workers, seed=seed, epoch=epoch
    ).to_lists()


def plan_report(
    episode_lengths: EpisodeLengths, *, world_size: int, num_workers: int, seed: int | None,
    epoch: int,
) -> PlanReport:
    """The balance report of the plan :func:`plan_shards` returns for the same arguments."""
    return plan_shards_arrays(
        episode_lengths, world_size=world_size, num_workers=num_workers, seed=seed, epoch=epoch
    ).report


def resolve_rank_and_world() -> tuple[int, int]:
    """(rank, world_size) from an initialised torch.distributed group, else RANK/WORLD_SIZE."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except ImportError:  # torch without distributed support
        pass
    try:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as exc:
        raise PlanError(f"RANK/WORLD_SIZE must be integers ({exc})") from None
    if world < 1 or not 0 <= rank < world:
        raise PlanError(f"RANK={rank} is not in range for WORLD_SIZE={world}")
    return rank, world
