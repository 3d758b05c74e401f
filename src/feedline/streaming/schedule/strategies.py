"""The pool's sampling strategies, chosen by name from the dispatch table :data:`POOL_STRATEGIES`.

A strategy decides the order in which an exact-coverage pool
(:class:`~feedline.streaming.schedule.pool.EpisodePool`) hands out the frames of its resident
episodes. The pool simulates it as clocks: every frame rings once, at its episode's admission
time plus a delay the strategy draws, and an episode leaves the pool (freeing its slot and
bytes) when its last frame has rung. A strategy therefore only answers, for one block of the
admission order, "which frame rings after which delay, and how long does each episode stay";
admission, byte limits and merging blocks stay in the pool. Registering a function here makes
it selectable as ``sampling_strategy=`` (MosaicML Streaming dispatches its shuffles the same
way in ``shuffle/__init__.py``; ours are a few lines each, so they share one module).

The table holds three:

* ``spread`` - every episode stays the same time and rings its frames evenly over it, in
  playback order from a random start: batches as diverse as a global shuffle, each frame decoded
  once.
* ``remaining`` - every frame rings after an independent Exp(1) delay: the next anchor is uniform
  over the resident episodes' remaining frames.
* ``round_robin`` - one shuffled frame of each resident episode per round, the episodes shuffled
  in each round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from feedline.streaming.errors import StreamingError

__all__ = ["POOL_STRATEGIES", "Block", "Clocks", "PoolStrategy", "get_strategy"]


class Block(NamedTuple):
    """One block of a pool's admission order: its episodes and their frame slots.

    Args:
        lengths: frames of each episode of the block.
        offsets: each episode's first slot.
        local: per slot, its episode (position in the block).
        pos: per slot, its position inside that episode.
    """

    lengths: np.ndarray
    offsets: np.ndarray
    local: np.ndarray
    pos: np.ndarray


class Clocks(NamedTuple):
    """What a strategy draws for one block.

    Args:
        frames: per slot, the frame index it yields.
        delays: per slot, when it rings after its episode's admission.
        stays: per episode, how long it stays resident (until its last frame rings).
    """

    frames: np.ndarray
    delays: np.ndarray
    stays: np.ndarray


def _remaining(block: Block, rng: np.random.Generator) -> Clocks:
    """``remaining``: the next anchor is uniform over every remaining resident frame.

    Equivalently: pick a resident episode with probability proportional to its remaining
    frames, then a random remaining frame of it. Each frame rings after an independent Exp(1)
    delay; by memorylessness the next ring is uniform over the resident remaining frames.
    """
    delays = rng.standard_exponential(block.pos.size)
    return Clocks(block.pos, delays, np.maximum.reduceat(delays, block.offsets))


def _round_robin(block: Block, rng: np.random.Generator) -> Clocks:
    """``round_robin``: each round shuffles the resident episodes and takes one frame of each.

    Each episode's frames come in a shuffled order, one per round; episodes admitted during a
    round join the next one. The j-th frame of an episode's shuffled order rings in round
    ``admission round + j``; a uniform key in ``[0, 0.5)`` orders the episodes inside a round
    and keeps it below the next round.
    """
    n = block.pos.size
    # Sort keys stay below local + 0.5, so the shuffle never mixes two episodes' frames.
    frames = block.pos[np.argsort(block.local + 0.5 * rng.random(n), kind="stable")]
    delays = block.pos + 0.5 * rng.random(n)
    return Clocks(frames, delays, block.lengths.astype(np.float64))


def _spread(block: Block, rng: np.random.Generator) -> Clocks:
    """``spread``: each episode's frames in playback order from a random start, evenly spaced.

    Why: a global shuffle spreads every episode's frames evenly over the epoch, so a batch mixes
    as many episodes as it has samples and no episode dominates a stretch of it. Here every
    episode stays resident for the same time (1) and rings its ``L`` frames at
    ``(k + u_k) / L`` for ``k = 0 .. L-1`` (``u_k`` uniform in ``[0, 1)``): a frame-proportional
    rate, stratified, so a window of ``w`` anchors holds about ``w * L / (resident frames)``
    frames of the episode with a spread of at most one, and episodes admitted together leave
    together rather than draining into a few long ones. The k-th ring plays frame
    ``(r + k) mod L`` for a uniform start ``r``: a resident episode is decoded forward, each frame
    once, and its decoded frames are released a window later, so holding hundreds of episodes
    resident costs their compressed bytes, not their pixels; the random start keeps a batch's
    samples at unrelated points of their episodes.
    """
    start = rng.integers(0, block.lengths)
    frames = (block.pos + start[block.local]) % block.lengths[block.local]
    delays = (block.pos + rng.random(block.pos.size)) / block.lengths[block.local]
    return Clocks(frames, delays, np.ones(block.lengths.size, dtype=np.float64))


@dataclass(frozen=True)
class PoolStrategy:
    """One entry of the dispatch table.

    Args:
        stream: the strategy's part of the pool's random-number key, so two strategies never
            share random numbers. Fixed forever: changing it changes every anchor order and
            invalidates every checkpoint taken with the strategy.
        ring: draws one block's :class:`Clocks` from the block and a seeded generator.
        cohorts: the strategy's episodes leave together, so the pool splits its episodes into
            equal cohorts of at most ``pool_size`` (41 episodes in a pool of 40: 21 and 20)
            instead of leaving the last few alone at the end of the epoch. Default ``False``.
    """

    stream: int
    ring: Callable[[Block, np.random.Generator], Clocks]
    cohorts: bool = False


#: Strategy name (the value of ``sampling_strategy`` / ``strategy``) -> its implementation.
POOL_STRATEGIES: dict[str, PoolStrategy] = {
    "remaining": PoolStrategy(stream=1, ring=_remaining),
    "round_robin": PoolStrategy(stream=2, ring=_round_robin),
    "spread": PoolStrategy(stream=3, ring=_spread, cohorts=True),
}


def get_strategy(name: str, *, setting: str = "strategy") -> PoolStrategy:
    """The strategy registered as ``name``; an unknown name is refused listing the table's keys.

    Args:
        name: the strategy's name.
        setting: the keyword the caller passed it as, named in the error.
    """
    try:
        return POOL_STRATEGIES[name]
    except (KeyError, TypeError):
        raise StreamingError(
            f"unknown {setting} {name!r}; choose one of {list(POOL_STRATEGIES)}"
        ) from None
