"""One resume harness for every stateful stage and for both readers.

``check_resume(make, stops)`` runs a stage uninterrupted, then for every stop ``k``: takes ``k``
items from a fresh stage, saves its state through a JSON round trip (what a checkpoint does),
loads it into another fresh stage and checks that the rest is exactly the uninterrupted rest, in
order. A second save/load in the middle of the resumed run catches state that stops advancing
after the first resume. Stages that span epochs cover the three cases users hit: resume
mid-epoch, at the very end of an epoch, and the epoch after a resume; :class:`Epochs` makes a
multi-epoch stage out of a per-epoch one (a pool, a pipeline).

Every stage goes through :class:`feedline.streaming.schedule.state.Stateful`, the one contract:
the real stages subclass it, and test drivers that wrap them (several epochs, a DataLoader
loop) implement the same two methods. :class:`TrackedRun` is the training loop of any reader on
the floor (``StreamingEpisodeDataset``, ``TokenDataset``), and :func:`check_elastic` stops a job
on one world size and resumes it on another.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from feedline.streaming.schedule.state import Stateful

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

    from feedline.streaming.reader import StreamingReader

T = TypeVar("T")


class StatefulIterator(Protocol[T]):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def __iter__(self) -> Iterator[T]: ...

    def __next__(self) -> T: ...


def json_roundtrip(state: Mapping[str, Any]) -> dict[str, Any]:
    """What survives a checkpoint file: plain JSON types only (tuples become lists)."""
    return json.loads(json.dumps(state))


def resume_points(
    total: int, epoch_ends: Sequence[int] = (), *, every: bool = False, random_count: int = 8,
    seed: int = 0,
) -> list[int]:
    """Stops to test: all of 0..total when ``every``, else the start, the end, every epoch end,
    one item either side of each, and ``random_count`` random positions."""
    if every:
        return list(range(total + 1))
    rng = random.Random(seed)
    points = {0, total}
    for end in epoch_ends:
        points.update(p for p in (end - 1, end, end + 1) if 0 <= p <= total)
    points.update(rng.randint(0, total) for _ in range(random_count))
    return sorted(points)


class Epochs(Stateful, Generic[T]):
    """Consecutive epochs of a per-epoch stage, as one resumable stage.

    ``make(epoch)`` builds the stage of one epoch; the state is the epoch plus that stage's own
    state, so a checkpoint taken after an epoch's last item resumes at its end.
    """

    def __init__(self, make: Callable[[int], StatefulIterator[T]], epochs: Sequence[int]) -> None:
        self.make, self.epochs = make, list(epochs)
        self.epoch = self.epochs[0]
        self.stage = make(self.epoch)

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        while True:
            try:
                return next(self.stage)
            except StopIteration:
                if self.epoch == self.epochs[-1]:
                    raise
                close(self.stage)
                self.epoch = self.epochs[self.epochs.index(self.epoch) + 1]
                self.stage = self.make(self.epoch)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "stage": self.stage.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        close(self.stage)
        self.epoch = state["epoch"]
        self.stage = self.make(self.epoch)
        self.stage.load_state_dict(state["stage"])

    def close(self) -> None:
        close(self.stage)


def close(stage: object) -> None:
    """Stop a stage's threads or workers, if it has any (an abandoned run must not linger)."""
    closer = getattr(stage, "close", None)
    if closer is not None:
        closer()


def check_resume(
    make: Callable[[], StatefulIterator[T]],
    stops: Iterable[int],
    *,
    full: list[T] | None = None,
    roundtrip: Callable[[Mapping[str, Any]], Mapping[str, Any]] = json_roundtrip,
    chain: bool = True,
    on_state: Callable[[int, Mapping[str, Any]], None] | None = None,
) -> list[T]:
    """Assert that resuming at every stop reproduces the uninterrupted sequence exactly.

    ``on_state(k, state)`` may check the checkpoint taken after ``k`` items (e.g. its counters).
    """
    if full is None:
        whole = make()
        full = list(whole)
        close(whole)
    for k in stops:
        first = make()
        assert isinstance(first, Stateful), f"{type(first).__name__} lacks the state contract"
        prefix = list(islice(first, k))
        assert prefix == full[:k], f"a fresh run diverged before stop {k}"
        state = roundtrip(first.state_dict())
        close(first)
        if on_state is not None:
            on_state(k, state)
        second = make()
        second.load_state_dict(state)
        rest: list[T] = []
        if chain and k < len(full):
            middle = (len(full) - k) // 2
            rest = list(islice(second, middle))
            third = make()
            third.load_state_dict(roundtrip(second.state_dict()))
            close(second)
            second = third
        rest += list(second)
        close(second)
        assert len(prefix) + len(rest) == len(full), (
            f"resume at {k}: {len(prefix)} + {len(rest)} items, uninterrupted run has {len(full)}"
        )
        mismatch = next((i for i, (a, b) in enumerate(zip(rest, full[k:], strict=True)) if a != b),
                        None)
        assert mismatch is None, (
            f"resume at {k}: item {k + mismatch} differs: {rest[mismatch]!r} != "
            f"{full[k + mismatch]!r}"
        )
    return full


class TrackedRun(Stateful):
    """What a training loop takes over ``epochs`` epochs: ``for batch in ds.track(loader)`` per
    epoch, each batch as ``keys(batch)`` (hashable sample keys). Its state is the reader's own
    checkpoint, so the harness drives the real thing: a fresh DataLoader per epoch, real worker
    processes when the loader has them."""

    def __init__(self, make: Callable[[], StreamingReader], loader: Callable[[Any], DataLoader],
                 keys: Callable[[Any], list], epochs: int = 2) -> None:
        self.ds, self.loader, self.keys, self.epochs = make(), loader, keys, epochs
        self._batches: Iterator[Any] | None = None

    def __iter__(self) -> TrackedRun:
        return self

    def __next__(self) -> list:
        while True:
            if self._batches is None:
                if self.ds.epoch >= self.epochs:
                    raise StopIteration
                self._batches = self.ds.track(self.loader(self.ds))
            batch = next(self._batches, None)
            if batch is not None:
                return self.keys(batch)
            self._batches = None  # the tracked loop ended: the reader is at the next epoch

    def state_dict(self) -> dict[str, Any]:
        return self.ds.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.close()
        self.ds.load_state_dict(state)

    def close(self) -> None:
        if self._batches is not None:
            self._batches.close()  # shuts the DataLoader's workers down
            self._batches = None


def check_elastic(
    make: Callable[[int, int], StreamingReader],
    before: tuple[int, Callable[[Any], DataLoader]],
    after: tuple[int, Callable[[Any], DataLoader]],
    keys: Callable[[Any], list],
    stop: int,
    everything: Sequence,
    *,
    roundtrip: Callable[[Mapping[str, Any]], Mapping[str, Any]] = json_roundtrip,
) -> list[StreamingReader]:
    """Every rank of a ``before[0]``-rank job takes ``stop`` batches (lockstep, as DDP does), the
    job stops, and comes back on ``after[0]`` ranks with another loader; the consumed keys plus
    what the new ranks read must be ``everything``: none skipped, none read on both sides of the
    stop, and repeated only as the readers' evening out says (``evened_anchors``: the repeats a
    padded worker serves after all of its own anchors). The resumed readers (at the next epoch
    by then) are returned for the caller's own checks."""
    world, loader = before
    consumed: list = []
    states = []
    for rank in range(world):
        ds = make(rank, world)
        batches = ds.track(loader(ds))
        for k, batch in enumerate(batches):
            consumed.extend(keys(batch))
            if k + 1 == stop:
                states.append(roundtrip(ds.state_dict()))
                break
        batches.close()
    assert len(states) == world, f"a rank ran out before batch {stop}"
    # a checkpoint is the job's: every rank's is the same but for the rank and its own repeats,
    # so the one DDP saves (rank 0's) resumes every rank of the new world
    same = [{k: v for k, v in s.items() if k not in ("rank", "extra")} for s in states]
    assert all(s == same[0] for s in same[1:]), "ranks wrote different checkpoints"
    new_world, new_loader = after
    resumed = [make(rank, new_world) for rank in range(new_world)]
    for ds in resumed:
        ds.load_state_dict(states[0])
    # the resumed epoch's plan is what is left of it, summed over the new ranks
    left = len(set(everything)) - len(set(consumed))
    planned = [ds.evened_anchors()["planned"] for ds in resumed]
    assert sum(planned) == left, f"resumed ranks plan {planned}, {left} samples are left"
    rest: list = []
    repeats = 0
    for ds in resumed:
        loader_ = new_loader(ds)
        repeats += ds.evened_anchors(loader_.num_workers)["repeated"]
        rest.extend(k for batch in ds.track(loader_) for k in keys(batch))
    assert not set(consumed) & set(rest), "the resumed job read again what was consumed"
    assert set(consumed) | set(rest) == set(everything), (
        f"{len(set(consumed))} consumed + {len(set(rest))} resumed, the epoch has {len(everything)}"
    )
    assert len(rest) - len(set(rest)) == repeats, "repeats other than the evening out's"
    return resumed
