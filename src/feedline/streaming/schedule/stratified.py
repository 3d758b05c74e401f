"""Stratified batches: one pool per source in each worker, interleaved batch by batch by quota.

Why: with ``batching="stratified"`` every batch holds each source's share of the batch, as
MosaicML Streaming's stratified batching does, so that a small source is in every gradient
step rather than in a random few. A worker batches its own anchors (the DataLoader collates
``batch_size`` consecutive samples of one worker), so the worker's order decides the batches:
each of its sources gets its own exact-coverage pool (its share of the worker's pool size and
byte budget), and batch ``b`` takes ``quotas[b, s]`` anchors from source ``s``'s pool
(:func:`stratified_quotas`, the rounding carried so the
epoch stays exact). The plan deals each source over ranks and workers on its own
(``plan_shards_arrays(groups=...)``), so a worker's shares are the mixture's within one episode.

Fetch order: the units sorted by their first anchor in the interleaved order. Why this cannot
deadlock the pipeline: at the moment a unit's first anchor comes, the units fetched and not yet
released of each source are a subset of what that source's pool held resident at that moment
of its own clock, which fits the source's share of the budget; the shares add up to the
worker's budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from feedline.streaming.errors import StreamingError
from feedline.streaming.schedule.pool import EpisodePool

__all__ = ["StratifiedPool", "split_share", "stratified_quotas"]


def stratified_quotas(counts: Sequence[int], batch_size: int) -> np.ndarray:
    """Per batch, how many anchors each source gives: ``out[b, s]``.

    Why: with ``batching="stratified"`` every batch holds each source's share of the batch. By
    the end of batch ``b`` source ``s`` should have given ``b * B * counts[s] / total``; each
    batch gives every source the whole part of what it is short of that (the least behind
    yielding when those parts overfill the batch), and the batch's leftover places go to the
    largest fractions. The rounding error is carried from batch to batch, so a source's running
    count stays within 1.5 anchors of its share (a property test holds it; many small sources in
    batches of one come closest) and the epoch holds exactly ``counts`` (every batch has ``B``
    anchors but the last).
    """
    want = np.asarray(counts, dtype=np.int64)
    total = int(want.sum())
    batches = -(-total // batch_size) if total else 0
    out = np.zeros((batches, want.size), dtype=np.int64)
    given = np.zeros(want.size, dtype=np.int64)
    for b in range(batches):
        end = min((b + 1) * batch_size, total)
        short = end * want / total - given
        room = want - given
        take = np.minimum(np.floor(np.maximum(short, 0.0)).astype(np.int64), room)
        over = int(take.sum()) - (end - int(given.sum()))
        while over > 0:  # sources behind by whole anchors outnumber the batch: the least behind yield
            s = int(np.argmin(np.where(take > 0, short - take, np.inf)))
            take[s] -= 1
            over -= 1
        while over < 0:  # the places left go to the largest fractions (sources with room)
            s = int(np.argmax(np.where(take < room, short - take, -np.inf)))
            take[s] += 1
            over += 1
        out[b] = take
        given += take
    return out


def split_share(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights``, at least 1 each (largest remainders)."""
    w = np.asarray(weights, dtype=np.float64)
    exact = total * w / w.sum()
    out = np.maximum(np.floor(exact).astype(np.int64), 1)
    short = total - int(out.sum())
    if short > 0:
        out[np.argsort(-(exact - out), kind="stable")[:short]] += 1
    return [int(x) for x in out]


class StratifiedPool:
    """One worker's anchors of a stratified mixture (the :class:`EpisodePool` interface the
    reader and the resume replay use: ``take``, ``skip``, counts).

    Args:
        pools: the worker's pool of each source that has units in it, in source order.
        batch_size: the DataLoader's batch size (the quotas are per batch).
    """

    def __init__(self, pools: Sequence[EpisodePool], batch_size: int) -> None:
        if not batch_size or batch_size < 1:
            raise StreamingError("stratified batching needs the DataLoader's batch_size")
        self.pools = list(pools)
        self.batch_size = int(batch_size)
        counts = [p.total_anchors for p in self.pools]
        self.total_anchors = int(sum(counts))
        quotas = stratified_quotas(counts, self.batch_size)
        sources = np.tile(np.arange(len(self.pools)), quotas.shape[0])
        #: per interleaved position, the pool it comes from
        self._source = np.repeat(sources, quotas.reshape(-1))
        eps = np.empty(self.total_anchors, dtype=np.int64)
        frames = np.empty(self.total_anchors, dtype=np.int64)
        for s, pool in enumerate(self.pools):
            at = self._source == s
            eps[at], frames[at] = pool.take(pool.anchors_remaining)
        self._eps, self._frames = eps, frames
        self._yielded = 0

    @property
    def resident_limit(self) -> int:
        return sum(p.pool_size for p in self.pools)

    @property
    def anchors_yielded(self) -> int:
        return self._yielded

    @property
    def anchors_remaining(self) -> int:
        return self.total_anchors - self._yielded

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        a = self._yielded
        b = min(self.total_anchors, a + int(n))
        self._yielded = b
        return self._eps[a:b], self._frames[a:b]

    def skip(self, n: int) -> None:
        if n < 0 or self._yielded + n > self.total_anchors:
            raise StreamingError(
                f"cannot skip {n} anchors: {self.anchors_remaining} left in this worker's epoch"
            )
        self._yielded += int(n)
