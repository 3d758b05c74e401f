"""The one checkpoint contract every stateful stage of the episode reader implements.

Why one contract: a resume bug in any stage silently repeats or skips data, so every stateful
stage declares it (subclasses :class:`Stateful`) and exposes the same two methods - the pool
(:class:`~feedline.episodes.schedule.pool.EpisodePool`), the consumption tracker
(:class:`~feedline.episodes.schedule.resume.ConsumptionTracker`), the pipeline
(:class:`~feedline.episodes.stream.pipeline.EpisodePipeline`) and the streaming dataset
(:class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset`) - and each is checked by the
same harness (``tests/episodes/resume_harness.py``): resume mid-epoch, at epoch end, and the epoch
after a resume. ``state_dict``/``load_state_dict`` are PyTorch's names, which training loops
already call on models, optimizers and DataLoaders.

Rules of the contract (taken from torchdata's stateful nodes):

* ``state_dict()`` describes what the *consumer has taken*, never what producers prepared ahead
  (prefetched episodes, decoded-but-unconsumed samples are recomputed, not saved).
* The state is small and plain: ``int``/``str``/``float``/``bool``/``None``, lists and dicts of
  them, so it survives ``json`` and ``torch.save`` and costs nothing to take every step.
  Stages whose order is a pure function of (seed, epoch, sizes) store an offset, not RNG state.
* ``load_state_dict(state)`` is called before iteration starts and puts the stage exactly where
  the state says; it refuses (``ResumeMismatchError``) a state taken under settings that would
  give a different order, naming what differs.
* Iterators are explicit objects, not generators, so their position can be read at any time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from feedline.episodes.errors import ResumeMismatchError

__all__ = ["STATE_VERSION_KEY", "Stateful", "check_state_version"]

STATE_VERSION_KEY = "state_version"


@runtime_checkable
class Stateful(Protocol):
    """A stage whose position can be saved and restored (see the module docstring)."""

    def state_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly description of what the consumer has taken so far."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the position described by ``state``; refuse a state from other settings."""
        ...


def check_state_version(state: Mapping[str, Any], expected: int, *, stage: str) -> None:
    """Refuse a state written by another (older or newer) layout of ``stage``'s state."""
    found = state.get(STATE_VERSION_KEY)
    if found != expected:
        raise ResumeMismatchError(
            f"{stage} state has {STATE_VERSION_KEY}={found!r}, this feedline reads version "
            f"{expected}; resume with the feedline version that wrote the checkpoint"
        )
