"""One ``feedline doctor`` run: metadata → files → data Parquet → videos, into a :class:`Report`.

The run reads through a :class:`~feedline.episodes.doctor.reads.CountingStore`, so the report
says what each kind of read cost. Videos are indexed in parallel (each is a few range reads, so a
remote dataset is bound by latency, not bandwidth); everything else is sequential and cheap.
Problems in the data become findings and never stop the run; only a root the doctor cannot read
as a LeRobot v3 dataset at all (no ``meta/info.json``, unreadable ``meta/episodes``) raises.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from feedline.episodes.doctor.data import DataResult, check_data_file, check_orphan_file
from feedline.episodes.doctor.findings import Findings, Report
from feedline.episodes.doctor.inventory import Inventory, take_inventory
from feedline.episodes.doctor.metadata import Metadata, check_stats, load_metadata
from feedline.episodes.doctor.reads import CountingStore
from feedline.episodes.doctor.spans import Offsets, check_span, summarise_tolerance
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

#: Videos indexed at once (each a few range reads; latency-bound on a remote store).
DEFAULT_WORKERS = 8


def run_doctor(
    root: str,
    *,
    episodes: Iterable[int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: bool | None = None,
) -> Report:
    """Examine the dataset at ``root`` (folder or URL) and report every problem found.

    Args:
        root: the dataset root: a folder, ``http(s)://``, ``s3://`` or ``hf://`` URL.
        episodes: only these episodes (the orphan checks then do not run). Default ``None``: all.
        storage_options: options for the store (as every reader takes them). Default none.
        workers: videos indexed in parallel. Default 8.
        progress: show progress bars; default: when stderr is a terminal (log lines otherwise).
    """
    store = CountingStore(open_store(root, **dict(storage_options or {})))
    try:
        return _run(store, episodes, max(1, int(workers)), progress)
    finally:
        store.close()


def _run(store: CountingStore, episodes: Iterable[int] | None, workers: int, progress: bool | None) -> Report:
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
                check_data_file(store, path, inventory.sizes[path], table, findings, result, orphans=full)
            bar.update(1)
    checked["orphans"] = _orphan_files(store, inventory, full, findings)
    with store.kind("metadata"):
        check_stats(store, meta, findings)

    offsets = Offsets()
    per_camera: dict[str, list[Keyframes]] = defaultdict(list)
    spans = _spans_by_video(table)
    present = [p for p in video_files if p in inventory.sizes]
    with (
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="doctor") as pool,
        Progress("doctor: videos", total=len(present), unit="video", enabled=progress) as bar,
    ):
        tables = pool.map(lambda p: index_video(store, p, inventory.sizes[p], findings), present)
        for path, video in zip(present, tables, strict=True):
            bar.update(1)
            if video is None:
                continue
            check_codec(path, video, findings)
            stats = keyframes(video)
            check_keyframes(path, stats, findings)
            per_camera[spans[path][0][0]].append(stats)
            for key, row in spans[path]:
                episode = int(table.episode_index[row])
                if (key, episode) in meta.bad_spans:
                    continue
                check_span(
                    video, path, key, episode, int(table.length[row]),
                    float(table.from_timestamp[key][row]), float(table.to_timestamp[key][row]),
                    meta.fps, result.timestamps.get(episode), findings, offsets,
                )
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


def _spans_by_video(table: EpisodeTable) -> dict[str, list[tuple[str, int]]]:
    """Per video file, the (camera, row) of every episode stretch it holds."""
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for key, paths in table.video_path.items():
        for row, path in enumerate(paths):
            out[path].append((key, row))
    return out


def _report_missing(table: EpisodeTable, inventory: Inventory, findings: Findings) -> None:
    users: dict[str, list[int]] = defaultdict(list)
    for row, path in enumerate(table.data_path):
        users[path].append(int(table.episode_index[row]))
    for paths in table.video_path.values():
        for row, path in enumerate(paths):
            users[path].append(int(table.episode_index[row]))
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
