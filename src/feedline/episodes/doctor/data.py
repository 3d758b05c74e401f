"""The data Parquet checks: footers, every episode's rows, orphan rows, monotonic timestamps.

Per data file the doctor reads the footer (the readers' own ``read_footer``, so a file they
cannot open is reported with their message) and then two columns, ``index`` and ``timestamp``,
through the footer's column chunks only (about 12 bytes a row before compression). That read
cannot be avoided: whether timestamps increase within an episode and which rows no episode covers
are facts about the values, which footer statistics do not hold. The timestamps read here are
also the times the tolerance check asks the videos for, exactly as the readers do
(``from_timestamp + timestamp``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from feedline.episodes.doctor.findings import Findings
from feedline.episodes.doctor.reads import CountingStore
from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.format import EpisodeTable
from feedline.episodes.parquet import VERIFY_PAGES, named_parquet_errors, read_footer

#: The columns read from each data file (the only column reads the doctor makes).
DATA_COLUMNS = ("index", "timestamp")


@dataclass
class DataResult:
    """What the data checks learnt for the video checks.

    Args:
        timestamps: per episode whose rows were all read, its ``timestamp`` column in ``index``
            order (seconds, float64).
        rows: rows per data file that were read.
    """

    timestamps: dict[int, np.ndarray] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)


def check_data_file(
    store: CountingStore,
    path: str,
    size: int,
    table: EpisodeTable,
    findings: Findings,
    result: DataResult,
    *,
    orphans: bool,
) -> None:
    """Check one data file for the episodes of ``table`` that name it.

    ``orphans``: whether to count rows no episode covers (only meaningful for the whole dataset).
    """
    if size == 0:
        findings.error("files", path, None, "zero-byte data file: every episode in it is lost",
                       "restore the file from the dataset's source (re-upload or re-convert it)")
        return
    try:
        with store.kind("parquet_footers"):
            footer = read_footer(store, path)
    except EpisodeFormatError as exc:
        findings.error("files", path, None, f"the readers cannot open it: {exc}",
                       "the footer is damaged or the file truncated: restore it from the source")
        return
    names = [footer.schema.column(i).path for i in range(footer.num_columns)]
    missing = [c for c in DATA_COLUMNS if c not in names]
    if missing:
        findings.error("files", path, None, f"no column(s) {missing} (the readers need them)",
                       "rewrite the data file with LeRobot's columns (index, timestamp, ...)")
        return
    where = store.url(path)
    try:
        with store.kind("parquet_columns"), store.open(path) as handle, named_parquet_errors(where):
            pf = pq.ParquetFile(handle, metadata=footer, pre_buffer=True, **VERIFY_PAGES)
            columns = pf.read(columns=list(DATA_COLUMNS))
            index = np.asarray(columns.column("index").to_numpy(), dtype=np.int64)
            stamps = np.asarray(columns.column("timestamp").to_numpy(), dtype=np.float64)
    except EpisodeFormatError as exc:
        findings.error("files", path, None, f"the readers cannot read its rows: {exc}",
                       "restore the file from the source")
        return
    result.rows[path] = len(index)
    order = np.argsort(index, kind="stable")
    index, stamps = index[order], stamps[order]
    mine = np.flatnonzero(np.asarray(table.data_path, dtype=object) == path)
    covered = np.zeros(len(index), dtype=bool)
    for i in mine:
        episode = int(table.episode_index[i])
        lo, hi = int(table.dataset_from_index[i]), int(table.dataset_to_index[i])
        first, last = np.searchsorted(index, lo, "left"), np.searchsorted(index, hi, "left")
        covered[first:last] = True
        _check_episode_rows(path, episode, lo, hi, index[first:last], stamps[first:last], findings, result)
    if orphans and not covered.all():
        extra = int((~covered).sum())
        shown = index[~covered]
        findings.warning(
            "orphans", path, None,
            f"{extra} of {len(index)} rows ({100 * extra / len(index):.1f} %) belong to no episode "
            f"(index {int(shown[0])}..{int(shown[-1])}): no reader ever returns them",
            "if they are recorded episodes whose metadata was lost, restore their meta/episodes rows; "
            "otherwise rewrite the file without them (they only cost bytes)",
        )


def _check_episode_rows(
    path: str,
    episode: int,
    lo: int,
    hi: int,
    index: np.ndarray,
    stamps: np.ndarray,
    findings: Findings,
    result: DataResult,
) -> None:
    length = hi - lo
    distinct = len(np.unique(index))
    if distinct != length or len(index) != length:
        what = (f"holds {distinct} of its {length} rows (index {lo}..{hi - 1})" if distinct != length
                else f"holds {len(index) - length} duplicate rows in index {lo}..{hi - 1}")
        findings.error(
            "rows", path, episode, f"the data file {what}; the readers refuse the episode",
            "restore the episode's rows, or drop the episode from meta/episodes",
        )
        return
    steps = np.diff(stamps)
    bad = np.flatnonzero(~(steps > 0))
    if not np.isfinite(stamps).all():
        at = int(np.flatnonzero(~np.isfinite(stamps))[0])
        findings.error(
            "monotonic", path, episode, f"timestamp of frame {at} is {stamps[at]!r}",
            "rewrite the episode's timestamp column as frame_index / fps",
        )
        return
    if len(bad):
        at = int(bad[0]) + 1
        findings.error(
            "monotonic", path, episode,
            f"timestamps do not increase: frame {at} is at {stamps[at]:.6g} s, frame {at - 1} at "
            f"{stamps[at - 1]:.6g} s ({len(bad)} such step(s)); windows and video frames are looked "
            "up by timestamp, so these frames are read out of order or twice",
            "rewrite the episode's timestamp column as frame_index / fps",
        )
    result.timestamps[episode] = stamps


def check_orphan_file(store: CountingStore, path: str, size: int, findings: Findings) -> None:
    """A data file no episode names: how many rows it holds (from its footer)."""
    rows = "?"
    if size:
        try:
            with store.kind("parquet_footers"):
                rows = str(read_footer(store, path).num_rows)
        except EpisodeFormatError:
            rows = "unreadable"
    findings.warning(
        "orphans", path, None, f"no episode points at this data file ({rows} rows, {size} bytes)",
        "restore the meta/episodes rows of its episodes, or delete the file",
    )
