"""Provisional index provider: parses each MP4's moov directly (replaced by the mmap index)."""

from __future__ import annotations

from feedline.episodes.mp4.table import SampleTable, read_table
from feedline.io import Store


class IndexProvider:
    def __init__(self, store: Store, *, revision: str | None, lock_timeout_s: float, workers: int) -> None:
        self.store = store

    def tables(self, paths: list[str]) -> dict[str, SampleTable]:
        out = {}
        for path in paths:
            size = self.store.stat(path).size
            out[path] = read_table(
                lambda s, e, p=path: self.store.read_range(p, s, e), size, self.store.url(path)
            )
        return out
