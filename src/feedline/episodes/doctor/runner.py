"""One ``feedline doctor`` run: metadata → files → data Parquet → videos, into a :class:`Report`.

The run reads through a :class:`~feedline.episodes.doctor.reads.CountingStore`, so the report
says what each kind of read cost. Videos are indexed in parallel (each is a few range reads, so a
remote dataset is bound by latency, not bandwidth); everything else is sequential and cheap.
Problems in the data become findings and never stop the run; only a root the doctor cannot read
as a LeRobot v3 dataset at all (no ``meta/info.json``, unreadable ``meta/episodes``) raises.
"""

from __future__ import annotations

import gc
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from feedline.episodes.doctor.data import (
    SAMPLE_EPISODES,
    DataResult,
    check_data_file,
    check_orphan_file,
)
from feedline.episodes.doctor.findings import Findings, Report
from feedline.episodes.doctor.inventory import Inventory, take_inventory
from feedline.episodes.doctor.metadata import Metadata, check_stats, load_metadata
from feedline.episodes.doctor.reads import CountingStore
from feedline.episodes.doctor.spans import Offsets, check_video_spans, summarise_tolerance
from feedline.episodes.doctor.video import (
    Keyframes,
    check_codec,
    check_keyframes,
    index_video,
    keyframes,
    summarise_keyframes,
)
from feedline.episodes.format import EpisodeTable
from feedline.io import open_store
from feedline.run.progress import Progress

T = TypeVar("T")

#: Videos indexed at once (each a few range reads; latency-bound on a remote store).
DEFAULT_WORKERS = 8


def run_doctor(
    root: str,
    *,
    episodes: Iterable[int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: bool | None = None,
    full: bool = False,
) -> Report:
    """Examine the dataset at ``root`` (folder or URL) and report every problem found.

    Args:
        root: the dataset root: a folder, ``http(s)://``, ``s3://`` or ``hf://`` URL.
        episodes: only these episodes (the orphan checks then do not run). Default ``None``: all.
        storage_options: options for the store (as every reader takes them). Default none.
        workers: videos indexed in parallel. Default 8.
        progress: show progress bars; default: when stderr is a terminal (log lines otherwise).
        full: read the ``index`` and ``timestamp`` columns of every episode (the exhaustive
            check). Default: row-group statistics for every episode, the values of a sample
            per data file and of every episode the statistics do not clear.
    """
    store = CountingStore(open_store(root, **dict(storage_options or {})))
    try:
        return _run(store, episodes, max(1, int(workers)), progress, full)
    finally:
        store.close()


def _run(
    store: CountingStore, episodes: Iterable[int] | None, workers: int, progress: bool | None, full_read: bool
) -> Report:
    findings = Findings()
    with store.kind("metadata"):
        meta = load_metadata(store, findings)
    full = episodes is None
    table = meta.table.select(episodes)
    data_files, video_files = table.data_files(), table.video_files()
    inventory = take_inventory(store, data_files, video_files, workers)
    _report_missing(table, inventory, findings)
    checked: dict[str, Any] = {}

    result = DataResult()
    with Progress("doctor: data files", total=len(data_files), unit="file", enabled=progress) as bar:
        for path in data_files:
            if path in inventory.sizes:
                check_data_file(store, path, inventory.sizes[path], table, findings, result, orphans=full,
                                fps=meta.fps, sample=None if full_read else SAMPLE_EPISODES)
                # a parsed footer of 5,000 row groups (~30 MB) is freed only by the cycle
                # collector: collected per file, memory stays one footer, not every footer
                gc.collect()
            bar.update(1)
    checked["data_values"] = _values_checked(result, full_read)
    checked["orphans"] = _orphan_files(store, inventory, full, findings)
    with store.kind("metadata"):
        check_stats(store, meta, findings)

    offsets = Offsets()
    per_camera: dict[str, list[Keyframes]] = defaultdict(list)
    spans = _spans_by_video(table, meta)
    present = [p for p in video_files if p in inventory.sizes]
    with (
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="doctor") as pool,
        Progress("doctor: videos", total=len(present), unit="video", enabled=progress) as bar,
    ):
        for path, video in _bounded(pool, lambda p: index_video(store, p, inventory.sizes[p], findings), present, workers):
            bar.update(1)
            if video is None:
                continue
            check_codec(path, video, findings)
            stats = keyframes(video)
            check_keyframes(path, stats, findings)
            for key, rows in spans[path]:
                per_camera[key].append(stats)
                check_video_spans(
                    video, path, key, table.episode_index[rows], table.length[rows],
                    np.asarray(table.from_timestamp[key], np.float64)[rows],
                    np.asarray(table.to_timestamp[key], np.float64)[rows],
                    meta.fps, result.timestamps, findings, offsets,
                )
            del video
    for key in meta.video_keys:
        summarise_keyframes(key, per_camera.get(key, []), findings)
    summarise_tolerance(offsets, meta.fps, findings)
    return Report(
        root=store.url(),
        findings=findings.sorted(),
        bytes_read=store.bytes_read,
        requests=store.requests,
        dataset=_dataset_facts(meta, table, inventory),
        checked=checked,
    )


def _bounded(pool: ThreadPoolExecutor, work: Callable[[str], T], items: list[str], ahead: int) -> Iterator[tuple[str, T]]:
    """``(item, work(item))`` in order, with at most ``2 * ahead`` results pending (a video's
    sample table is megabytes at thousands of episodes: memory stays bounded by the window)."""
    pending: deque[tuple[str, Future[T]]] = deque()
    for item in items:
        pending.append((item, pool.submit(work, item)))
        if len(pending) >= 2 * ahead:
            first, future = pending.popleft()
            yield first, future.result()
    while pending:
        first, future = pending.popleft()
        yield first, future.result()


def _values_checked(result: DataResult, full: bool) -> bool | str:
    """``True`` when every episode's rows were read, else the sentence saying how many were."""
    if full or result.episodes_read >= result.episodes_total:
        return True
    return (
        f"sampled: the index and timestamp values of {result.episodes_read} of {result.episodes_total} "
        f"episodes were read ({SAMPLE_EPISODES} per data file and every episode its footer's row-group "
        "statistics do not clear); the rows, orphans and monotonic checks of the others rest on those "
        "statistics (run with --full to read every value)"
    )


def _spans_by_video(table: EpisodeTable, meta: Metadata) -> dict[str, list[tuple[str, np.ndarray]]]:
    """Per video file, per camera, the table rows of the episode stretches it holds (those whose
    metadata timestamps the readers accept)."""
    out: dict[str, list[tuple[str, np.ndarray]]] = defaultdict(list)
    for key in table.video_path:
        bad = {e for k, e in meta.bad_spans if k == key}
        for path, rows in table.positions_by_video_file(key).items():
            if bad:
                rows = rows[~np.isin(table.episode_index[rows], list(bad))]
            out[path].append((key, rows))
    return out


def _report_missing(table: EpisodeTable, inventory: Inventory, findings: Findings) -> None:
    if not inventory.missing:
        return
    users: dict[str, list[int]] = defaultdict(list)
    for path, rows in table.positions_by_data_file().items():
        users[path].extend(table.episode_index[rows].tolist())
    for key in table.video_path:
        for path, rows in table.positions_by_video_file(key).items():
            users[path].extend(table.episode_index[rows].tolist())
    for path in inventory.missing:
        named = sorted(set(users[path]))
        shown = ", ".join(map(str, named[:5])) + (" ..." if len(named) > 5 else "")
        findings.error(
            "files", path, named[0] if len(named) == 1 else None,
            f"not found, but {len(named)} episode(s) point at it ({shown})",
            "restore the file, or drop its episodes from meta/episodes",
        )


def _orphan_files(store: CountingStore, inventory: Inventory, full: bool, findings: Findings) -> bool | str:
    """Report files no episode names; say why not when the check cannot run."""
    if not full:
        reason = "not checked: only some episodes were examined (--episodes)"
    elif not inventory.listed:
        reason = f"not checked: {store.url()} cannot be listed (plain HTTP), so files no episode names are unknown"
    else:
        for path in inventory.orphan_data:
            check_orphan_file(store, path, inventory.sizes[path], findings)
        for path in inventory.orphan_videos:
            findings.warning(
                "orphans", path, None,
                f"no episode points at this video ({inventory.sizes[path]} bytes)",
                "restore the meta/episodes rows of its episodes, or delete the file",
            )
        return True
    findings.info("orphans", None, None, f"orphan data and video files {reason}")
    return reason


def _dataset_facts(meta: Metadata, table: EpisodeTable, inventory: Inventory) -> dict[str, int]:
    data, videos = table.data_files(), table.video_files()
    return {
        "episodes": len(table),
        "frames": int(table.length.sum()),
        "cameras": len(meta.video_keys),
        "data_files": len(data),
        "videos": len(videos),
        "data_bytes": sum(inventory.sizes.get(p, 0) for p in data),
        "video_bytes": sum(inventory.sizes.get(p, 0) for p in videos),
    }
