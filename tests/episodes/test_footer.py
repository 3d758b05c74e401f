"""A data file's footer kept as bytes and cut to a few row groups: the cut reads what the whole
footer reads, its group positions agree with a field-by-field walk, and damage is named."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.episodes import footer as footer_module
from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.footer import TAIL_BYTES, DataFooter, read_data_footer, read_footer_bytes
from feedline.io import LocalStore


def _file(groups: int, rows: int = 4, *, statistics: bool = True, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    n = groups * rows
    table = pa.table({
        "index": np.arange(n, dtype=np.int64),
        "episode_index": np.repeat(np.arange(groups, dtype=np.int64), rows),
        "timestamp": np.tile(np.arange(rows) / 30, groups).astype(np.float32),
        "observation.state": pa.array(list(rng.random((n, 3), np.float32)), pa.list_(pa.float32(), 3)),
        "note": pa.array([f"row {i}" for i in range(n)]),
    })
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=rows, write_statistics=statistics)
    return out.getvalue()


def _footer_bytes(data: bytes) -> bytes:
    length = int.from_bytes(data[-8:-4], "little")
    return data[-8 - length : -8]


@pytest.fixture(scope="module")
def wide() -> tuple[bytes, DataFooter]:
    data = _file(300)
    return data, DataFooter.parse(_footer_bytes(data), "data/file-000.parquet")


@settings(max_examples=40, deadline=None)
@given(picked=st.lists(st.integers(0, 299), min_size=1, max_size=20, unique=True))
def test_a_cut_footer_reads_the_same_rows_as_the_whole_one(wide, picked) -> None:
    data, footer = wide
    cut = footer.subset(picked)
    assert cut.num_row_groups == len(picked)
    assert cut.num_rows == sum(int(footer.index.num_rows[g]) for g in picked)
    got = pq.ParquetFile(io.BytesIO(data), metadata=cut).read_row_groups(list(range(len(picked))))
    want = pq.ParquetFile(io.BytesIO(data)).read_row_groups(picked)
    assert got.equals(want)


def test_the_fast_group_search_agrees_with_a_walk_of_every_field(wide) -> None:
    _, footer = wide
    starts, ends = footer_module._scan_groups(footer.raw, footer.list_at[0], footer.num_row_groups)
    assert np.array_equal(starts, footer.group_start) and np.array_equal(ends, footer.group_end)
    assert np.all(footer.group_start[1:] == footer.group_end[:-1])  # back to back in the list


def test_a_footer_the_fast_search_cannot_follow_is_walked(monkeypatch) -> None:
    data = _file(40, statistics=False)
    monkeypatch.setattr(footer_module, "_find_groups", lambda *a: None)
    walked = DataFooter.parse(_footer_bytes(data), "x")
    monkeypatch.undo()
    found = DataFooter.parse(_footer_bytes(data), "x")
    assert np.array_equal(walked.group_end, found.group_end)
    got = pq.ParquetFile(io.BytesIO(data), metadata=walked.subset([3, 39])).read()
    assert got.equals(pq.ParquetFile(io.BytesIO(data)).read_row_groups([3, 39]))
    assert not walked.index.has_index.any()  # no statistics: every group stays a candidate


def test_a_cut_of_many_groups_uses_the_long_list_header(wide) -> None:
    data, footer = wide
    picked = list(range(10, 40))  # >= 15 elements: the header carries a varint count
    got = pq.ParquetFile(io.BytesIO(data), metadata=footer.subset(picked)).read_row_groups(
        list(range(len(picked)))
    )
    assert got.column("index").to_pylist() == list(range(40, 160))


def test_a_footer_pickles_with_its_bytes(wide) -> None:
    _, footer = wide
    again = pickle.loads(pickle.dumps(footer))
    assert again.subset_bytes([5, 7]) == footer.subset_bytes([5, 7])


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.999])
def test_truncated_footer_bytes_are_one_line_naming_the_file(wide, cut) -> None:
    _, footer = wide
    raw = bytes(footer.raw)
    with pytest.raises(EpisodeFormatError, match="data/file-007.parquet") as info:
        DataFooter.parse(raw[: int(len(raw) * cut)], "data/file-007.parquet")
    assert "\n" not in str(info.value)


def test_a_short_footer_is_one_read_and_a_long_one_two(tmp_path) -> None:
    small, large = _file(8), _file(300)
    assert len(_footer_bytes(small)) < TAIL_BYTES < len(_footer_bytes(large))
    (tmp_path / "small.parquet").write_bytes(small)
    (tmp_path / "large.parquet").write_bytes(large)
    store = LocalStore(tmp_path)
    reads: list[int] = []
    original = store.open

    def counting_open(path: str):
        handle = original(path)
        raw = getattr(handle, "raw", handle)
        read = raw.read

        def read_counted(n: int = -1) -> bytes:
            reads.append(n)
            return read(n)

        raw.read = read_counted
        return handle

    store.open = counting_open  # counts the reads of the file object the footer is read from
    assert read_footer_bytes(store, "small.parquet") == _footer_bytes(small)
    assert len(reads) == 1
    reads.clear()
    assert read_footer_bytes(store, "large.parquet") == _footer_bytes(large)
    assert len(reads) == 2
    assert read_data_footer(store, "large.parquet").num_row_groups == 300


@pytest.mark.parametrize(
    ("tail", "problem"),
    [(b"not parquet at all, not at all", "no Parquet magic"), (b"xx" * 8 + b"PARE", "encrypted"),
     (b"xx" * 8 + (10**6).to_bytes(4, "little") + b"PAR1", "footer of 1000000 bytes")],
)
def test_a_file_that_does_not_end_like_parquet_is_named(tmp_path, tail, problem) -> None:
    (tmp_path / "bad.parquet").write_bytes(tail)
    with pytest.raises(EpisodeFormatError, match=f"bad.parquet.*{problem}"):
        read_footer_bytes(LocalStore(tmp_path), "bad.parquet")
