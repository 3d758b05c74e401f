"""Episode rows from data Parquet: row groups pruned by statistics, then filtered to the episode."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.parquet import (
    EpisodeRows,
    candidate_row_groups,
    read_episode_rows,
    read_episodes_rows,
)
from feedline.episodes.synth.writer import row_identity
from feedline.io import open_store


def _check_rows(table: pa.Table, episode: int, from_index: int, length: int) -> None:
    assert table.column("index").to_pylist() == list(range(from_index, from_index + length))
    assert set(table.column("episode_index").to_pylist()) == {episode}
    states = table.column("observation.state").to_pylist()
    assert [row_identity(s) for s in states] == [(episode, k) for k in range(length)]


def test_one_row_group_per_episode_prunes_to_exactly_it(av1_dataset):
    ds = av1_dataset
    meta = pq.ParquetFile(ds.root / ds.data_files[1]).metadata  # episodes 2 and 3
    assert candidate_row_groups(meta, EpisodeRows(2, 32, 72)) == [0]
    assert candidate_row_groups(meta, EpisodeRows(3, 72, 82)) == [1]
    assert candidate_row_groups(meta, EpisodeRows(0, 0, 12)) == []


@pytest.mark.parametrize("where", ["local", "http", "s3"])
def test_reads_each_episode_from_every_store(where, open_root, av1_dataset):
    root, options = open_root("av1", where)
    store = open_store(root, **options)
    starts = av1_dataset.episode_from_index
    for ep, length in enumerate(av1_dataset.episode_lengths):
        path = av1_dataset.data_files[0 if ep < 2 else 1]
        table = read_episode_rows(store, path, ep, starts[ep], starts[ep] + length)
        _check_rows(table, ep, starts[ep], length)
    both = read_episodes_rows(
        store,
        av1_dataset.data_files[1],
        [EpisodeRows(2, 32, 72), EpisodeRows(3, 72, 82)],
        columns=["action"],
    )
    assert both[3].column_names == ["action", "index", "episode_index"]
    assert both[2].num_rows == 40


def _write_file(
    path,
    episodes: list[tuple[int, int, int]],
    *,
    row_group_size=None,
    write_statistics=True,
    payload_floats=0,
    shuffle=False,
) -> None:
    """A data file holding (episode, from_index, length) episodes, optionally in arbitrary row groups."""
    parts = []
    for ep, start, length in episodes:
        frames = np.arange(length)
        cols = {
            "observation.state": pa.FixedSizeListArray.from_arrays(
                pa.array(np.repeat(ep * 1000 + frames, 6).astype(np.float32)), 6
            ),
            "episode_index": pa.array(np.full(length, ep), pa.int64()),
            "index": pa.array(start + frames, pa.int64()),
        }
        if payload_floats:
            rng = np.random.default_rng(ep)
            cols["payload"] = pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(length * payload_floats)), payload_floats
            )
        parts.append(pa.table(cols))
    table = pa.concat_tables(parts)
    if shuffle:
        table = table.take(np.random.default_rng(0).permutation(table.num_rows))
    if row_group_size is None:
        with pq.ParquetWriter(path, table.schema, write_statistics=write_statistics) as writer:
            for part in parts:
                writer.write_table(part)
    else:
        pq.write_table(
            table, path, row_group_size=row_group_size, write_statistics=write_statistics
        )


def test_groups_without_statistics_stay_candidates(tmp_path):
    eps = [(0, 0, 15), (1, 15, 40), (2, 55, 22)]
    _write_file(tmp_path / "nostats.parquet", eps, write_statistics=False)
    meta = pq.ParquetFile(tmp_path / "nostats.parquet").metadata
    assert candidate_row_groups(meta, EpisodeRows(1, 15, 55)) == [0, 1, 2]
    store = open_store(str(tmp_path))
    for ep, start, length in eps:
        _check_rows(
            read_episode_rows(store, "nostats.parquet", ep, start, start + length),
            ep,
            start,
            length,
        )


@pytest.mark.parametrize("row_group_size", [7, 16, 1000])
def test_row_groups_not_aligned_with_episodes(tmp_path, row_group_size):
    eps = [(0, 0, 15), (1, 15, 40), (2, 55, 22), (3, 77, 9)]
    _write_file(tmp_path / "f.parquet", eps, row_group_size=row_group_size)
    store = open_store(str(tmp_path))
    meta = pq.ParquetFile(tmp_path / "f.parquet").metadata
    groups = candidate_row_groups(meta, EpisodeRows(2, 55, 77))
    expected = [
        g
        for g in range(meta.num_row_groups)
        if g * row_group_size < 77 and (g + 1) * row_group_size > 55
    ]
    assert groups == expected
    got = read_episodes_rows(store, "f.parquet", [EpisodeRows(ep, s, s + n) for ep, s, n in eps])
    for ep, start, length in eps:
        _check_rows(got[ep], ep, start, length)


def test_shuffled_rows_come_back_in_index_order(tmp_path):
    eps = [(0, 0, 15), (1, 15, 40)]
    _write_file(tmp_path / "s.parquet", eps, row_group_size=10, shuffle=True)
    table = read_episode_rows(open_store(str(tmp_path)), "s.parquet", 1, 15, 55)
    _check_rows(table, 1, 15, 40)


def test_missing_rows_are_an_error_naming_the_file(tmp_path):
    _write_file(tmp_path / "short.parquet", [(0, 0, 15), (1, 15, 30)])
    store = open_store(str(tmp_path))
    with pytest.raises(
        EpisodeFormatError,
        match=r"short\.parquet: episode 1 should hold rows with index 15\.\.54, found 30",
    ):
        read_episode_rows(store, "short.parquet", 1, 15, 55)
    with pytest.raises(EpisodeFormatError, match="no row group can hold episode"):
        read_episode_rows(store, "short.parquet", 5, 100, 110)
    with pytest.raises(EpisodeFormatError, match="data file not found"):
        read_episode_rows(store, "absent.parquet", 0, 0, 15)
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all" * 10)
    with pytest.raises(EpisodeFormatError, match="unreadable Parquet"):
        read_episode_rows(store, "junk.parquet", 0, 0, 15)


def test_remote_read_fetches_only_the_episode_bytes(tmp_path, nginx_server):
    """Over HTTP, reading one of 20 episodes moves a small fraction of the file."""
    eps = [(e, e * 200, 200) for e in range(20)]
    name = "episodes-parquet-pruning.parquet"
    _write_file(
        nginx_server.root / name, eps, payload_floats=32
    )  # ~50 KB per episode, incompressible
    size = (nginx_server.root / name).stat().st_size
    before = len(nginx_server.log_lines())
    table = read_episode_rows(open_store(nginx_server.url), name, 13, 2600, 2800)
    _check_rows(table, 13, 2600, 200)
    lines = [line for line in nginx_server.log_lines()[before:] if name in line]
    sent = sum(int(re.search(r'" \d{3} (\d+) ', line).group(1)) for line in lines)
    assert lines and all(" 206 " in line for line in lines if "GET" in line)
    assert sent < size / 8, (sent, size)


# ---- pruning every episode of a file at once ---------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from feedline.episodes.parquet import RowGroupIndex, read_file_episodes  # noqa: E402


def _brute_force(index: RowGroupIndex, ep: int, start: int, stop: int) -> list[int]:
    """The rule, one group at a time (what the footer walk did)."""
    out = []
    for g in range(len(index)):
        if index.num_rows[g] == 0:
            continue
        if index.has_index[g] and (index.index_max[g] < start or index.index_min[g] >= stop):
            continue
        if index.has_episode[g] and not index.episode_min[g] <= ep <= index.episode_max[g]:
            continue
        out.append(g)
    return out


@settings(max_examples=150, deadline=None)
@given(
    groups=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 60), st.integers(0, 20), st.booleans(),
                  st.integers(0, 9), st.integers(0, 3), st.booleans()),
        min_size=0, max_size=25,
    ),
    episodes=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 70), st.integers(1, 15)),
                      min_size=1, max_size=12),
    disjoint=st.booleans(),
)
def test_array_pruning_equals_the_group_by_group_rule(groups, episodes, disjoint):
    """Any layout: sorted and disjoint (the binary-search path), overlapping, shuffled, empty
    groups, groups without statistics."""
    if disjoint:  # consecutive non-overlapping index ranges
        at, made = 0, []
        for rows, _, span, stats, emin, ewidth, estats in groups:
            made.append((rows, at, at + span, stats, emin, emin + ewidth, estats))
            at += span + 1
    else:
        made = [(r, lo, lo + w, s, e, e + ew, es) for r, lo, w, s, e, ew, es in groups]
    arr = np.array([[r, lo, hi, s, e0, e1, es] for r, lo, hi, s, e0, e1, es in made] or
                   np.zeros((0, 7)), np.int64).reshape(-1, 7)
    index = RowGroupIndex(
        num_rows=arr[:, 0], nbytes=arr[:, 0] * 10 + 1, index_min=arr[:, 1], index_max=arr[:, 2],
        has_index=arr[:, 3].astype(bool), episode_min=arr[:, 4], episode_max=arr[:, 5],
        has_episode=arr[:, 6].astype(bool),
    )
    eps = np.array([e for e, _, _ in episodes])
    starts = np.array([s for _, s, _ in episodes])
    stops = starts + np.array([n for _, _, n in episodes])
    ptr, found = index.candidates(eps, starts, stops)
    per_bytes = index.candidate_bytes(ptr, found)
    for i, (e, s, t) in enumerate(zip(eps.tolist(), starts.tolist(), stops.tolist(), strict=True)):
        expected = _brute_force(index, e, s, t)
        assert found[ptr[i] : ptr[i + 1]].tolist() == expected
        assert per_bytes[i] == int(index.nbytes[expected].sum())


@pytest.mark.parametrize("row_group_size", [None, 7, 1000])
def test_a_file_of_episodes_reads_as_each_episode_does(tmp_path, row_group_size):
    eps = [(0, 0, 15), (1, 15, 40), (2, 55, 22), (3, 77, 9)]
    _write_file(tmp_path / "f.parquet", eps, row_group_size=row_group_size, shuffle=row_group_size == 7)
    store = open_store(str(tmp_path))
    wanted = [eps[2], eps[0], eps[3]]  # any order: the table follows it
    table = read_file_episodes(
        store, "f.parquet", np.array([e for e, _, _ in wanted]), np.array([s for _, s, _ in wanted]),
        np.array([s + n for _, s, n in wanted]),
    )
    one_by_one = [read_episode_rows(store, "f.parquet", e, s, s + n) for e, s, n in wanted]
    assert table.equals(pa.concat_tables(one_by_one))


def test_a_file_missing_an_episodes_rows_names_it(tmp_path):
    _write_file(tmp_path / "f.parquet", [(0, 0, 15), (1, 15, 40)])
    store = open_store(str(tmp_path))
    with pytest.raises(EpisodeFormatError, match=r"episode 1 should hold rows with index 15\.\.59, found 40"):
        read_file_episodes(store, "f.parquet", np.array([0, 1]), np.array([0, 15]), np.array([15, 60]))
