"""Window and chunk arithmetic: which tokens a window holds, which windows a chunk holds.

A file of ``T`` tokens holds ``T // (L + 1)`` windows: window ``i`` is tokens
``[i * (L + 1), (i + 1) * (L + 1))``, across document boundaries and without padding, and the
tail that does not fill a window is dropped, exactly as datatrove's ``DatatroveFileDataset``
cuts a file for ``seq_len = L``.

A *chunk* is a run of up to ``chunk_windows`` consecutive windows of one file: one contiguous
byte range, fetched with one ranged read. Chunks are what the streaming floor deals, pools and
resumes in place of episodes: the chunk id is the episode index, its window count the episode
length, its byte range the payload. Chunk ids run over the files in order, every file's chunks
back to back, the last chunk of a file holding what is left of it.

Positions (``return_positions``) are datatrove's: they count from 0 at the window's first token
and restart at every token that follows a document end inside the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ChunkTable", "chunk_table", "default_chunk_windows", "positions", "windows_in"]

#: Bytes a chunk aims at when ``chunk_windows`` is not given: one ranged read of about 1 MiB.
CHUNK_BYTES = 1 << 20


def windows_in(tokens: int, seq_len: int) -> int:
    """Whole windows of ``seq_len + 1`` tokens in a file of ``tokens`` tokens."""
    return int(tokens) // (int(seq_len) + 1)


def default_chunk_windows(seq_len: int, token_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Windows per chunk so that a chunk is about ``chunk_bytes`` (at least one window)."""
    return max(1, int(chunk_bytes) // ((int(seq_len) + 1) * int(token_bytes)))


@dataclass(frozen=True)
class ChunkTable:
    """Every chunk of a list of files, as parallel int64 arrays indexed by chunk id.

    Args:
        file: the file each chunk belongs to.
        first: its first window (in the file).
        count: its windows.
    """

    file: np.ndarray
    first: np.ndarray
    count: np.ndarray

    def __len__(self) -> int:
        return int(self.count.size)

    @property
    def windows(self) -> int:
        return int(self.count.sum())

    def token_range(self, chunk: int, seq_len: int) -> tuple[int, int]:
        """Token positions ``[start, end)`` of ``chunk`` in its file."""
        span = int(seq_len) + 1
        first = int(self.first[chunk])
        return first * span, (first + int(self.count[chunk])) * span

    def byte_range(self, chunk: int, seq_len: int, token_bytes: int) -> tuple[int, int]:
        start, end = self.token_range(chunk, seq_len)
        return start * token_bytes, end * token_bytes

    def chunk_of(self, file: int, window: int) -> tuple[int, int]:
        """(chunk id, window within the chunk) of ``window`` of ``file``."""
        starts = np.flatnonzero(self.file == file)
        at = int(np.searchsorted(self.first[starts], window, side="right")) - 1
        chunk = int(starts[at])
        return chunk, int(window) - int(self.first[chunk])


def chunk_table(windows_per_file: Sequence[int] | np.ndarray, chunk_windows: int) -> ChunkTable:
    """The chunks of files holding ``windows_per_file`` windows (files with none have none)."""
    if int(chunk_windows) < 1:
        raise ValueError(f"chunk_windows must be >= 1, not {chunk_windows}")
    windows = np.asarray(windows_per_file, dtype=np.int64).reshape(-1)
    per_file = -(-windows // int(chunk_windows))  # ceil
    file = np.repeat(np.arange(windows.size, dtype=np.int64), per_file)
    starts = np.cumsum(per_file) - per_file
    k = np.arange(file.size, dtype=np.int64) - starts[file]  # chunk number within its file
    first = k * int(chunk_windows)
    count = np.minimum(int(chunk_windows), windows[file] - first)
    return ChunkTable(file, first, count)


def positions(doc_ends: np.ndarray, start: int, length: int) -> np.ndarray:
    """datatrove's positions of the ``length`` tokens from token ``start``: 0 at the first,
    restarting after every document end ``e`` with ``start < e < start + length``."""
    lo = int(np.searchsorted(doc_ends, start, side="right"))
    hi = int(np.searchsorted(doc_ends, start + length - 1, side="right"))
    base = np.zeros(length, dtype=np.int64)
    resets = doc_ends[lo:hi].astype(np.int64) - start
    base[resets] = resets
    np.maximum.accumulate(base, out=base)
    return np.arange(length, dtype=np.int64) - base
