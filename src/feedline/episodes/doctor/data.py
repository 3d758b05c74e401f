"""The data Parquet checks: footers, every episode's rows, orphan rows, monotonic timestamps.

Per data file the doctor reads the footer (the readers' own ``read_footer``, so a file they
cannot open is reported with their message) and screens every episode with its row-group
statistics (rows, ``index`` and ``timestamp`` ranges). Whether timestamps increase and whether a
duplicate stands in for a missing row are facts about the values, which statistics do not hold,
so the ``index`` and ``timestamp`` columns are read, through the footer's column chunks only, for
a sample of episodes per file and for every episode the statistics do not clear (``--full``: for
all). The timestamps read are also the times the tolerance check asks the videos for, exactly as
the readers do (``from_timestamp + timestamp``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from feedline.episodes.doctor.findings import Findings
from feedline.episodes.doctor.reads import CountingStore
from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.format import EpisodeTable
from feedline.episodes.parquet import VERIFY_PAGES, RowGroupIndex, named_parquet_errors, read_footer

#: The columns read from each data file (the only column reads the doctor makes).
DATA_COLUMNS = ("index", "timestamp")
#: Episodes per data file whose columns the default (sampling) mode reads, beside the ones the
#: row-group statistics do not clear; a file with no more episodes is read whole.
SAMPLE_EPISODES = 32


@dataclass
class DataResult:
    """What the data checks learnt for the video checks.

    Args:
        timestamps: per episode whose rows were all read, its ``timestamp`` column in ``index``
            order (seconds, float64).
        rows: rows per data file (from its footer).
        episodes_read: episodes whose ``index`` and ``timestamp`` values were read.
        episodes_total: episodes of the data files checked.
    """

    timestamps: dict[int, np.ndarray] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    episodes_read: int = 0
    episodes_total: int = 0


def check_data_file(
    store: CountingStore,
    path: str,
    size: int,
    table: EpisodeTable,
    findings: Findings,
    result: DataResult,
    *,
    orphans: bool,
    fps: float,
    sample: int | None = SAMPLE_EPISODES,
) -> None:
    """Check one data file for the episodes of ``table`` that name it.

    ``orphans``: whether to count rows no episode covers (only meaningful for the whole dataset).
    ``sample``: read the columns of at most this many episodes per file (evenly spaced) plus
    every episode whose row-group statistics do not prove its rows; ``None`` reads them all.
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
    mine = table.positions_by_data_file().get(path, np.zeros(0, np.int64))
    plan = plan_reads(footer, names.index("timestamp"), table, mine, fps, sample)
    where = store.url(path)
    try:
        with store.kind("parquet_columns"), store.open(path) as handle, named_parquet_errors(where):
            pf = pq.ParquetFile(handle, metadata=footer, pre_buffer=True, **VERIFY_PAGES)
            columns = pf.read_row_groups(plan.groups.tolist(), columns=list(DATA_COLUMNS))
            index = np.asarray(columns.column("index").to_numpy(), dtype=np.int64)
            stamps = np.asarray(columns.column("timestamp").to_numpy(), dtype=np.float64)
    except EpisodeFormatError as exc:
        findings.error("files", path, None, f"the readers cannot read its rows: {exc}",
                       "restore the file from the source")
        return
    result.rows[path] = footer.num_rows
    result.episodes_read += len(plan.checked)
    result.episodes_total += len(mine)
    order = np.argsort(index, kind="stable")
    index, stamps = index[order], stamps[order]
    covered = np.zeros(len(index), dtype=bool)
    for i in plan.checked.tolist():
        episode = int(table.episode_index[i])
        lo, hi = int(table.dataset_from_index[i]), int(table.dataset_to_index[i])
        first, last = np.searchsorted(index, lo, "left"), np.searchsorted(index, hi, "left")
        covered[first:last] = True
        _check_episode_rows(path, episode, lo, hi, index[first:last], stamps[first:last], findings, result)
    extra = int((~covered).sum()) + plan.orphan_rows
    if orphans and extra:
        shown = index[~covered]
        ends = [int(shown[0]), int(shown[-1])] if len(shown) else []
        ends += [plan.orphan_min, plan.orphan_max] if plan.orphan_rows else []
        low, high = min(ends), max(ends)
        total = footer.num_rows
        findings.warning(
            "orphans", path, None,
            f"{extra} of {total} rows ({100 * extra / total:.1f} %) belong to no episode "
            f"(index {low}..{high}): no reader ever returns them",
            "if they are recorded episodes whose metadata was lost, restore their meta/episodes rows; "
            "otherwise rewrite the file without them (they only cost bytes)",
        )


@dataclass
class ReadPlan:
    """Which row groups of a data file to read and which episodes to check with their values.

    Args:
        groups: row groups whose ``index`` and ``timestamp`` columns are read, ascending.
        checked: table positions of the episodes checked with values (every group they may use
            is read; every episode that may use a read group is checked).
        orphan_rows: rows of unread groups that no episode's ``index`` range can reach (from
            their statistics).
        orphan_min: smallest ``index`` of those rows.
        orphan_max: largest.
    """

    groups: np.ndarray
    checked: np.ndarray
    orphan_rows: int = 0
    orphan_min: int = 0
    orphan_max: int = 0


def plan_reads(
    footer: pq.FileMetaData, ts_column: int, table: EpisodeTable, mine: np.ndarray, fps: float,
    sample: int | None,
) -> ReadPlan:
    """Screen every episode of a file with the footer's row-group statistics, then choose what
    to read: a sample of episodes, every episode the statistics do not clear, and what those
    reads touch. ``sample=None``: every group and every episode (the exhaustive check).

    An episode is cleared when its groups lie wholly inside its ``index`` range, belong to no
    other episode, hold ``length`` rows from its first ``index`` to its last, and their
    ``timestamp`` statistics are finite and span ``(length - 1) / fps`` to within half a frame.
    """
    stats = RowGroupIndex.from_footer(footer)
    n_groups = len(stats)
    if sample is None or len(mine) <= sample:
        return ReadPlan(np.arange(n_groups, dtype=np.int64), np.asarray(mine, np.int64))
    by_index = dataclasses.replace(stats, has_episode=np.zeros(n_groups, bool))  # coverage is by index
    lo, hi = table.dataset_from_index[mine], table.dataset_to_index[mine]
    length = table.length[mine]
    ptr, groups = by_index.candidates(table.episode_index[mine], lo, hi)
    owner = np.repeat(np.arange(len(mine)), np.diff(ptr))
    users = np.bincount(groups, minlength=n_groups)
    ts_min, ts_max, ts_ok = _timestamp_stats(footer, ts_column)
    inside = (stats.has_index[groups] & (stats.index_min[groups] >= lo[owner])
              & (stats.index_max[groups] < hi[owner]) & (users[groups] == 1) & ts_ok[groups])
    n = len(mine)
    fails = np.bincount(owner, weights=~inside, minlength=n) > 0
    rows = np.bincount(owner, weights=stats.num_rows[groups], minlength=n)
    big = np.full(n, np.iinfo(np.int64).max)
    first, last = big.copy(), np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(first, owner, stats.index_min[groups])
    np.maximum.at(last, owner, stats.index_max[groups])
    t0, t1 = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(t0, owner, ts_min[groups])
    np.maximum.at(t1, owner, ts_max[groups])
    with np.errstate(invalid="ignore"):
        span_ok = np.abs((t1 - t0) - (length - 1) / fps) < 0.5 / fps
    clear = (~fails & (rows == length) & (first == lo) & (last == hi - 1)
             & np.isfinite(t0) & np.isfinite(t1) & span_ok & (np.diff(ptr) > 0))
    pick = np.zeros(n, bool)
    pick[np.unique(np.linspace(0, n - 1, sample).round().astype(np.int64))] = True
    pick |= ~clear
    while True:  # every group of a checked episode is read, every episode of a read group checked
        read = np.zeros(n_groups, bool)
        read[groups[pick[owner]]] = True
        more = pick.copy()
        more[owner[read[groups]]] = True
        if (more == pick).all():
            break
        pick = more
    live = (stats.num_rows > 0) & stats.has_index & (users == 0)
    orphan = live & ~read
    plan = ReadPlan(np.flatnonzero(read), np.asarray(mine, np.int64)[pick])
    if orphan.any():
        plan.orphan_rows = int(stats.num_rows[orphan].sum())
        plan.orphan_min = int(stats.index_min[orphan].min())
        plan.orphan_max = int(stats.index_max[orphan].max())
    return plan


def _timestamp_stats(footer: pq.FileMetaData, column: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row group, the ``timestamp`` column's min and max and whether they are usable."""
    n = footer.num_row_groups
    lo, hi, ok = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, bool)
    for g in range(n):
        st = footer.row_group(g).column(column).statistics
        if st is not None and st.has_min_max:
            try:
                lo[g], hi[g] = float(st.min), float(st.max)
            except (TypeError, ValueError):
                continue
            ok[g] = bool(np.isfinite(lo[g]) and np.isfinite(hi[g]))
    return lo, hi, ok


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
            "monotonic", path, episode, f"timestamp of frame {at} is {float(stamps[at])!r}",
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
