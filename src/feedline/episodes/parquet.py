"""Read one episode's rows from a data Parquet file, touching only the row groups that can hold it.

LeRobot writes one row group per episode, so the footer's ``index`` / ``episode_index`` min/max
statistics let a reader fetch just that episode's bytes from a remote file. A row group without
statistics stays a candidate (correctness first); the rows read are then filtered to exactly the
episode and checked to be its full, contiguous ``index`` range.

Pages are read with pyarrow's page checksum verification: a file written with page CRCs
(``write_page_checksum=True``) never yields rows from a page damaged after writing. Files
without them (LeRobot's writer does not ask for them) are read unchecked.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from feedline.episodes.errors import EpisodeFormatError, EpisodesError, ParquetDamaged
from feedline.io import NotFoundError, Store, StoreError

#: What pyarrow (and its thrift / base64 / decompression layers) raise on a damaged Parquet file:
#: ``ArrowInvalid`` (magic bytes, base64 schema), ``OSError`` (thrift footer, page headers),
#: ``ArrowNotImplementedError`` (an unknown compression codec), and plain ``ValueError`` /
#: ``IndexError`` / ``KeyError`` / ``TypeError`` / ``OverflowError`` from metadata that parses but
#: does not make sense.
_PARQUET_FAULTS = (
    pa.ArrowException,
    OSError,
    ValueError,
    IndexError,
    KeyError,
    TypeError,
    OverflowError,
    MemoryError,
)


#: Verify the CRC-32 of every page read that carries one (pyarrow >= 13; costs a CRC per page).
VERIFY_PAGES = {"page_checksum_verification": True}
#: How pyarrow says a page failed its CRC ("could not verify page integrity, CRC checksum
#: verification failed for page_ordinal 0").
_PAGE_CRC_FAILED = "CRC checksum verification failed"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("…" if len(text) > 300 else "") or type(exc).__name__


@contextmanager
def named_parquet_errors(where: str) -> Iterator[None]:
    """Turn any failure of pyarrow reading a damaged Parquet file into one
    :class:`EpisodeFormatError` line naming ``where`` (the file's URL); a page failing its CRC
    is a :class:`ParquetDamaged`.

    The store's own errors (``StoreError``: not found, access denied, transient) and feedline's
    errors pass through unchanged.
    """
    try:
        yield
    except (EpisodesError, StoreError):
        raise
    except _PARQUET_FAULTS as exc:
        if _PAGE_CRC_FAILED in str(exc):
            raise ParquetDamaged(
                f"{where}: damaged Parquet: a page fails its CRC-32 checksum ({_one_line(exc)}); "
                "the file changed after it was written: fetch it again"
            ) from None
        raise EpisodeFormatError(
            f"{where}: unreadable Parquet ({type(exc).__name__}: {_one_line(exc)})"
        ) from None


def read_footer(store: Store, path: str) -> pq.FileMetaData:
    """A Parquet file's footer (one small read); a damaged file is an :class:`EpisodeFormatError`
    naming it."""
    where = store.url(path)
    with _open(store, path) as handle, named_parquet_errors(where):
        metadata = pq.ParquetFile(_unbuffered(handle)).metadata
        metadata.schema.to_arrow_schema()  # the base64 ARROW:schema is decoded here
        return metadata


def _open(store: Store, path: str) -> Any:
    try:
        return store.open(path)
    except NotFoundError:
        raise EpisodeFormatError(f"{store.url(path)}: data file not found") from None


@dataclass(frozen=True)
class EpisodeRows:
    """Which rows to read: ``index`` in ``[from_index, to_index)`` of ``episode_index``.

    Args:
        episode_index: the episode.
        from_index: global ``index`` of its first row.
        to_index: global ``index`` one past its last row.
    """

    episode_index: int
    from_index: int
    to_index: int


def _min_max(rg: pq.RowGroupMetaData, column: int | None) -> tuple[int, int] | None:
    if column is None:
        return None
    stats = rg.column(column).statistics
    if stats is None or not stats.has_min_max:
        return None
    try:
        return int(stats.min), int(stats.max)
    except (TypeError, ValueError):
        return None


def candidate_row_groups(metadata: pq.FileMetaData, want: EpisodeRows) -> list[int]:
    """Row groups whose statistics do not rule out the episode (no statistics → candidate)."""
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    index_col = names.index("index") if "index" in names else None
    episode_col = names.index("episode_index") if "episode_index" in names else None
    out = []
    for g in range(metadata.num_row_groups):
        rg = metadata.row_group(g)
        if rg.num_rows == 0:
            continue
        index_range = _min_max(rg, index_col)
        if index_range is not None and (
            index_range[1] < want.from_index or index_range[0] >= want.to_index
        ):
            continue
        episode_range = _min_max(rg, episode_col)
        if episode_range is not None and not (
            episode_range[0] <= want.episode_index <= episode_range[1]
        ):
            continue
        out.append(g)
    return out


def _filter_episode(table: pa.Table, want: EpisodeRows, where: str) -> pa.Table:
    mask = pc.and_(
        pc.equal(table.column("episode_index"), want.episode_index),
        pc.and_(
            pc.greater_equal(table.column("index"), want.from_index),
            pc.less(table.column("index"), want.to_index),
        ),
    )
    rows = table.filter(mask).sort_by("index")
    index = rows.column("index").to_numpy()
    expected = np.arange(want.from_index, want.to_index)
    if len(index) != len(expected) or not np.array_equal(index, expected):
        raise EpisodeFormatError(
            f"{where}: episode {want.episode_index} should hold rows with index {want.from_index}..{want.to_index - 1}, "
            f"found {len(index)} matching rows"
        )
    return rows


def _unbuffered(handle: Any) -> Any:
    """The store's file object without its read-ahead buffer.

    pyarrow already reads exactly the footer and the coalesced column chunks it needs; a
    buffered wrapper would stretch each of those reads to its buffer size (e.g. 1 MiB over
    HTTP), fetching neighbouring episodes the pruning just ruled out.
    """
    return handle.raw if isinstance(handle, io.BufferedReader) else handle


def read_episodes_rows(
    store: Store,
    data_path: str,
    wanted: Sequence[EpisodeRows],
    columns: Sequence[str] | None = None,
    metadata: pq.FileMetaData | None = None,
) -> dict[int, pa.Table]:
    """Each wanted episode's rows from one data file, in ``index`` order, opening the file once.

    Only candidate row groups are read (pyarrow coalesces their column chunks into few range
    reads); ``columns`` limits the columns read (``index`` and ``episode_index`` are always read).
    ``metadata``: the file's footer when the caller already read it (it is not read again).
    """
    where = store.url(data_path)
    with _open(store, data_path) as handle, named_parquet_errors(where):
        pf = pq.ParquetFile(_unbuffered(handle), metadata=metadata, pre_buffer=True, **VERIFY_PAGES)
        names = pf.schema_arrow.names
        for required in ("index", "episode_index"):
            if required not in names:
                raise EpisodeFormatError(f"{where}: data file has no '{required}' column")
        read_cols = None
        if columns is not None:
            missing = [c for c in columns if c not in names]
            if missing:
                raise EpisodeFormatError(f"{where}: data file has no column(s) {missing}")
            read_cols = list(dict.fromkeys([*columns, "index", "episode_index"]))
        groups_of = {w.episode_index: candidate_row_groups(pf.metadata, w) for w in wanted}
        needed = sorted({g for groups in groups_of.values() for g in groups})
        if not needed:
            missing_eps = [w.episode_index for w in wanted]
            raise EpisodeFormatError(f"{where}: no row group can hold episode(s) {missing_eps[:5]}")
        combined = pf.read_row_groups(needed, columns=read_cols)
        sizes = [pf.metadata.row_group(g).num_rows for g in needed]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    slices = {g: combined.slice(int(starts[i]), sizes[i]) for i, g in enumerate(needed)}
    out = {}
    with named_parquet_errors(where):
        for w in wanted:
            parts = [slices[g] for g in groups_of[w.episode_index]]
            table = pa.concat_tables(parts) if parts else combined.slice(0, 0)
            out[w.episode_index] = _filter_episode(table, w, where)
    return out


def read_episode_rows(
    store: Store,
    data_path: str,
    episode_index: int,
    from_index: int,
    to_index: int,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """One episode's rows (see :func:`read_episodes_rows`)."""
    want = EpisodeRows(episode_index, from_index, to_index)
    return read_episodes_rows(store, data_path, [want], columns)[episode_index]
