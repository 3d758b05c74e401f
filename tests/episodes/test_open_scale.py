"""The open does array work, not Python work per episode (the issue of 100,000-episode datasets).

Counted, not timed: opening either reader builds no mini-MP4 header per episode (only the few
spans at a file's start that the closed form leaves to the writer), prunes each data file's row
groups once, and makes no ``Episode`` object.
"""

from __future__ import annotations

import pytest

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset
from feedline.episodes import format as format_module
from feedline.episodes import parquet as parquet_module
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.episodes.video.mp4 import writer as mp4_writer


@pytest.fixture(scope="module")
def many_short(tmp_path_factory):
    """60 short episodes in two files per camera and per data file."""
    root = tmp_path_factory.mktemp("scale") / "many"
    return write_synthetic_dataset(
        root, episodes=60, frames_per_episode=[3, 5, 4] * 20, cameras=2, fps=10,
        width=32, height=24, video_files_size_in_mb=0.05, data_files_size_in_mb=0.05,
    )


@pytest.mark.parametrize("reader", [StreamingEpisodeDataset, EpisodeDataset])
def test_open_costs_per_file_not_per_episode(reader, many_short, monkeypatch, tmp_path):
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path))
    reader(root=str(many_short.root))  # builds the sidecar once; the counted open reuses it
    calls = {"headers": 0, "footers": 0, "episodes": 0}

    def counting(name, target, attr):
        original = getattr(target, attr)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(target, attr, wrapper)

    counting("headers", mp4_writer, "build_header")
    import feedline.episodes.video.minimp4 as minimp4

    monkeypatch.setattr(minimp4, "build_header", mp4_writer.build_header)
    original_from_footer = parquet_module.RowGroupIndex.from_footer

    def from_footer(metadata):
        calls["footers"] += 1
        return original_from_footer(metadata)

    monkeypatch.setattr(parquet_module.RowGroupIndex, "from_footer", staticmethod(from_footer))
    original_episode = format_module.Episode.__init__

    def episode_init(self, *args, **kwargs):
        calls["episodes"] += 1
        original_episode(self, *args, **kwargs)

    monkeypatch.setattr(format_module.Episode, "__init__", episode_init)
    ds = reader(root=str(many_short.root))
    files = {k: len(v) for k, v in many_short.video_files.items()}
    assert ds.num_episodes == 60
    assert calls["headers"] <= sum(files.values())  # a file's first span at most, never per episode
    # the streaming reader's footers come from the node's cache the first open filled; the
    # map-style reader reads every row once, each file's footer with it
    cached = reader is StreamingEpisodeDataset
    assert calls["footers"] == (0 if cached else len(many_short.data_files))
    assert calls["episodes"] == 0
    assert len(many_short.data_files) >= 2 and min(files.values()) >= 2
