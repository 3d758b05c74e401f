"""The training-loop side every streaming reader shares: epochs, checkpoints, ``track(loader)``.

Why one class: the episode reader and the token reader (:mod:`feedline.text.dataset`) run on the
same scheduler, so they count consumed batches, resume, publish each pass's position to their
DataLoader workers and pick a worker's starting position the same way; a resume bug fixed here
is fixed for both. A reader subclasses :class:`TrackedReader` and supplies what differs: its
order settings (:meth:`resume_settings`), the units it plans (:attr:`plan_units`), its pool maker
and rank, and the pipeline a worker runs (:meth:`worker_pipeline`). It may add to what is done
when an epoch starts or a batch is taken (:meth:`_epoch_started`, :meth:`_batch_taken`).

How a loop drives it::

    loader = DataLoader(reader, batch_size=B, num_workers=K)
    reader.load_state_dict(checkpoint)            # optional, before iterating
    for batch in reader.track(loader): ...        # one epoch; the next call runs the next one
        checkpoint = reader.state_dict()
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, ClassVar

from torch.utils.data import get_worker_info

from feedline.streaming.batches import batch_len
from feedline.streaming.board import WorkerBoard
from feedline.streaming.errors import ResumeMismatchError, StreamingError
from feedline.streaming.pipeline import UnitPipeline
from feedline.streaming.schedule.resume import (
    STATE_STAGE,
    STATE_VERSION,
    ConsumptionTracker,
    ResumePosition,
    ResumeSettings,
    ResumeState,
    resume_position,
)
from feedline.streaming.schedule.slot import WorkerSlot
from feedline.streaming.schedule.state import Stateful

__all__ = ["TrackedReader"]


class TrackedReader(Stateful):
    """Epochs, checkpoints and workers' positions of a streaming reader (see the module doc).

    A subclass sets :attr:`slot` and calls :meth:`_init_loop` in its constructor.
    """

    STATE_VERSION = STATE_VERSION
    STATE_STAGE = STATE_STAGE
    #: Samples between two publications of a worker's counters to the training process.
    PUBLISH_EVERY: ClassVar[int] = 64
    #: What ``state_dict()`` before ``track()`` names (a sentence's subject).
    READER_NAME: ClassVar[str] = "the reader"
    #: The error a misuse of ``track``/``state_dict`` raises (the reader's part's own).
    LOOP_ERROR: ClassVar[type[Exception]] = StreamingError

    slot: WorkerSlot
    epoch: int
    allow_order_change: bool
    #: How every worker builds its pool (a :class:`~feedline.streaming.schedule.elastic.PoolMaker`).
    pool_maker: Any

    def _init_loop(self, counters: tuple[type, ...] = ()) -> None:
        """Start at epoch 0 with nothing consumed; ``counters``: the reader's own counter
        dataclasses its pipelines publish beside the pipeline's (see
        :class:`~feedline.streaming.board.WorkerBoard`)."""
        self.epoch = 0
        self._tracker: ConsumptionTracker | None = None
        self._pending_state: dict[str, Any] | None = None
        self._position: ResumePosition | None = None
        self._board = WorkerBoard(counters)
        warm = getattr(getattr(self, "pool_maker", None), "warm", None)
        if warm is not None:  # the pools' arrays, made here once rather than in every worker
            warm()

    # ---- what a reader supplies --------------------------------------------------------------

    def resume_settings(self, batch_size: int, num_workers: int, drop_last: bool) -> ResumeSettings:
        raise NotImplementedError

    @property
    def plan_units(self) -> Any:
        """What the plan deals: a fixed ``{unit: frames}`` or per-epoch units."""
        raise NotImplementedError

    @property
    def rank(self) -> int:
        return self.slot.rank

    @property
    def world_size(self) -> int:
        return self.slot.world_size

    @property
    def data_rank(self) -> int:
        """The data-parallel group this rank reads for (``rank // replication``): the rank the
        plan, the pools and the checkpoint count."""
        return self.slot.data_rank

    @property
    def data_world_size(self) -> int:
        """Data-parallel groups (``world_size // replication``): the world the plan deals to."""
        return self.slot.data_world_size

    def worker_pipeline(
        self, position: ResumePosition, num_workers: int, worker_id: int
    ) -> UnitPipeline | None:
        raise NotImplementedError

    def _epoch_started(self, loader: Any, tracker: ConsumptionTracker) -> None:
        """``track(loader)`` is about to iterate an epoch (before the workers start)."""

    def _batch_taken(self, batch: Any) -> None:
        """The loop took ``batch``."""

    def _restored(self, position: ResumePosition) -> None:
        """A checkpoint put the reader at ``position``."""

    def _serve(self, pipeline: UnitPipeline, worker_id: int) -> Iterator[Any]:
        """What a worker yields of its pipeline (a reader may wrap it)."""
        return iter(pipeline)

    # ---- epochs and checkpoints -------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch``'s order next (a resume position of another epoch is dropped)."""
        if int(epoch) != self.epoch:
            self._position = None
            self._pending_state = None
        self.epoch = int(epoch)
        self._write_control(self._position)

    def _write_control(self, position: ResumePosition | None) -> None:
        self._board.write_control(self.epoch, position)

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Restore a checkpoint taken by :meth:`state_dict` (``load_state_dict``); call before
        iterating.

        Refuses (``ResumeMismatchError``) a checkpoint whose order settings differ, naming them,
        unless ``allow_order_change=True`` (then the nearest epoch boundary, with a warning).
        """
        saved = ResumeState.from_dict(state, version_checked=True)
        settings = self.resume_settings(saved.batch_size, saved.num_workers, saved.drop_last)
        position = resume_position(
            saved, settings, self.plan_units, rank=self.data_rank,
            allow_order_change=self.allow_order_change, make_pool=self.pool_maker,
        )
        self._pending_state = dict(state)
        self._position = position
        self.epoch = position.epoch
        self._restored(position)
        self._write_control(position)

    def state_dict(self) -> dict[str, Any]:
        """What the training loop consumed on this rank (needs :meth:`track`)."""
        if self._tracker is not None:
            return self._tracker.state_dict()
        if self._pending_state is not None:
            return dict(self._pending_state)
        raise self.LOOP_ERROR(
            "state_dict() counts the batches the training loop consumed: iterate with "
            f"`for batch in dataset.track(loader)` to make {self.READER_NAME} checkpointable"
        )

    def track(self, loader: Any) -> Iterator[Any]:
        """Iterate ``loader`` (a DataLoader over this dataset) for one epoch, counting batches."""
        if loader.dataset is not self:
            raise self.LOOP_ERROR("track(loader) needs a DataLoader over this dataset")
        settings = self.resume_settings(loader.batch_size or 1, loader.num_workers, loader.drop_last)
        tracker = ConsumptionTracker(
            settings, self.plan_units, rank=self.data_rank, epoch=self.epoch,
            allow_order_change=self.allow_order_change, make_pool=self.pool_maker,
        )
        if self._pending_state is not None:
            tracker.load_state_dict(self._pending_state)
            self._pending_state = None
        self._tracker = tracker
        self.epoch = tracker.epoch
        self._position = tracker.position
        self._write_control(self._position)
        self._epoch_started(loader, tracker)
        return self._tracked(loader, tracker)

    def _tracked(self, loader: Any, tracker: ConsumptionTracker) -> Iterator[Any]:
        iterator = iter(loader)  # workers start (with this position) or the in-process iterator
        self._position = None
        for batch in iterator:
            tracker.record_batch(batch_len(batch))
            self._batch_taken(batch)
            yield batch
        tracker.next_epoch()
        self.epoch = tracker.epoch
        self._write_control(None)

    # ---- workers ------------------------------------------------------------------------------

    def _current_position(
        self, num_workers: int, position: ResumePosition | None
    ) -> ResumePosition:
        parts = replace(self.slot, num_workers=num_workers).parts
        if position is None or position.epoch != self.epoch:
            return ResumePosition(self.epoch, 0, (0,) * parts, True)
        if len(position.worker_offsets) != parts:
            if not any(position.worker_offsets):
                return ResumePosition(self.epoch, 0, (0,) * parts, True, history=position.history)
            raise ResumeMismatchError(
                f"cannot resume sample-exactly: the checkpoint was taken with num_workers="
                f"{len(position.worker_offsets) if len(position.worker_offsets) > 1 else 0}, "
                f"the DataLoader has num_workers={num_workers}"
            )
        return position

    def _in_process(self) -> None:
        """Iteration starts in the training process (``num_workers=0``)."""

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        num_workers, worker_id = (info.num_workers, info.id) if info is not None else (0, 0)
        if info is None:
            self._in_process()
            position = self._current_position(num_workers, self._position)
            self._position = None  # in-process: the position is used once
        else:  # what the training process published for this pass (persistent workers too)
            published = self._board.read_control()
            if published is not None:
                self.epoch = published.epoch
            position = self._current_position(
                num_workers, self._position if published is None else published
            )
        return self._items(position, num_workers, worker_id)

    def _items(
        self, position: ResumePosition, num_workers: int, worker_id: int
    ) -> Iterator[Any]:
        pipeline = self.worker_pipeline(position, num_workers, worker_id)
        if pipeline is None:
            return
        published: dict[str, int] = {}
        row = 0 if get_worker_info() is None else 1 + worker_id
        board, every = self._board, self.PUBLISH_EVERY
        try:
            for n, item in enumerate(self._serve(pipeline, worker_id), 1):
                if n % every == 0:
                    board.publish(row, published, *pipeline.counters)
                yield item
        finally:
            pipeline.close()
            board.publish(row, published, *pipeline.counters)
