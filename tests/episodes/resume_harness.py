"""One resume harness for every stateful stage of the episode reader.

``check_resume(make, stops)`` runs a stage uninterrupted, then for every stop ``k``: takes ``k``
items from a fresh stage, saves its state through a JSON round trip (what a checkpoint does),
loads it into another fresh stage and checks that the rest is exactly the uninterrupted rest, in
order. A second save/load in the middle of the resumed run catches state that stops advancing
after the first resume. Stages that span epochs cover the three cases users hit: resume
mid-epoch, at the very end of an epoch, and the epoch after a resume.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class StatefulIterator(Protocol[T]):
    def __iter__(self) -> Iterator[T]: ...

    def __next__(self) -> T: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


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


def check_resume(
    make: Callable[[], StatefulIterator[T]],
    stops: Iterable[int],
    *,
    full: list[T] | None = None,
    roundtrip: Callable[[Mapping[str, Any]], Mapping[str, Any]] = json_roundtrip,
    chain: bool = True,
) -> list[T]:
    """Assert that resuming at every stop reproduces the uninterrupted sequence exactly."""
    if full is None:
        full = list(make())
    for k in stops:
        first = make()
        prefix = list(islice(first, k))
        assert prefix == full[:k], f"a fresh run diverged before stop {k}"
        second = make()
        second.load_state_dict(roundtrip(first.state_dict()))
        rest: list[T] = []
        if chain and k < len(full):
            middle = (len(full) - k) // 2
            rest = list(islice(second, middle))
            third = make()
            third.load_state_dict(roundtrip(second.state_dict()))
            second = third
        rest += list(second)
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
