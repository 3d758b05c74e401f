"""The one checkpoint contract every stateful stage of both streaming readers implements.

Why one contract: a resume bug in any stage silently repeats or skips data, so every stateful
stage declares it (subclasses :class:`Stateful`) and exposes the same two methods - the pool
(:class:`~feedline.streaming.schedule.pool.EpisodePool`), the consumption tracker
(:class:`~feedline.streaming.schedule.resume.ConsumptionTracker`), the pipeline
(:class:`~feedline.streaming.pipeline.UnitPipeline`) and the streaming dataset
(:class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset`) - and each is checked by the
same harness (``tests/streaming/resume_harness.py``): resume mid-epoch, at epoch end, and the epoch
after a resume. ``state_dict``/``load_state_dict`` are PyTorch's names, which training loops
already call on models, optimizers and DataLoaders.

Rules of the contract (taken from torchdata's stateful nodes):

* ``state_dict()`` describes what the *consumer has taken*, never what producers prepared ahead
  (prefetched episodes, decoded-but-unconsumed samples are recomputed, not saved).
* The state is small and plain: ``int``/``str``/``float``/``bool``/``None``, lists and dicts of
  them, so it survives ``json`` and ``torch.save`` and costs nothing to take every step.
  Stages whose order is a pure function of (seed, epoch, sizes) store an offset, not RNG state.
* ``load_state_dict(state)`` is called before iteration starts and puts the stage exactly where
  the state says; it refuses (``ResumeMismatchError``) a state of another layout version, or one
  taken under settings that would give a different order, naming what differs.
* Iterators are explicit objects, not generators, so their position can be read at any time.

Like torchdata's ``BaseNode``, the base class owns the rules and a stage fills in only its own
parts: :meth:`Stateful.state_settings` (what must match), :meth:`Stateful.state_position` (where
the consumer is) and :meth:`Stateful.restore_state`. ``state_dict``/``load_state_dict`` write
the version, and check it and the settings, once for every stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from feedline.streaming.errors import ResumeMismatchError

__all__ = ["STATE_VERSION_KEY", "Stateful", "check_state_version", "state_differences"]

STATE_VERSION_KEY = "state_version"


def check_state_version(state: Mapping[str, Any], expected: int, *, stage: str) -> None:
    """Refuse a state written by another (older or newer) layout of ``stage``'s state, or one
    that is not a mapping at all (``None``, a list, a string: a checkpoint saved wrongly)."""
    if not isinstance(state, Mapping):
        raise ResumeMismatchError(
            f"{stage} state must be the dict state_dict() returned, not {type(state).__name__} "
            f"{state!r}"[:300]
        )
    found = state.get(STATE_VERSION_KEY)
    if found != expected:
        raise ResumeMismatchError(
            f"{stage} state has {STATE_VERSION_KEY}={found!r}, this feedline reads version "
            f"{expected}; resume with the feedline version that wrote the checkpoint"
        )


def state_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``name (checkpoint X, now Y)`` for every setting of ``current`` that ``saved`` differs in."""
    return [
        f"{name} (checkpoint {saved.get(name)!r}, now {value!r})"
        for name, value in current.items()
        if saved.get(name) != value
    ]


class Stateful:
    """A stage whose position can be saved and restored (see the module docstring).

    Subclasses set :attr:`STATE_VERSION` and :attr:`STATE_STAGE` and implement
    :meth:`state_position` and :meth:`restore_state` (and :meth:`state_settings` when settings
    must match).
    """

    #: The layout version of this stage's state; a state of another version is refused.
    STATE_VERSION: ClassVar[int] = 1
    #: How refusals name the stage (``"EpisodePool"``).
    STATE_STAGE: ClassVar[str] = "stage"
    #: How a settings refusal names it (``"the episode pool"``).
    STATE_NAME: ClassVar[str] = "the stage"

    def state_settings(self) -> dict[str, Any]:
        """Every setting the saved position is only valid under (default: none)."""
        return {}

    def state_position(self) -> dict[str, Any]:
        """What the consumer has taken so far (plain, JSON-friendly)."""
        raise NotImplementedError

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Move to ``state``'s position; version and settings are already checked."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The version, the settings that must match, and the consumer's position."""
        return {STATE_VERSION_KEY: self.STATE_VERSION, **self.state_position(),
                **self.state_settings()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the position described by ``state``; refuse another version or settings."""
        check_state_version(state, self.STATE_VERSION, stage=self.STATE_STAGE)
        diffs = state_differences(state, self.state_settings())
        if diffs:
            raise ResumeMismatchError(
                f"cannot restore {self.STATE_NAME} sample-exactly: " + "; ".join(diffs)
            )
        self.restore_state(state)
