"""Elastic resume: which anchors of an epoch are still due after runs of other topologies.

Why: a checkpoint taken with W ranks, K DataLoader workers and batch size B must resume under
W', K', B' in the middle of the epoch without repeating or skipping an anchor. The checkpoint
stays a few integers: one :class:`Stage` per topology the epoch ran under (W, K, B, drop_last
and the batches each rank consumed). Ranks step in lockstep (``lerobot-train`` takes the same
number of batches on every rank), so one rank's count is every rank's, capped at a rank's own
batches.

What is due is a pure function of (episode lengths, seed, epoch, stages): starting from every
frame of the epoch, each stage plans the frames still due over its topology
(:func:`~feedline.streaming.schedule.plan.plan_shards_arrays` weighted by due frames), replays
each of its (rank, worker) pools up to the anchors the loader had delivered
(:mod:`~feedline.streaming.schedule.loader`), and removes them (:func:`remainder_after`). The next
stage plans what is left the same way, so a partly consumed episode stays whole: its due frames
go to one worker, whose pool yields just those (``EpisodePool(frames=...)``). With no stage the
remainder is the whole epoch and the plan is the ordinary one, so a resume that changes nothing
is the sample-exact resume it always was.

How the reader calls it::

    make_pool = PoolMaker(strategy, pool_size, seed, lengths, byte_budget, episode_bytes)
    due = remainder_after(lengths, stages, seed=seed, epoch=epoch, make_pool=make_pool)
    plan = stage_plan(due, world_size=W2, num_workers=K2, seed=seed, epoch=epoch)
    pool = make_pool(plan.parts[rank][part], epoch=epoch, rank=rank, part=part,
                     num_workers=K2, remainder=due)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from feedline.streaming.schedule.even import EVEN_MODES, even_counts
from feedline.streaming.schedule.loader import batches_per_worker, worker_offsets
from feedline.streaming.schedule.plan import EpisodeLengths, ShardPlan, plan_shards_arrays
from feedline.streaming.schedule.pool import EpisodePool, aligned, aligned_columns, sorted_columns
from feedline.streaming.schedule.slot import WorkerSlot, worker_parts
from feedline.streaming.schedule.stratified import StratifiedPool, split_share

__all__ = [
    "MAX_STAGES",
    "EpochUnits",
    "PoolMaker",
    "Remainder",
    "Stage",
    "consumed_anchors",
    "consumed_by_worker",
    "epoch_start",
    "remainder_after",
    "stage_plan",
    "subtract",
]

#: Most topologies one epoch may run under (the shared control block holds this many).
MAX_STAGES = 16


@dataclass(frozen=True)
class Stage:
    """One stretch of an epoch under one topology: what its ranks had consumed when it ended.

    Args:
        world_size: ranks.
        num_workers: DataLoader workers per rank (0: in process).
        batch_size: samples per batch.
        drop_last: whether each worker's partial last batch was dropped.
        batches: batches every rank consumed (lockstep; a rank with fewer took all of its own).
        even: how its ranks' batches were evened out
            (:data:`~feedline.streaming.schedule.even.EVEN_MODES`). Default ``"none"``: what
            checkpoints of five integers ran under.
    """

    world_size: int
    num_workers: int
    batch_size: int
    drop_last: bool
    batches: int
    even: str = "none"

    def to_list(self) -> list[int]:
        """The checkpoint form: six integers (the last is the evening-out mode's number)."""
        values = astuple(self)[:-1]
        return [*(int(v) for v in values), EVEN_MODES.index(self.even)]

    @classmethod
    def from_list(cls, values: Sequence[int]) -> Stage:
        w, k, b, drop, n, *rest = (int(v) for v in values)
        mode = rest[0] if rest else EVEN_MODES.index("none")
        if len(rest) > 1 or not 0 <= mode < len(EVEN_MODES):
            raise ValueError(f"a stage is 5 or 6 integers with an evening-out mode below "
                             f"{len(EVEN_MODES)}, not {list(values)}")
        return cls(w, k, b, bool(drop), n, EVEN_MODES[mode])

    def describe(self) -> str:
        return f"{self.world_size} rank(s) x {self.num_workers} worker(s) x batch {self.batch_size}"


@dataclass(frozen=True)
class Remainder:
    """The anchors of an epoch still due.

    Args:
        lengths: every episode with a due frame -> how many are due.
        frames: partly consumed episodes only -> their due frame indices, sorted.
    """

    lengths: dict[int, int]
    frames: dict[int, np.ndarray]

    @classmethod
    def whole(cls, episode_lengths: Mapping[int, int]) -> Remainder:
        return cls(dict(episode_lengths), {})

    @property
    def total(self) -> int:
        return sum(self.lengths.values())

    def due(self, episode: int) -> np.ndarray:
        """The due frame indices of ``episode``."""
        part = self.frames.get(episode)
        return np.arange(self.lengths[episode], dtype=np.int64) if part is None else part


@runtime_checkable
class EpochUnits(Protocol):
    """Units that change from epoch to epoch (a mixture's copies and extras windows,
    :class:`~feedline.streaming.schedule.mixture.MixtureUnits`): ``epoch(n)`` gives epoch ``n``'s."""

    def epoch(self, epoch: int) -> Remainder: ...


def epoch_start(units: Mapping[int, int] | EpochUnits, epoch: int) -> Remainder:
    """Every anchor of ``epoch`` before anything is consumed: the whole of a fixed selection
    (episode index -> frames), or what an :class:`EpochUnits` gives for that epoch."""
    if isinstance(units, EpochUnits):
        return units.epoch(epoch)
    return Remainder.whole(units)


@dataclass(frozen=True)
class PoolMaker:
    """How every worker of a run builds its pool: the reader, its tracker and the replay share it.

    Args:
        strategy: the pool strategy's name.
        pool_size: episodes resident per rank (each worker holds its share).
        seed: the resolved order seed.
        episode_lengths: frames per selected episode.
        byte_budget: payload bytes resident per rank, with ``episode_bytes``. Default ``None``.
        episode_bytes: each episode's payload size, to admit by bytes too. Default ``None``.
        groups: maps units to their source, for a mixture whose plan deals every source on its
            own. Default ``None``.
        stratified: each worker runs one pool per source and interleaves them by per-batch
            quotas (:mod:`~feedline.streaming.schedule.stratified`); needs ``groups`` and the
            batch size. Default ``False``.
    """

    strategy: str
    pool_size: int
    seed: int
    episode_lengths: Mapping[int, int]
    byte_budget: int | None = None
    episode_bytes: Mapping[int, int] | None = None
    groups: Callable[[np.ndarray], np.ndarray] | None = None
    stratified: bool = False

    @functools.cached_property
    def _columns(self) -> dict[str, tuple[np.ndarray, np.ndarray] | None]:
        """The lengths' and byte sizes' (keys, values) as sorted arrays, made once: :meth:`warm`
        makes them in the opening process, so that forked workers share them and never walk
        (and, by touching reference counts, copy) the million Python objects of the dicts."""
        return {
            "lengths": sorted_columns(self.episode_lengths),
            "episode_bytes": (
                None if self.episode_bytes is None else sorted_columns(self.episode_bytes)
            ),
        }

    def warm(self) -> None:
        """Make the arrays :meth:`values_of` reads (before the DataLoader forks its workers)."""
        self._columns  # noqa: B018 - computed for its cache

    def values_of(self, which: str, order: np.ndarray) -> Any:
        """``lengths`` or ``episode_bytes`` of ``order``'s episodes, parallel to it (the mapping
        itself when it is not a dict of integers)."""
        columns = self._columns[which]
        mapping = self.episode_lengths if which == "lengths" else self.episode_bytes
        if columns is None:
            return mapping
        return aligned_columns(np.asarray(order, dtype=np.int64), *columns, which)

    def plan_input(self, lengths: Mapping[int, int]) -> Any:
        """What to plan ``lengths`` from: when they are this maker's own lengths of episodes
        ``0..n-1``, their cached array (the plan reads it as the same selection), else
        ``lengths`` itself."""
        columns = self._columns["lengths"] if lengths is self.episode_lengths else None
        if columns is None:
            return lengths
        keys, values = columns
        if keys.size and keys[0] == 0 and keys[-1] == keys.size - 1:
            return values
        return lengths

    @property
    def plan_groups(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """What the plan deals on its own: each source, when the batches are stratified."""
        return self.groups if self.stratified else None

    def __call__(
        self, order: Sequence[int] | np.ndarray, *, epoch: int, rank: int, part: int,
        num_workers: int, remainder: Remainder | None = None, batch_size: int | None = None,
    ) -> EpisodePool | StratifiedPool:
        """The pool of plan part ``part`` of ``rank`` (over ``remainder``'s due frames); a
        stratified mixture's needs the ``batch_size`` its batches are cut with."""
        slot = WorkerSlot(num_workers=num_workers)
        by_bytes = self.episode_bytes is not None and self.byte_budget is not None
        order = np.asarray(order, dtype=np.int64)
        lengths: Any = (
            self.values_of("lengths", order) if remainder is None else remainder.lengths
        )
        episode_bytes = self.values_of("episode_bytes", order) if by_bytes else None
        common = dict(
            strategy=self.strategy, seed=self.seed, epoch=epoch, rank=rank, worker=part,
            frames=None if remainder is None else remainder.frames,
        )
        pool_size = slot.share(self.pool_size)
        budget = slot.share(self.byte_budget) if by_bytes else None  # type: ignore[arg-type]
        if not (self.stratified and self.groups is not None):
            return EpisodePool(
                order, lengths, pool_size=pool_size, episode_bytes=episode_bytes,
                byte_budget=budget, **common,  # type: ignore[arg-type]
            )
        group = np.asarray(self.groups(order), dtype=np.int64)
        present = np.unique(group).tolist()
        masks = [group == g for g in present]
        members = [order[mask] for mask in masks]
        sizes = split_share(pool_size, [m.size for m in members])
        nbytes = [  # each source's bytes in the worker, summed with arrays
            int(aligned(m, self.episode_bytes, "episode_bytes").sum()) for m in members
        ] if by_bytes else []
        budgets = split_share(budget, nbytes) if by_bytes and budget else [None] * len(members)
        pools = [
            EpisodePool(
                m, _part(lengths, mask), pool_size=size,
                episode_bytes=None if episode_bytes is None else _part(episode_bytes, mask),
                byte_budget=b, substream=1 + g, **common,  # type: ignore[arg-type]
            )
            for m, mask, size, b, g in zip(members, masks, sizes, budgets, present, strict=True)
        ]
        return StratifiedPool(pools, batch_size or 0)


def _part(values: Any, mask: np.ndarray) -> Any:
    """A source's share of values parallel to the worker's order (a mapping is kept whole)."""
    return values if isinstance(values, Mapping) else values[mask]


def stage_plan(
    remainder: Remainder, *, world_size: int, num_workers: int, seed: int, epoch: int,
    groups: Callable[[np.ndarray], np.ndarray] | None = None,
) -> ShardPlan:
    """The shard plan of the due frames: whole (due parts of) episodes, balanced by due frames
    (each of ``groups`` on its own, for a stratified mixture)."""
    lengths: EpisodeLengths = remainder.lengths
    return plan_shards_arrays(
        lengths, world_size=world_size, num_workers=num_workers, seed=seed, epoch=epoch,
        groups=groups,
    )


def consumed_by_worker(
    remainder: Remainder, stage: Stage, *, seed: int, epoch: int, make_pool: PoolMaker
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per (rank, worker) of ``stage``, the (episodes, frames) its loader had delivered.

    Replayed from the pure schedule; one worker at a time, so memory holds one worker's share.
    """
    plan = stage_plan(
        remainder, world_size=stage.world_size, num_workers=stage.num_workers, seed=seed,
        epoch=epoch, groups=make_pool.plan_groups,
    )
    parts = worker_parts(stage.num_workers)
    evened = even_counts(plan.report.worker_frames, parts, stage.even)
    for rank, frames_of in enumerate(plan.report.worker_frames):
        counts = evened[rank].tolist()
        total = sum(batches_per_worker(counts, stage.batch_size, stage.drop_last))
        offsets = worker_offsets(counts, stage.batch_size, stage.drop_last,
                                 min(stage.batches, total))
        for part, offset in enumerate(offsets):
            # a padded worker's repeats come after all of its own anchors: they consume none
            offset = min(offset, frames_of[part] if part < len(frames_of) else 0)
            if offset:
                pool = make_pool(plan.parts[rank][part], epoch=epoch, rank=rank, part=part,
                                 num_workers=stage.num_workers, remainder=remainder,
                                 batch_size=stage.batch_size)
                yield pool.take(offset)


def consumed_anchors(
    remainder: Remainder, stage: Stage, *, seed: int, epoch: int, make_pool: PoolMaker
) -> tuple[np.ndarray, np.ndarray]:
    """(episodes, frames) every rank of ``stage`` had consumed, replayed from the pure schedule."""
    chunks = list(consumed_by_worker(remainder, stage, seed=seed, epoch=epoch,
                                     make_pool=make_pool))
    if not chunks:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])


def subtract(remainder: Remainder, episodes: np.ndarray, frames: np.ndarray) -> Remainder:
    """``remainder`` without the given anchors (each must be due; none twice)."""
    out = Remainder(dict(remainder.lengths), dict(remainder.frames))
    _remove(out, episodes, frames)
    return out


def _remove(remainder: Remainder, episodes: np.ndarray, frames: np.ndarray) -> None:
    """Remove the given anchors from ``remainder`` in place (a worker's episodes are its own,
    so no episode is split over two calls of one stage)."""
    if episodes.size == 0:
        return
    order = np.lexsort((frames, episodes))
    episodes, frames = episodes[order], frames[order]
    touched, starts, taken = np.unique(episodes, return_index=True, return_counts=True)
    lengths, partial = remainder.lengths, remainder.frames
    for episode, start, n in zip(touched.tolist(), starts.tolist(), taken.tolist(), strict=True):
        if n == lengths[episode]:  # wholly consumed
            del lengths[episode]
            partial.pop(episode, None)
            continue
        due = remainder.due(episode)
        keep = np.ones(due.size, dtype=bool)
        keep[np.searchsorted(due, frames[start : start + n])] = False
        lengths[episode] = int(keep.sum())
        partial[episode] = due[keep]


def remainder_after(
    episode_lengths: Mapping[int, int] | EpochUnits, stages: Sequence[Stage], *, seed: int,
    epoch: int, make_pool: PoolMaker,
) -> Remainder:
    """The anchors of ``epoch`` still due after ``stages`` ran in turn (see the module docstring);
    ``episode_lengths`` is a fixed selection or the :class:`EpochUnits` of a mixture."""
    remainder = epoch_start(episode_lengths, epoch)
    for stage in stages:
        if not remainder.lengths:
            break
        # a stage's plan reads the remainder before it: remove into a copy
        after = Remainder(dict(remainder.lengths), dict(remainder.frames))
        for eps, frames in consumed_by_worker(remainder, stage, seed=seed, epoch=epoch,
                                              make_pool=make_pool):
            _remove(after, eps, frames)
        remainder = after
    return remainder
