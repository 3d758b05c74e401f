"""The exact-coverage pool: one worker's schedule of (episode, frame) anchors for one epoch.

A worker owns whole episodes in an admission order (``plan[rank][worker]``). Its pool holds at
most ``pool_size`` resident episodes (and, optionally, at most ``byte_budget`` of their payload
bytes); when a resident episode's last frame is drawn, the next episodes of the admission order
are admitted as count and bytes allow. Every frame of every owned episode is yielded exactly once.

Strategies, registered by name in :data:`~feedline.streaming.schedule.strategies.POOL_STRATEGIES`
(both readers' ``sampling_strategy``; the episode reader defaults to ``spread``):

* ``spread`` - each resident episode plays forward from a random frame, its frames evenly spaced
  over one stay shared by every episode, so batches mix about as many episodes as a global shuffle.
* ``remaining`` - the next anchor is uniform over all remaining frames of the resident episodes
  (an episode drawn in proportion to its remaining frames, then one of them).
* ``round_robin`` - each round shuffles the resident episodes and takes one shuffled remaining
  frame from each; episodes admitted during a round join the next round.

How it is computed (why it is fast and exact): every strategy is simulated as clocks. Each frame
rings once, at its episode's admission time plus a delay the strategy draws (see
:mod:`feedline.streaming.schedule.strategies`); an episode is exhausted when its last frame rings.
Episode admission times come from a small event heap (count and byte limits); frames are
generated and sorted with numpy, block by block.
Random numbers are drawn per block of the admission order from a seed sequence of
``(seed, epoch, rank, worker, strategy, block)``, so the anchor order depends only on those and
the episode sizes - never on how the caller consumes it.

How the pipeline drives it (one pool per worker per epoch)::

    pool = EpisodePool(order, lengths_of_order, strategy=..., pool_size=worker_pool_size,
                       seed=seed, epoch=epoch, rank=rank, worker=worker_id,
                       episode_bytes=bytes_of_order, byte_budget=worker_byte_budget)
    pool.skip(offset)                   # resume: this worker's offset from feedline.streaming.schedule.resume
    for episode_index, frame_index in pool: ...   # or pool.take(n) -> numpy arrays

``worker`` is the plan part index (``plan[rank][worker]``); it equals the DataLoader worker id
except after a resume that rotates parts (see :mod:`feedline.streaming.schedule.resume`), and it seeds the
pool, so a rotated worker reproduces its part's anchors exactly.

Fetch episodes in the order of their first anchor (:func:`fetch_order` of the anchors); an
episode's bytes can be released once all of its anchors have been decoded. An episode's anchors
all fall between its admission and its exhaustion, so the episodes fetched and not yet released
are, at any anchor, the resident ones that anchor has reached plus what is fetched ahead: with
``byte_budget`` set they always fit it, and the fetch frontier never deadlocks. Fetching in
admission order instead would make the first anchor wait, on average, for half the first pool.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from feedline.streaming.errors import StreamingError
from feedline.streaming.schedule.slot import check_episode_size_arrays, mapping_columns
from feedline.streaming.schedule.state import Stateful
from feedline.streaming.schedule.strategies import POOL_STRATEGIES, Block, get_strategy
from feedline.streaming.settings import DEFAULT_SEED, floor_default, resolve_seed
from feedline.validate import check_int

__all__ = [
    "STRATEGIES",
    "EpisodePool",
    "aligned",
    "aligned_columns",
    "anchor_counts",
    "fetch_order",
    "first_anchors",
    "last_anchors",
    "positions_in",
    "sorted_columns",
]

STRATEGIES = tuple(POOL_STRATEGIES)  # the names a pool accepts (keys of the dispatch table)
_POOL_STREAM = 0x504F4F4C  # "POOL": keeps the pools' random streams apart from the plan's
_MIN_BLOCK_FRAMES = 1 << 17


class EpisodePool(Stateful):
    """Exact-coverage anchor iterator of one worker for one epoch (see the module docstring).

    Yields ``(episode_index, frame_index)`` anchors; every frame of every episode exactly once.

    Args:
        episodes: the worker's episode indices in admission order (``plan[rank][worker]``).
        lengths: frames per episode: a mapping by episode index, or a sequence parallel to
            ``episodes``.
        strategy: a key of :data:`~feedline.streaming.schedule.strategies.POOL_STRATEGIES`.
            Default ``"remaining"``.
        pool_size: most episodes resident at once (this worker's share of the rank's
            ``episode_pool_size``). Default 256.
        seed: order seed; ``None`` is :data:`~feedline.streaming.settings.NONE_SEED`. Default 1000.
        epoch: the epoch; with ``seed``, ``rank`` and ``worker`` it keys the random numbers.
            Default 0.
        rank: the rank whose worker this is. Default 0.
        worker: the plan part index (the DataLoader worker id unless a resume rotated parts).
            Default 0.
        episode_bytes: each episode's payload size (mapping or parallel sequence), to admit by
            bytes as well as by count. Default ``None``: count only.
        byte_budget: most payload bytes resident at once, with ``episode_bytes`` (this worker's
            share of the rank budget); an episode larger than it fails at construction.
            Default ``None``.
        frames: for episodes of which only some frames are still due (an elastic resume hands
            a partly consumed episode to one worker), episode index -> those frame indices,
            sorted; ``lengths`` counts them. The strategy orders the ``k``-th due frame as it
            would frame ``k`` of an episode of that length. Default ``None``: every frame.
        substream: keeps the random numbers of pools that share a worker apart (a stratified
            mixture runs one pool per source in each worker). Default 0.
    """

    STATE_VERSION = 1
    STATE_STAGE = "EpisodePool"
    STATE_NAME = "the episode pool"

    def __init__(
        self,
        episodes: Sequence[int] | np.ndarray,
        lengths: Sequence[int] | np.ndarray | Mapping[int, int],
        *,
        strategy: str = "remaining",
        pool_size: int = floor_default("pool_size"),
        seed: int | None = DEFAULT_SEED,
        epoch: int = 0,
        rank: int = 0,
        worker: int = 0,
        episode_bytes: Sequence[int] | np.ndarray | Mapping[int, int] | None = None,
        byte_budget: int | None = None,
        frames: Mapping[int, np.ndarray] | None = None,
        substream: int = 0,
    ) -> None:
        self.substream = int(substream)
        self.episodes = np.asarray(episodes, dtype=np.int64).reshape(-1)
        self.lengths = aligned(self.episodes, lengths, "lengths")
        self._due_start, self._due = _due_frames(self.episodes, self.lengths, frames)
        self._strategy = get_strategy(strategy)
        check_int("pool_size", pool_size, minimum=1, error=StreamingError)
        if np.any(self.lengths < 1):
            bad = int(np.flatnonzero(self.lengths < 1)[0])
            raise StreamingError(f"episode {int(self.episodes[bad])} has no frames")
        self.strategy = strategy
        self.pool_size = pool_size
        self.seed = resolve_seed(seed)
        self.epoch, self.rank, self.worker = int(epoch), int(rank), int(worker)
        self.byte_budget = None if byte_budget is None else int(byte_budget)
        self.episode_bytes: np.ndarray | None = None
        if episode_bytes is not None:
            if self.byte_budget is None:
                raise StreamingError("episode_bytes needs a byte_budget")
            self.episode_bytes = aligned(self.episodes, episode_bytes, "episode_bytes")
            check_episode_size_arrays(self.episodes, self.episode_bytes, self.byte_budget)
        self.total_anchors = int(self.lengths.sum())
        self._cohort_ends: np.ndarray | None = None  # per cohort, its end in admission order
        self._slots: np.ndarray | None = None  # per admission position, its cohort's size
        if self._strategy.cohorts and self.episodes.size > pool_size:
            n, cohorts = self.episodes.size, -(-self.episodes.size // pool_size)
            sizes = n // cohorts + (np.arange(cohorts) < n % cohorts)  # larger cohorts first
            self._cohort_ends = np.cumsum(sizes)
            self._slots = np.repeat(sizes, sizes).astype(np.int64)
        self._blocks = self._block_bounds()
        self._identity: str | None = None
        self.reset()

    # ---- schedule -------------------------------------------------------------------------

    def _block_bounds(self) -> np.ndarray:
        """Admission-order positions where random-number blocks start (a function of sizes only)."""
        n = self.episodes.size
        if n == 0:
            return np.zeros(1, dtype=np.int64)
        mean = self.total_anchors / n
        target = max(_MIN_BLOCK_FRAMES, int(4 * self.pool_size * mean))
        before = np.cumsum(self.lengths) - self.lengths
        block_of = before // target
        starts = np.flatnonzero(np.diff(block_of, prepend=-1))
        return np.append(starts, n).astype(np.int64)

    def reset(self) -> None:
        """Rewind to the first anchor of the epoch."""
        self._heap: list[tuple[float, int, int]] = []
        self._resident = 0
        self._resident_bytes = 0
        self._now = 0.0
        self._block = 0
        empty_f, empty_i = np.empty(0, np.float64), np.empty(0, np.int64)
        self._pending = (empty_f, empty_i, empty_i)
        self._chunk_eps = empty_i
        self._chunk_frames = empty_i
        self._chunk_lists: tuple[list[int], list[int]] | None = None
        self._cursor = 0
        self._yielded = 0
        self._next_start = self._admit(0) if self.episodes.size else math.inf

    def _admit(self, pos: int) -> float:
        """Admission time of the episode at admission position ``pos`` (reserves its slot)."""
        nbytes = 0 if self.episode_bytes is None else int(self.episode_bytes[pos])
        budget = self.byte_budget
        # the size of pos's cohort (never above the previous one's), else the pool size
        slots = self.pool_size if self._slots is None else int(self._slots[pos])
        while self._resident >= slots or (
            budget is not None and self._resident_bytes + nbytes > budget
        ):
            end, _, freed = heapq.heappop(self._heap)
            self._now = max(self._now, end)
            self._resident -= 1
            self._resident_bytes -= freed
        self._resident += 1
        self._resident_bytes += nbytes
        return self._now

    def _admit_block(self, a: int, b: int, stays: np.ndarray) -> np.ndarray:
        """Admission times of positions ``a..b-1`` (staying ``stays``), then of ``b``: the loop
        of :meth:`_admit` inlined over plain lists, the one Python step left per episode (each
        admission waits on the heap of the ones before, so it is sequential by nature)."""
        durations = stays.tolist()
        nbytes = [0] * (b - a) if self.episode_bytes is None else self.episode_bytes[a:b].tolist()
        slots_of = None if self._slots is None else self._slots[a:b].tolist()
        budget = math.inf if self.byte_budget is None else self.byte_budget
        pool_size = self.pool_size
        heap = self._heap
        push, pop = heapq.heappush, heapq.heappop
        resident, resident_bytes, now = self._resident, self._resident_bytes, self._now
        starts = [0.0] * (b - a)
        starts[0] = start = self._next_start
        push(heap, (start + durations[0], a, nbytes[0]))
        for j in range(1, b - a):
            size = nbytes[j]
            slots = pool_size if slots_of is None else slots_of[j]
            while resident >= slots or resident_bytes + size > budget:
                end, _, freed = pop(heap)
                if end > now:
                    now = end
                resident -= 1
                resident_bytes -= freed
            resident += 1
            resident_bytes += size
            starts[j] = now
            push(heap, (now + durations[j], a + j, size))
        self._resident, self._resident_bytes, self._now = resident, resident_bytes, now
        self._next_start = self._admit(b) if b < self.episodes.size else math.inf
        return np.array(starts, dtype=np.float64)

    def _rng(self, block: int) -> np.random.Generator:
        key = [self.seed, self.epoch, self.rank, self.worker, _POOL_STREAM,
               self._strategy.stream, block]
        if self.substream:
            key.append(self.substream)
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))

    def _next_block(self) -> bool:
        """Generate one block of the admission order and emit every anchor that is now final."""
        if self._block >= self._blocks.size - 1:
            return False
        a, b = int(self._blocks[self._block]), int(self._blocks[self._block + 1])
        self._block += 1
        lengths = self.lengths[a:b]
        n = int(lengths.sum())
        rng = self._rng(self._block - 1)
        local = np.repeat(np.arange(b - a), lengths)
        offsets = np.cumsum(lengths) - lengths
        pos = np.arange(n, dtype=np.int64) - offsets[local]
        frames, delay, stays = self._strategy.ring(Block(lengths, offsets, local, pos), rng)
        if self._due_start is not None:  # the k-th due frame of a partly consumed episode
            start = self._due_start[a:b][local]
            due = start >= 0
            frames = np.where(due, self._due[np.where(due, start + frames, 0)], frames)
        starts = self._admit_block(a, b, stays)
        times = starts[local] + delay
        eps = self.episodes[a:b][local]
        p_t, p_e, p_f = self._pending
        all_t = np.concatenate((p_t, times))
        all_e = np.concatenate((p_e, eps))
        all_f = np.concatenate((p_f, frames))
        final = all_t < self._next_start  # later admissions ring at or after _next_start
        sel = np.flatnonzero(final)
        order = sel[np.argsort(all_t[sel], kind="stable")]
        self._chunk_eps, self._chunk_frames = all_e[order], all_f[order]
        self._chunk_lists = None
        self._cursor = 0
        keep = ~final
        self._pending = (all_t[keep], all_e[keep], all_f[keep])
        return True

    def _refill(self) -> bool:
        while self._cursor >= self._chunk_eps.size:
            if not self._next_block():
                return False
        return True

    # ---- iteration ------------------------------------------------------------------------

    def __iter__(self) -> EpisodePool:
        return self

    def __next__(self) -> tuple[int, int]:
        if self._cursor >= self._chunk_eps.size and not self._refill():
            raise StopIteration
        if self._chunk_lists is None:
            self._chunk_lists = (self._chunk_eps.tolist(), self._chunk_frames.tolist())
        c = self._cursor
        self._cursor = c + 1
        self._yielded += 1
        return self._chunk_lists[0][c], self._chunk_lists[1][c]

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` next anchors as (episode indices, frame indices) int64 arrays."""
        eps: list[np.ndarray] = []
        frames: list[np.ndarray] = []
        while n > 0 and self._refill():
            c = self._cursor
            k = min(n, self._chunk_eps.size - c)
            eps.append(self._chunk_eps[c : c + k])
            frames.append(self._chunk_frames[c : c + k])
            self._cursor = c + k
            self._yielded += k
            n -= k
        if not eps:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(eps), np.concatenate(frames)

    def skip(self, n: int) -> None:
        """Advance past ``n`` anchors without materialising them (resume fast-forward)."""
        if n < 0 or self._yielded + n > self.total_anchors:
            raise StreamingError(
                f"cannot skip {n} anchors: worker {self.worker} of rank {self.rank} has "
                f"{self.total_anchors - self._yielded} left in epoch {self.epoch}"
            )
        while n > 0 and self._refill():
            k = min(n, self._chunk_eps.size - self._cursor)
            self._cursor += k
            self._yielded += k
            n -= k

    @property
    def admission(self) -> np.ndarray:
        """The episodes in the order the pool admits them (a worker fetches them in the order of
        their first anchor instead: :func:`fetch_order`)."""
        return self.episodes

    @property
    def resident_limit(self) -> int:
        """Most episodes resident at once."""
        return self.pool_size

    @property
    def anchors_yielded(self) -> int:
        """Anchors handed out so far (taken, skipped or iterated)."""
        return self._yielded

    @property
    def anchors_remaining(self) -> int:
        """Anchors still to come in this epoch."""
        return self.total_anchors - self._yielded

    # ---- state ----------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        """Digest of the owned episodes, their sizes and byte sizes: the pool's data identity."""
        if self._identity is None:
            h = hashlib.sha256(b"feedline.streaming.schedule.pool/v1")
            h.update(self.episodes.tobytes())
            h.update(self.lengths.tobytes())
            if self.episode_bytes is not None:
                h.update(self.episode_bytes.tobytes())
            if self._due_start is not None:
                h.update(self._due_start.tobytes())
                h.update(self._due.tobytes())
            self._identity = h.hexdigest()[:32]
        return self._identity

    def state_settings(self) -> dict[str, Any]:
        """Every setting that fixes the order, and the episodes' identity (checked on load)."""
        return {
            "seed": self.seed, "epoch": self.epoch, "rank": self.rank, "worker": self.worker,
            "strategy": self.strategy, "pool_size": self.pool_size,
            "byte_budget": self.byte_budget, "identity": self.identity,
        }

    def state_position(self) -> dict[str, Any]:
        """Anchors yielded so far."""
        return {"anchors_yielded": self._yielded}

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Rewind and skip to the saved anchor."""
        self.reset()
        self.skip(int(state["anchors_yielded"]))


def _due_frames(
    episodes: np.ndarray, lengths: np.ndarray, frames: Mapping[int, np.ndarray] | None
) -> tuple[np.ndarray | None, np.ndarray]:
    """(per episode, its start in the due-frame table or -1 for all frames; the table)."""
    empty = np.empty(0, np.int64)
    if not frames:
        return None, empty
    start = np.full(episodes.size, -1, dtype=np.int64)
    table: list[np.ndarray] = []
    at = 0
    for i, episode in enumerate(episodes.tolist()):
        due = frames.get(episode)
        if due is None:
            continue
        due = np.asarray(due, dtype=np.int64).reshape(-1)
        if due.size != lengths[i]:
            raise StreamingError(
                f"episode {episode} has {due.size} due frames but a length of {int(lengths[i])}"
            )
        start[i] = at
        at += due.size
        table.append(due)
    if not table:
        return None, empty
    return start, np.concatenate(table)


def aligned(episodes: np.ndarray, values: Any, name: str) -> np.ndarray:
    """``values`` aligned with ``episodes``: a mapping by episode index or a parallel sequence.

    A dict is read as two arrays and looked up with ``searchsorted`` (a worker's share of a
    million episodes is aligned in milliseconds, not in one Python lookup per episode); other
    mappings are looked up one by one.
    """
    if isinstance(values, Mapping):
        columns = sorted_columns(values)
        if columns is not None:
            return aligned_columns(episodes, *columns, name)
        try:
            return np.fromiter((values[int(e)] for e in episodes), np.int64, episodes.size)
        except KeyError as exc:
            raise StreamingError(f"{name} has no entry for episode {exc.args[0]}") from None
    out = np.asarray(values, dtype=np.int64).reshape(-1)
    if out.size != episodes.size:
        raise StreamingError(f"{name} has {out.size} entries for {episodes.size} episodes")
    return out


def sorted_columns(mapping: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """(keys, values) of a dict of integers as int64 arrays sorted by key (``None`` for any
    other mapping, which is then looked up one by one)."""
    columns = mapping_columns(mapping)
    if columns is None:
        return None
    keys, values = columns
    if keys.size > 1 and np.any(keys[1:] <= keys[:-1]):
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
    keys.flags.writeable = values.flags.writeable = False  # shared by every pool that reads them
    return keys, values


def aligned_columns(
    episodes: np.ndarray, keys: np.ndarray, values: np.ndarray, name: str
) -> np.ndarray:
    """The values of ``episodes`` from a mapping's :func:`sorted_columns`."""
    if keys.size == episodes.size and np.array_equal(keys, episodes):
        return values
    at, found = positions_in(keys, episodes)
    if not found.all():
        missing = int(episodes[int(np.flatnonzero(~found)[0])])
        raise StreamingError(f"{name} has no entry for episode {missing}")
    return values[at]


def positions_in(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each of ``values`` is in ``keys``, sorted and distinct, or 0; whether it is there):
    ``searchsorted``, or a table over the keys' span when it is small (no binary search per
    value in random order)."""
    values = np.asarray(values, dtype=np.int64)
    if keys.size == 0:
        return np.zeros(values.size, dtype=np.int64), np.zeros(values.size, dtype=bool)
    low, size = int(keys[0]), int(keys[-1]) - int(keys[0]) + 1
    if size == keys.size:  # every episode of a range
        at = values - low
        found = (at >= 0) & (at < size)
        return np.where(found, at, 0), found
    if size <= 4 * (keys.size + values.size) + (1 << 16):
        table = np.full(size, -1, dtype=np.int64)
        table[keys - low] = np.arange(keys.size, dtype=np.int64)
        offset = values - low
        inside = (offset >= 0) & (offset < size)
        at = table[np.where(inside, offset, 0)]
        found = inside & (at >= 0)
        return np.where(found, at, 0), found
    at = np.minimum(np.searchsorted(keys, values), keys.size - 1)
    return at, keys[at] == values


def fetch_order(episodes: np.ndarray) -> np.ndarray:
    """The distinct episodes of an anchor sequence in the order of their first anchor: the order
    a worker fetches them in (see the module docstring for why it fits the budget)."""
    episodes = np.asarray(episodes, dtype=np.int64)
    _, first = first_anchors(episodes)
    return episodes[np.sort(first)]


def first_anchors(episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct episodes, sorted; the position of each one's first anchor in ``episodes``)."""
    return _extreme_anchors(episodes, np.minimum)


def last_anchors(episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct episodes, sorted; the position of each one's last anchor in ``episodes``)."""
    return _extreme_anchors(episodes, np.maximum)


def anchor_counts(episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct episodes, sorted; how many anchors each has in ``episodes``)."""
    episodes = np.asarray(episodes, dtype=np.int64)
    span = _dense_span(episodes)
    if span is None:
        distinct, counts = np.unique(episodes, return_counts=True)
        return distinct, counts.astype(np.int64)
    low, size = span
    counts = np.bincount(episodes - low, minlength=size)
    distinct = np.flatnonzero(counts)
    return distinct + low, counts[distinct].astype(np.int64)


def _dense_span(episodes: np.ndarray) -> tuple[int, int] | None:
    """(lowest episode, span) when a table over the span is no larger than a few times the
    anchors (then the table replaces a sort of a worker's millions of anchors), else ``None``."""
    if episodes.size == 0:
        return None
    low, high = int(episodes.min()), int(episodes.max())
    size = high - low + 1
    return (low, size) if size <= 4 * episodes.size + (1 << 16) else None


def _extreme_anchors(episodes: np.ndarray, pick: np.ufunc) -> tuple[np.ndarray, np.ndarray]:
    """(distinct episodes, the least or greatest position of each): ``np.unique``'s answer,
    from a table over the episodes' span instead of a sort when the span allows."""
    episodes = np.asarray(episodes, dtype=np.int64)
    span = _dense_span(episodes)
    n = episodes.size
    if span is None:
        if pick is np.minimum:
            distinct, at = np.unique(episodes, return_index=True)
            return distinct, at.astype(np.int64)
        distinct, at = np.unique(episodes[::-1], return_index=True)
        return distinct, (n - 1 - at).astype(np.int64)
    low, size = span
    table = np.full(size, n if pick is np.minimum else -1, dtype=np.int64)
    pick.at(table, episodes - low, np.arange(n, dtype=np.int64))
    distinct = np.flatnonzero(table != (n if pick is np.minimum else -1))
    return distinct + low, table[distinct]
