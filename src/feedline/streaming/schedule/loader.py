"""DataLoader arithmetic: which anchors of each worker a loader has delivered after N batches.

A DataLoader over an IterableDataset asks its workers for batches in turn: worker 0, 1, ...,
N-1, 0, 1, ...; a worker that has run out is skipped. Each worker batches its own anchors, so its
last batch may be partial (``drop_last=False``) or dropped (``drop_last=True``). Why a module of
its own: the resume arithmetic (:mod:`~feedline.streaming.schedule.resume`) and the elastic
replay of an old topology (:mod:`~feedline.streaming.schedule.elastic`) both count with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from feedline.streaming.errors import StreamingError
from feedline.validate import check_int

__all__ = [
    "batches_per_worker",
    "loader_batches",
    "loader_cursor",
    "samples_in_batches",
    "worker_offsets",
]


def batches_per_worker(counts: Sequence[int], batch_size: int, drop_last: bool) -> list[int]:
    """Batches each worker delivers in one epoch."""
    check_int("batch_size", batch_size, minimum=1, error=StreamingError)
    if drop_last:
        return [n // batch_size for n in counts]
    return [-(-n // batch_size) for n in counts]


def loader_batches(
    counts: Sequence[int], batch_size: int, drop_last: bool
) -> Iterator[tuple[int, int, int]]:
    """The DataLoader's batch order as (worker, first anchor in worker, batch size) triples."""
    per_worker = batches_per_worker(counts, batch_size, drop_last)
    for k in range(max(per_worker, default=0)):
        for w, (n, b) in enumerate(zip(counts, per_worker, strict=True)):
            if k < b:
                start = k * batch_size
                yield w, start, min(batch_size, n - start)


def _delivered(n: int, batches: int, batch_size: int) -> int:
    return min(n, batches * batch_size)


def loader_cursor(
    counts: Sequence[int], batch_size: int, drop_last: bool, batches_consumed: int
) -> tuple[list[int], int]:
    """(anchors each worker delivered, index of the worker whose batch comes next in its round).

    The second value is the rotation a resumed run applies so that a fresh DataLoader, which
    always starts asking worker 0, continues the interrupted round: DataLoader worker ``w``
    serves plan part ``(w + rotation) % len(counts)``.
    """
    per_worker = batches_per_worker(counts, batch_size, drop_last)
    total = sum(per_worker)
    if not 0 <= batches_consumed <= total:
        raise StreamingError(
            f"{batches_consumed} batches consumed, but this rank's epoch has {total} batches"
        )

    def in_rounds(k: int) -> int:
        return sum(min(b, k) for b in per_worker)

    lo, hi = 0, max(per_worker, default=0)  # full rounds: largest k with in_rounds(k) <= consumed
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if in_rounds(mid) <= batches_consumed:
            lo = mid
        else:
            hi = mid - 1
    extra = batches_consumed - in_rounds(lo)
    taken, rotation = [], 0
    for w, (n, b) in enumerate(zip(counts, per_worker, strict=True)):
        m = min(b, lo)
        if extra and b > lo:
            m += 1
            extra -= 1
            rotation = w + 1
        taken.append(_delivered(n, m, batch_size))
    return taken, rotation % max(1, len(counts))


def worker_offsets(
    counts: Sequence[int], batch_size: int, drop_last: bool, batches_consumed: int
) -> list[int]:
    """Anchors each worker has delivered after the loader yielded ``batches_consumed`` batches."""
    return loader_cursor(counts, batch_size, drop_last, batches_consumed)[0]


def samples_in_batches(
    counts: Sequence[int], batch_size: int, drop_last: bool, batches_consumed: int
) -> int:
    return sum(worker_offsets(counts, batch_size, drop_last, batches_consumed))
