"""The reader skeleton both streaming readers stand on: plan, length, resume settings, workers.

Why one class: the episode reader and the token reader deal units to ranks and workers, count
a rank's samples and batches, build each worker's byte budget, pool and pipeline, and describe
their order to a checkpoint in the same way; when each kept its own copy the copies drifted
(after an elastic resume ``len()`` counted the whole epoch in one and the remainder in the
other). A reader subclasses :class:`StreamingReader`, sets :attr:`settings` (a
:class:`~feedline.streaming.settings.ReaderSettings`), :attr:`slot`, :attr:`pool_maker`,
:attr:`unit_bytes` and :attr:`sampler_identity`, and supplies what differs: the units of an
epoch (:meth:`epoch_lengths`), and how a worker fetches and assembles (:meth:`make_pipeline`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from feedline.streaming.budget import ByteBudget
from feedline.streaming.chain import PipelineChain
from feedline.streaming.errors import EPISODE_UNIT, PlanError, UnitKind
from feedline.streaming.loop import TrackedReader
from feedline.streaming.pipeline import UnitPipeline
from feedline.streaming.schedule.even import even_counts, pad_positions
from feedline.streaming.schedule.plan import ShardPlan, plan_shards_arrays
from feedline.streaming.schedule.pool import aligned, fetch_order
from feedline.streaming.schedule.resume import ResumePosition, ResumeSettings, rank_batch_counts
from feedline.streaming.schedule.slot import WorkerSlot, worker_parts
from feedline.streaming.settings import ReaderSettings

__all__ = ["StreamingReader"]

log = logging.getLogger(__name__)


class StreamingReader(TrackedReader):
    """What both streaming readers share (see the module docstring)."""

    #: How the too-large error names this reader's unit and settings.
    UNIT_KIND: ClassVar[UnitKind] = EPISODE_UNIT

    settings: ReaderSettings
    #: Payload bytes of every unit the plan deals.
    unit_bytes: Mapping[int, int]
    #: What the checkpoint compares to know the data is the same.
    sampler_identity: str

    # ---- what a reader supplies --------------------------------------------------------------

    def epoch_lengths(self, epoch: int) -> Mapping[int, int]:
        """``{unit: samples}`` of ``epoch`` (a mixture's units change with the epoch)."""
        raise NotImplementedError

    @property
    def mixture_description(self) -> str:
        """The checkpoint's ``mixture`` (empty for one source)."""
        return ""

    def make_pipeline(
        self, units: np.ndarray, anchors: np.ndarray, order: np.ndarray, budget: ByteBudget,
        slot: WorkerSlot,
    ) -> UnitPipeline:
        """The pipeline serving ``units``/``anchors`` in order, fetching in ``order``."""
        raise NotImplementedError

    def _check_worker(self, num_workers: int) -> None:
        """Refuse, before a worker fetches, what this reader cannot serve with ``num_workers``."""

    def _worker_world(self, lengths: Mapping[int, int]) -> tuple[Mapping[int, int], int, int]:
        """What a worker's plan deals, over which world, as which rank (a reader may narrow it)."""
        return lengths, self.data_world_size, self.data_rank

    def _pool_options(self) -> dict[str, Any]:
        """Extra keywords of :attr:`pool_maker` (a stratified mixture's batch size)."""
        return {}

    # ---- the shared part ---------------------------------------------------------------------

    @property
    def allow_order_change(self) -> bool:  # type: ignore[override]
        return bool(self.settings.value("allow_order_change"))

    @property
    def seed(self) -> int:
        return int(self.settings.value("seed"))

    @property
    def rank_budget_bytes(self) -> int:
        """The byte budget in bytes: the budget of this rank, shared by its workers."""
        return self.settings.byte_budget_bytes

    def resume_settings(self, batch_size: int, num_workers: int, drop_last: bool) -> ResumeSettings:
        """Everything that fixes this rank's order and batches under a DataLoader's settings."""
        return ResumeSettings.for_reader(
            self.settings, world_size=self.data_world_size, batch_size=batch_size,
            num_workers=num_workers, drop_last=drop_last, sampler_identity=self.sampler_identity,
            mixture=self.mixture_description,
        )

    def _remainder(self, position: ResumePosition) -> Any:
        """What ``position``'s history left due (``None``: every sample of one source), kept:
        the replay of an earlier topology is the costly part of an elastic resume, and the
        reader ships it to its workers with itself."""
        key = (position.epoch, position.history)
        cache = self.__dict__.setdefault("_remainders", {})
        if key not in cache:
            cache.clear()
            cache[key] = position.remainder(self.plan_units, self.pool_maker)
        return cache[key]

    def _restored(self, position: ResumePosition) -> None:
        if position.history:
            self._remainder(position)  # once here, shipped to the workers with the reader

    def _resumed_in(self, epoch: int) -> ResumePosition | None:
        """The elastic resume whose remainder ``epoch`` is (``None``: the whole epoch is due)."""
        tracker = self._tracker
        position = self._position or (tracker.position if tracker is not None else None)
        if position is not None and position.epoch == epoch and position.history:
            return position
        return None

    def _due(self, epoch: int) -> Mapping[int, int]:
        """Units of ``epoch`` still due for this reader: an elastic resume's remainder in the
        epoch it resumed, else the whole epoch."""
        position = self._resumed_in(epoch)
        if position is not None:
            return self._remainder(position).lengths
        return self.epoch_lengths(epoch)

    def _check_plannable(self, units: int, world: int, epoch: int, remaining: bool) -> None:
        """The plan's refusal of more ranks than units, in this reader's words: after an elastic
        resume the units left are the epoch's *remaining* ones, not its selection."""
        if units >= world:
            return
        kind = self.UNIT_KIND
        if remaining:
            advice = (f"resume on at most {units} rank(s), or from a checkpoint taken earlier in the "
                      "epoch")
        else:
            more = "select more episodes" if kind.unit == "episode" else f"more {kind.unit}s: {kind.shrink}"
            advice = f"reduce the number of ranks to at most {units} (or {more})"
        raise PlanError(
            f"{type(self).__name__}: {units} {'remaining' if remaining else 'selected'} {kind.unit}(s) "
            f"of epoch {epoch} cannot give each of {world} ranks a whole {kind.unit}; {advice}"
        )

    def _rank_plan(self, epoch: int | None, num_workers: int = 0) -> ShardPlan:
        epoch = self.epoch if epoch is None else epoch
        due = self._due(epoch)
        self._check_plannable(len(due), self.data_world_size, epoch, self._resumed_in(epoch) is not None)
        return plan_shards_arrays(
            due, world_size=self.data_world_size, num_workers=num_workers,
            seed=self.seed, epoch=epoch, groups=self.pool_maker.plan_groups,
        )

    def rank_units(self, epoch: int | None = None) -> np.ndarray:
        """The units this rank reads in ``epoch`` (default: the current one), in its plan's
        order; after a resume, those of the epoch's remainder."""
        plan = self._rank_plan(epoch)
        parts = plan.parts[self.data_rank]
        return np.concatenate(parts) if len(parts) else np.zeros(0, dtype=np.int64)

    @property
    def even_mode(self) -> str:
        """How this reader evens out its ranks' batches (``"none"`` on one data rank)."""
        return str(self.settings.value("even_batches")) if self.data_world_size > 1 else "none"

    def rank_samples(self, epoch: int | None = None, num_workers: int = 0) -> int:
        """Samples this rank yields in ``epoch`` (default: the current one) with ``num_workers``
        DataLoader workers, repeats included and dropped anchors not; after an elastic resume,
        in its epoch, those still due. The same on every rank unless ``even_batches="none"``."""
        return int(self._evened(epoch, num_workers)[self.data_rank].sum())

    def evened_anchors(self, num_workers: int = 0, epoch: int | None = None) -> dict[str, int]:
        """This rank's epoch against its plan: ``planned`` anchors, how many of them its
        workers ``repeated`` or ``dropped`` to even out the ranks' batches, and ``yielded``."""
        epoch = self.epoch if epoch is None else epoch
        plan = self._rank_plan(epoch, num_workers)
        planned = int(plan.report.rank_frames[self.data_rank])
        yielded = int(self._evened(epoch, num_workers, plan)[self.data_rank].sum())
        return {"planned": planned, "yielded": yielded,
                "repeated": max(0, yielded - planned), "dropped": max(0, planned - yielded)}

    def _evened(self, epoch: int | None, num_workers: int, plan: ShardPlan | None = None
                ) -> np.ndarray:
        plan = self._rank_plan(epoch, num_workers) if plan is None else plan
        return even_counts(plan.report.worker_frames, worker_parts(num_workers), self.even_mode)

    def batches_per_rank(
        self, batch_size: int, num_workers: int, drop_last: bool = False, epoch: int | None = None
    ) -> list[int]:
        """Batches every rank's DataLoader yields in ``epoch``, one entry per data-parallel group:
        all equal (``even_batches``), unless ``even_batches="none"``, when ranks balanced by
        samples can differ by a few batches."""
        return rank_batch_counts(
            self.plan_units, self.resume_settings(batch_size, num_workers, drop_last),
            epoch=self.epoch if epoch is None else epoch, groups=self.pool_maker.plan_groups,
        )

    def track(self, loader: Any) -> Iterator[Any]:
        """As :meth:`TrackedReader.track`; the epoch's repeats or drops (to even out the ranks'
        batches) are logged once and kept in the checkpoint's ``extra["evened"]``."""
        iterator = super().track(loader)
        tracker = self._tracker
        if tracker is not None and self.even_mode != "none":
            evened = self.evened_anchors(loader.num_workers, tracker.epoch)
            tracker.extra["evened"] = evened
            if evened["repeated"] or evened["dropped"]:
                log.info(
                    "epoch %d: rank %d %s %d of its %d anchors so that every rank yields the "
                    "same number of batches (even_batches=%r)", tracker.epoch, self.data_rank,
                    "repeats" if evened["repeated"] else "drops",
                    evened["repeated"] or evened["dropped"], evened["planned"], self.even_mode)
        return iterator

    def __len__(self) -> int:
        return self.rank_samples()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_tracker"] = None  # the training process's, never a worker's
        return state

    def worker_pipeline(
        self, position: ResumePosition, num_workers: int, worker_id: int
    ) -> UnitPipeline | PipelineChain | None:
        """The pipeline DataLoader worker ``worker_id`` runs (None when the plan leaves it idle):
        its own anchors, evened out (:mod:`~feedline.streaming.schedule.even`) to the count
        every rank's worker of its rank yields, by repeats after them or by stopping early."""
        due = self._remainder(position)  # None: every sample of one source once
        lengths: Mapping[int, int] = self.plan_units if due is None else due.lengths
        lengths, world, rank = self._worker_world(lengths)
        self._check_plannable(len(lengths), world, position.epoch, due is not None)
        shard_plan = plan_shards_arrays(
            self.pool_maker.plan_input(lengths), world_size=world, num_workers=num_workers,
            seed=self.seed,
            epoch=position.epoch, groups=self.pool_maker.plan_groups,
        )
        plan = shard_plan.parts[rank]
        part = position.part_for_worker(worker_id)
        mode = self.settings.value("even_batches") if world > 1 else "none"
        target = int(even_counts(shard_plan.report.worker_frames, worker_parts(num_workers),
                                 mode)[rank, part])
        own = shard_plan.report.worker_frames[rank][part] if part < len(plan) else 0
        offset = position.offset_for_worker(worker_id)
        if target == 0 or offset >= target:
            return None
        # an idle worker that must pad repeats anchors of the rank's first part
        source = part if part < len(plan) else 0
        order = plan[source]  # an int64 array: no Python object per unit on a worker's start
        slot = replace(self.slot, num_workers=num_workers, worker_id=worker_id)
        self._worker_budget(num_workers).check_size_arrays(order, self._unit_sizes(order))
        self._check_worker(num_workers)  # both before any fetch
        pool = self.pool_maker(
            order, epoch=position.epoch, rank=self.data_rank, part=source,
            num_workers=num_workers, remainder=due, **self._pool_options(),
        )
        resident = pool.resident_limit + int(self.settings.value("prefetch"))

        def pipeline(units: np.ndarray, anchors: np.ndarray) -> UnitPipeline:
            budget = self._worker_budget(num_workers)  # a pipeline closes its own at its end
            budget.max_episodes = max(budget.max_episodes, resident)
            return self.make_pipeline(units, anchors, fetch_order(units), budget, slot)

        if target <= own:  # its own anchors, the first ``target`` of them
            pool.skip(offset)
            return pipeline(*pool.take(target - offset))
        units, anchors = pool.take(pool.anchors_remaining)
        picks = pad_positions(units.size, target - own, seed=self.seed, epoch=position.epoch,
                              rank=self.data_rank, part=part)
        repeats = units[picks], anchors[picks]
        after = max(0, offset - own)
        first = pipeline(units[offset:], anchors[offset:]) if offset < own else None
        return PipelineChain(first, lambda: pipeline(repeats[0][after:], repeats[1][after:]))

    def _worker_budget(self, num_workers: int) -> ByteBudget:
        """A worker's share of the byte budget (a pipeline closes its budget, so the repeats of
        a padded worker get a second one)."""
        settings = self.settings
        return ByteBudget.for_worker(
            byte_budget_gb=settings.value("byte_budget_gb"),
            pool_size=settings.value("pool_size"), prefetch=int(settings.value("prefetch")),
            num_workers=num_workers, kind=self.UNIT_KIND,
        )

    def _unit_sizes(self, order: np.ndarray) -> np.ndarray:
        """Payload bytes of every unit of ``order``, parallel to it."""
        maker = self.pool_maker
        sizes = (
            maker.values_of("episode_bytes", order) if maker.episode_bytes is self.unit_bytes
            else self.unit_bytes
        )
        return aligned(order, sizes, "unit_bytes") if isinstance(sizes, Mapping) else sizes
