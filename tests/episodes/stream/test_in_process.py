"""Iterating in the training process says once that torch's intra-op threads compete with the
decode threads (measured 4x slower at 96x128 on 2 cores; see bench/streaming.py)."""

from __future__ import annotations

import logging

import pytest
import torch

from feedline.episodes.stream import inprocess as stream_dataset
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "intra-op threads" in r.getMessage()]


def test_in_process_iteration_warns_once_with_several_torch_threads(
    av1_dataset: SyntheticDataset, threads, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_dataset, "_warned_in_process", False)
    threads(2)
    ds = StreamingEpisodeDataset(root=str(av1_dataset.root), episode_pool_size=2)
    with caplog.at_level(logging.WARNING):
        assert sum(1 for _ in ds) == av1_dataset.total_frames
        assert sum(1 for _ in ds) == av1_dataset.total_frames
    (message,) = _warnings(caplog)
    assert "num_workers>=1" in message and "torch.set_num_threads(1)" in message


def test_no_warning_with_one_torch_thread(
    av1_dataset: SyntheticDataset, threads, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_dataset, "_warned_in_process", False)
    threads(1)
    ds = StreamingEpisodeDataset(root=str(av1_dataset.root), episode_pool_size=2)
    with caplog.at_level(logging.WARNING):
        next(iter(ds))
    assert _warnings(caplog) == []
