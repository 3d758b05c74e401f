"""The bulk writer's datasets open with both readers, and every episode is where meta/episodes says.

A small instance (300 episodes, 100 per file, 2 files per chunk) stands for the 100,000-episode
ones: the same code writes both, only the counts differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset
from feedline.episodes.synth import bulk
from feedline.episodes.synth.bulk import BulkDataset, file_of_episode, write_bulk_dataset
from feedline.episodes.synth.identity import SynthError, decode_identity, row_identity

PER_FILE = 100
CHUNKS = 2
FEW = [0, 1, 99, 100, 199, 200, 299]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> BulkDataset:
    root = tmp_path_factory.mktemp("bulk") / "b300"
    return write_bulk_dataset(
        root, episodes=300, episodes_per_file=PER_FILE, chunks_size=CHUNKS, progress=False
    )


def _meta(ds: BulkDataset) -> dict[str, np.ndarray]:
    files = sorted((ds.root / "meta" / "episodes").rglob("*.parquet"))
    tables = [pq.read_table(f).to_pydict() for f in files]
    return {k: np.concatenate([np.asarray(t[k], dtype=object) for t in tables]) for k in tables[0]}


def test_layout_follows_the_chunk_and_file_rollover(small: BulkDataset) -> None:
    meta = _meta(small)
    episodes = meta["episode_index"].astype(int)
    assert episodes.tolist() == list(range(300))
    chunk, file = file_of_episode(episodes, PER_FILE, CHUNKS)
    assert sorted(set(zip(chunk.tolist(), file.tolist(), strict=True))) == [(0, 0), (0, 1), (1, 0)]
    prefixes = ["data", "meta/episodes", *(f"videos/{k}" for k in small.camera_keys)]
    for prefix in prefixes:
        col = {"data": "data", "meta/episodes": "meta/episodes"}.get(prefix, prefix)
        assert (meta[f"{col}/chunk_index"].astype(int) == chunk).all(), prefix
        assert (meta[f"{col}/file_index"].astype(int) == file).all(), prefix
        for c, f in {(0, 0), (0, 1), (1, 0)}:
            ext = "parquet" if not prefix.startswith("videos") else "mp4"
            assert (small.root / prefix / f"chunk-{c:03d}" / f"file-{f:03d}.{ext}").is_file()
    lengths = meta["length"].astype(int)
    assert (lengths == small.episode_lengths).all() and lengths.min() >= 8 and lengths.max() <= 24
    assert (meta["dataset_from_index"].astype(int) == small.episode_from_index).all()
    assert (meta["dataset_to_index"].astype(int) == small.episode_from_index + lengths).all()
    info = json.loads((small.root / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 300 and info["total_frames"] == small.total_frames
    assert info["chunks_size"] == CHUNKS


def test_one_row_group_per_episode_with_its_rows(small: BulkDataset) -> None:
    for path in small.data_files:
        pf = pq.ParquetFile(small.root / path)
        first = None
        for g in range(pf.num_row_groups):
            rows = pf.read_row_group(g, columns=["episode_index", "frame_index", "index"])
            episode = set(rows.column("episode_index").to_pylist())
            assert len(episode) == 1
            (e,) = episode
            first = e if first is None else first
            assert e == first + g
            assert rows.num_rows == small.episode_lengths[e]
            assert rows.column("frame_index").to_pylist() == list(range(rows.num_rows))
            start = int(small.episode_from_index[e])
            assert rows.column("index").to_pylist() == list(range(start, start + rows.num_rows))


def test_every_episodes_frames_and_timestamps_agree_with_meta(small: BulkDataset) -> None:
    meta = _meta(small)
    for camera, key in enumerate(small.camera_keys):
        for c, f in [(0, 0), (0, 1), (1, 0)]:
            path = small.root / "videos" / key / f"chunk-{c:03d}" / f"file-{f:03d}.mp4"
            with av.open(str(path)) as container:
                frames = [(fr.time, decode_identity(fr.to_ndarray(format="rgb24")))
                          for fr in container.decode(video=0)]
            times = np.array([t for t, _ in frames])
            mine = np.flatnonzero((meta[f"videos/{key}/chunk_index"] == c)
                                  & (meta[f"videos/{key}/file_index"] == f))
            assert len(frames) == int(meta["length"][mine].astype(int).sum())
            for e in mine.tolist():
                lo = float(meta[f"videos/{key}/from_timestamp"][e])
                hi = float(meta[f"videos/{key}/to_timestamp"][e])
                at = np.flatnonzero((times >= lo - 1e-6) & (times < hi - 1e-6))
                assert len(at) == small.episode_lengths[e], (key, e)
                got = [frames[i][1] for i in at]
                assert got == [small.expected_identity(camera, e, j) for j in range(len(at))]
                assert np.allclose(times[at] - lo, np.arange(len(at)) / small.fps)


def test_per_episode_stats_match_the_rows(small: BulkDataset) -> None:
    meta = _meta(small)
    table = pq.read_table(small.root / small.data_files[1]).to_pydict()
    episode = np.asarray(table["episode_index"])
    for e in (100, 150, 199):
        state = np.asarray(table["observation.state"], dtype=np.float64)[episode == e]
        assert np.allclose(meta["stats/observation.state/min"][e], state.min(axis=0))
        assert np.allclose(meta["stats/observation.state/max"][e], state.max(axis=0))
        assert np.allclose(meta["stats/observation.state/mean"][e], state.mean(axis=0))
        assert np.allclose(meta["stats/observation.state/std"][e], state.std(axis=0))
        assert meta["stats/observation.state/count"][e] == [len(state)]
        assert np.asarray(meta[f"stats/{small.camera_keys[0]}/mean"][e]).shape == (3, 1, 1)
        assert row_identity(state[3]) == (e, 3)
    stats = json.loads((small.root / "meta" / "stats.json").read_text())
    assert stats["index"]["count"] == [small.total_frames]
    assert stats["index"]["max"] == [small.total_frames - 1]
    assert np.asarray(stats[small.camera_keys[1]]["mean"]).shape == (3, 1, 1)


def test_both_readers_open_it_and_agree_sample_for_sample(small, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path))
    full = EpisodeDataset(root=str(small.root))
    assert full.num_episodes == 300 and len(full) == small.total_frames
    ref = EpisodeDataset(root=str(small.root), episodes=FEW, return_uint8=True)
    starts = np.concatenate([[0], np.cumsum(ref.episode_table.length)])
    first = {int(e): int(starts[i]) for i, e in enumerate(ref.episode_table.episode_index)}
    ds = StreamingEpisodeDataset(root=str(small.root), episodes=FEW, return_uint8=True)
    seen = []
    for item in ds:
        e, j = int(item["episode_index"]), int(item["frame_index"])
        expected = ref[first[e] + j]
        assert list(item) == list(expected)
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(item[key], value), (key, e, j)
            else:
                assert item[key] == value, key
        for camera, key in enumerate(small.camera_keys):
            assert decode_identity(item[key]) == small.expected_identity(camera, e, j)
        assert item["task"] == small.tasks[e % len(small.tasks)]
        seen.append((e, j))
    assert sorted(seen) == [(e, j) for e in FEW for j in range(small.episode_lengths[e])]


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch) -> None:
    def broken(group, report):
        raise OSError("disk full")

    monkeypatch.setattr(bulk, "_write_group", broken)
    with pytest.raises(OSError, match="disk full"):
        write_bulk_dataset(tmp_path / "ds", episodes=20, episodes_per_file=10, progress=False)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "ds").mkdir()
    with pytest.raises(SynthError, match="already exists"):
        write_bulk_dataset(tmp_path / "ds", episodes=20, progress=False)
    with pytest.raises(SynthError, match="max_frames"):
        write_bulk_dataset(tmp_path / "other", episodes=20, max_frames=500, progress=False)


@given(
    episodes=st.integers(1, 20_000),
    per_file=st.integers(1, 6000),
    chunks=st.integers(1, 1000),
)
def test_rollover_arithmetic(episodes: int, per_file: int, chunks: int) -> None:
    index = np.arange(episodes)
    chunk, file = file_of_episode(index, per_file, chunks)
    assert (file >= 0).all() and (file < chunks).all()
    flat = chunk * chunks + file  # the files in order: chunk by chunk, file by file
    assert flat[0] == 0 and (np.diff(flat) >= 0).all() and (np.diff(flat) <= 1).all()
    counts = np.bincount(flat)
    assert (counts[:-1] == per_file).all() and 1 <= counts[-1] <= per_file
    assert file_of_episode(int(episodes - 1), per_file, chunks) == (int(chunk[-1]), int(file[-1]))
