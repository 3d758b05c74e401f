"""Mixture arithmetic: how many anchors each source gives per epoch, and which ones.

Why a module of its own: the plan, the pools and the resume replay deal in *units* (an id and
its due frames) and need not know where a unit comes from. A mixture turns sources with a
``weight``, ``repeat`` or ``choose`` into the units of one epoch (:meth:`MixtureUnits.epoch`):

* **Counts** (:func:`source_counts`): ``choose`` is a number of anchors, ``repeat`` a multiple of
  the source's selected frames (rounded half up), and the ``weight`` sources share what the
  others leave of ``epoch_size`` in proportion to their weights (largest remainders, so the
  counts add up exactly).
* **Which anchors**: a count ``c`` of a source of ``N`` frames is ``q = c // N`` whole passes
  (every frame ``q`` times) and ``r = c % N`` extras. The extras are a window of ``r`` frames of
  the source's *cycle* (its episodes in one seeded order, frames in playback order), starting
  where the previous epoch's window ended. A window shorter than the cycle never holds a frame
  twice, so within an epoch two frames of a source differ in use by at most one, and over
  epochs the windows walk the whole cycle: a source chosen at 10 % of its frames shows every
  frame once in ten epochs. Whole episodes stay whole except at a window's two ends.
* **Stratified batches** (:mod:`~feedline.streaming.schedule.stratified`) cut each worker's
  order so that every batch holds each source's share.
* **Unit ids**: source ``s``'s episode ``e`` in its ``k``-th copy of the epoch is
  ``k * span + offset[s] + e``, where ``offset`` stacks the sources' episode index ranges and
  ``span`` is their total. One source of plain frames is copy 0 at offset 0: the ids are the
  episode indices, and the plan, pools and checkpoints are those of the plain reader.

How the reader calls it::

    units = MixtureUnits([lengths_of_source_0, ...], counts, seed=seed)
    due = units.epoch(epoch)                       # a Remainder: unit -> due frames
    source, episode, copy = units.locate(unit)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from feedline.streaming.errors import MixtureError
from feedline.streaming.schedule.elastic import Remainder

__all__ = ["MixtureUnits", "Quota", "source_counts"]

_CYCLE_STREAM = 0x4D495843  # "MIXC": the cycle orders' random stream, apart from plan and pools


@dataclass(frozen=True)
class Quota:
    """How many anchors one source gives per epoch: exactly one of the three.

    Args:
        weight: a share of what ``epoch_size`` leaves after the ``repeat``/``choose`` sources,
            relative to the other weights.
        repeat: a multiple of the source's selected frames (fractional allowed).
        choose: anchors per epoch.
    """

    weight: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self) -> None:
        given = [n for n in ("weight", "repeat", "choose") if getattr(self, n) is not None]
        if len(given) > 1:
            raise MixtureError(f"give one of weight, repeat or choose, not {' and '.join(given)}")
        for name in given:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value
            ) or value < 0:
                raise MixtureError(f"{name} must be a finite number >= 0, not {value!r}")
        if self.choose is not None and int(self.choose) != self.choose:
            raise MixtureError(f"choose is a number of frames, not {self.choose!r}")

    @property
    def kind(self) -> str:
        for name in ("weight", "repeat", "choose"):
            if getattr(self, name) is not None:
                return name
        return "repeat"  # none given: every frame once

    def describe(self) -> str:
        value = getattr(self, self.kind)
        return "repeat 1" if value is None else f"{self.kind} {value:g}"


#: The most times one epoch may hold a source's selected frames (or an epoch all of them): an
#: epoch's plan and pools cost memory per anchor, so a larger count (``epoch_size=10**12``,
#: ``repeat: 1e6``) is refused at once instead of ending in a ``MemoryError`` minutes later.
#: More copies are more epochs.
MAX_COPIES = 64


def _bounded(count: int, frames: int, what: str) -> int:
    if count > MAX_COPIES * max(int(frames), 1):
        raise MixtureError(
            f"{what} gives {count} anchors an epoch, more than {MAX_COPIES} times its {int(frames)} frames "
            f"(an epoch's plan costs memory per anchor); run more epochs instead"
        )
    return count


def source_counts(
    frames: Sequence[int], quotas: Sequence[Quota], epoch_size: int | None = None,
    names: Sequence[str] | None = None,
) -> list[int]:
    """Anchors per epoch of each source (see the module docstring).

    Args:
        frames: each source's selected frames.
        quotas: each source's :class:`Quota` (none given: ``repeat=1``).
        epoch_size: anchors per epoch over all sources. Default ``None``: the sum of the sources'
            frames when some source has a ``weight``, else the sum of the counts.
        names: how errors name the sources. Default: ``source 0``, ``source 1``, ...
    """
    if len(frames) != len(quotas):
        raise MixtureError(f"{len(frames)} sources but {len(quotas)} quotas")
    names = [f"source {i}" for i in range(len(frames))] if names is None else list(names)
    counts: list[int | None] = []
    for n, quota in zip(frames, quotas, strict=True):
        if quota.choose is not None:
            counts.append(_bounded(int(quota.choose), n, f"{names[len(counts)]}'s choose {quota.choose}"))
        elif quota.weight is not None:
            counts.append(None)
        else:
            repeat = 1.0 if quota.repeat is None else float(quota.repeat)
            counts.append(_bounded(math.floor(repeat * int(n) + 0.5), n, f"{names[len(counts)]}'s repeat {repeat:g}"))
    fixed = sum(c for c in counts if c is not None)
    weighted = [i for i, c in enumerate(counts) if c is None]
    if not weighted:
        if epoch_size is not None and int(epoch_size) != fixed:
            raise MixtureError(
                f"epoch_size={epoch_size} but the sources' repeat/choose counts add up to {fixed}; "
                "leave epoch_size out, or give some source a weight to fill the rest"
            )
        return [int(c) for c in counts]  # type: ignore[arg-type]
    size = sum(int(n) for n in frames) if epoch_size is None else int(epoch_size)
    _bounded(size, sum(int(n) for n in frames), f"epoch_size={epoch_size}")
    rest = size - fixed
    if rest < 0:
        raise MixtureError(
            f"the repeat/choose sources take {fixed} anchors, more than epoch_size={size}; raise "
            "epoch_size or lower their counts"
        )
    weights = np.asarray([float(quotas[i].weight) for i in weighted])  # type: ignore[arg-type]
    if weights.sum() <= 0:
        raise MixtureError(
            f"the weights of {', '.join(names[i] for i in weighted)} add up to 0; give at least "
            "one a positive weight"
        )
    exact = rest * weights / weights.sum()
    share = np.floor(exact).astype(np.int64)
    short = rest - int(share.sum())
    share[np.argsort(-(exact - share), kind="stable")[:short]] += 1  # largest remainders
    for i, c in zip(weighted, share.tolist(), strict=True):
        counts[i] = _bounded(int(c), frames[i], f"{names[i]}'s weight {quotas[i].weight:g} of epoch_size={size}")
    return [int(c) for c in counts]  # type: ignore[arg-type]


class MixtureUnits:
    """The units (an id and its due frames) of every epoch of a mixture.

    Args:
        sources: per source, its selected episodes: episode index -> frames.
        counts: per source, anchors per epoch (:func:`source_counts`).
        seed: the resolved order seed; it orders each source's cycle.
    """

    def __init__(
        self, sources: Sequence[Mapping[int, int]], counts: Sequence[int], *, seed: int
    ) -> None:
        if not sources or len(sources) != len(counts):
            raise MixtureError(f"{len(sources)} sources but {len(counts)} counts")
        self.seed = int(seed)
        self.counts = [int(c) for c in counts]
        self.episodes: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        offsets = [0]
        for s, lengths in enumerate(sources):
            keys = np.fromiter(lengths.keys(), np.int64, len(lengths))
            if keys.size == 0:
                raise MixtureError(f"source {s} has no selected episode")
            order = np.argsort(keys, kind="stable")  # keys and values in one pass each
            eps = keys[order]
            self.episodes.append(eps)
            self.lengths.append(np.fromiter(lengths.values(), np.int64, len(lengths))[order])
            offsets.append(offsets[-1] + int(eps[-1]) + 1)
        self.offsets = np.asarray(offsets[:-1], dtype=np.int64)
        #: Ids per copy: the sources' stacked episode index ranges.
        self.span = int(offsets[-1])
        self.frames = [int(n.sum()) for n in self.lengths]
        self._epochs: dict[int, Remainder] = {}

    @property
    def plain(self) -> bool:
        """One source giving each frame once: the units are its episode indices."""
        return len(self.counts) == 1 and self.counts[0] == self.frames[0]

    def unit(self, source: int, episode: int, copy: int = 0) -> int:
        return int(copy) * self.span + int(self.offsets[source]) + int(episode)

    def locate(self, unit: int) -> tuple[int, int, int]:
        """``(source, episode index, copy)`` of ``unit``."""
        copy, rest = divmod(int(unit), self.span)
        source = int(np.searchsorted(self.offsets, rest, side="right")) - 1
        return source, rest - int(self.offsets[source]), copy

    def sources_of(self, units: np.ndarray) -> np.ndarray:
        """The source of each unit (vectorised :meth:`locate`)."""
        rest = np.asarray(units, dtype=np.int64) % self.span
        return np.searchsorted(self.offsets, rest, side="right") - 1

    def _cycle(self, source: int) -> np.ndarray:
        """Positions (into the source's episode arrays) in the seeded cycle order."""
        key = np.random.SeedSequence([self.seed, source, _CYCLE_STREAM])
        return np.random.Generator(np.random.PCG64(key)).permutation(self.episodes[source].size)

    def epoch(self, epoch: int) -> Remainder:
        """The units of ``epoch`` and their due frames (partly due ones in ``frames``); the last
        few epochs asked are kept, since the tracker, the reader and the replay ask alike."""
        epoch = int(epoch)
        cached = self._epochs.get(epoch)
        if cached is None:
            cached = self._epochs[epoch] = self._units(epoch)
            while len(self._epochs) > 3:
                del self._epochs[next(iter(self._epochs))]
        return cached

    def _units(self, epoch: int) -> Remainder:
        lengths: dict[int, int] = {}
        partial: dict[int, np.ndarray] = {}
        for s, count in enumerate(self.counts):
            n_frames = self.frames[s]
            copies, extra = divmod(count, n_frames)
            eps, lens = self.episodes[s], self.lengths[s]
            base = int(self.offsets[s])
            for k in range(copies):
                ids = (k * self.span + base + eps).tolist()
                lengths.update(zip(ids, lens.tolist(), strict=True))
            if extra:
                self._window(s, epoch, extra, copies, lengths, partial)
        return Remainder(lengths, partial)

    def _window(
        self, s: int, epoch: int, extra: int, copy: int, lengths: dict[int, int],
        partial: dict[int, np.ndarray],
    ) -> None:
        """The ``extra`` frames of the cycle window of ``epoch`` as units of copy ``copy``."""
        order = self._cycle(s)
        lens = self.lengths[s][order]
        ends = np.cumsum(lens)
        n_frames = int(ends[-1])
        start = (epoch * extra) % n_frames
        stop = start + extra  # may pass the cycle's end and wrap (extra < n_frames)
        pieces = [(start, min(stop, n_frames))]
        if stop > n_frames:
            pieces.append((0, stop - n_frames))
        base = copy * self.span + int(self.offsets[s])
        starts = ends - lens
        edges: dict[int, list[np.ndarray]] = {}
        for a, b in pieces:
            first = int(np.searchsorted(ends, a, side="right"))
            last = int(np.searchsorted(ends, b, side="left"))
            inside = np.arange(first, last + 1)
            whole = inside[(starts[inside] >= a) & (ends[inside] <= b)]
            ids = (base + self.episodes[s][order[whole]]).tolist()
            lengths.update(zip(ids, lens[whole].tolist(), strict=True))
            for j in {first, last}:  # the window's ends: cut unless wholly inside
                e0, e1 = int(starts[j]), int(ends[j])
                if e0 >= a and e1 <= b:
                    continue
                lo, hi = max(a, e0) - e0, min(b, e1) - e0
                if hi > lo:
                    edges.setdefault(j, []).append(np.arange(lo, hi, dtype=np.int64))
        for j, parts in edges.items():
            frames = np.unique(np.concatenate(parts))
            unit = base + int(self.episodes[s][order[j]])
            lengths[unit] = int(frames.size)
            if frames.size < int(lens[j]):
                partial[unit] = frames
