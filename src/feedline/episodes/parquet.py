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
from collections.abc import Iterator, Mapping, Sequence
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
    with open_data_file(store, path) as handle, named_parquet_errors(where):
        metadata = pq.ParquetFile(unbuffered(handle)).metadata
        metadata.schema.to_arrow_schema()  # the base64 ARROW:schema is decoded here
        return metadata


def open_data_file(store: Store, path: str) -> Any:
    """``store.open(path)``, a missing file named as a data file (an ``EpisodeFormatError``)."""
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


@dataclass(frozen=True)
class RowGroupIndex:
    """What row-group pruning needs of one data file's footer, as arrays (one entry per group).

    Built once per footer (a Python pass over its groups' two statistics), then every episode of
    the file is pruned at once with array operations: at 5,000 groups per file a per-episode
    walk over the footer cost ~13 ms an episode. Groups without usable statistics carry
    ``has_index`` / ``has_episode`` ``False`` and stay candidates.

    Args:
        num_rows: rows per group.
        nbytes: compressed bytes per group (all columns).
        index_min: smallest ``index`` per group (where ``has_index``).
        index_max: largest ``index`` per group.
        has_index: whether the group's ``index`` statistics are usable.
        episode_min: smallest ``episode_index`` per group (where ``has_episode``).
        episode_max: largest ``episode_index`` per group.
        has_episode: whether the group's ``episode_index`` statistics are usable.
    """

    num_rows: np.ndarray
    nbytes: np.ndarray
    index_min: np.ndarray
    index_max: np.ndarray
    has_index: np.ndarray
    episode_min: np.ndarray
    episode_max: np.ndarray
    has_episode: np.ndarray

    @classmethod
    def from_footer(
        cls, metadata: pq.FileMetaData, groups: Sequence[int] | None = None
    ) -> RowGroupIndex:
        """Every group's fields, asked of pyarrow one group at a time (``groups``: only these,
        in this order)."""
        names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        index_col = names.index("index") if "index" in names else None
        episode_col = names.index("episode_index") if "episode_index" in names else None
        chosen = range(metadata.num_row_groups) if groups is None else groups
        n = len(chosen)
        rows = np.zeros(n, np.int64)
        nbytes = np.zeros(n, np.int64)
        bounds = np.zeros((4, n), np.int64)
        usable = np.zeros((2, n), bool)
        for i, g in enumerate(chosen):
            rg = metadata.row_group(int(g))
            rows[i] = rg.num_rows
            nbytes[i] = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
            for k, column in enumerate((index_col, episode_col)):
                found = _min_max(rg, column)
                if found is not None:
                    bounds[2 * k, i], bounds[2 * k + 1, i] = found
                    usable[k, i] = True
        return cls(rows, nbytes, bounds[0], bounds[1], usable[0], bounds[2], bounds[3], usable[1])

    def __len__(self) -> int:
        return len(self.num_rows)

    def candidates(
        self, episode_index: np.ndarray, from_index: np.ndarray, to_index: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every episode's candidate groups at once, as ``(ptr, groups)``: episode ``i``'s are
        ``groups[ptr[i]:ptr[i + 1]]``, ascending.

        A group is ruled out when it is empty, when its ``index`` range misses
        ``[from_index, to_index)`` or when its ``episode_index`` range misses the episode.
        Groups sorted by ``index`` without overlap (how LeRobot writes) are found by binary
        search; any other layout by a blocked comparison of every episode with every group.
        """
        episode_index = np.asarray(episode_index, np.int64)
        from_index = np.asarray(from_index, np.int64)
        to_index = np.asarray(to_index, np.int64)
        n_eps = len(episode_index)
        live = self.num_rows > 0
        with_stats = np.flatnonzero(live & self.has_index)
        without = np.flatnonzero(live & ~self.has_index)
        order = with_stats[np.argsort(self.index_min[with_stats], kind="stable")]
        lo_sorted, hi_sorted = self.index_min[order], self.index_max[order]
        if len(order) and np.all(hi_sorted[:-1] < lo_sorted[1:]):  # disjoint, so both ascend
            first = np.searchsorted(hi_sorted, from_index, side="left")  # max >= from
            stop = np.searchsorted(lo_sorted, to_index, side="left")  # min < to
            counts = np.maximum(stop - first, 0)
            owner = np.repeat(np.arange(n_eps), counts)
            starts = np.repeat(first - (np.cumsum(counts) - counts), counts)
            groups = order[starts + np.arange(int(counts.sum()))] if len(owner) else owner
        else:
            owner_parts, group_parts = [], []
            block = max(1, 2_000_000 // max(1, len(order)))
            for s in range(0, n_eps, block):
                hit = (lo_sorted[None, :] < to_index[s : s + block, None]) & (
                    hi_sorted[None, :] >= from_index[s : s + block, None]
                )
                e, g = np.nonzero(hit)
                owner_parts.append(e + s)
                group_parts.append(order[g])
            owner = np.concatenate(owner_parts) if owner_parts else np.zeros(0, np.int64)
            groups = np.concatenate(group_parts) if group_parts else np.zeros(0, np.int64)
        if len(without):
            owner = np.concatenate([owner, np.repeat(np.arange(n_eps), len(without))])
            groups = np.concatenate([groups, np.tile(without, n_eps)])
        ep = episode_index[owner]
        keep = ~self.has_episode[groups] | (
            (self.episode_min[groups] <= ep) & (ep <= self.episode_max[groups])
        )
        owner, groups = owner[keep], groups[keep]
        order_ = np.lexsort((groups, owner))
        owner, groups = owner[order_], groups[order_]
        ptr = np.zeros(n_eps + 1, np.int64)
        np.cumsum(np.bincount(owner, minlength=n_eps), out=ptr[1:])
        return ptr, groups.astype(np.int64)

    def candidate_bytes(self, ptr: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """Per episode, the compressed bytes of its candidate groups (from :meth:`candidates`)."""
        per = np.zeros(len(ptr) - 1, np.int64)
        if len(groups):
            owner = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
            np.add.at(per, owner, self.nbytes[groups])
        return per


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


def candidate_row_groups(metadata: pq.FileMetaData | RowGroupIndex, want: EpisodeRows) -> list[int]:
    """Row groups whose statistics do not rule out the episode (no statistics → candidate)."""
    index = metadata if isinstance(metadata, RowGroupIndex) else RowGroupIndex.from_footer(metadata)
    ptr, groups = index.candidates(
        np.array([want.episode_index]), np.array([want.from_index]), np.array([want.to_index])
    )
    return groups[ptr[0] : ptr[1]].tolist()


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


def unbuffered(handle: Any) -> Any:
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
    row_groups: Mapping[int, Sequence[int]] | None = None,
) -> dict[int, pa.Table]:
    """Each wanted episode's rows from one data file, in ``index`` order, opening the file once.

    Only candidate row groups are read (pyarrow coalesces their column chunks into few range
    reads); ``columns`` limits the columns read (``index`` and ``episode_index`` are always read).
    ``metadata``: the file's footer when the caller already read it (it is not read again).
    ``row_groups``: per wanted episode its candidate groups when the caller pruned them already
    (:class:`RowGroupIndex`), so a fetch does no per-group work on a large footer.
    """
    where = store.url(data_path)
    with open_data_file(store, data_path) as handle, named_parquet_errors(where):
        pf = pq.ParquetFile(unbuffered(handle), metadata=metadata, pre_buffer=True, **VERIFY_PAGES)
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
        if row_groups is not None:
            groups_of = {w.episode_index: list(row_groups[w.episode_index]) for w in wanted}
        else:
            index = RowGroupIndex.from_footer(pf.metadata)
            ptr, found = index.candidates(
                np.array([w.episode_index for w in wanted], np.int64),
                np.array([w.from_index for w in wanted], np.int64),
                np.array([w.to_index for w in wanted], np.int64),
            )
            groups_of = {
                w.episode_index: found[ptr[i] : ptr[i + 1]].tolist() for i, w in enumerate(wanted)
            }
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


def read_file_episodes(
    store: Store,
    data_path: str,
    episode_index: np.ndarray,
    from_index: np.ndarray,
    to_index: np.ndarray,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The rows of many episodes of one data file as one table: the episodes in the given
    order, each one's rows in ``index`` order, checked to be exactly its ``index`` range.

    The same rows :func:`read_episodes_rows` gives per episode, found for all of them at once
    with a sort and binary searches, so reading a file of 5,000 episodes costs array work, not
    5,000 filters (the map-style reader reads every episode at its open).
    """
    where = store.url(data_path)
    episode_index = np.asarray(episode_index, np.int64)
    from_index = np.asarray(from_index, np.int64)
    to_index = np.asarray(to_index, np.int64)
    with open_data_file(store, data_path) as handle, named_parquet_errors(where):
        pf = pq.ParquetFile(unbuffered(handle), pre_buffer=True, **VERIFY_PAGES)
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
        ptr, groups = RowGroupIndex.from_footer(pf.metadata).candidates(
            episode_index, from_index, to_index
        )
        if not len(groups):
            raise EpisodeFormatError(
                f"{where}: no row group can hold episode(s) {episode_index[:5].tolist()}"
            )
        table = pf.read_row_groups(np.unique(groups).tolist(), columns=read_cols)
    with named_parquet_errors(where):
        index = np.asarray(table.column("index").to_numpy(), np.int64)
        episode = np.asarray(table.column("episode_index").to_numpy(), np.int64)
    # one sort key per row, (episode, index): an episode's rows are then one run, in order
    if len(index) and (index.min() < 0 or index.max() >= 2**32 or episode.min() < 0 or episode.max() >= 2**31):
        out = read_episodes_rows(
            store, data_path,
            [EpisodeRows(int(e), int(a), int(b)) for e, a, b in zip(episode_index, from_index, to_index, strict=True)],
            columns,
        )
        return pa.concat_tables([out[int(e)] for e in episode_index])
    key = (episode << 32) | index
    order = np.argsort(key, kind="stable")
    key = key[order]
    lo = np.searchsorted(key, (episode_index << 32) | from_index, side="left")
    hi = np.searchsorted(key, (episode_index << 32) | to_index, side="left")
    lengths = to_index - from_index
    found = hi - lo
    rows = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
    expected = np.repeat((episode_index << 32) | from_index, lengths) + (
        np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    )
    bad = found != lengths
    if not bad.any():
        rows_ok = key[np.minimum(rows, len(key) - 1)] == expected if len(key) else rows == -1
        if not rows_ok.all():
            owner = np.repeat(np.arange(len(lengths)), lengths)
            bad[owner[~rows_ok]] = True
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EpisodeFormatError(
            f"{where}: episode {int(episode_index[i])} should hold rows with index "
            f"{int(from_index[i])}..{int(to_index[i]) - 1}, found {int(found[i])} matching rows"
        )
    with named_parquet_errors(where):
        return table.take(pa.array(order[rows], pa.int64()))


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
