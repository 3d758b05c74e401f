"""The admission frontier: which episode payloads a worker may hold, by count and by exact bytes.

Every episode's payload size (synthesized mini-MP4s of all cameras, from the sidecar, plus its
Parquet rows) is known before anything is fetched, so the frontier reserves exact bytes up front.
An episode moves through::

    reserve() -> FETCHING -> mark_resident() -> RESIDENT -> begin_decode() -> DECODING
              -> end_decode() ... -> release()  (bytes return once the last decode has ended)

``reserved_bytes`` counts every reservation (pending fetches, completed prefetches, episodes
still decoding); ``resident_bytes`` counts completed payloads, even before their first sample is
requested. The budget bounds compressed payload, not RSS (decoders and decoded tensors are
bounded elsewhere).

How the pipeline drives it (one cache per worker, shared by its fetch and decode threads)::

    cache = ByteBudget.for_worker(byte_budget_gb=8, pool_size=32, prefetch=8,
                                        num_workers=N)
    cache.check_sizes(sizes_of_my_episodes)        # too-large episodes fail before any fetch
    # fetch thread, in admission order (plan[rank][worker]):
    cache.reserve(ep, nbytes)        # blocks while full: speculative prefetch pauses here
    ... fetch ...; cache.mark_resident(ep)         # or cache.abandon(ep) if the fetch failed
    # decode threads, per anchor:  cache.begin_decode(ep) ... cache.end_decode(ep)
    # when the pool has yielded the episode's last anchor:  cache.release(ep)

Reservations are first come, first served: a waiting ``reserve`` is never overtaken by a
``try_reserve``, so the next episode the pool needs cannot starve behind speculative ones.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from feedline.streaming.errors import EPISODE_UNIT, StreamingError, UnitKind
from feedline.streaming.schedule.slot import (
    WorkerSlot,
    check_episode_size_arrays,
    check_episode_sizes,
)
from feedline.streaming.settings import floor_default, gib_bytes
from feedline.validate import check_int

__all__ = ["ByteBudget", "EpisodePhase"]


class EpisodePhase(enum.Enum):
    """Where a reserved episode is: being fetched, held, or being decoded from."""

    FETCHING = "fetching"
    RESIDENT = "resident"
    DECODING = "decoding"


@dataclass
class _Entry:
    nbytes: int
    phase: EpisodePhase
    decodes: int = 0
    released: bool = False


class ByteBudget:
    """Byte- and count-bounded admission frontier of one worker (thread-safe).

    Build one per worker with :meth:`for_worker`, which splits the rank's settings.

    Args:
        budget_bytes: most payload bytes this worker may have reserved at once.
        max_episodes: most episodes reserved at once (resident pool plus prefetch).
        rank_budget_bytes: the whole rank's budget, named by the too-large error. Default
            ``None``: ``budget_bytes``.
        parts: the workers sharing ``rank_budget_bytes`` (a
            :class:`~feedline.streaming.schedule.slot.WorkerSlot`'s ``parts``), named by the
            too-large error. Default 1.
        kind: how the too-large error names the unit and its settings. Default the episode
            reader's.
    """

    def __init__(
        self,
        budget_bytes: int,
        *,
        max_episodes: int,
        rank_budget_bytes: int | None = None,
        parts: int = 1,
        kind: UnitKind = EPISODE_UNIT,
    ) -> None:
        self.kind = kind
        self.budget_bytes = check_int("budget_bytes", budget_bytes, minimum=1, error=StreamingError)
        self.max_episodes = check_int("max_episodes", max_episodes, minimum=1, error=StreamingError)
        self.rank_budget_bytes = self.budget_bytes if rank_budget_bytes is None else rank_budget_bytes
        self.parts = check_int("parts", parts, minimum=1, error=StreamingError)
        self._cond = threading.Condition()
        self._entries: dict[int, _Entry] = {}
        self._reserved = 0
        self._resident = 0
        self._waiting = 0
        self._closed = False
        self.peak_reserved_bytes = 0
        self.reserve_waits = 0
        self.reserve_wait_seconds = 0.0

    @classmethod
    def for_worker(
        cls,
        *,
        byte_budget_gb: float = floor_default("byte_budget_gb"),
        pool_size: int = floor_default("pool_size"),
        prefetch: int = floor_default("prefetch"),
        num_workers: int = 0,
        kind: UnitKind = EPISODE_UNIT,
    ) -> ByteBudget:
        """A worker's frontier: 1/N of the rank's bytes; its pool share plus the prefetch count.

        Args:
            byte_budget_gb: the rank's budget in GiB (split 1/N). Default 8.
            pool_size: the rank's episode pool size (split 1/N, at least 1). Default 256.
            prefetch: episodes fetched ahead, per worker. Default 8.
            num_workers: the DataLoader's workers (0: one in-process worker). Default 0.
            kind: how the too-large error names the unit and its settings. Default the
                episode reader's.
        """
        check_int("pool_size", pool_size, minimum=1, error=StreamingError)
        check_int("prefetch", prefetch, minimum=0, error=StreamingError)
        slot = WorkerSlot(num_workers=num_workers)
        rank_budget = gib_bytes(byte_budget_gb)
        return cls(
            slot.share(rank_budget),
            max_episodes=slot.share(pool_size) + prefetch,
            rank_budget_bytes=rank_budget,
            parts=slot.parts,
            kind=kind,
        )

    # ---- checks ---------------------------------------------------------------------------

    def check_sizes(self, sizes: Mapping[int, int] | Iterable[tuple[int, int]]) -> None:
        """Fail before any fetch if one episode alone exceeds this worker's budget."""
        check_episode_sizes(
            sizes, self.budget_bytes, rank_budget_bytes=self.rank_budget_bytes, parts=self.parts,
            kind=self.kind,
        )

    def check_size_arrays(self, units: np.ndarray, nbytes: np.ndarray) -> None:
        """:meth:`check_sizes` of parallel arrays (a worker's share, checked in one comparison)."""
        check_episode_size_arrays(
            units, nbytes, self.budget_bytes, rank_budget_bytes=self.rank_budget_bytes,
            parts=self.parts, kind=self.kind,
        )

    # ---- reservations ---------------------------------------------------------------------

    def _fits(self, nbytes: int) -> bool:
        return (
            len(self._entries) < self.max_episodes
            and self._reserved + nbytes <= self.budget_bytes
        )

    def _add(self, episode: int, nbytes: int) -> None:
        self._entries[episode] = _Entry(nbytes, EpisodePhase.FETCHING)
        self._reserved += nbytes
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self._reserved)

    def _precheck(self, episode: int, nbytes: int) -> None:
        if self._closed:
            raise StreamingError("the episode byte cache is closed")
        if nbytes < 0:
            raise StreamingError(f"episode {episode} has a negative payload size {nbytes}")
        self.check_sizes(((episode, nbytes),))
        if episode in self._entries:
            raise StreamingError(f"episode {episode} is already reserved")

    def try_reserve(self, episode: int, nbytes: int) -> bool:
        """Reserve without waiting (speculative prefetch); False when full or someone waits."""
        with self._cond:
            self._precheck(episode, nbytes)
            if self._waiting or not self._fits(nbytes):
                return False
            self._add(episode, nbytes)
            return True

    def reserve(self, episode: int, nbytes: int, timeout: float | None = None) -> bool:
        """Reserve, waiting for releases while full; False if ``timeout`` seconds pass."""
        with self._cond:
            self._precheck(episode, nbytes)
            if self._fits(nbytes) and not self._waiting:
                self._add(episode, nbytes)
                return True
            self._waiting += 1
            self.reserve_waits += 1
            started = time.monotonic()
            try:
                ok = self._cond.wait_for(
                    lambda: self._closed or self._fits(nbytes), timeout=timeout
                )
            finally:
                self._waiting -= 1
                self.reserve_wait_seconds += time.monotonic() - started
            if self._closed:
                raise StreamingError("the episode byte cache was closed while waiting")
            if not ok:
                return False
            self._add(episode, nbytes)
            self._cond.notify_all()
            return True

    def _entry(self, episode: int) -> _Entry:
        entry = self._entries.get(episode)
        if entry is None:
            raise StreamingError(f"episode {episode} is not reserved in the byte cache")
        return entry

    def mark_resident(self, episode: int) -> None:
        """The fetch completed: the payload is held."""
        with self._cond:
            entry = self._entry(episode)
            if entry.phase is not EpisodePhase.FETCHING:
                raise StreamingError(f"episode {episode} was already fetched")
            entry.phase = EpisodePhase.RESIDENT
            self._resident += entry.nbytes

    def abandon(self, episode: int) -> None:
        """Drop a reservation whose fetch failed (so a retry can reserve it again)."""
        with self._cond:
            entry = self._entry(episode)
            if entry.phase is not EpisodePhase.FETCHING:
                raise StreamingError(f"episode {episode} is resident; release it instead")
            self._drop(episode, entry)

    def begin_decode(self, episode: int) -> None:
        """A sample of the episode starts decoding (its bytes stay reserved until it ends)."""
        with self._cond:
            entry = self._entry(episode)
            if entry.phase is EpisodePhase.FETCHING:
                raise StreamingError(f"episode {episode} is still being fetched")
            entry.decodes += 1
            entry.phase = EpisodePhase.DECODING

    def end_decode(self, episode: int) -> None:
        """A decode ended; a released episode's bytes return with its last one."""
        with self._cond:
            entry = self._entry(episode)
            if entry.decodes < 1:
                raise StreamingError(f"episode {episode} has no decode in progress")
            entry.decodes -= 1
            if entry.decodes == 0:
                entry.phase = EpisodePhase.RESIDENT
                if entry.released:
                    self._drop(episode, entry)

    def release(self, episode: int) -> None:
        """The pool is done with the episode; bytes return after its last decode ends."""
        with self._cond:
            entry = self._entry(episode)
            if entry.phase is EpisodePhase.FETCHING:
                raise StreamingError(f"episode {episode} is released before it was fetched")
            entry.released = True
            if entry.decodes == 0:
                self._drop(episode, entry)

    def _drop(self, episode: int, entry: _Entry) -> None:
        del self._entries[episode]
        self._reserved -= entry.nbytes
        if entry.phase is not EpisodePhase.FETCHING:
            self._resident -= entry.nbytes
        self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiting ``reserve`` with an error (pipeline shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ---- observation ----------------------------------------------------------------------

    @property
    def reserved_bytes(self) -> int:
        """Bytes of every reservation: pending fetches, completed payloads, decoding episodes."""
        with self._cond:
            return self._reserved

    @property
    def resident_bytes(self) -> int:
        """Bytes of completed payloads, even before their first sample is requested."""
        with self._cond:
            return self._resident

    @property
    def reserved_episodes(self) -> int:
        """Episodes holding a reservation, in any phase."""
        with self._cond:
            return len(self._entries)

    def phase(self, episode: int) -> EpisodePhase | None:
        """The episode's phase, or None when it holds no reservation."""
        with self._cond:
            entry = self._entries.get(episode)
            return None if entry is None else entry.phase
