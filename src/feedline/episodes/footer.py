"""A data file's Parquet footer kept as bytes, cut down to one episode's row groups at fetch.

Why: LeRobot writes one row group per episode, so a data file of 5,000 episodes has a ~4 MB
footer, and pyarrow holds ~28 MB per parsed one. At 100,000 episodes (20 files) every process
that kept every footer parsed held half a gigabyte; at 1,000,000 it would not fit. A
:class:`DataFooter` keeps the footer's Thrift bytes plus, per row group, where its struct lies
in them (found once per footer), and :meth:`DataFooter.subset` writes a footer of just the
groups a fetch reads (~800 bytes per group), which pyarrow parses in microseconds. The column
chunk offsets inside a row group are absolute file offsets, so the cut footer reads the same
pages from the same file.

The row-group structs are located by a scan of the Thrift compact encoding (the Parquet
format's): each group's end is found from its own ``total_byte_size`` and ``num_rows`` (known
from pyarrow's parse) and checked to be where the next group starts; a footer that does not
follow the pattern is walked field by field. Every cut footer is checked against the group
statistics before a fetch uses it.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.footerscan import scan_index
from feedline.episodes.parquet import (
    RowGroupIndex,
    named_parquet_errors,
    open_data_file,
    unbuffered,
)
from feedline.io import Store

__all__ = ["DataFooter", "read_data_footer"]

#: Bytes read from a data file's end at first: the footer of a file of a few hundred groups,
#: in one request; a longer footer costs a second read of exactly its length.
TAIL_BYTES = 64 * 1024
_MAGIC = b"PAR1"

# Thrift compact protocol type codes (the low nibble of a field header, or a list's element type).
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = 1, 2, 3, 4, 5, 6, 7, 8
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12


class _Malformed(Exception):
    """The bytes do not follow the Thrift compact encoding where the scan expected them to."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise _Malformed("varint runs past the footer")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 70:
            raise _Malformed("varint too long")


def _zigzag(n: int) -> bytes:
    """``n`` as a Thrift compact i64 (zigzag, then LEB128)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _skip(buf: bytes, pos: int, kind: int, depth: int = 0) -> int:
    """The position after one value of type ``kind`` starting at ``pos``."""
    if depth > 32:
        raise _Malformed("structs nested too deep")
    if kind in (_TRUE, _FALSE):  # a list element (a field's bool lives in its header)
        return pos + 1
    if kind == _BYTE:
        return pos + 1
    if kind in (_I16, _I32, _I64):
        return _varint(buf, pos)[1]
    if kind == _DOUBLE:
        return pos + 8
    if kind == _BINARY:
        n, pos = _varint(buf, pos)
        return pos + n
    if kind in (_LIST, _SET):
        if pos >= len(buf):
            raise _Malformed("list header past the footer")
        head = buf[pos]
        pos += 1
        size, elem = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        if elem in (_TRUE, _FALSE, _BYTE):
            return pos + size
        for _ in range(size):
            pos = _skip(buf, pos, elem, depth + 1)
        return pos
    if kind == _MAP:
        size, pos = _varint(buf, pos)
        if size == 0:
            return pos
        types = buf[pos]
        pos += 1
        for _ in range(size):
            pos = _skip(buf, pos, types >> 4, depth + 1)
            pos = _skip(buf, pos, types & 0x0F, depth + 1)
        return pos
    if kind == _STRUCT:
        return _struct_end(buf, pos, depth + 1)
    raise _Malformed(f"unknown Thrift type {kind}")


def _fields(buf: bytes, pos: int) -> tuple[int, int, int]:
    """The next field header at ``pos``: ``(field id delta or id, type, position after it)``;
    type 0 is the struct's end."""
    if pos >= len(buf):
        raise _Malformed("struct runs past the footer")
    head = buf[pos]
    pos += 1
    if head == 0:
        return 0, 0, pos
    delta, kind = head >> 4, head & 0x0F
    if delta == 0:
        raw, pos = _varint(buf, pos)
        return -((raw >> 1) ^ -(raw & 1)) - 1, kind, pos  # an absolute id, returned negated - 1
    return delta, kind, pos


def _struct_end(buf: bytes, pos: int, depth: int = 0) -> int:
    while True:
        _, kind, pos = _fields(buf, pos)
        if kind == 0:
            return pos
        if kind not in (_TRUE, _FALSE):
            pos = _skip(buf, pos, kind, depth)


@dataclass(frozen=True)
class _Layout:
    """Where the parts of a footer's top-level struct lie (byte offsets into its Thrift bytes)."""

    num_rows_at: tuple[int, int]  # the value of field 3 (num_rows)
    list_at: tuple[int, int]  # field 4's list header (after its field header)
    list_end: int
    group_start: np.ndarray
    group_end: np.ndarray
    num_rows: np.ndarray  # per group, as pyarrow parsed it


def _top_level(buf: bytes) -> tuple[tuple[int, int], int, int]:
    """``(num_rows value span, row_groups list header start, the list's element count)``,
    walking FileMetaData's fields up to its row groups."""
    pos, field_id = 0, 0
    num_rows_at = None
    while True:
        delta, kind, pos = _fields(buf, pos)
        if kind == 0:
            raise _Malformed("no row_groups field")
        field_id = -delta - 1 if delta < 0 else field_id + delta
        if field_id == 3 and kind == _I64:
            start = pos
            pos = _skip(buf, pos, kind)
            num_rows_at = (start, pos)
        elif field_id == 4 and kind == _LIST:
            if num_rows_at is None:
                raise _Malformed("num_rows does not come before row_groups")
            head = buf[pos]
            if head & 0x0F != _STRUCT:
                raise _Malformed("row_groups is not a list of structs")
            size = head >> 4
            if size == 15:
                size = _varint(buf, pos + 1)[0]
            return num_rows_at, pos, size
        elif kind not in (_TRUE, _FALSE):
            pos = _skip(buf, pos, kind)


def _list_first(buf: bytes, list_at: int) -> int:
    head = buf[list_at]
    return _varint(buf, list_at + 1)[1] if head >> 4 == 15 else list_at + 1


def _scan_groups(buf: bytes, list_at: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row group's struct, walked field by field (the general path)."""
    starts = np.zeros(count, np.int64)
    ends = np.zeros(count, np.int64)
    pos = _list_first(buf, list_at)
    for g in range(count):
        starts[g] = pos
        pos = _struct_end(buf, pos)
        ends[g] = pos
    return starts, ends


#: A row group's fields after ``num_rows`` as pyarrow writes them (file_offset,
#: total_compressed_size, ordinal: i64/i16 fields with a short delta), then its stop byte. It
#: reads them exactly as :func:`_struct_end` does, in C; any other field falls back to the walk.
_TAIL = re.compile(rb"(?:[\x14\x16\x24\x26][\x80-\xff]{0,9}[\x00-\x7f]){0,4}\x00")


def _find_groups(
    buf: bytes, list_at: int, total_byte_size: np.ndarray, num_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Every row group's struct found by its ``total_byte_size`` / ``num_rows`` fields (the fast
    path; ``None`` when the footer does not look as expected, e.g. another writer's order)."""
    count = len(num_rows)
    starts = np.zeros(count, np.int64)
    ends = np.zeros(count, np.int64)
    pos = _list_first(buf, list_at)
    sizes, rows = total_byte_size.tolist(), num_rows.tolist()
    find = buf.find
    for g in range(count):
        starts[g] = pos
        if buf[pos : pos + 1] != b"\x19" and buf[pos : pos + 1] != b"\x1c":  # field 1: a list
            return None
        marker = b"\x16" + _zigzag(sizes[g]) + b"\x16" + _zigzag(rows[g])
        at = find(marker, pos)
        if at < 0:
            return None
        tail = _TAIL.match(buf, at + len(marker))  # the group's remaining fields
        if tail is not None:
            pos = tail.end()
        else:
            try:
                pos = _struct_end(buf, at + len(marker))
            except _Malformed:
                return None
        ends[g] = pos
    return starts, ends


def _locate(buf: bytes, metadata: pq.FileMetaData) -> _Layout:
    num_rows_at, list_at, count = _top_level(buf)
    if count != metadata.num_row_groups:
        raise _Malformed(f"{count} row groups in the bytes, {metadata.num_row_groups} parsed")
    n = metadata.num_row_groups
    total = np.fromiter((metadata.row_group(g).total_byte_size for g in range(n)), np.int64, n)
    rows = np.fromiter((metadata.row_group(g).num_rows for g in range(n)), np.int64, n)
    found = _find_groups(buf, list_at, total, rows)
    if found is not None and n:
        # The fast path must agree with a full walk on a sample of groups and end the list.
        probe = sorted({0, n - 1, *range(0, n, max(1, n // 16))})
        if any(_struct_end(buf, int(found[0][g])) != int(found[1][g]) for g in probe):
            found = None
    starts, ends = found if found is not None else _scan_groups(buf, list_at, n)
    list_end = int(ends[-1]) if n else _list_first(buf, list_at)
    _struct_end(buf, list_end)  # the rest of FileMetaData must parse too
    return _Layout(num_rows_at, (list_at, _list_first(buf, list_at)), list_end, starts, ends, rows)


def _parse_thrift(raw: bytes) -> pq.FileMetaData:
    """pyarrow's parse of footer bytes (wrapped as the tail of a Parquet file)."""
    framed = _MAGIC + raw + len(raw).to_bytes(4, "little") + _MAGIC
    return pq.read_metadata(pa.BufferReader(framed))


@dataclass(frozen=True)
class DataFooter:
    """One data file's footer: its Thrift bytes, where each row group lies in them, and the
    pruning arrays (:class:`~feedline.episodes.parquet.RowGroupIndex`).

    Args:
        raw: the footer's Thrift bytes (without the length and magic that follow it in the file).
        num_rows_at: ``(start, end)`` of the file's ``num_rows`` value in ``raw``.
        list_at: ``(header start, first element)`` of the row-group list in ``raw``.
        list_end: where the row-group list ends in ``raw``.
        group_start: per row group, where its struct starts in ``raw``.
        group_end: per row group, where it ends.
        index: the groups' rows, bytes and ``index`` / ``episode_index`` statistics.
        page_offset: per row group, its first column chunk's data page offset (checks a cut).
    """

    raw: Any  # bytes, or a read-only memory map of them
    num_rows_at: tuple[int, int]
    list_at: tuple[int, int]
    list_end: int
    group_start: np.ndarray
    group_end: np.ndarray
    index: RowGroupIndex
    page_offset: np.ndarray

    @classmethod
    def parse(cls, raw: bytes, where: str) -> DataFooter:
        """Parse and locate a footer; damaged bytes are an
        :class:`~feedline.episodes.errors.EpisodeFormatError` naming ``where``."""
        raw = bytes(raw)
        with named_parquet_errors(where):
            metadata = _parse_thrift(raw)
            metadata.schema.to_arrow_schema()  # the base64 ARROW:schema is decoded here
            n = metadata.num_row_groups
            pages = np.fromiter(
                (
                    metadata.row_group(g).column(0).data_page_offset
                    if metadata.row_group(g).num_columns else -1
                    for g in range(n)
                ),
                np.int64, n,
            )
        try:
            layout = _locate(raw, metadata)
        except (_Malformed, IndexError, RecursionError) as exc:
            raise EpisodeFormatError(f"{where}: unreadable Parquet footer ({exc})") from None
        with named_parquet_errors(where):
            index = scan_index(raw, metadata, layout.group_start, layout.group_end, layout.num_rows)
            if index is None:  # not the layout the scan knows: ask pyarrow group by group
                index = RowGroupIndex.from_footer(metadata)
        return cls(
            raw, layout.num_rows_at, layout.list_at, layout.list_end, layout.group_start,
            layout.group_end, index, pages,
        )

    @property
    def num_row_groups(self) -> int:
        return len(self.group_start)

    def subset_bytes(self, groups: list[int]) -> bytes:
        """The Thrift bytes of a footer holding only ``groups`` (in the given order), the file's
        ``num_rows`` set to theirs."""
        raw = self.raw
        rows = int(self.index.num_rows[groups].sum()) if groups else 0
        (rows_start, rows_end), (list_head, _) = self.num_rows_at, self.list_at
        k = len(groups)
        header = bytes([(k << 4) | _STRUCT]) if k < 15 else bytes([0xF0 | _STRUCT]) + _uvarint(k)
        starts, ends = self.group_start, self.group_end
        return b"".join([
            bytes(raw[:rows_start]), _zigzag(rows), bytes(raw[rows_end:list_head]), header,
            *(bytes(raw[int(starts[g]) : int(ends[g])]) for g in groups),
            bytes(raw[self.list_end :]),
        ])

    def subset(self, groups: list[int], where: str = "data file") -> pq.FileMetaData:
        """pyarrow's footer of only ``groups`` (group ``j`` of it is ``groups[j]`` of the file),
        checked against the file's own statistics for those groups."""
        groups = [int(g) for g in groups]
        with named_parquet_errors(where):
            metadata = _parse_thrift(self.subset_bytes(groups))
        ok = metadata.num_row_groups == len(groups)
        for j, g in enumerate(groups if ok else ()):
            rg = metadata.row_group(j)
            first = rg.column(0).data_page_offset if rg.num_columns else -1
            if rg.num_rows != int(self.index.num_rows[g]) or first != int(self.page_offset[g]):
                ok = False
                break
        if not ok:
            raise EpisodeFormatError(
                f"{where}: the footer's row groups {groups[:5]} could not be cut out of it; "
                "the file's footer does not follow the Parquet encoding"
            )
        return metadata

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["raw"] = bytes(self.raw)  # a memory map does not pickle; its bytes do
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_footer_bytes(store: Store, path: str) -> bytes:
    """A data file's footer bytes: one read of its last :data:`TAIL_BYTES`, a second only when
    the footer is longer; a file that does not end like Parquet is named."""
    where = store.url(path)
    with open_data_file(store, path) as handle:
        raw = unbuffered(handle)
        size = raw.seek(0, io.SEEK_END)
        if size < 12:
            raise EpisodeFormatError(f"{where}: unreadable Parquet (only {size} bytes)")
        start = max(0, size - TAIL_BYTES)
        raw.seek(start)
        tail = _read_exactly(raw, size - start, where)
        if tail[-4:] != _MAGIC:
            kind = "an encrypted footer (not supported)" if tail[-4:] == b"PARE" else "no Parquet magic at its end"
            raise EpisodeFormatError(f"{where}: unreadable Parquet ({kind})")
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 12 > size:
            raise EpisodeFormatError(
                f"{where}: unreadable Parquet (footer of {length} bytes in a file of {size})"
            )
        if length + 8 <= len(tail):
            return tail[len(tail) - 8 - length : len(tail) - 8]
        raw.seek(size - 8 - length)
        return _read_exactly(raw, length, where)


def _read_exactly(handle: Any, n: int, where: str) -> bytes:
    parts, left = [], n
    while left > 0:
        chunk = handle.read(left)
        if not chunk:
            raise EpisodeFormatError(f"{where}: unreadable Parquet (the file ended early)")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_data_footer(store: Store, path: str) -> DataFooter:
    """A data file's :class:`DataFooter` (one small read, two for a long footer)."""
    return DataFooter.parse(read_footer_bytes(store, path), store.url(path))
