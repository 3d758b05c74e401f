"""The map-style reader's Parquet rows read per episode on first use, kept in a bounded LRU.

Why: reading every row of a large dataset at the open made the map-style reader's open grow with
the dataset (1,000,000 episodes: 87 s and 9.2 GiB, most of it pyarrow reading 5,000 one-episode
row groups per file). Here the open reads only the data files' footers (from the node's cache,
:func:`feedline.episodes.metacache.cached_footer`, memory-mapped) and prunes every episode's row
groups with arrays; a sample's episode is read when it is first asked for, with one ranged read
of its row groups (the footer cut to them, as the streaming reader's fetch does), and kept in a
per-process LRU of whole episodes, so memory is bounded by the cache, not by the dataset.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from feedline.episodes.base import column_to_numpy
from feedline.episodes.errors import EpisodeDatasetError, EpisodeFormatError
from feedline.episodes.footer import DataFooter
from feedline.episodes.parquet import EpisodeRows, named_parquet_errors, read_episodes_rows
from feedline.episodes.stream.payload import ParquetLayout, parquet_layout
from feedline.episodes.table import EpisodeTable
from feedline.io import Store

__all__ = ["EpisodeRowCache", "LazyRows", "check_schemas"]

Columns = dict[str, np.ndarray]


class EpisodeRowCache:
    """A thread-safe LRU of episodes' columns, keyed by table position.

    Two threads asking for the same missing episode read it once (the second waits for the
    first); a read that fails is not cached, so the next ask reads again and names the error
    again.

    Args:
        capacity: episodes kept, least recently used dropped first; at least 1.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, Columns] = OrderedDict()
        self._loading: dict[int, threading.Event] = {}
        self.reads = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: int, load: Callable[[], Columns]) -> Columns:
        """``key``'s columns, from the cache or ``load()`` (then cached)."""
        while True:
            with self._lock:
                found = self._entries.get(key)
                if found is not None:
                    self._entries.move_to_end(key)
                    return found
                waiting = self._loading.get(key)
                if waiting is None:
                    done = self._loading[key] = threading.Event()
            if waiting is not None:
                waiting.wait()
                continue  # cached now, or the read failed and this thread tries itself
            try:
                value = load()
                with self._lock:
                    self.reads += 1
                    self._entries[key] = value
                    while len(self._entries) > self.capacity:
                        self._entries.popitem(last=False)
                return value
            finally:
                with self._lock:
                    del self._loading[key]
                done.set()


def check_schemas(store: Store, table: EpisodeTable, layout: ParquetLayout, need_timestamp: bool) -> None:
    """What the eager read checked of every data file, from the footers alone: ``index`` and
    ``episode_index`` are there, every file has the same columns, ``timestamp`` when videos
    are read (a footer cut to no group is only the schema: microseconds to parse)."""
    names: list[str] | None = None
    first = ""
    for path in table.data_files():
        where = store.url(path)
        with named_parquet_errors(where):
            got = layout.footers[path].subset([], where).schema.to_arrow_schema().names
        for required in ("index", "episode_index"):
            if required not in got:
                raise EpisodeFormatError(f"{where}: data file has no '{required}' column")
        if names is None:
            names, first = got, where
        elif got != names:
            raise EpisodeDatasetError(f"{where}: has columns {got}, {first} has {names}")
    if need_timestamp and names is not None and "timestamp" not in names:
        raise EpisodeDatasetError(f"{first}: no 'timestamp' column for video lookup")


class LazyRows:
    """Every selected episode's rows, read on first use and kept per process.

    Picklable: a DataLoader worker gets the footers (memory maps travel as their cache paths)
    and the pruned groups, and starts with an empty cache of its own.

    Args:
        store: the dataset's store at the open (the footers are read through it).
        table: the selected episodes.
        capacity: episodes kept per process (:class:`EpisodeRowCache`).
        need_timestamp: whether samples look frames up by ``timestamp`` (videos).
    """

    def __init__(self, store: Store, table: EpisodeTable, capacity: int, need_timestamp: bool) -> None:
        self.table = table
        self.capacity = capacity
        self.layout = parquet_layout(store, table)
        check_schemas(store, table, self.layout, need_timestamp)
        self._pid = os.getpid()
        self._cache = EpisodeRowCache(capacity)

    def cache(self) -> EpisodeRowCache:
        """This process's cache (a fresh one in a forked or spawned worker)."""
        if self._pid != os.getpid():
            self._cache = EpisodeRowCache(self.capacity)
            self._pid = os.getpid()
        return self._cache

    def columns(self, store: Store, position: int) -> Columns:
        """The columns of the episode at ``position`` (rows on axis 0, ``index`` order)."""
        return self.cache().get(position, lambda: self.read(store, position))

    def read(self, store: Store, position: int) -> Columns:
        """One ranged read of the episode's candidate row groups, its rows checked to be exactly
        its ``index`` range (a damaged file is one line naming it)."""
        table, i = self.table, position
        ep = int(table.episode_index[i])
        want = EpisodeRows(ep, int(table.dataset_from_index[i]), int(table.dataset_to_index[i]))
        path = table.data_path[i]
        footers: Mapping[str, DataFooter] = self.layout.footers
        groups = self.layout.groups_of(i) or ()
        where = store.url(path)
        if not groups:
            raise EpisodeFormatError(f"{where}: no row group can hold episode(s) [{ep}]")
        cut = footers[path].subset(list(groups), where)
        rows = read_episodes_rows(store, path, [want], metadata=cut, row_groups={ep: range(len(groups))})[ep]
        with named_parquet_errors(where):
            return {name: column_to_numpy(rows.column(name)) for name in rows.column_names}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = None
        state["_pid"] = -1
        return state
