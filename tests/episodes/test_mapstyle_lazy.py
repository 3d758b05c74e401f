"""The map-style reader's rows read per episode on first use equal the rows it reads whole.

Samples are compared key for key (frames, windows, pad masks, task) between ``preload_rows=True``
and ``preload_rows=False`` over every frame of small datasets, in process, through a real
DataLoader with two workers and shuffle, and over HTTP; a damaged data file is still one line
naming it, at the open (its footer) or at the sample that reads it (its pages).
"""

from __future__ import annotations

import pickle
import shutil
import threading
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from feedline.episodes import EpisodeDataset
from feedline.episodes.errors import EpisodeDatasetError, EpisodeFormatError, ParquetDamaged
from feedline.episodes.mapstyle import PRELOAD_EPISODES
from feedline.episodes.rowcache import EpisodeRowCache
from feedline.episodes.synth.bulk import write_bulk_dataset
from tests.episodes.test_parquet_damage import _silent_flip, magic

CAM0 = "observation.images.cam_0"
DATA_FILE = "data/chunk-000/file-000.parquet"
AV1_DELTAS = {CAM0: [-0.1, 0.0, 0.1], "observation.state": [-0.2, -0.1, 0.0], "action": [0.0, 0.1, 0.2]}


@pytest.fixture(scope="module")
def bulk(tmp_path_factory):
    """60 short episodes, 20 per data file and MP4 (one row group per episode)."""
    root = tmp_path_factory.mktemp("lazy") / "bulk"
    return write_bulk_dataset(
        root, episodes=60, min_frames=3, max_frames=6, cameras=1, episodes_per_file=20,
        progress=False, workers=1,
    )


def assert_same(got: dict[str, Any], want: dict[str, Any], where: Any = "") -> None:
    assert list(got) == list(want), where
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            other = got[key]
            assert other.dtype == value.dtype and other.shape == value.shape, (where, key)
            assert torch.equal(other, value), (where, key)
        else:
            assert got[key] == value, (where, key)


def test_every_sample_equals_the_preloaded_one(bulk):
    deltas = {CAM0: [-0.2, 0.0], "observation.state": [-0.1, 0.0, 0.1], "action": [0.0, 0.1]}
    eager = EpisodeDataset(root=str(bulk.root), delta_timestamps=deltas, preload_rows=True)
    lazy = EpisodeDataset(
        root=str(bulk.root), delta_timestamps=deltas, preload_rows=False, row_cache_size=5
    )
    assert lazy._lazy is not None and eager._lazy is None and len(lazy) == len(eager) > 0
    for i in range(len(eager)):
        assert_same(lazy[i], eager[i], i)
    cache = lazy._lazy.cache()
    assert cache.reads == lazy.num_episodes  # storage order: each episode read once
    assert len(cache) == 5  # never more than row_cache_size
    assert_same(lazy[-1], eager[len(eager) - 1])
    with pytest.raises(IndexError):
        lazy[len(lazy)]


def test_selection_and_default_rule(bulk):
    chosen = [3, 20, 21, 59]
    lazy = EpisodeDataset(root=str(bulk.root), episodes=chosen, preload_rows=False)
    eager = EpisodeDataset(root=str(bulk.root), episodes=chosen)
    assert eager.preload_rows and len(bulk.episode_lengths) <= PRELOAD_EPISODES  # small: read whole
    for i in range(len(eager)):
        assert_same(lazy[i], eager[i], i)
    assert lazy.episode_data(21).columns.keys() == eager.episode_data(21).columns.keys()
    with pytest.raises(EpisodeDatasetError, match="row_cache_size"):
        EpisodeDataset(root=str(bulk.root), preload_rows=False, row_cache_size=0)


def test_dataloader_two_workers_shuffled(bulk):
    eager = EpisodeDataset(root=str(bulk.root), delta_timestamps={CAM0: [-0.1, 0.0]}, preload_rows=True)
    lazy = EpisodeDataset(
        root=str(bulk.root), delta_timestamps={CAM0: [-0.1, 0.0]}, preload_rows=False,
        row_cache_size=4,
    )
    lazy[0]  # the parent's cache is its own; workers start empty
    loader = DataLoader(
        lazy, batch_size=32, shuffle=True, num_workers=2, timeout=120,
        generator=torch.Generator().manual_seed(0),
    )
    seen = Counter()
    for batch in loader:
        for j, index in enumerate(batch["index"].tolist()):
            want = eager[index]  # every episode starts at its global index: position == index
            got = {
                key: value[j] if isinstance(value, torch.Tensor) else value[j]
                for key, value in batch.items()
            }
            assert_same(got, want, index)
            seen[index] += 1
    assert sorted(seen) == list(range(len(eager))) and set(seen.values()) == {1}


def test_pickled_dataset_reads_its_own_rows(bulk):
    lazy = EpisodeDataset(root=str(bulk.root), preload_rows=False)
    first = lazy[7]
    copy = pickle.loads(pickle.dumps(lazy))
    assert copy._lazy is not None and len(copy._lazy.cache()) == 0
    assert_same(copy[7], first)


def test_over_http_each_episode_is_one_read(av1_dataset, av1_http, nginx_server):
    eager = EpisodeDataset(root=av1_http, delta_timestamps=AV1_DELTAS, preload_rows=True)
    lazy = EpisodeDataset(root=av1_http, delta_timestamps=AV1_DELTAS, preload_rows=False)

    def data_requests() -> list[str]:
        return [line for line in nginx_server.log_lines() if "/episodes-av1/data/" in line]

    before = len(data_requests())
    for i in range(len(eager)):
        assert_same(lazy[i], eager[i], i)
    first_pass = data_requests()[before:]
    again = len(data_requests())
    for i in range(len(eager)):
        lazy[i]
    assert len(data_requests()) == again  # cached: no request for rows read before
    gets = [line for line in first_pass if '"GET ' in line]
    assert lazy._lazy.cache().reads == len(av1_dataset.episode_lengths) == 4
    # per episode one ranged GET of its row group (the footers came from the node's cache at
    # the open) and the store's stat when it opens the data file
    assert len(gets) == 4 and all(" 206 " in line for line in gets), first_pass
    assert len(first_pass) == 8 and sum('"HEAD ' in line for line in first_pass) == 4, first_pass


@pytest.fixture
def damaged_copy(av1_dataset, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(av1_dataset.root, root)
    return root


def test_damaged_page_fails_the_sample_naming_the_file(damaged_copy):
    target = damaged_copy / DATA_FILE
    target.write_bytes(_silent_flip(target.read_bytes()))
    lazy = EpisodeDataset(root=str(damaged_copy), preload_rows=False)  # footers are intact
    with pytest.raises(ParquetDamaged) as err:
        lazy[0]  # episode 0 lives in the damaged file
    message = str(err.value)
    assert "\n" not in message and DATA_FILE in message and "CRC" in message
    with pytest.raises(ParquetDamaged):
        lazy[1]  # a failed read is not cached: asked again, named again
    last = lazy[len(lazy) - 1]  # episode 3, in the other data file, reads as before
    assert last["episode_index"].item() == 3


def test_damaged_footer_fails_the_open_naming_the_file(damaged_copy):
    target = damaged_copy / DATA_FILE
    target.write_bytes(magic(target.read_bytes()))
    with pytest.raises(EpisodeFormatError) as err:
        EpisodeDataset(root=str(damaged_copy), preload_rows=False)
    assert "\n" not in str(err.value) and DATA_FILE in str(err.value)


def test_row_cache_reads_once_across_threads():
    cache = EpisodeRowCache(capacity=2)
    started, calls = threading.Event(), Counter()

    def load(key: int):
        def read():
            calls[key] += 1
            started.wait(5)  # every thread is asking by now
            return {"index": torch.arange(key).numpy()}
        return read

    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get(1, load(1)))) for _ in range(8)]
    for t in threads:
        t.start()
    started.set()
    for t in threads:
        t.join(10)
    assert calls[1] == 1 and len(got) == 8 and all(g is got[0] for g in got)
    for key in (2, 3):
        cache.get(key, load(key))
    assert len(cache) == 2 and cache.reads == 3
    cache.get(1, load(1))  # dropped as least recently used: read again
    assert calls[1] == 2

    def fails():
        raise EpisodeFormatError("data file: damaged")

    with pytest.raises(EpisodeFormatError):
        cache.get(9, fails)
    assert cache.get(9, load(9))["index"].tolist() == list(range(9))
