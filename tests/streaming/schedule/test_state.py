"""The one state contract: every stateful stage of the episode reader declares and implements it."""

from __future__ import annotations

import pytest

from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.streaming.pipeline import UnitPipeline
from feedline.streaming.schedule.pool import EpisodePool
from feedline.streaming.schedule.resume import ConsumptionTracker
from feedline.streaming.schedule.state import Stateful


@pytest.mark.parametrize(
    "stage", [EpisodePool, ConsumptionTracker, UnitPipeline, StreamingEpisodeDataset]
)
def test_every_stateful_stage_implements_the_contract(stage: type) -> None:
    assert issubclass(stage, Stateful)
    assert stage.load_state_dict is Stateful.load_state_dict  # the base checks, once for all
    assert stage.restore_state is not Stateful.restore_state  # its own restore
    own_dict = stage.state_dict is not Stateful.state_dict
    assert own_dict or stage.state_position is not Stateful.state_position
    assert stage.STATE_STAGE != Stateful.STATE_STAGE


class Counter(Stateful):
    """A minimal stage: counts items under a step size that must match on resume."""

    STATE_VERSION = 3
    STATE_STAGE = "Counter"
    STATE_NAME = "the counter"

    def __init__(self, step: int) -> None:
        self.step, self.taken = step, 0

    def state_settings(self) -> dict:
        return {"step": self.step}

    def state_position(self) -> dict:
        return {"taken": self.taken}

    def restore_state(self, state) -> None:
        self.taken = state["taken"]


def test_the_base_writes_and_checks_version_and_settings() -> None:
    from feedline.episodes.errors import ResumeMismatchError
    from feedline.streaming.schedule.state import STATE_VERSION_KEY

    saved = Counter(2)
    saved.taken = 5
    state = saved.state_dict()
    assert state == {STATE_VERSION_KEY: 3, "step": 2, "taken": 5}
    again = Counter(2)
    again.load_state_dict(state)
    assert again.taken == 5
    with pytest.raises(ResumeMismatchError, match=r"Counter state has state_version=1"):
        Counter(2).load_state_dict({**state, STATE_VERSION_KEY: 1})
    with pytest.raises(ResumeMismatchError,
                       match=r"^cannot restore the counter sample-exactly: step \(checkpoint 2, now 3\)$"):
        Counter(3).load_state_dict(state)
