"""The one state contract: every stateful stage of the episode reader declares and implements it."""

from __future__ import annotations

import pytest

from feedline.episodes.schedule.pool import EpisodePool
from feedline.episodes.schedule.resume import ConsumptionTracker
from feedline.episodes.schedule.state import Stateful
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.stream.pipeline import EpisodePipeline


@pytest.mark.parametrize(
    "stage", [EpisodePool, ConsumptionTracker, EpisodePipeline, StreamingEpisodeDataset]
)
def test_every_stateful_stage_implements_the_contract(stage: type) -> None:
    assert issubclass(stage, Stateful)
    for method in ("state_dict", "load_state_dict"):  # its own, not the protocol's stub
        assert getattr(stage, method) is not getattr(Stateful, method), method
