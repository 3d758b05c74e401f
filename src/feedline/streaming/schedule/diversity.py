"""Batch diversity: how many distinct episodes the training loop's batches mix, against the ideal.

A streaming reader trades a global shuffle for whole resident episodes, so its batches mix fewer
episodes than a map-style ``shuffle=True`` loader does. These numbers say how many fewer, where the
batches are known (the training process, one batch after another), in the same arithmetic for the
reader and for an ideal global shuffle of the same episode lengths:

* **episodes per batch** - distinct episode indices in one batch: mean, 5th percentile (nearest
  rank) and minimum over every full batch recorded (an epoch's short last batches, one per
  DataLoader worker, are bounded by their size, not by the order, so they are left out here);
* **episodes per window** - distinct episodes in ``window`` (10) consecutive batches of one
  epoch, mean over every sliding window (a gradient step sees one batch; an optimiser's momentum
  sees several);
* **early episode share** - the share of the rank's episodes of an epoch that its first
  ``early`` (10 %) anchors touch: near 1 for a global shuffle, near ``pool / episodes`` for a pool
  that admits episodes in order. Mean over the epochs recorded from their start.

:class:`BatchDiversity` counts them batch by batch (a ``numpy.unique`` and a few dict updates per
batch); :func:`ideal_diversity` feeds it uniform permutations of all anchors instead, so the ideal
and the measurement share every definition. Pure arithmetic: no I/O, no threads.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields, replace

import numpy as np

from feedline.streaming.errors import StreamingError
from feedline.validate import check_int

__all__ = [
    "DIVERSITY_METRICS",
    "EARLY_SHARE",
    "WINDOW_BATCHES",
    "BatchDiversity",
    "DiversityReport",
    "expected_share",
    "ideal_diversity",
]

WINDOW_BATCHES = 10  # consecutive batches of one window
EARLY_SHARE = 0.1  # the share of an epoch's anchors at which its episode share is taken
_IDEAL_STREAM = 0x49444541  # "IDEA": keeps the ideal's random stream apart from the plan's and pools'


@dataclass(frozen=True)
class DiversityReport:
    """The diversity of the batches recorded (every field is one ``metrics()`` key).

    Args:
        diversity_batches: full batches recorded.
        batch_episodes_mean: distinct episodes per full batch, mean (0 before any batch).
        batch_episodes_p5: its 5th percentile (nearest rank).
        batch_episodes_min: its minimum.
        window_episodes_mean: distinct episodes per window of consecutive batches, mean (0 before
            the first full window).
        early_episode_share: share of the epoch's episodes touched by its first anchors, mean
            over the epochs that got there from their start (0 before one did).
    """

    diversity_batches: int
    batch_episodes_mean: float
    batch_episodes_p5: float
    batch_episodes_min: float
    window_episodes_mean: float
    early_episode_share: float

    def as_dict(self) -> dict[str, float | int]:
        """The report as ``metrics()`` keys (:data:`DIVERSITY_METRICS`) and values."""
        return dict(zip(DIVERSITY_METRICS, astuple(self), strict=True))


#: The diversity keys of ``StreamingEpisodeDataset.metrics()``, by their field names.
DIVERSITY_METRICS: tuple[str, ...] = tuple(f.name for f in fields(DiversityReport))


class BatchDiversity:
    """Counts the diversity of batches as the training loop takes them (see the module docstring).

    Memory is one histogram of distinct counts, the last ``window`` batches' episodes and, until
    an epoch's early mark, the set of episodes it has touched.

    Args:
        batch_size: the loader's batch size: a shorter batch (an epoch's end) counts in windows
            and the early share but not in the per-batch figures. Default ``None``: every batch
            counts.
        window: consecutive batches of one window. Default 10.
        early: the share of an epoch's anchors at which its episode share is taken. Default 0.1.
    """

    def __init__(
        self, batch_size: int | None = None, window: int = WINDOW_BATCHES, early: float = EARLY_SHARE
    ) -> None:
        self.batch_size = batch_size
        self.window = check_int("window", window, minimum=1, error=StreamingError)
        if not 0 < early <= 1:
            raise StreamingError(f"early must be in (0, 1], got {early!r}")
        self.early = float(early)
        self.reset()
        self._clear_epoch()

    def reset(self) -> None:
        """Zero the figures (the current epoch's windows and early mark carry on)."""
        self._histogram = np.zeros(0, dtype=np.int64)  # distinct count -> batches
        self._window_sum = 0
        self._windows = 0
        self._shares: list[float] = []

    def _clear_epoch(self) -> None:
        self._recent: deque[np.ndarray] = deque()
        self._in_window: dict[int, int] = {}
        self._touched: set[int] | None = None
        self._episodes = 0
        self._mark = 0
        self._seen = 0

    def early_mark(self, anchors: int) -> int:
        """Anchors of an epoch of ``anchors`` at which its episode share is taken (at least 1)."""
        return max(1, math.ceil(self.early * anchors - 1e-9))

    def begin_epoch(self, episodes: int, anchors: int, *, from_start: bool = True) -> None:
        """An epoch of ``episodes`` episodes and ``anchors`` anchors starts (windows restart).

        ``from_start=False`` (a resume inside the epoch) skips its early share: the anchors
        before the resume point were counted by another run, if at all.
        """
        self._clear_epoch()
        if from_start and episodes > 0 and anchors > 0:
            self._touched = set()
            self._episodes = int(episodes)
            self._mark = self.early_mark(anchors)

    def record(self, episode_indices: np.ndarray | Sequence[int]) -> None:
        """One batch the training loop took: its samples' episode indices, in batch order."""
        batch = np.asarray(episode_indices, dtype=np.int64).reshape(-1)
        unique = np.unique(batch)
        distinct = int(unique.size)
        if self.batch_size is None or batch.size >= self.batch_size:
            if distinct >= self._histogram.size:
                self._histogram = np.pad(self._histogram, (0, distinct + 1 - self._histogram.size))
            self._histogram[distinct] += 1

        in_window = self._in_window
        for episode in unique.tolist():
            in_window[episode] = in_window.get(episode, 0) + 1
        self._recent.append(unique)
        if len(self._recent) > self.window:
            for episode in self._recent.popleft().tolist():
                left = in_window[episode] - 1
                if left:
                    in_window[episode] = left
                else:
                    del in_window[episode]
        if len(self._recent) == self.window:
            self._window_sum += len(in_window)
            self._windows += 1

        if self._touched is not None:
            take = min(batch.size, self._mark - self._seen)
            self._touched.update(batch[:take].tolist())
            self._seen += take
            if self._seen >= self._mark:
                self._shares.append(len(self._touched) / self._episodes)
                self._touched = None

    def report(self) -> DiversityReport:
        """The diversity of every batch recorded since :meth:`reset`."""
        histogram = self._histogram
        batches = int(histogram.sum())
        if batches == 0:
            mean = p5 = low = 0.0
        else:
            values = np.arange(histogram.size)
            mean = float((values * histogram).sum() / batches)
            cumulative = np.cumsum(histogram)
            p5 = float(np.searchsorted(cumulative, math.ceil(0.05 * batches)))
            low = float(np.flatnonzero(histogram)[0])
        window = self._window_sum / self._windows if self._windows else 0.0
        share = float(np.mean(self._shares)) if self._shares else 0.0
        return DiversityReport(batches, mean, p5, low, window, share)


def ideal_diversity(
    lengths: Sequence[int] | np.ndarray,
    batch_size: int,
    *,
    drop_last: bool = False,
    rounds: int = 4,
    seed: int = 0,
    window: int = WINDOW_BATCHES,
    early: float = EARLY_SHARE,
    max_batches: int = 5_000,
) -> DiversityReport:
    """The diversity of an ideal global shuffle of episodes of ``lengths`` frames, by simulation.

    Each round draws a uniform permutation of all anchors (every frame of every episode once),
    cuts it into batches of ``batch_size`` (the last one partial unless ``drop_last``, as a
    DataLoader does) and records them with :class:`BatchDiversity`; the report is the mean of the
    rounds' reports, minimum and p5 included (``diversity_batches``: the batches of one round). Deterministic given
    ``seed``. A uniform permutation's batches are exchangeable, so only the first
    ``max_batches`` are batched (the mean and percentiles are the same in expectation); when the
    early mark lies past them, the early share is its exact expectation
    (:func:`expected_share`) instead: a dataset of 100M frames costs a second, not the minutes a
    full permutation would.
    """
    sizes = np.asarray(lengths, dtype=np.int64).reshape(-1)
    check_int("batch_size", batch_size, minimum=1, error=StreamingError)
    check_int("rounds", rounds, minimum=1, error=StreamingError)
    check_int("max_batches", max_batches, minimum=1, error=StreamingError)
    if sizes.size == 0 or np.any(sizes < 1):
        raise StreamingError("ideal_diversity needs at least one episode, each of at least one frame")
    anchors = int(sizes.sum())
    ends = np.cumsum(sizes)
    counter = BatchDiversity(batch_size, window, early)
    mark = counter.early_mark(anchors)
    served = anchors - anchors % batch_size if drop_last else anchors  # what a DataLoader yields
    usable = min(served, max_batches * batch_size)  # anchors batched
    reports = []
    for r in range(rounds):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, _IDEAL_STREAM, r])))
        positions = rng.permutation(anchors) if usable == anchors else rng.choice(
            anchors, size=usable, replace=False, shuffle=True)
        episodes = np.searchsorted(ends, positions, side="right")
        counter.reset()
        counter.begin_epoch(int(sizes.size), anchors)
        for start in range(0, usable, batch_size):
            counter.record(episodes[start : min(start + batch_size, usable)])
        reports.append(counter.report())
    if usable < mark <= served:  # the mark lies past the batched prefix: its exact expectation
        reports = [replace(report, early_episode_share=expected_share(sizes, mark))
                   for report in reports]
    columns = list(zip(*(astuple(report) for report in reports), strict=True))
    return DiversityReport(
        int(columns[0][0]), *(float(np.mean(column)) for column in columns[1:])
    )


def expected_share(lengths: Sequence[int] | np.ndarray, anchors: int) -> float:
    """The expected share of episodes that the first ``anchors`` of a uniform permutation touch.

    An episode of ``l`` of the ``N`` frames is missed with the hypergeometric probability
    ``C(N - l, m) / C(N, m)``; the share is one minus the mean of that over the episodes.
    """
    sizes = np.asarray(lengths, dtype=np.int64).reshape(-1)
    total, m = int(sizes.sum()), int(anchors)
    missed = 0.0
    values, counts = np.unique(sizes, return_counts=True)
    for length, count in zip(values.tolist(), counts.tolist(), strict=True):
        if total - length >= m:
            missed += count * math.exp(
                math.lgamma(total - length + 1) - math.lgamma(total - length - m + 1)
                - math.lgamma(total + 1) + math.lgamma(total - m + 1)
            )
    return 1.0 - missed / sizes.size
