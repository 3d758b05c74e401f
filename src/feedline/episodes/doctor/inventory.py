"""Which files a dataset has: sizes of the files its episodes name, and the ones none names.

One listing of ``data/`` and ``videos/`` where the store can list (local folders, S3, the Hub)
gives every size at once and the orphans (files no episode points at); a store that cannot list
(plain HTTP) is asked for each named file's size instead, and the orphan-file checks are reported
as not run. Neither costs a byte of content: sizes come from listings and HEAD requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from feedline.io import NotFoundError, ObjectInfo, Store, StoreError

DATA_DIR = "data"
VIDEOS_DIR = "videos"


@dataclass
class Inventory:
    """File sizes and orphans.

    Args:
        sizes: size in bytes of each named file that exists.
        missing: named files that do not exist.
        listed: whether the store could list (the orphan checks need it).
        orphan_data: ``*.parquet`` files under ``data/`` no episode names (when listed).
        orphan_videos: ``*.mp4`` files under ``videos/`` no episode names (when listed).
    """

    sizes: dict[str, int]
    missing: list[str]
    listed: bool
    orphan_data: list[str]
    orphan_videos: list[str]


def take_inventory(
    store: Store, data_files: Iterable[str], video_files: Iterable[str], workers: int = 8
) -> Inventory:
    """Sizes of the named files, from one listing or one stat each, and the unnamed ones."""
    data, videos = sorted(set(data_files)), sorted(set(video_files))
    found: dict[str, ObjectInfo] = {}
    listed = True
    try:
        for prefix in (DATA_DIR, VIDEOS_DIR):
            found.update({info.path: info for info in store.list(prefix)})
    except StoreError:
        listed = False
    todo = [p for p in data + videos if p not in found]

    def stat(path: str) -> ObjectInfo | None:
        try:
            return store.stat(path)
        except NotFoundError:
            return None

    if todo:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
            for path, info in zip(todo, pool.map(stat, todo), strict=True):
                if info is not None:
                    found[path] = info
    named = set(data) | set(videos)
    sizes = {p: found[p].size for p in data + videos if p in found}
    missing = [p for p in data + videos if p not in found]
    orphan_data = sorted(p for p in found if p.startswith(DATA_DIR + "/") and p.endswith(".parquet") and p not in named)
    orphan_videos = sorted(p for p in found if p.startswith(VIDEOS_DIR + "/") and p.endswith(".mp4") and p not in named)
    if orphan_data or orphan_videos:
        sizes.update({p: found[p].size for p in orphan_data + orphan_videos})
    return Inventory(sizes, missing, listed, orphan_data if listed else [], orphan_videos if listed else [])
