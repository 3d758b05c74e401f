"""One resume harness for every stateful stage of the episode reader.

``check_resume(make, stops)`` runs a stage uninterrupted, then for every stop ``k``: takes ``k``
items from a fresh stage, saves its state through a JSON round trip (what a checkpoint does),
loads it into another fresh stage and checks that the rest is exactly the uninterrupted rest, in
order. A second save/load in the middle of the resumed run catches state that stops advancing
after the first resume. Stages that span epochs cover the three cases users hit: resume
mid-epoch, at the very end of an epoch, and the epoch after a resume; :class:`Epochs` makes a
multi-epoch stage out of a per-epoch one (a pool, a pipeline).

Every stage goes through :class:`feedline.streaming.schedule.state.Stateful`, the one contract:
the real stages subclass it, and test drivers that wrap them (several epochs, a DataLoader
loop) implement the same two methods.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, Generic, Protocol, TypeVar

from feedline.streaming.schedule.state import Stateful

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
