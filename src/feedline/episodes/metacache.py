"""What the open derives from a dataset's metadata and data files, cached on the node under
``$FEEDLINE_HOME``.

Why: at 100,000 episodes the open's largest cost was reading and parsing 20 data-file footers
(4 MB each) in every process that opened the dataset, on every open. A footer's bytes and the
arrays derived from them (:class:`~feedline.episodes.footer.DataFooter`) depend only on the
file's content, so they are kept once per node, keyed by the file's path in the dataset and its
fingerprint (an HTTP strong ETag, an S3 ETag and version, a Hub blob hash, a local inode + mtime +
size) and not by its URL:
the same file behind another host, port or mirror is the same entry, and a replaced file is a
new one. Entries are built under a process lock (ranks opening at once build each entry once)
and written atomically; the footer bytes are memory-mapped, so every rank and worker on the
node shares their pages instead of holding a copy. A file without a fingerprint is read as
before, uncached.

The episode table (:class:`~feedline.episodes.table.EpisodeTable`, what the open derives from
``meta/episodes``: at 100,000 episodes most of a warm open went to reading those files, mostly
per-episode statistics no reader needs to start) is cached the same way: keyed by
``meta/info.json`` and the first ``meta/episodes`` file's fingerprint, trusted only while every
``meta/episodes`` file it came from still has the fingerprint it had (one stat each). Entries
hold arrays (``.npz``, read without pickle), the tasks as Arrow IPC and a JSON manifest, so a
cache folder others can write is never a way to run code.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import zipfile
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from feedline.episodes.footer import DataFooter, read_data_footer
from feedline.episodes.parquet import RowGroupIndex
from feedline.episodes.table import EpisodeTable, PathColumn, TaskColumn
from feedline.io import Store, StoreError
from feedline.io.arrays import load_npz
from feedline.io.atomic import atomic_write
from feedline.io.home import feedline_home
from feedline.io.locks import process_lock

__all__ = [
    "CACHE_VERSION", "cached_episode_table", "cached_footer", "footer_cache_dir", "table_cache_dir",
]

#: Bumped whenever an entry's layout changes: entries of another version are never read.
CACHE_VERSION = "v1"
#: How long a process waits for another one building the same entry.
LOCK_TIMEOUT_S = 600.0
_INDEX_FIELDS = (
    "num_rows", "nbytes", "index_min", "index_max", "has_index", "episode_min", "episode_max",
    "has_episode",
)


def footer_cache_dir() -> Path:
    """Where data-file footers are cached (one entry per file content)."""
    return feedline_home() / "parquet-footers" / CACHE_VERSION


def _entry(path: str, fingerprint: str, size: int) -> Path:
    # The path inside the dataset is part of the key: some fingerprints are not content hashes
    # (nginx's ETag is the mtime in seconds and the size), and two files of one dataset written
    # in the same second with the same size must not share an entry.
    key = hashlib.sha256(f"{path}\0{fingerprint}\0{size}".encode()).hexdigest()
    return footer_cache_dir() / key[:2] / key


def cached_footer(store: Store, path: str, refresh: bool = False) -> DataFooter:
    """``path``'s footer from the node's cache, read and cached first when missing.

    One stat per file is what an open of an unchanged dataset costs here; a file the store
    cannot fingerprint is read and parsed each time (no entry could be trusted). ``refresh``
    reads the file again and replaces the entry (the open does so when a cached footer cannot
    hold an episode the metadata puts in the file)."""
    try:
        info = store.stat(path)
    except StoreError:
        return read_data_footer(store, path)  # the read names what is wrong with the file
    if info.fingerprint is None:
        return read_data_footer(store, path)
    entry = _entry(path, info.fingerprint, info.size)
    loaded = None if refresh else _load(entry)
    if loaded is not None:
        return loaded
    with process_lock(entry.with_name(entry.name + ".lock"), LOCK_TIMEOUT_S, remove=True):
        loaded = None if refresh else _load(entry)  # another process may have built it meanwhile
        if loaded is not None:
            return loaded
        footer = read_data_footer(store, path)
        _store(entry, footer)
    return _mapped(entry, footer)


def _mapped(entry: Path, footer: DataFooter) -> DataFooter:
    """``footer`` as the entry just written holds it: its bytes mapped from the entry (shared
    pages, not a copy per process), its arrays the ones in hand (not loaded back: parsing the
    ``.npz`` headers again was a tenth of a cold open's footer reads)."""
    raw_path = entry.with_suffix(".thrift")
    try:
        raw = _map(raw_path)
    except OSError:
        return footer
    cached = CachedFooter(**{f.name: getattr(footer, f.name) for f in fields(DataFooter) if f.name != "raw"}, raw=raw)
    object.__setattr__(cached, "cached_at", str(raw_path))
    return cached


def _store(entry: Path, footer: DataFooter) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(entry.with_suffix(".thrift"), durable=False) as handle:
        handle.write(bytes(footer.raw))
    arrays = {name: getattr(footer.index, name) for name in _INDEX_FIELDS}
    arrays.update(
        group_start=footer.group_start, group_end=footer.group_end, page_offset=footer.page_offset,
        places=np.array([*footer.num_rows_at, *footer.list_at, footer.list_end], np.int64),
    )
    with atomic_write(entry.with_suffix(".npz"), durable=False) as handle:  # written last: the marker
        np.savez(handle, **arrays)


def _load(entry: Path) -> DataFooter | None:
    """The cached footer, its bytes memory-mapped; ``None`` when absent or unreadable (it is
    then rebuilt: a damaged cache entry is never an error, only a slower open)."""
    arrays_path, raw_path = entry.with_suffix(".npz"), entry.with_suffix(".thrift")
    if not arrays_path.exists():
        return None
    try:
        got = load_npz(arrays_path)
        raw = _map(raw_path)
        places = got.pop("places").tolist()
        index = RowGroupIndex(**{name: got[name] for name in _INDEX_FIELDS})
        footer = CachedFooter(
            raw, (places[0], places[1]), (places[2], places[3]), places[4], got["group_start"],
            got["group_end"], index, got["page_offset"],
        )
        object.__setattr__(footer, "cached_at", str(raw_path))
    except (OSError, ValueError, KeyError, IndexError, EOFError, zipfile.BadZipFile):
        return None
    if not (len(footer.group_end) == len(index) and footer.list_end <= len(raw)):
        return None
    return footer


def _map(path: Path) -> Any:
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return b""
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


class CachedFooter(DataFooter):
    """A :class:`DataFooter` whose bytes are a memory map of its cache entry: it pickles as the
    entry's path (a worker maps the same pages) and falls back to the bytes when the entry is
    gone by then."""

    cached_at: str = ""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["raw"] = None if self.cached_at and os.path.exists(self.cached_at) else bytes(self.raw)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("raw") is None:
            state["raw"] = _map(Path(state["cached_at"]))
        self.__dict__.update(state)


# ------------------------------------------------------------------------------ the episode table

_LOADS = (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, zipfile.BadZipFile,
          pa.ArrowException)


def table_cache_dir() -> Path:
    """Where episode tables are cached (one entry per dataset revision)."""
    return feedline_home() / "episode-tables" / CACHE_VERSION


def cached_episode_table(
    store: Store, info: dict[str, Any], first_file: str,
    build: Callable[[], tuple[EpisodeTable, list[str]]],
) -> tuple[EpisodeTable, list[str]]:
    """The dataset's episode table and ``meta/episodes`` files, from the node's cache when every
    file it came from is unchanged, else ``build()`` (and cached when the store fingerprints
    every file)."""
    try:
        head = store.stat(first_file)
    except StoreError:
        return build()  # the build names what is missing
    if head.fingerprint is None:
        return build()
    material = json.dumps(info, sort_keys=True, default=str) + "\0" + head.fingerprint
    key = hashlib.sha256(material.encode()).hexdigest()
    entry = table_cache_dir() / key[:2] / key
    loaded = _load_table(store, entry)
    if loaded is not None:
        return loaded
    with process_lock(entry.with_name(entry.name + ".lock"), LOCK_TIMEOUT_S, remove=True):
        loaded = _load_table(store, entry)
        if loaded is not None:
            return loaded
        table, files = build()
        prints = _fingerprints(store, files)
        if prints is not None:
            _store_table(entry, table, files, prints)
    return table, files


def _fingerprints(store: Store, files: list[str]) -> list[list[Any]] | None:
    out = []
    for path in files:
        try:
            info = store.stat(path)
        except StoreError:
            return None
        if info.fingerprint is None:
            return None
        out.append([info.fingerprint, info.size])
    return out


def _store_table(entry: Path, table: EpisodeTable, files: list[str], prints: list[list[Any]]) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    keys = list(table.video_path)
    arrays = {name: getattr(table, name) for name in EpisodeTable._COLUMNS}
    arrays["data_path"] = table.data_path.codes
    for i, key in enumerate(keys):
        arrays[f"video_path.{i}"] = table.video_path[key].codes
        arrays[f"from_timestamp.{i}"] = np.asarray(table.from_timestamp[key])
        arrays[f"to_timestamp.{i}"] = np.asarray(table.to_timestamp[key])
    with atomic_write(entry.with_suffix(".npz"), durable=False) as handle:
        np.savez(handle, **arrays)
    tasks = table.tasks.tasks
    if tasks is not None:
        with atomic_write(entry.with_suffix(".arrow"), durable=False) as handle:
            batch = pa.record_batch([tasks], names=["tasks"])
            with pa.ipc.new_file(handle, batch.schema) as writer:
                writer.write_batch(batch)
    manifest = {
        "files": files, "fingerprints": prints, "episodes": len(table),
        "data_files": table.data_path.files, "video_keys": keys,
        "video_files": [table.video_path[key].files for key in keys], "tasks": tasks is not None,
    }
    with atomic_write(entry.with_suffix(".json"), "w", durable=False) as handle:  # the marker
        json.dump(manifest, handle)


def _load_table(store: Store, entry: Path) -> tuple[EpisodeTable, list[str]] | None:
    """The cached table when its entry is whole and every file it came from is unchanged."""
    manifest_path = entry.with_suffix(".json")
    if not manifest_path.exists():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
        files = [str(f) for f in manifest["files"]]
        if _fingerprints(store, files) != manifest["fingerprints"]:
            return None
        got = load_npz(entry.with_suffix(".npz"))
        n = int(manifest["episodes"])
        tasks = None
        if manifest["tasks"]:
            with pa.memory_map(str(entry.with_suffix(".arrow"))) as source:
                tasks = pa.ipc.open_file(source).read_all().column("tasks").combine_chunks()
        keys = manifest["video_keys"]
        table = EpisodeTable(
            **{name: got[name] for name in EpisodeTable._COLUMNS},
            data_path=PathColumn(manifest["data_files"], got["data_path"]),
            video_path={
                key: PathColumn(manifest["video_files"][i], got[f"video_path.{i}"])
                for i, key in enumerate(keys)
            },
            from_timestamp={key: got[f"from_timestamp.{i}"] for i, key in enumerate(keys)},
            to_timestamp={key: got[f"to_timestamp.{i}"] for i, key in enumerate(keys)},
            tasks=TaskColumn(tasks, n),
        )
    except _LOADS:
        return None
    columns = [table.length, table.dataset_from_index, table.dataset_to_index, table.data_path.codes]
    if len(table) != n or any(len(c) != n for c in columns):
        return None
    return table, files
