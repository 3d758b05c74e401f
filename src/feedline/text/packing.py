"""Packing that keeps documents whole: rows of ``L + 1`` tokens that each start at a document.

datatrove's cut (:mod:`feedline.text.windows`) slices a file into windows across documents and
drops its tail. ``packing="best_fit"`` instead packs each file's documents into rows, nanochat's
way: a buffer of the next :data:`BEST_FIT_BUFFER` documents in file order, and for every row the
largest buffered document that fits the room left, again and again. When none fits, the row's
remainder is

* ``"pad"``: padded (with ``pad_id``; the loss mask drops it, it is its own segment), or
* ``"crop"``: filled with the head of the shortest buffered document, whose rest is dropped, so
  every row is full (the last, partial row of a file is dropped).

A document longer than a row is cropped to the row in either mode. The packing is a pure function
of the file's index, ``L`` and the mode, computed when the dataset opens: its rows are fixed units
like the cut's windows, so the plan, pools, exact coverage (every row, hence every document, once
per epoch), sample-exact and elastic resume are the floor's, unchanged. A row's documents are
spread through its part of the file; a chunk of rows is fetched as the few byte ranges its
documents cover (one pinned ranged read; pieces less than :data:`READ_GAP_BYTES` apart merged,
the gap read along).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

__all__ = ["BEST_FIT_BUFFER", "READ_GAP_BYTES", "PackedFile", "merged_ranges", "pack_file"]

#: Bytes of a gap between two pieces of a chunk read along rather than split into two ranges.
READ_GAP_BYTES = 64 << 10
#: Documents considered at once: nanochat's order of magnitude; more packs tighter but spreads
#: a chunk's reads over more of the file.
BEST_FIT_BUFFER = 1000


@dataclass(frozen=True)
class PackedFile:
    """A file's rows, as parallel int64 arrays.

    Args:
        row_first: ``rows + 1`` offsets into the pieces: row ``r`` holds pieces
            ``row_first[r]:row_first[r + 1]``.
        piece_start: each piece's first token in the file (a document's first token).
        piece_length: its tokens in the row (the whole document, or its cropped head).
        row_padded: padding tokens at the end of each row.
        row_dropped: tokens of the documents a row holds that it cut off (crops).
        dropped_tail: tokens of a file's last, partial row, dropped (``crop`` only).
    """

    row_first: np.ndarray
    piece_start: np.ndarray
    piece_length: np.ndarray
    row_padded: np.ndarray
    row_dropped: np.ndarray
    dropped_tail: int = 0

    @property
    def rows(self) -> int:
        return int(self.row_first.size) - 1


def pack_file(doc_ends: np.ndarray, span: int, remainder: str, buffer: int = BEST_FIT_BUFFER) -> PackedFile:
    """Pack the documents of one file (its index ``doc_ends``) into rows of ``span`` tokens
    (see the module docstring); empty documents are skipped."""
    ends = np.asarray(doc_ends, dtype=np.int64)
    starts = np.concatenate((np.zeros(1, np.int64), ends[:-1]))
    lengths = (ends - starts).tolist()
    starts_list = starts.tolist()
    waiting = [i for i, n in enumerate(lengths) if n > 0]
    pool: list[tuple[int, int]] = []  # (length, document), sorted
    taken = 0
    row_first, piece_start, piece_length, padded, dropped = [0], [], [], [], []
    tail = 0
    while True:
        room, cut = span, 0
        while room > 0:
            while len(pool) < buffer and taken < len(waiting):
                doc = waiting[taken]
                bisect.insort(pool, (lengths[doc], doc))
                taken += 1
            if not pool:
                break
            at = bisect.bisect_right(pool, (room, len(lengths))) - 1  # the largest that fits
            if at >= 0:
                length, doc = pool.pop(at)
                piece_start.append(starts_list[doc])
                piece_length.append(length)
                room -= length
            elif remainder == "crop" or room == span:  # nothing fits: crop the shortest into the room
                length, doc = pool.pop(0)
                piece_start.append(starts_list[doc])
                piece_length.append(room)
                cut += length - room
                room = 0
            else:
                break
        placed = len(piece_start) - row_first[-1]
        if placed == 0:
            break
        if room and remainder == "crop":  # the file's last row, partial: dropped
            tail = span - room + cut
            del piece_start[row_first[-1]:], piece_length[row_first[-1]:]
            break
        row_first.append(len(piece_start))
        padded.append(room)
        dropped.append(cut)
        if not pool and taken == len(waiting):
            break
    return PackedFile(np.asarray(row_first, np.int64), np.asarray(piece_start, np.int64),
                      np.asarray(piece_length, np.int64), np.asarray(padded, np.int64),
                      np.asarray(dropped, np.int64), int(tail))


def merged_ranges(starts: np.ndarray, lengths: np.ndarray, gap: int = 0) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The token ranges covering pieces (sorted; ranges at most ``gap`` tokens apart merged, the
    gap read along: one range costs a request, a few KiB more do not) and, for each piece, where
    its tokens begin in the ranges' concatenation."""
    order = np.argsort(starts, kind="stable")
    ranges: list[list[int]] = []
    offset_of = np.empty(starts.size, np.int64)
    total = 0  # tokens in the ranges before the last one
    for i in order.tolist():
        lo, hi = int(starts[i]), int(starts[i] + lengths[i])
        if ranges and lo - ranges[-1][1] <= gap:
            last = ranges[-1]
            last[1] = max(last[1], hi)
        else:
            if ranges:
                total += ranges[-1][1] - ranges[-1][0]
            ranges.append([lo, hi])
        offset_of[i] = total + lo - ranges[-1][0]
    return [(a, b) for a, b in ranges], offset_of
