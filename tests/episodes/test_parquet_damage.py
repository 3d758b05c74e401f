"""Damaged Parquet (meta/episodes, tasks, data files): every read fails with one line naming the file,
and a bit flipped in a page written with a CRC-32 is never read as data."""

from __future__ import annotations

import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset
from feedline.episodes.errors import EpisodeFormatError, ParquetDamaged
from feedline.episodes.format import load_meta
from feedline.episodes.parquet import EpisodeRows, read_episodes_rows, read_footer
from feedline.episodes.stream.payload import parquet_footers
from feedline.io import open_store

META_FILE = "meta/episodes/chunk-000/file-000.parquet"
DATA_FILE = "data/chunk-000/file-000.parquet"


def _footer_start(data: bytes) -> int:
    return len(data) - 8 - int.from_bytes(data[-8:-4], "little")


def magic(data: bytes) -> bytes:
    """'Parquet magic bytes not found'."""
    return data[:-4] + b"PAR2"


def thrift(data: bytes) -> bytes:
    """'Couldn't deserialize thrift'."""
    start = _footer_start(data)
    return data[:start] + b"\xff" * 64 + data[start + 64 :]


def base64(data: bytes) -> bytes:
    """'Invalid base64 input' (the ARROW:schema key-value of the footer)."""
    key = data.find(b"ARROW:schema", _footer_start(data))
    found = re.compile(rb"[A-Za-z0-9+/=]{40}").search(data, key + 12)
    assert key > 0 and found is not None
    return data[: found.start() + 8] + b"!!!!" + data[found.start() + 12 :]


def codec17(data: bytes) -> bytes:
    """'Unsupported compression codec value: 17' (the first column chunk's SNAPPY codec, 1)."""
    at = data.find(b"\x15\x02\x16", _footer_start(data))
    assert at > 0
    return data[: at + 1] + bytes([17 * 2]) + data[at + 2 :]  # thrift compact: zigzag varint


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def empty(data: bytes) -> bytes:
    return b""


@pytest.fixture
def dataset_copy(av1_dataset, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(av1_dataset.root, root)
    return root


def _one_line(err: pytest.ExceptionInfo, path: str) -> str:
    message = str(err.value)
    assert "\n" not in message
    assert path in message, message
    return message


@pytest.mark.parametrize("mutate", [magic, thrift, base64, codec17, truncated, empty])
def test_damaged_episodes_metadata_names_the_file(dataset_copy, mutate):
    target = dataset_copy / META_FILE
    target.write_bytes(mutate(target.read_bytes()))
    with pytest.raises(EpisodeFormatError) as err:
        load_meta(open_store(str(dataset_copy)))
    _one_line(err, META_FILE)


@pytest.mark.parametrize("mutate", [magic, thrift, base64, truncated, empty])
def test_damaged_tasks_names_the_file(dataset_copy, mutate):
    target = dataset_copy / "meta/tasks.parquet"
    target.write_bytes(mutate(target.read_bytes()))
    with pytest.raises(EpisodeFormatError) as err:
        load_meta(open_store(str(dataset_copy)))
    _one_line(err, "meta/tasks.parquet")


@pytest.mark.parametrize("mutate", [magic, thrift, base64, truncated, empty])
def test_damaged_data_file_names_the_file(dataset_copy, mutate):
    store = open_store(str(dataset_copy))
    episode = load_meta(store).episodes[0]
    assert episode.data_path == DATA_FILE
    target = dataset_copy / DATA_FILE
    target.write_bytes(mutate(target.read_bytes()))
    want = [EpisodeRows(0, episode.dataset_from_index, episode.dataset_to_index)]
    with pytest.raises(EpisodeFormatError) as err:
        read_episodes_rows(store, DATA_FILE, want)
    _one_line(err, DATA_FILE)
    with pytest.raises(EpisodeFormatError) as err:
        read_footer(store, DATA_FILE)
    _one_line(err, DATA_FILE)
    with pytest.raises(EpisodeFormatError) as err:  # the streaming reader's footers, read at open
        parquet_footers(store, load_meta(store).episodes)
    _one_line(err, DATA_FILE)


def test_damaged_page_data_names_the_file(dataset_copy):
    """A footer that parses but a column chunk that does not decompress: the read names the file."""
    store = open_store(str(dataset_copy))
    episode = load_meta(store).episodes[0]
    target = dataset_copy / DATA_FILE
    data = bytearray(target.read_bytes())
    start = _footer_start(bytes(data))
    for pos in range(4, start, 7):  # every 7th payload byte
        data[pos] ^= 0x5A
    target.write_bytes(bytes(data))
    want = [EpisodeRows(0, episode.dataset_from_index, episode.dataset_to_index)]
    try:
        read_episodes_rows(store, DATA_FILE, want)
    except EpisodeFormatError as exc:
        assert "\n" not in str(exc) and DATA_FILE in str(exc)


# --- page checksums: the synthetic writer stores a CRC-32 per page, the readers verify it


def _flip(data: bytes, pos: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ 0x04]) + data[pos + 1 :]


def _chunk(data: bytes, column: str) -> range:
    """Byte positions of ``column``'s pages in row group 0 (episode 0), headers included."""
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    return range(start, start + chunk.total_compressed_size)


def _unverified(data: bytes) -> pa.Table | None:
    """What pyarrow reads without verifying page checksums (None: it raises)."""
    try:
        return pq.ParquetFile(pa.BufferReader(data)).read_row_groups([0])
    except (pa.ArrowException, OSError):
        return None


def _silent_flip(data: bytes, column: str = "timestamp") -> bytes:
    """The first one-bit flip in ``column``'s pages that unverified pyarrow reads as other values."""
    good = pq.ParquetFile(pa.BufferReader(data)).read_row_groups([0])
    for pos in _chunk(data, column):
        bad = _flip(data, pos)
        read = _unverified(bad)
        if read is not None and not read.equals(good):
            return bad
    raise AssertionError(f"no flip in {column} changes its values silently")


def test_flipped_page_bits_never_give_wrong_rows(dataset_copy):
    """Every byte of episode 0's row group flipped in turn: the rows read are the written ones or
    one line naming the file, and every flip pyarrow alone reads as other values is caught."""
    store = open_store(str(dataset_copy))
    episode = load_meta(store).episodes[0]
    target = dataset_copy / DATA_FILE
    data = target.read_bytes()
    want = [EpisodeRows(0, episode.dataset_from_index, episode.dataset_to_index)]
    good, group = read_episodes_rows(store, DATA_FILE, want)[0], _unverified(data)
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0)
    positions = [p for i in range(meta.num_columns) for p in _chunk(data, meta.column(i).path_in_schema)]
    outcomes = {"same rows": 0, "CRC error": 0, "other error": 0}
    silent = 0
    for pos in positions:
        bad = _flip(data, pos)
        target.write_bytes(bad)
        unverified = _unverified(bad)
        silently_wrong = unverified is not None and not unverified.equals(group)
        silent += silently_wrong
        try:
            rows = read_episodes_rows(store, DATA_FILE, want)[0]
        except EpisodeFormatError as exc:
            assert "\n" not in str(exc) and DATA_FILE in str(exc), exc
            outcomes["CRC error" if isinstance(exc, ParquetDamaged) else "other error"] += 1
            continue
        assert rows.equals(good) and not silently_wrong, f"byte {pos}: wrong rows, no error"
        outcomes["same rows"] += 1
    print(f"{len(positions)} one-bit flips, {silent} read as other values by pyarrow alone: {outcomes}")
    assert silent > 0 and outcomes["CRC error"] >= silent


def test_flipped_page_bit_fails_both_readers_naming_the_file(dataset_copy):
    """One flip that pyarrow alone reads as a wrong timestamp: the map-style reader fails at open,
    the streaming reader when it reads the episode, each with one line naming the file."""
    target = dataset_copy / DATA_FILE
    target.write_bytes(_silent_flip(target.read_bytes()))
    with pytest.raises(ParquetDamaged) as err:
        EpisodeDataset(root=str(dataset_copy))
    assert "CRC" in _one_line(err, DATA_FILE)
    with pytest.raises(ParquetDamaged) as err:
        list(StreamingEpisodeDataset(root=str(dataset_copy)))
    _one_line(err, DATA_FILE)


@pytest.mark.parametrize(
    ("path", "column"), [(META_FILE, "dataset_from_index"), ("meta/tasks.parquet", "task_index")]
)
def test_flipped_page_bit_in_metadata_names_the_file(dataset_copy, path, column):
    """A flip pyarrow alone reads as another value, in the episodes metadata or the tasks."""
    target = dataset_copy / path
    target.write_bytes(_silent_flip(target.read_bytes(), column))
    with pytest.raises(ParquetDamaged) as err:
        load_meta(open_store(str(dataset_copy)))
    _one_line(err, path)
