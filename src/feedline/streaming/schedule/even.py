"""Evening out an epoch: every rank yields the same number of batches, whatever the batch size.

Why: the shard plan deals whole episodes (or chunks), so ranks own slightly different numbers
of anchors, and a DDP loop whose ranks take different numbers of batches hangs in the first
collective after the shortest rank ran out. MosaicML Streaming and LitData give every rank the
same number of samples for this reason.

Equal samples per rank are not enough: a DataLoader batches each worker's anchors on its own
(:mod:`~feedline.streaming.schedule.loader`), so a rank's batch count is the sum over its
workers of ``ceil(n / batch_size)`` (or ``floor`` with ``drop_last``). That sum is the same on
every rank for *every* batch size exactly when the ranks' worker counts are the same multiset.
So the counts are evened out per worker: the ranks' workers are sorted by count, and the k-th
smallest of every rank yields the largest (``"pad"``) or the smallest (``"drop"``) k-th count of
all ranks. A padded worker repeats a few of its own anchors after all of them (a seeded choice,
in its own order); a dropping worker stops early. Neither needs the batch size, which a worker
never learns, and a resume counts the repeats as it counts any anchor.

Coverage stays exact in its own terms: ``"pad"`` serves every anchor at least once and counts
the repeats, ``"drop"`` every anchor at most once and counts the dropped; ``"none"`` keeps the
plan's counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from feedline.streaming.errors import StreamingError

__all__ = ["EVEN_MODES", "check_even_mode", "even_counts", "pad_positions"]

#: The modes, the default first.
EVEN_MODES = ("pad", "drop", "none")
_PAD_STREAM = 0x50414444  # "PADD": the repeats' random stream, apart from the plan's and pools'


def check_even_mode(value: object) -> str:
    """``value`` if it is a mode, else a one-line error naming the modes."""
    if not isinstance(value, str) or value not in EVEN_MODES:
        raise StreamingError(
            f"even_batches must be one of {', '.join(map(repr, EVEN_MODES))}, got {value!r}"
        )
    return value


def even_counts(worker_counts: Sequence[Sequence[int]], parts: int, mode: str) -> np.ndarray:
    """``[rank, part]`` anchors each worker yields once the epoch is evened out under ``mode``.

    ``worker_counts[rank]`` holds the plan's anchors per effective worker of that rank (fewer
    than ``parts`` when the plan leaves some idle: those count 0).
    """
    check_even_mode(mode)
    counts = np.zeros((len(worker_counts), parts), dtype=np.int64)
    for rank, row in enumerate(worker_counts):
        counts[rank, : len(row)] = row
    if mode == "none" or counts.shape[0] < 2:
        return counts
    order = np.argsort(counts, axis=1, kind="stable")
    ranked = np.take_along_axis(counts, order, axis=1)
    target = ranked.max(axis=0) if mode == "pad" else ranked.min(axis=0)
    out = np.empty_like(counts)
    np.put_along_axis(out, order, np.broadcast_to(target, counts.shape), axis=1)
    return out


def pad_positions(available: int, repeats: int, *, seed: int, epoch: int, rank: int,
                  part: int) -> np.ndarray:
    """Which of a worker's ``available`` anchors (positions in its own order) it repeats,
    ``repeats`` of them, sorted: distinct while they last, then round after round.

    Seeded by (seed, epoch, rank, part), so a resumed worker repeats the same anchors.
    """
    if repeats <= 0:
        return np.zeros(0, dtype=np.int64)
    if available <= 0:
        raise StreamingError(f"worker {part} of rank {rank} must repeat {repeats} anchor(s) but has none")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [seed, epoch, rank, part, _PAD_STREAM])))
    rounds, rest = divmod(repeats, available)
    chosen = [np.arange(available, dtype=np.int64)] * rounds
    if rest:
        chosen.append(np.sort(rng.choice(available, size=rest, replace=False)).astype(np.int64))
    return np.concatenate(chosen)
