"""Property tests of the window and chunk arithmetic (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.text.windows import chunk_table, default_chunk_windows, positions, windows_in


def _datatrove_positions(doc_ends: list[int], start: int, length: int) -> list[int]:
    """datatrove's ``_get_pos_from_index_file``, restated with plain lists."""
    window_end = start + length - 1
    resets = [0] + [e - start for e in doc_ends if start < e <= window_end]
    out, last = [], 0
    for i in range(length):
        if i in resets:
            last = i
        out.append(i - last)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=12), st.integers(1, 300))
def test_windows_are_whole_and_the_tail_is_dropped(file_tokens, seq_len):
    for tokens in file_tokens:
        n = windows_in(tokens, seq_len)
        assert n * (seq_len + 1) <= tokens < (n + 1) * (seq_len + 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=1, max_size=15), st.integers(1, 64), st.integers(1, 40))
def test_chunks_tile_every_window_of_every_file_exactly_once(windows, chunk_windows, seq_len):
    table = chunk_table(windows, chunk_windows)
    assert table.windows == sum(windows)
    assert np.all(table.count >= 1) and np.all(table.count <= chunk_windows)
    covered = {f: [] for f in range(len(windows))}
    for c in range(len(table)):
        f = int(table.file[c])
        covered[f].extend(range(int(table.first[c]), int(table.first[c] + table.count[c])))
        start, end = table.token_range(c, seq_len)
        assert (start, end) == (int(table.first[c]) * (seq_len + 1), int(table.first[c] + table.count[c]) * (seq_len + 1))
        assert table.byte_range(c, seq_len, 2) == (start * 2, end * 2)
        for k in (0, int(table.count[c]) - 1):
            assert table.chunk_of(f, int(table.first[c]) + k) == (c, k)
    for f, n in enumerate(windows):
        assert covered[f] == list(range(n))  # in order, each once
    assert np.all(np.diff(table.file) >= 0)  # chunk ids run over the files in order


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=40), st.integers(1, 50), st.data())
def test_positions_are_datatroves(doc_lengths, span, data):
    ends = np.cumsum(doc_lengths)
    total = int(ends[-1])
    if total < span:
        return
    start = data.draw(st.integers(0, total - span))
    got = positions(ends.astype(np.uint64).astype(np.int64), start, span)
    assert got.tolist() == _datatrove_positions(ends.tolist(), start, span)
    assert got[0] == 0


@given(st.integers(1, 10_000), st.sampled_from([2, 4]))
def test_default_chunks_are_about_a_mebibyte(seq_len, token_bytes):
    n = default_chunk_windows(seq_len, token_bytes)
    window = (seq_len + 1) * token_bytes
    assert n >= 1 and (n * window <= 1 << 20 or n == 1) and (n + 1) * window > 1 << 20
