"""Metadata cached on the node: a second open reads no footer and none of ``meta/episodes``, an
entry follows the content (not its URL), a replaced file is read again, a damaged entry is
rebuilt, a store without fingerprints is not cached."""

from __future__ import annotations

import dataclasses
import io
import mmap
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedline.episodes import metacache
from feedline.episodes.metacache import cached_footer, footer_cache_dir, table_cache_dir
from feedline.io import LocalStore


class CountingStore(LocalStore):
    """A local folder that counts the bytes read from it through file objects and ranges."""

    def __init__(self, root: Path, *, fingerprints: bool = True) -> None:
        super().__init__(root)
        self.bytes_read = 0
        self.opened: list[str] = []
        self.fingerprints = fingerprints

    def stat(self, path: str):
        info = super().stat(path)
        return info if self.fingerprints else dataclasses.replace(info, fingerprint=None)

    def open(self, path: str):
        self.opened.append(path)
        handle = super().open(path)
        raw = getattr(handle, "raw", handle)
        read = raw.read

        def counted(n: int = -1) -> bytes:
            out = read(n)
            self.bytes_read += len(out)
            return out

        raw.read = counted
        return handle


def _write(path: Path, groups: int, offset: int = 0) -> None:
    n = groups * 3
    table = pa.table({
        "index": np.arange(offset, offset + n, dtype=np.int64),
        "episode_index": np.repeat(np.arange(groups, dtype=np.int64), 3),
        "x": np.arange(n, dtype=np.float32),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=3)


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _entries() -> list[Path]:
    root = footer_cache_dir()
    return sorted(root.rglob("*.npz")) if root.exists() else []


def test_a_second_open_reads_no_footer_and_maps_the_cached_bytes(tmp_path: Path) -> None:
    _write(tmp_path / "ds/data/file-000.parquet", 40)
    store = CountingStore(tmp_path / "ds")
    first = cached_footer(store, "data/file-000.parquet")
    assert store.bytes_read > 0 and len(_entries()) == 1
    store.bytes_read = 0
    again = cached_footer(store, "data/file-000.parquet")
    assert store.bytes_read == 0
    assert isinstance(again.raw, mmap.mmap)
    assert again.subset_bytes([2, 30]) == first.subset_bytes([2, 30])
    assert np.array_equal(again.index.index_min, first.index.index_min)
    data = (tmp_path / "ds/data/file-000.parquet").read_bytes()
    got = pq.ParquetFile(io.BytesIO(data), metadata=again.subset([7])).read_row_groups([0])
    assert got.column("index").to_pylist() == [21, 22, 23]


def test_the_entry_follows_the_content_not_the_url(tmp_path: Path) -> None:
    _write(tmp_path / "ds/data/file-000.parquet", 10)
    os.symlink(tmp_path / "ds", tmp_path / "alias")  # the same files under another root
    cached_footer(CountingStore(tmp_path / "ds"), "data/file-000.parquet")
    other = CountingStore(tmp_path / "alias")
    cached_footer(other, "data/file-000.parquet")
    assert other.bytes_read == 0 and len(_entries()) == 1


def test_a_replaced_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "ds/data/file-000.parquet"
    _write(path, 10)
    store = CountingStore(tmp_path / "ds")
    assert cached_footer(store, "data/file-000.parquet").num_row_groups == 10
    _write(path, 12, offset=100)
    os.utime(path, ns=(1, 1))  # even with another mtime, the inode or size tells them apart
    footer = cached_footer(store, "data/file-000.parquet")
    assert footer.num_row_groups == 12 and int(footer.index.index_min[0]) == 100
    assert len(_entries()) == 2


def test_a_damaged_entry_is_rebuilt_not_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "ds/data/file-000.parquet", 10)
    store = CountingStore(tmp_path / "ds")
    cached_footer(store, "data/file-000.parquet")
    (entry,) = _entries()
    entry.write_bytes(entry.read_bytes()[:50])
    store.bytes_read = 0
    footer = cached_footer(store, "data/file-000.parquet")
    assert store.bytes_read > 0 and footer.num_row_groups == 10
    assert metacache._load(entry.with_suffix("")) is not None  # written whole again


def test_a_cached_footer_pickles_as_its_entry(tmp_path: Path) -> None:
    _write(tmp_path / "ds/data/file-000.parquet", 200)
    store = CountingStore(tmp_path / "ds")
    cached_footer(store, "data/file-000.parquet")
    footer = cached_footer(store, "data/file-000.parquet")
    blob = pickle.dumps(footer)
    assert len(blob) < len(footer.raw)  # the bytes stay in the node's cache, shared
    again = pickle.loads(blob)
    assert again.subset_bytes([0, 199]) == footer.subset_bytes([0, 199])


def test_a_store_without_fingerprints_is_not_cached(tmp_path: Path) -> None:
    _write(tmp_path / "ds/data/file-000.parquet", 10)
    store = CountingStore(tmp_path / "ds", fingerprints=False)
    cached_footer(store, "data/file-000.parquet")
    store.bytes_read = 0
    assert cached_footer(store, "data/file-000.parquet").num_row_groups == 10
    assert store.bytes_read > 0 and _entries() == []


# ---- the episode table ------------------------------------------------------------------------


def _meta_bytes(store: CountingStore, load) -> tuple[object, int]:
    """What ``load(store)`` gives and how many ``meta/episodes`` files it opened."""
    store.opened.clear()
    meta = load(store)
    return meta, sum(p.startswith("meta/episodes/") for p in store.opened)


def test_a_second_open_reads_none_of_meta_episodes(av1_dataset, tmp_path: Path) -> None:
    from feedline.episodes.format import load_meta, read_episode_table, read_info

    root = Path(shutil.copytree(av1_dataset.root, tmp_path / "ds"))
    store = CountingStore(root)
    first, read_first = _meta_bytes(store, load_meta)
    again, read_again = _meta_bytes(store, load_meta)
    assert read_first > 0
    uncached = read_episode_table(store, read_info(store), again.episodes_files)
    for table in (first.episodes, again.episodes):
        assert np.array_equal(table.episode_index, uncached.episode_index)
        assert np.array_equal(table.dataset_to_index, uncached.dataset_to_index)
        assert list(table.data_path) == list(uncached.data_path)
        for key in uncached.video_path:
            assert list(table.video_path[key]) == list(uncached.video_path[key])
            assert np.array_equal(table.from_timestamp[key], uncached.from_timestamp[key])
        assert list(table.tasks) == list(uncached.tasks)
    assert read_again == 0  # a warm open reads info.json, tasks and stats, none of meta/episodes
    assert again.episodes_files == first.episodes_files


def test_a_changed_meta_episodes_file_is_read_again(av1_dataset, tmp_path: Path) -> None:
    from feedline.episodes.format import load_meta

    root = Path(shutil.copytree(av1_dataset.root, tmp_path / "ds"))
    store = CountingStore(root)
    before = load_meta(store).episodes
    path = root / av1_dataset.episodes_files[0]
    table = pq.read_table(path)
    lengths = table.column("length").to_numpy().copy()
    table = table.set_column(table.schema.get_field_index("length"), "length", pa.array(lengths + 0))
    pq.write_table(table, path)  # same content, a new file: the entry must not be trusted blindly
    after, read = _meta_bytes(store, load_meta)
    assert read > 0 and np.array_equal(after.episodes.length, before.length)


def test_a_table_without_fingerprints_is_not_cached(av1_dataset, tmp_path: Path) -> None:
    from feedline.episodes.format import load_meta

    store = CountingStore(Path(shutil.copytree(av1_dataset.root, tmp_path / "ds")), fingerprints=False)
    load_meta(store)
    _, read = _meta_bytes(store, load_meta)
    assert read > 0
    assert not (table_cache_dir()).exists() or not list(table_cache_dir().rglob("*.json"))


class SecondsStore(CountingStore):
    """A folder fingerprinted the way nginx's ETag is: the mtime in whole seconds and the size,
    so files of equal size written in the same second share a fingerprint."""

    def stat(self, path: str):
        info = super().stat(path)
        mtime = int(os.stat(self.root / path).st_mtime)
        return dataclasses.replace(info, fingerprint=f'"{mtime:x}-{info.size:x}"')


def _same_second(*paths: Path) -> None:
    for path in paths:
        os.utime(path, (1_700_000_000, 1_700_000_000))


def test_files_sharing_a_fingerprint_keep_their_own_entries(tmp_path: Path) -> None:
    a, b = tmp_path / "ds/data/file-000.parquet", tmp_path / "ds/data/file-001.parquet"
    _write(a, 10, offset=300)
    _write(b, 10, offset=1000)
    assert a.stat().st_size == b.stat().st_size  # equal sizes: only the path tells them apart
    _same_second(a, b)
    store = SecondsStore(tmp_path / "ds")
    assert store.stat("data/file-000.parquet").fingerprint == store.stat("data/file-001.parquet").fingerprint
    first = cached_footer(store, "data/file-000.parquet")
    second = cached_footer(store, "data/file-001.parquet")
    assert int(first.index.index_min[0]) == 300 and int(second.index.index_min[0]) == 1000
    assert len(_entries()) == 2


def test_an_entry_that_cannot_hold_the_files_episodes_is_read_again(tmp_path: Path) -> None:
    """Two datasets with the same file path, size and second: the second open finds the first
    one's entry, sees that it holds none of its episodes and reads its own footer."""
    from feedline.episodes.stream.payload import parquet_layout
    from feedline.episodes.table import EpisodeTable

    for name, offset in (("one", 300), ("two", 1000)):
        path = tmp_path / name / "data/file-000.parquet"
        _write(path, 10, offset=offset)
        _same_second(path)
    assert (tmp_path / "one/data/file-000.parquet").stat().st_size == (
        tmp_path / "two/data/file-000.parquet").stat().st_size

    def table(offset: int) -> EpisodeTable:
        starts = offset + 3 * np.arange(10, dtype=np.int64)
        return EpisodeTable(
            np.arange(10), np.full(10, 3), starts, starts + 3, ["data/file-000.parquet"] * 10,
            {}, {}, {}, [("t",)] * 10,
        )

    one = parquet_layout(SecondsStore(tmp_path / "one"), table(300))
    store = SecondsStore(tmp_path / "two")
    two = parquet_layout(store, table(1000))
    assert store.bytes_read > 0  # the entry was the other dataset's: this file was read
    assert one.groups_of(4) == two.groups_of(4) == (4,)
    assert int(two.footers["data/file-000.parquet"].index.index_min[0]) == 1000
    store.bytes_read = 0
    assert parquet_layout(store, table(1000)).groups_of(4) == (4,) and store.bytes_read == 0
