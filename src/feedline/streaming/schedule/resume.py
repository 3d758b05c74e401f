"""Resume arithmetic: from "batches this rank consumed" to "anchors each worker skips".

The anchor order is a pure function of (seed, epoch, sizes, settings), so the checkpoint holds a
few integers (:class:`ResumeState`). What is counted is what the *training loop consumed*, never
what workers produced (torchdata's rule): prefetched and decoded-ahead samples are regenerated.

Given the per-worker anchor counts of the plan, ``batches_consumed`` fixes how many anchors
each worker has delivered (:func:`~feedline.streaming.schedule.loader.worker_offsets`).
``num_workers=0`` is one in-process part.

A checkpoint of another world size, worker count, batch size or ``drop_last`` resumes in the
middle of its epoch (elastic resume, :mod:`~feedline.streaming.schedule.elastic`): the old
topology and its batch count become a :class:`~feedline.streaming.schedule.elastic.Stage` of the
position's ``history``, the anchors it consumed are replayed and removed, and what is left is
re-planned over the new topology. Later checkpoints of that epoch carry the history along.

How the pipeline calls it::

    tracker = ConsumptionTracker(settings, episode_lengths, rank=rank)   # training process
    for batch in loader: tracker.record_batch(len(batch)); ...          # per consumed batch
    tracker.next_epoch()                                                  # loader exhausted
    checkpoint["dataset"] = tracker.state_dict()
    # on resume:
    tracker.load_state_dict(checkpoint["dataset"])       # refuses changed order settings
    pos = tracker.position                                # epoch, history, offsets, rotation
    # DataLoader worker w in epoch pos.epoch serves part pos.part_for_worker(w) of the plan
    # of the anchors pos.history left due, and first calls pool.skip(pos.offset_for_worker(w));
    # later epochs start at offset 0 with no rotation and no history.

A fresh DataLoader always asks worker 0 first, while the interrupted run may have been in the
middle of a round; rotating which plan part each worker serves continues that round exactly.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from feedline.streaming.errors import ResumeMismatchError, StreamingError
from feedline.streaming.schedule.elastic import (
    MAX_STAGES,
    EpochUnits,
    PoolMaker,
    Remainder,
    Stage,
    epoch_start,
    remainder_after,
)
from feedline.streaming.schedule.even import EVEN_MODES, even_counts
from feedline.streaming.schedule.loader import (
    batches_per_worker,
    loader_batches,
    loader_cursor,
    samples_in_batches,
    worker_offsets,
)
from feedline.streaming.schedule.plan import EpisodeLengths, episode_arrays, plan_shards_arrays
from feedline.streaming.schedule.pool import aligned
from feedline.streaming.schedule.slot import worker_parts
from feedline.streaming.schedule.state import STATE_VERSION_KEY, Stateful, check_state_version
from feedline.streaming.settings import ReaderSettings
from feedline.validate import check_int

__all__ = [
    "ConsumptionTracker",
    "ResumePosition",
    "ResumeSettings",
    "ResumeState",
    "batches_per_worker",
    "loader_batches",
    "loader_cursor",
    "rank_batch_counts",
    "rank_worker_counts",
    "resume_position",
    "sampler_identity",
    "samples_in_batches",
    "worker_offsets",
]

log = logging.getLogger(__name__)

STATE_VERSION = 1
STATE_STAGE = "episode reader"


def sampler_identity(
    episode_lengths: EpisodeLengths, episode_bytes: Mapping[int, int] | None = None
) -> str:
    """Digest of the selected episodes, their lengths (and byte sizes) and the planner version."""
    indices, lengths = episode_arrays(episode_lengths)
    h = hashlib.sha256(b"feedline.streaming.schedule.plan/v1")
    h.update(indices.tobytes())
    h.update(lengths.tobytes())
    if episode_bytes is not None:
        if isinstance(episode_bytes, Mapping):  # arrays: no Python lookup per episode
            sizes = aligned(indices, episode_bytes, "episode_bytes")
        else:
            sizes = np.fromiter((episode_bytes[int(i)] for i in indices), np.int64)
        h.update(sizes.tobytes())
    return h.hexdigest()[:32]


@dataclass(frozen=True)
class ResumeSettings:
    """Everything that fixes a rank's anchor order and batch boundaries.

    The first three come from the settings table's order settings
    (:meth:`for_reader`): the rows with an ``order_key``.

    Args:
        seed: the resolved order seed.
        strategy: the pool strategy's name.
        pool_settings: every pool knob that changes the schedule: the pool size and, when the
            pool admits by bytes, the byte budget (prefetch depth and decode threads do not).
        world_size: number of data ranks: the world size over ``replication`` (the ranks the
            plan deals to).
        batch_size: the DataLoader's batch size.
        num_workers: the DataLoader's workers (0: in process).
        drop_last: whether each worker drops its last partial batch.
        sampler_identity: :func:`sampler_identity` of the selected episodes.
        replication: ranks per data rank, recorded for the reader; not compared, since the
            data ranks alone fix the order. Default 1 (checkpoints from before it: 1).
        mixture: the sources, their quotas and the batching of a mixture, as one line (a
            changed weight is refused by name). Default empty: one dataset, every frame once.
        even_batches: how the ranks' batches are evened out
            (:mod:`~feedline.streaming.schedule.even`); ``"none"`` on one data rank, where
            there is nothing to even. Default ``"none"``: checkpoints from before it.
    """

    seed: int
    strategy: str
    pool_settings: dict[str, Any]
    world_size: int
    batch_size: int
    num_workers: int
    drop_last: bool
    sampler_identity: str
    replication: int = 1
    mixture: str = ""
    even_batches: str = "none"

    @classmethod
    def for_reader(
        cls, settings: ReaderSettings, *, world_size: int, batch_size: int, num_workers: int,
        drop_last: bool, sampler_identity: str, mixture: str = "",
    ) -> ResumeSettings:
        """A reader's order settings (from its settings table) under a DataLoader's batching;
        ``world_size`` is the reader's data world size (its data-parallel groups)."""
        return cls(
            **settings.order_settings(), world_size=world_size, batch_size=int(batch_size),
            num_workers=int(num_workers), drop_last=bool(drop_last),
            sampler_identity=sampler_identity, replication=settings.value("replication"),
            mixture=mixture,
            even_batches=settings.value("even_batches") if world_size > 1 else "none",
        )

    @property
    def parts(self) -> int:
        """The plan parts of a rank: its workers, or one in process."""
        return worker_parts(self.num_workers)

    def pool_maker(
        self, episode_lengths: Mapping[int, int], episode_bytes: Mapping[int, int] | None = None
    ) -> PoolMaker:
        """How this run's workers build their pools (the reader passes its episode bytes)."""
        return PoolMaker(
            self.strategy, int(self.pool_settings["pool_size"]), self.seed, episode_lengths,
            self.pool_settings.get("byte_budget"), episode_bytes,
        )


@dataclass(frozen=True)
class ResumeState(ResumeSettings):
    """The checkpointed position of one rank: settings plus what the training loop consumed.

    Takes the fields of :class:`ResumeSettings` first, then:

    Args:
        epoch: the epoch the training loop was in. Default 0.
        rank: the data rank (data-parallel group) that took the checkpoint. Default 0.
        batches_consumed_on_rank: batches of ``epoch`` the loop took on that rank. Default 0.
        samples_consumed_on_rank: samples in those batches (a consistency check). Default 0.
        history: the topologies ``epoch`` ran under before this one, as
            :meth:`~feedline.streaming.schedule.elastic.Stage.to_list` lists. Default empty.
        extra: free-form additions a newer writer may carry. Default empty.
    """

    epoch: int = 0
    rank: int = 0
    batches_consumed_on_rank: int = 0
    samples_consumed_on_rank: int = 0
    history: list[list[int]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint as a plain, versioned dict."""
        return {STATE_VERSION_KEY: STATE_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any], *, version_checked: bool = False) -> ResumeState:
        """Read a checkpoint written by :meth:`to_dict` (refusing another state version, unless
        ``version_checked``: a :class:`Stateful` stage's ``load_state_dict`` did)."""
        if not version_checked:
            check_state_version(state, STATE_VERSION, stage=STATE_STAGE)
        names = [f.name for f in fields(cls)]
        optional = ("extra", "history", "replication", "mixture", "even_batches")
        missing = [n for n in names if n not in state and n not in optional]
        if missing:
            raise ResumeMismatchError(f"episode reader state lacks {', '.join(missing)}")
        _check_types(state)
        return cls(**{n: state[n] for n in names if n in state})

    def settings(self) -> ResumeSettings:
        """The settings part alone, to compare with the current run's."""
        return ResumeSettings(**{f.name: getattr(self, f.name) for f in fields(ResumeSettings)})


#: The most DataLoader workers a checkpoint may name: more would be planned (one part each)
#: before anything else could refuse them.
MAX_WORKERS = 4096
_COUNTERS = {"world_size": 1, "batch_size": 1, "num_workers": 0, "replication": 1, "epoch": 0, "rank": 0,
             "batches_consumed_on_rank": 0, "samples_consumed_on_rank": 0}


def _check_types(state: Mapping[str, Any]) -> None:
    """Refuse counters that are not whole numbers in range, and settings of the wrong type: a
    mistyped checkpoint is one line, never an ``int()`` traceback or a plan for 10**9 workers."""
    def bad(key: str, want: str) -> ResumeMismatchError:
        return ResumeMismatchError(f"{STATE_STAGE} state: {key} must be {want}, not {state[key]!r}"[:300])

    for key, least in _COUNTERS.items():
        value = state.get(key, least)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise bad(key, f"a whole number >= {least}")
    if state["num_workers"] > MAX_WORKERS:
        raise bad("num_workers", f"at most {MAX_WORKERS}")
    if not isinstance(state["drop_last"], bool):
        raise bad("drop_last", "true or false")
    for key in ("strategy", "sampler_identity"):
        if not isinstance(state[key], str):
            raise bad(key, "text")
    if "mixture" in state and not isinstance(state["mixture"], str):
        raise bad("mixture", "text")
    if "even_batches" in state and state["even_batches"] not in EVEN_MODES:
        raise bad("even_batches", f"one of {', '.join(EVEN_MODES)}")
    for key in ("pool_settings", "extra"):
        if key in state and not isinstance(state[key], Mapping):
            raise bad(key, "a mapping")
    history = state.get("history", [])
    if not isinstance(history, list) or not all(
            isinstance(stage, list) and len(stage) in (5, 6) and all(isinstance(n, int) and not isinstance(n, bool) for n in stage)
            for stage in history):
        raise bad("history", "a list of stages (lists of 5 or 6 whole numbers)")
    if len(history) > MAX_STAGES:
        raise bad("history", f"at most {MAX_STAGES} stages")


def _epoch_lengths(units: EpisodeLengths | EpochUnits, epoch: int) -> EpisodeLengths:
    """The units of ``epoch`` to plan: a fixed selection as it is, a mixture's for ``epoch``."""
    return units.epoch(epoch).lengths if isinstance(units, EpochUnits) else units


def rank_worker_counts(
    episode_lengths: EpisodeLengths | EpochUnits, *, world_size: int, num_workers: int, seed: int,
    epoch: int, rank: int, groups: Any = None, even: str = "none",
) -> list[int]:
    """Anchors per DataLoader worker of ``rank`` (zeros for workers the plan leaves idle), once
    evened out under ``even``; ``groups`` as for
    :func:`~feedline.streaming.schedule.plan.plan_shards_arrays`."""
    report = plan_shards_arrays(
        _epoch_lengths(episode_lengths, epoch), groups=groups, world_size=world_size,
        num_workers=num_workers, seed=seed, epoch=epoch,
    ).report
    return even_counts(report.worker_frames, worker_parts(num_workers), even)[rank].tolist()


def rank_batch_counts(
    episode_lengths: EpisodeLengths | EpochUnits, settings: ResumeSettings, *, epoch: int,
    groups: Any = None,
) -> list[int]:
    """Batches every rank's loader yields in ``epoch``: all equal unless ``even_batches`` is
    ``"none"``, when ranks balanced by frames can differ by a few batches."""
    plan = plan_shards_arrays(
        _epoch_lengths(episode_lengths, epoch), world_size=settings.world_size, groups=groups,
        num_workers=settings.num_workers,
        seed=settings.seed, epoch=epoch,
    )
    evened = even_counts(plan.report.worker_frames, settings.parts, settings.even_batches)
    return [
        sum(batches_per_worker(row, settings.batch_size, settings.drop_last))
        for row in evened.tolist()
    ]


# ---- resolving a checkpoint ---------------------------------------------------------------


@dataclass(frozen=True)
class ResumePosition:
    """Where a rank restarts: ``epoch`` and the anchors each worker skips in it.

    Args:
        epoch: the epoch to start.
        batches_consumed: batches of it already taken under the current topology.
        worker_offsets: per plan part, the anchors already delivered.
        exact: ``False`` when ``allow_order_change`` moved the start to an epoch boundary.
        message: what an inexact or elastic resume changed (logged once). Default empty.
        worker_rotation: which plan part DataLoader worker 0 serves, so a fresh loader
            continues an interrupted round. Default 0.
        history: the earlier topologies of ``epoch``
            (:meth:`~feedline.streaming.schedule.elastic.Stage.to_list`); the plan covers only
            the anchors they left due. Default empty: the whole epoch.
    """

    epoch: int
    batches_consumed: int
    worker_offsets: tuple[int, ...]
    exact: bool
    message: str = ""
    worker_rotation: int = 0
    history: tuple[tuple[int, ...], ...] = ()

    def part_for_worker(self, worker_id: int) -> int:
        """The plan part (``plan[rank][part]``) DataLoader worker ``worker_id`` must serve."""
        return (worker_id + self.worker_rotation) % len(self.worker_offsets)

    def offset_for_worker(self, worker_id: int) -> int:
        """Anchors DataLoader worker ``worker_id`` skips in its part before yielding."""
        return self.worker_offsets[self.part_for_worker(worker_id)]

    @property
    def stages(self) -> list[Stage]:
        return [Stage.from_list(stage) for stage in self.history]

    def remainder(
        self, episode_lengths: Mapping[int, int] | EpochUnits, make_pool: PoolMaker
    ) -> Remainder | None:
        """The anchors of the epoch still due after :attr:`history` (``None``: every frame of a
        fixed selection; a mixture's units always come as a remainder)."""
        if not self.history:
            if isinstance(episode_lengths, EpochUnits):
                return episode_lengths.epoch(self.epoch)
            return None
        return remainder_after(episode_lengths, self.stages, seed=make_pool.seed,
                               epoch=self.epoch, make_pool=make_pool)


#: The settings a resume may change in the middle of an epoch (elastic resume).
TOPOLOGY = ("world_size", "num_workers", "batch_size", "drop_last", "even_batches")
#: Recorded but not compared: at the same data world size another replication reads the same.
UNCOMPARED = ("replication",)


def _differences(saved: ResumeSettings, current: ResumeSettings) -> list[tuple[str, str]]:
    return [
        (f.name, f"{f.name} (checkpoint {getattr(saved, f.name)!r}, now {getattr(current, f.name)!r})")
        for f in fields(ResumeSettings)
        if f.name not in UNCOMPARED and getattr(saved, f.name) != getattr(current, f.name)
    ]


def _as_lengths(episode_lengths: EpisodeLengths | EpochUnits) -> dict[int, int] | EpochUnits:
    if isinstance(episode_lengths, EpochUnits):
        return episode_lengths
    indices, lengths = episode_arrays(episode_lengths)
    return dict(zip(indices.tolist(), lengths.tolist(), strict=True))


def resume_position(
    saved: ResumeState | Mapping[str, Any],
    current: ResumeSettings,
    episode_lengths: EpisodeLengths | EpochUnits,
    *,
    rank: int,
    allow_order_change: bool = False,
    make_pool: PoolMaker | None = None,
) -> ResumePosition:
    """Turn a checkpoint into this rank's restart position (or refuse, naming what differs).

    A change of world size, workers, batch size or ``drop_last`` resumes mid-epoch (elastic);
    any other change is refused, or with ``allow_order_change`` restarts at an epoch boundary.
    ``make_pool`` builds the pools the replay of an earlier topology needs (default: from
    ``current``, admitting by count only; the reader passes its own, with episode bytes).
    """
    state = saved if isinstance(saved, ResumeState) else ResumeState.from_dict(saved)
    lengths = _as_lengths(episode_lengths)
    diffs = _differences(state.settings(), current)
    epoch = state.epoch
    if any(name not in TOPOLOGY for name, _ in diffs):
        what = "; ".join(text for _, text in diffs)
        if not allow_order_change:
            raise ResumeMismatchError(
                f"cannot resume sample-exactly: {what}. Restore those settings, or pass "
                "allow_order_change=True to restart at the nearest epoch boundary with a "
                "different anchor order"
            )
        return _boundary_position(state, lengths, what, current.parts)
    if make_pool is None:
        make_pool = current.pool_maker(epoch_start(lengths, epoch).lengths)
    history = tuple(tuple(Stage.from_list(stage).to_list()) for stage in state.history)
    if diffs:
        return _elastic_position(state, current, lengths, history, make_pool)
    position = ResumePosition(epoch, 0, (0,) * current.parts, True, history=history)
    due = position.remainder(lengths, make_pool)
    counts = rank_worker_counts(
        _epoch_lengths(lengths, epoch) if due is None else due.lengths,
        world_size=current.world_size, groups=make_pool.plan_groups,
        num_workers=current.num_workers, seed=current.seed, epoch=epoch, rank=rank,
        even=current.even_batches,
    )
    per_worker = batches_per_worker(counts, current.batch_size, current.drop_last)
    batches = state.batches_consumed_on_rank
    if batches > sum(per_worker):
        raise ResumeMismatchError(
            f"checkpoint says rank {state.rank} consumed {batches} batches of epoch {epoch}, "
            f"but rank {rank}'s epoch has only {sum(per_worker)}"
        )
    offsets, rotation = loader_cursor(counts, current.batch_size, current.drop_last, batches)
    if state.rank == rank and sum(offsets) != state.samples_consumed_on_rank:
        raise ResumeMismatchError(
            f"checkpoint of rank {rank} counts {state.samples_consumed_on_rank} samples in "
            f"{batches} batches, but those batches hold {sum(offsets)} samples; the checkpoint "
            "does not belong to this data order"
        )
    if batches == sum(per_worker):  # the epoch was finished: start the next one
        return ResumePosition(epoch + 1, 0, (0,) * len(counts), True)
    return ResumePosition(epoch, batches, tuple(offsets), True, worker_rotation=rotation,
                          history=history)


def _elastic_position(
    state: ResumeState, current: ResumeSettings, lengths: dict[int, int] | EpochUnits,
    history: tuple[tuple[int, ...], ...], make_pool: PoolMaker,
) -> ResumePosition:
    """Mid-epoch resume under another topology: the checkpoint's becomes a stage of history."""
    stage = Stage(state.world_size, state.num_workers, state.batch_size, state.drop_last,
                  state.batches_consumed_on_rank, state.even_batches)
    if len(history) >= MAX_STAGES:
        raise ResumeMismatchError(
            f"epoch {state.epoch} already ran under {len(history) + 1} topologies, the most one "
            "epoch can resume across; resume with the checkpoint's world size, workers and "
            "batch size, or pass allow_order_change=True to restart at an epoch boundary"
        )
    history = (*history, tuple(stage.to_list()))
    position = ResumePosition(state.epoch, 0, (0,) * current.parts, True, history=history)
    due = position.remainder(lengths, make_pool)
    assert due is not None
    if not due.lengths:  # nothing left of the epoch: start the next one
        return ResumePosition(state.epoch + 1, 0, (0,) * current.parts, True)
    new = Stage(current.world_size, current.num_workers, current.batch_size, current.drop_last, 0,
                current.even_batches)
    message = (
        f"resuming epoch {state.epoch} after {stage.batches} batch(es) under {stage.describe()} "
        f"with {new.describe()}: the anchor order changes; the {due.total} anchor(s) not yet "
        f"consumed ({len(due.lengths)} episode(s), {len(due.frames)} partly consumed) are "
        "re-dealt over the new ranks, so coverage stays exact: none repeated, none skipped"
    )
    return replace(position, message=message)


def _boundary_position(
    state: ResumeState, episode_lengths: EpisodeLengths | EpochUnits, what: str, parts: int
) -> ResumePosition:
    """Nearest epoch boundary of the checkpoint's own run (``allow_order_change=True``)."""
    counts = rank_worker_counts(
        episode_lengths, world_size=state.world_size, num_workers=state.num_workers,
        seed=state.seed, epoch=state.epoch, rank=min(state.rank, state.world_size - 1),
        even=state.even_batches,
    )
    total = sum(batches_per_worker(counts, state.batch_size, state.drop_last))
    done = state.batches_consumed_on_rank
    epoch = state.epoch + (1 if total and 2 * done >= total else 0)
    if epoch == state.epoch and done:
        effect = f"repeats the {done} batch(es) already consumed of epoch {state.epoch}"
    elif epoch > state.epoch and done < total:
        effect = f"skips the last {total - done} batch(es) of epoch {state.epoch}"
    else:
        effect = "loses nothing"
    message = (
        f"resuming with a different anchor order because {what}: starting at the beginning of "
        f"epoch {epoch}, the nearest epoch boundary; this {effect}"
    )
    log.warning(message)
    return ResumePosition(epoch, 0, (0,) * parts, False, message)


# ---- the training-process side ------------------------------------------------------------


class ConsumptionTracker(Stateful):
    """Counts what the training loop consumed on this rank; its state is the reader's checkpoint.

    Its order settings travel inside the position: whether they must match is
    :func:`resume_position`'s call (``allow_order_change`` restarts at an epoch boundary).

    Args:
        settings: the run's order and batching settings.
        episode_lengths: frames per selected episode (by episode index), or a mixture's
            :class:`~feedline.streaming.schedule.elastic.EpochUnits`.
        rank: this rank's data rank (its data-parallel group; the rank without replication).
        epoch: the epoch the loop starts in. Default 0.
        allow_order_change: accept a checkpoint of other order settings at the nearest epoch
            boundary instead of refusing it. Default ``False``.
        make_pool: how the run's workers build their pools, for replaying an earlier topology
            (:meth:`ResumeSettings.pool_maker`). Default ``None``: from ``settings``.
    """

    STATE_VERSION = STATE_VERSION
    STATE_STAGE = STATE_STAGE

    def __init__(
        self,
        settings: ResumeSettings,
        episode_lengths: EpisodeLengths | EpochUnits,
        *,
        rank: int,
        epoch: int = 0,
        allow_order_change: bool = False,
        make_pool: PoolMaker | None = None,
    ) -> None:
        self.settings = settings
        self.make_pool = make_pool
        self.episode_lengths = episode_lengths
        self.rank = check_int("rank", rank, minimum=0, error=StreamingError)
        self.allow_order_change = allow_order_change
        self.epoch = check_int("epoch", epoch, minimum=0, error=StreamingError)
        self.batches_consumed = 0
        self.samples_consumed = 0
        self.position = ResumePosition(epoch, 0, (0,) * settings.parts, True)
        #: What the reader adds to the checkpoint's ``extra`` (the epoch's repeats and drops).
        self.extra: dict[str, Any] = {}

    def record_batch(self, num_samples: int) -> None:
        """The training loop took one batch of ``num_samples`` samples."""
        self.batches_consumed += 1
        self.samples_consumed += int(num_samples)

    def next_epoch(self) -> None:
        """The loader is exhausted: the next iteration starts the next epoch at offset 0."""
        self.epoch += 1
        self.batches_consumed = self.samples_consumed = 0
        self.position = ResumePosition(self.epoch, 0, (0,) * self.settings.parts, True)

    def state_position(self) -> dict[str, Any]:
        """The rank's checkpoint (:class:`ResumeState` as a plain dict): settings + batches taken."""
        return asdict(ResumeState(
            **asdict(self.settings), epoch=self.epoch, rank=self.rank,
            batches_consumed_on_rank=self.batches_consumed,
            samples_consumed_on_rank=self.samples_consumed,
            history=[list(stage) for stage in self.position.history],
            extra=dict(self.extra),
        ))

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Resume from a checkpoint (refused, naming what differs, under other settings)."""
        self.position = resume_position(
            ResumeState.from_dict(state, version_checked=True), self.settings,
            self.episode_lengths, rank=self.rank, allow_order_change=self.allow_order_change,
            make_pool=self.make_pool,
        )
        if self.position.exact and self.position.message:
            log.info(self.position.message)  # elastic: once, when the training loop resumes
        self.epoch = self.position.epoch
        self.batches_consumed = self.position.batches_consumed
        self.samples_consumed = sum(self.position.worker_offsets)
