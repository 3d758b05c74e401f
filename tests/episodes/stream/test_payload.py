"""stream/payload.py on real PyAV-encoded datasets: what an episode's fetch reads, byte for byte.

Every read goes through a recording store (a local folder read the way a remote one is: Parquet
through ranged reads), so the tests see exactly which bytes a fetch asks for: the episode's
candidate row groups (pruned by the footer's statistics), the mini-MP4 sample ranges of each
camera, and nothing else. The sizes reserved up front must be the sizes fetched, the frames
decoded from memory must be the map-style reader's, and a failure must name the file.
"""

from __future__ import annotations

import dataclasses
import io
import random
import shutil
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from feedline.episodes import EpisodeDataset
from feedline.episodes.assemble import assemble_sample
from feedline.episodes.errors import EpisodeFormatError, FrameTimestampError
from feedline.episodes.format import EpisodeTable, load_meta
from feedline.episodes.stream.decoded import DecodedFrames
from feedline.episodes.stream.payload import (
    EpisodeSpans,
    episode_spans,
    fetch_episode,
    parquet_episode_bytes,
    parquet_footers,
)
from feedline.episodes.synth.writer import SyntheticDataset, decode_identity, row_identity
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import merge_ranges
from feedline.io.errors import StoreError
from feedline.io.store import LocalStore, RangedFile

TOLERANCE_S = 1e-4


def worker() -> dict:
    """What a worker passes every fetch: its own decoded-frame memory, the tolerance."""
    return {"decoded": DecodedFrames(2**30, 8), "tolerance_s": TOLERANCE_S}


class RecordingStore(LocalStore):
    """A local folder that reads like a remote store and records every byte range it serves."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[tuple[str, int, int]] = []

    def read_range(self, path: str, start: int, end: int) -> bytes:
        self.reads.append((path, start, end))
        return super().read_range(path, start, end)

    def open(self, path: str) -> IO[bytes]:  # what the HTTP and object stores hand pyarrow
        return io.BufferedReader(RangedFile(self, path, self.stat(path).size))

    def reads_of(self, path: str) -> list[tuple[int, int]]:
        return [(start, end) for p, start, end in self.reads if p == path]


class Opened:
    """One dataset root opened the way the streaming reader opens it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = RecordingStore(root)
        self.meta = load_meta(self.store)
        self.table: EpisodeTable = self.meta.episodes
        self.reader = VideoFrameReader(self.store, video_paths=self.table.video_files())
        self.parquet = parquet_episode_bytes(self.store, self.table)
        self.spans = episode_spans(self.table, self.reader, self.meta.fps, self.parquet,
                                   TOLERANCE_S)


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with an empty cache, so what it counts are the reads of a first open."""
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "feedline-home"))


@pytest.fixture
def opened(av1_dataset: SyntheticDataset) -> Opened:
    return Opened(av1_dataset.root)


@pytest.fixture
def copied(av1_dataset: SyntheticDataset, tmp_path: Path) -> Path:
    """A private copy of the dataset, for tests that rewrite or damage its files."""
    return Path(shutil.copytree(av1_dataset.root, tmp_path / "av1"))


def _row_group_spans(path: Path) -> list[tuple[int, int]]:
    """Each row group's byte range ``[first column chunk, + compressed size)`` in the file."""
    metadata = pq.ParquetFile(path).metadata
    spans = []
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        columns = [group.column(c) for c in range(group.num_columns)]
        start = min(c.dictionary_page_offset or c.data_page_offset for c in columns)
        spans.append((start, start + sum(c.total_compressed_size for c in columns)))
    return spans


def _sample_ranges(reader: VideoFrameReader, path: str, first: int, last: int) -> list[tuple[int, int]]:
    """The merged byte ranges of samples ``first..last``, straight from the video's index."""
    table = reader.table(path)
    starts = np.asarray(table.offset[first : last + 1], dtype=np.int64)
    return merge_ranges(starts, starts + np.asarray(table.size[first : last + 1], dtype=np.int64))


# ---- sizes known before anything is fetched ---------------------------------------------------


def test_parquet_bytes_are_the_episodes_own_row_groups(opened: Opened, av1_dataset) -> None:
    """One row group per episode (LeRobot's layout): each episode reserves exactly its group."""
    expected = {}
    for ep, (file, group) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        start, end = _row_group_spans(av1_dataset.root / av1_dataset.data_files[file])[group]
        expected[ep] = end - start
    assert opened.parquet == expected
    fresh = RecordingStore(opened.root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEEDLINE_HOME", str(opened.root.parent / "another-home"))
        parquet_episode_bytes(fresh, opened.table)
    assert sorted({path for path, _, _ in fresh.reads}) == av1_dataset.data_files
    # footers only: one read per file, ending at its end (small files fit the footer read)
    for path in av1_dataset.data_files:
        reads = fresh.reads_of(path)
        assert len(reads) == 1 and reads[0][1] == (av1_dataset.root / path).stat().st_size
    opened.store.reads.clear()
    assert parquet_episode_bytes(opened.store, opened.table) == expected
    assert opened.store.reads == []  # cached on the node: a second open reads no footer


def test_row_groups_are_pruned_by_statistics_and_kept_without_them(copied: Path) -> None:
    data = copied / "data/chunk-000/file-001.parquet"  # episodes 2 (40 rows) and 3 (10 rows)
    rows = pq.read_table(data)
    pq.write_table(rows, data, row_group_size=8)  # ep 2: groups 0-4, ep 3: groups 5-6
    groups = _row_group_spans(data)
    assert len(groups) == 7
    pruned = Opened(copied).parquet
    assert pruned[2] == sum(end - start for start, end in groups[:5])
    assert pruned[3] == sum(end - start for start, end in groups[5:])
    pq.write_table(rows, data, row_group_size=8, write_statistics=False)
    groups = _row_group_spans(data)
    unpruned = Opened(copied)
    everything = sum(end - start for start, end in groups)
    assert unpruned.parquet[2] == unpruned.parquet[3] == everything  # no statistics: candidates
    payload = fetch_episode(unpruned.store, unpruned.reader, unpruned.table, unpruned.spans[3], **worker())
    assert payload.data.columns["index"].tolist() == list(range(72, 82))  # filtered to episode 3
    assert [row_identity(s) for s in payload.data.columns["observation.state"]] == [
        (3, k) for k in range(10)
    ]


def test_span_reaches_the_last_row_when_to_timestamp_is_short(opened: Opened) -> None:
    """A to_timestamp measured short must not cut frames a sample can ask for."""
    short = {key: ts.copy() for key, ts in opened.table.to_timestamp.items()}
    for ts in short.values():
        ts[2] = 1.0  # episode 2 has 40 frames at 10 fps: it runs to 3.9 s
    table = dataclasses.replace(opened.table, to_timestamp=short)
    spans = episode_spans(table, opened.reader, opened.meta.fps, opened.parquet, TOLERANCE_S)
    assert spans[2].nbytes == opened.spans[2].nbytes
    for key, plans in spans[2].video.items():
        assert [(p.first, p.last, p.size) for p in plans] == [(0, 39, p.size) for p in plans]
        assert [p.layout.header for p in plans] == [
            p.layout.header for p in opened.spans[2].video[key]
        ]


# ---- what a fetch reads ------------------------------------------------------------------------


@pytest.mark.parametrize("episode", [1, 2], ids=["inside-a-concatenated-file", "own-file"])
def test_fetch_reads_exactly_the_planned_byte_ranges(opened: Opened, episode: int) -> None:
    spans: EpisodeSpans = opened.spans[episode]
    i = spans.position
    opened.store.reads.clear()
    payload = fetch_episode(opened.store, opened.reader, opened.table, spans, **worker())

    video_paths = {key: paths[i] for key, paths in opened.table.video_path.items()}
    data_path = opened.table.data_path[i]
    assert {path for path, _, _ in opened.store.reads} == {data_path, *video_paths.values()}
    video_read = 0
    for key, path in video_paths.items():
        plans = spans.video[key]
        expected = [r for p in plans for r in _sample_ranges(opened.reader, path, p.first, p.last)]
        assert opened.store.reads_of(path) == expected  # the samples' bytes, nothing more
        minis = payload.minis[key]
        assert [len(m.data) for m in minis] == [p.size for p in plans]  # size reserved = built
        assert all(m.plan is p for m, p in zip(minis, plans, strict=True))
        video_read += sum(end - start for start, end in expected)
    # Parquet: the footer, then exactly the episode's row group
    size = (opened.root / data_path).stat().st_size
    footer, *rest = opened.store.reads_of(data_path)
    assert footer[1] == size
    group = _row_group_spans(opened.root / data_path)[episode % 2]
    assert rest == [group] and spans.parquet_bytes == group[1] - group[0]
    assert payload.fetched_bytes == spans.parquet_bytes + video_read
    assert spans.nbytes == spans.parquet_bytes + sum(len(m.data) for ms in payload.minis.values()
                                                     for m in ms)
    start, length = int(opened.table.dataset_from_index[i]), int(opened.table.length[i])
    assert payload.data.columns["index"].tolist() == list(range(start, start + length))
    assert payload.data.episode_index == episode and payload.data.dataset_from_index == start


def test_with_the_footers_read_once_a_fetch_reads_only_the_episodes_row_group(opened: Opened) -> None:
    opened.store.reads.clear()
    footers = parquet_footers(opened.store, opened.table)
    assert parquet_episode_bytes(opened.store, opened.table, footers) == opened.parquet
    assert opened.store.reads == []  # read once at the open, then from the node's cache
    for episode in (0, 1):  # two episodes of one data file
        spans = opened.spans[episode]
        opened.store.reads.clear()
        with_footer = fetch_episode(opened.store, opened.reader, opened.table, spans, footers, **worker())
        data_path = opened.table.data_path[spans.position]
        group = _row_group_spans(opened.root / data_path)[episode % 2]
        assert opened.store.reads_of(data_path) == [group]  # no footer read
        plain = fetch_episode(opened.store, opened.reader, opened.table, spans, **worker())
        for name, values in plain.data.columns.items():
            assert np.array_equal(with_footer.data.columns[name], values), name


# ---- frames from memory ----------------------------------------------------------------------


def test_frames_are_decoded_from_memory_and_equal_the_map_style_reader(opened: Opened) -> None:
    episode = 1  # frames 1.2 s into a file shared with episode 0
    payload = fetch_episode(opened.store, opened.reader, opened.table, opened.spans[episode], **worker())
    key = "observation.images.cam_1"
    path = payload.data.video_path[key]
    stamps = [1.2 + k / 10 for k in (0, 1, 7, 19)]
    opened.store.reads.clear()
    got = payload.frames(key, stamps)
    assert opened.store.reads == []  # no I/O: the fetched mini-MP4 holds every frame
    assert payload.outside_fetches == 0
    assert [decode_identity(image) for image in got] == [(1, 1, k) for k in (0, 1, 7, 19)]
    expected = VideoFrameReader(opened.store).frames_at(path, stamps, TOLERANCE_S)
    assert np.array_equal(got, expected)


def test_a_frame_outside_the_fetched_span_is_read_and_counted(opened: Opened) -> None:
    payload = fetch_episode(opened.store, opened.reader, opened.table, opened.spans[1], **worker())
    key = "observation.images.cam_0"
    opened.store.reads.clear()
    got = payload.frames(key, [0.3])  # episode 0's frame 3
    assert decode_identity(got[0]) == (0, 0, 3)
    assert payload.outside_fetches == 1 and opened.store.reads  # the fallback read it


# ---- errors name the file --------------------------------------------------------------------


def test_a_missing_data_file_is_named(copied: Path) -> None:
    opened = Opened(copied)
    missing = "data/chunk-000/file-001.parquet"
    (copied / missing).unlink()
    with pytest.raises(EpisodeFormatError, match=rf"{copied / missing}: data file not found"):
        parquet_episode_bytes(opened.store, opened.table)
    with pytest.raises(EpisodeFormatError, match=rf"{copied / missing}: data file not found"):
        fetch_episode(opened.store, opened.reader, opened.table, opened.spans[2], **worker())


def test_a_video_cut_short_after_planning_is_named(copied: Path) -> None:
    opened = Opened(copied)
    video = opened.table.video_path["observation.images.cam_0"][2]
    (copied / video).write_bytes((copied / video).read_bytes()[:1000])
    with pytest.raises(StoreError, match=str(copied / video)):
        fetch_episode(opened.store, opened.reader, opened.table, opened.spans[2], **worker())


def test_a_time_outside_the_video_is_named(opened: Opened) -> None:
    payload = fetch_episode(opened.store, opened.reader, opened.table, opened.spans[3], **worker())
    key = "observation.images.cam_0"
    path = payload.data.video_path[key]
    with pytest.raises(FrameTimestampError, match=rf"{opened.store.url(path)}: no frame within"):
        payload.frames(key, [0.0, 7.5])


# ---- decoded frames are released after their last sample ---------------------------------------


@pytest.mark.parametrize("order", ["forward", "shuffled"])
def test_frames_are_released_after_their_last_sample(opened: Opened, av1_dataset, order: str) -> None:
    """Each kept frame is dropped once the last sample needing it is assembled, not when the
    episode ends: in order a worker holds about one window per camera, in any order it holds
    nothing once every sample is done (before close), and no frame is decoded twice."""
    cam = "observation.images.cam_0"
    ref = EpisodeDataset(root=str(av1_dataset.root), delta_timestamps={cam: [-0.2, -0.1, 0.0]},
                         return_uint8=True)
    spec = ref.sample_spec
    decoded = DecodedFrames(2**30, 8)
    payload = fetch_episode(opened.store, opened.reader, opened.table, opened.spans[1],
                            decoded=decoded, tolerance_s=TOLERANCE_S)
    decode = payload.decode

    length = payload.data.length
    frames = list(range(length))
    if order == "shuffled":
        random.Random(5).shuffle(frames)
    held = []
    for frame in frames:
        item = assemble_sample(spec, payload.data, frame, decode, payload.windows(spec))
        expected = ref[payload.data.dataset_from_index + frame]
        for key in spec.video_keys:
            assert torch.equal(item[key], expected[key]), (key, frame)
        held.append(decoded.counters.decoded_bytes)
    frame_bytes = int(ref[0][cam].numel())
    cameras = len(spec.video_keys)
    assert decoded.counters.decoded_bytes == 0  # all released, and the payload is still open
    assert decoded.counters.redecoded_frames == 0
    assert decoded.counters.decoded_frames == length * cameras
    if order == "forward":  # the window being served and the frame decoded ahead of it
        assert max(held) <= 4 * cameras * frame_bytes
    assert max(held) < length * cameras * frame_bytes
    payload.close()
