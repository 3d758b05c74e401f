"""The MP4 sidecar (schema v3): one archive per dataset revision indexing every camera file.

Archive = NPZ (a zip of ``.npy`` members, readable with ``numpy.load``) holding, per video
file ``s<i>/<column>.npy`` with canonical int64 columns (``offset, size, dts, ctts,
pts_ticks, sync, presented``) plus float64 ``pts`` (bit-identical to PyAV's ``frame.time``), and
``meta.json``: schema version, revision, root, whether it covers the whole dataset, a content id,
and per video its path, size, fingerprint and track facts (codec config, timescale, edit list).
The zip comment holds a digest of the zip directory: each open sees cheaply that no member changed.

Lifecycle (:func:`ensure_sidecar`): the local revision-keyed cache under ``feedline_home()``,
else a valid published sidecar (``meta/mp4-sidecars/`` in the dataset root), else build
locally under a process lock and install atomically. A video's entry is valid only if its fingerprint
from a fresh listing equals the recorded one, so a video replaced at the same path (same size
too) is re-indexed; a store without fingerprints re-indexes on every open. Training never
writes to the dataset: publishing is the CLI's explicit ``--push``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import posixpath
import tempfile
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.errors import SidecarDamaged, SidecarError
from feedline.episodes.video.entries import VideoEntry, check_members, video_entries
from feedline.episodes.video.mp4.table import INT_COLUMNS, SampleTable, read_table
from feedline.io import (
    HubStore,
    LockTimeout,
    ObjectInfo,
    Store,
    StoreError,
    atomic_write,
    feedline_home,
    process_lock,
)
from feedline.io.arrays import read_members

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
FORMAT_NAME = "feedline-mp4-sidecar"
#: The schema is part of the file name, so an older schema never shadows (or is read as) this one.
SIDECAR_NAME = f"sidecar-v{SCHEMA_VERSION}.npz"
PUBLISHED_DIR = "meta/mp4-sidecars"
PUBLISHED_PATH = f"{PUBLISHED_DIR}/{SIDECAR_NAME}"
HUB_SIDECAR_BRANCH = "lerobot-sidecars"
DEFAULT_WORKERS = 4
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed member times: same content, same bytes
# meta.json lists the indexed videos under "sources" (schema 3's name, from before "source" came
# to mean a dataset root in feedline); renaming the key would orphan every published sidecar.
_VIDEOS_KEY = "sources"
_DIGEST_TAG = b"feedline-directory-sha256:"


#: What numpy's NPZ reader, zipfile, zlib and json raise on a damaged archive (a missing member
#: is a KeyError). Nothing wider: a TypeError or AttributeError from feedline's own code is a bug
#: and surfaces as one instead of as a damaged sidecar; a malformed ``meta.json`` (JSON of the
#: wrong shape) is turned into a ValueError where it is read (:func:`~feedline.episodes.video.entries.video_entries`).
_ARCHIVE_FAULTS = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error)


class Sidecar:
    """A loaded sidecar archive; arrays are read lazily per video.

    Loading checks what is cheap (no decompression): the zip directory against its writer's
    digest, ``meta.json`` (format, schema, a content id, every video's fields and types) and
    each member a video needs at the size its sample count implies; reading a member checks its
    CRC-32, so no edit goes unseen, even one with recomputed zip CRCs. An archive without the
    digest is checked in full against its content id. Any failure is a :class:`SidecarDamaged`.

    Args:
        path: the local ``.npz`` archive; one of another schema or format is refused with
            :class:`~feedline.episodes.errors.SidecarError`.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._verified = False
        try:
            self._npz = np.load(self.path, allow_pickle=False)  # members are parsed as read
        except _ARCHIVE_FAULTS as exc:
            raise SidecarDamaged(f"{self.path}: not a readable MP4 sidecar ({_line(exc)})") from None
        try:
            meta = json.loads(self._npz["meta.json"])  # not an array: no header to parse
            if not isinstance(meta, dict):
                raise ValueError("meta.json is not an object")
        except _ARCHIVE_FAULTS as exc:
            self._npz.close()
            raise SidecarDamaged(f"{self.path}: not a readable MP4 sidecar ({_line(exc)})") from None
        if meta.get("format") != FORMAT_NAME or meta.get("schema_version") != SCHEMA_VERSION:
            self._npz.close()
            raise SidecarError(
                f"{self.path}: sidecar schema {meta.get('schema_version')!r}, this feedline reads "
                f"schema {SCHEMA_VERSION}; rebuild it with `feedline build-sidecar`"
            )
        try:
            self.meta: dict[str, Any] = meta
            self.revision: str | None = meta.get("revision")
            self.complete: bool = bool(meta.get("complete"))
            self.content_id: str = meta["content_id"]
            if not isinstance(self.content_id, str) or len(self.content_id) != 64:
                raise ValueError(f"content_id {self.content_id!r} is not a SHA-256 hex digest")
            self.entries: dict[str, VideoEntry] = video_entries(meta[_VIDEOS_KEY])
            sizes = {info.filename: info.file_size for info in self._npz.zip.infolist()}
            for entry in self.entries.values():
                check_members(entry, sizes)
            recorded = self._npz.zip.comment
            if not recorded.startswith(_DIGEST_TAG):
                self.verify()  # written before the digest existed, or by another tool
            elif recorded != _directory_digest(self._npz.zip.infolist()):
                raise ValueError("its members differ from the ones recorded when it was written")
        except SidecarDamaged:
            self._npz.close()
            raise
        except _ARCHIVE_FAULTS as exc:
            self._npz.close()
            raise SidecarDamaged(f"{self.path}: damaged MP4 sidecar ({_line(exc)})") from None

    def close(self) -> None:
        """Close the archive (tables already read stay valid)."""
        self._npz.close()

    def table(self, path: str) -> SampleTable:
        """The sample table of the video at ``path``, read from the archive (CRC-checked)."""
        entry = self.entries[path]
        try:
            cols = read_members(self._npz, {n: f"{entry.key}/{n}" for n in (*INT_COLUMNS, "pts")})
            if any(c.shape != (entry.samples,) for c in cols.values()):
                raise ValueError(f"arrays of {path} do not hold {entry.samples} samples")
        except _ARCHIVE_FAULTS as exc:
            raise SidecarDamaged(
                f"{self.path}: damaged MP4 sidecar, entry {path} ({_line(exc)})"
            ) from None
        return SampleTable(
            info=entry.info, offset=cols["offset"], size=cols["size"], dts=cols["dts"],
            ctts=cols["ctts"], pts_ticks=cols["pts_ticks"], pts=cols["pts"],
            sync=cols["sync"].astype(bool), presented=cols["presented"].astype(bool),
            origin=(entry.size, entry.fingerprint),
        )

    def verify(self) -> None:
        """Read every member and recompute the content id (a :class:`SidecarDamaged` if it differs)."""
        if self._verified:
            return
        digest = hashlib.sha256()
        try:
            for entry in sorted(self.entries.values(), key=lambda e: int(e.key[1:])):
                for name in (*INT_COLUMNS, "pts"):
                    member = f"{entry.key}/{name}"
                    digest.update(member.encode() + b"\0" + self._npz.zip.read(member + ".npy"))
        except _ARCHIVE_FAULTS as exc:
            raise SidecarDamaged(f"{self.path}: damaged MP4 sidecar ({_line(exc)})") from None
        meta = {k: v for k, v in self.meta.items() if k != "content_id"}
        digest.update(json.dumps(meta, sort_keys=True).encode())
        if digest.hexdigest() != self.content_id:
            raise SidecarDamaged(
                f"{self.path}: damaged MP4 sidecar (its content does not match its content_id)"
            )
        self._verified = True

    def stale(self, current: dict[str, ObjectInfo]) -> list[str]:
        """Paths of ``current`` this sidecar lacks or indexes from a different object."""
        return [p for p, info in current.items() if not _entry_valid(self.entries.get(p), info)]


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _directory_digest(members: list[zipfile.ZipInfo]) -> bytes:
    """The zip comment pinning every member: SHA-256 of each one's name, CRC-32 and size.

    zipfile checks a member's bytes against its directory CRC-32 as it reads them, so this pins
    the bytes too (up to a CRC-32 collision) at ~2 % of an open; hashing them costs 5-7 opens.
    """
    digest = hashlib.sha256("\0".join([m.filename for m in members]).encode())
    digest.update(np.array([m.CRC for m in members], dtype="<u4").tobytes())
    digest.update(np.array([m.file_size for m in members], dtype="<u8").tobytes())
    return _DIGEST_TAG + digest.hexdigest().encode()


def _entry_valid(entry: VideoEntry | None, info: ObjectInfo) -> bool:
    return (
        entry is not None
        and info.fingerprint is not None
        and entry.fingerprint == info.fingerprint
        and entry.size == info.size
    )


def _load(path: Path) -> tuple[Sidecar | None, str | None]:
    """(the sidecar at ``path`` or None, why it could not be loaded or None when missing)."""
    if not path.is_file():
        return None, None
    try:
        return Sidecar(path), None
    except SidecarError as exc:
        return None, str(exc)


def try_load(path: Path) -> Sidecar | None:
    """The sidecar at ``path``, or None if missing, unreadable or of another schema."""
    sidecar, problem = _load(path)
    if problem is not None:
        log.warning("ignoring %s", problem)
    return sidecar


# ------------------------------------------------------------------------------------ listing


def current_objects(store: Store, paths: Iterable[str]) -> dict[str, ObjectInfo]:
    """Size and fingerprint of each path, from one fresh listing where the store can list.

    Stores that cannot list (HTTP) are stat'ed per file. A missing video is an error.
    """
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    prefix = posixpath.commonpath([posixpath.dirname(p) or "." for p in wanted])
    prefix = "" if prefix == "." else prefix
    found: dict[str, ObjectInfo] = {}
    try:
        for info in store.list(prefix):
            found[info.path] = info
    except StoreError:
        pass
    missing = [p for p in wanted if p not in found]
    if missing:
        with ThreadPoolExecutor(max_workers=min(8, len(missing))) as pool:
            for path, info in zip(missing, pool.map(_stat_or_fail(store), missing), strict=True):
                found[path] = info
    return {p: found[p] for p in wanted}


def _stat_or_fail(store: Store) -> Callable[[str], ObjectInfo]:
    def stat(path: str) -> ObjectInfo:
        try:
            return store.stat(path)
        except StoreError as exc:
            raise SidecarError(f"{store.url(path)}: cannot index this video: {exc}") from exc

    return stat


def list_videos(store: Store, prefix: str = "videos") -> list[str]:
    """Every ``*.mp4`` below ``prefix`` (stores that can list only)."""
    try:
        return [i.path for i in store.list(prefix) if i.path.endswith(".mp4")]
    except StoreError as exc:
        raise SidecarError(f"{store.url(prefix)}: cannot list the videos ({exc}); pass video_paths") from exc


# ------------------------------------------------------------------------------------ building


def parse_video(store: Store, path: str, info: ObjectInfo) -> SampleTable:
    """Index one video: a few range reads to find and read its moov, then the tables."""
    return read_table(lambda s, e: store.read_range(path, s, e), info.size, store.url(path))


def _write_npy(zf: zipfile.ZipFile, name: str, array: np.ndarray, digest: Any, compress: bool) -> None:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    data = buf.getvalue()
    digest.update(name.encode() + b"\0" + data)
    member = zipfile.ZipInfo(name + ".npy", _ZIP_TIME)
    # Level 1 when compressed (a published archive travels): within a few % of level 6's size,
    # 3-7x faster. A node's own cache is stored: deflating its int64 members was ~7 s of a
    # 1,000,000-episode cold open, for a file read only locally (~8x larger, same content id).
    member.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    zf.writestr(member, data, compresslevel=1 if compress else None)


def _video_json(path: str, key: str, info: ObjectInfo | VideoEntry, table: SampleTable) -> dict[str, Any]:
    return {
        "path": path,
        "key": key,
        "size": int(info.size),
        "fingerprint": info.fingerprint,
        "samples": len(table),
        "info": table.info.to_json(),
    }


def write_sidecar(
    target: Path,
    store: Store,
    current: dict[str, ObjectInfo],
    *,
    revision: str | None,
    complete: bool = False,
    reuse: Sidecar | None = None,
    keep_others: bool = True,
    workers: int = DEFAULT_WORKERS,
    max_held: int | None = None,
    progress: Callable[[str], None] | None = None,
    parse: Callable[[Store, str, ObjectInfo], SampleTable] = parse_video,
    on_table: Callable[[str, SampleTable, str | None], None] | None = None,
    compress: bool = True,
) -> Sidecar:
    """Build the archive for ``current`` into ``target`` (atomically) and load it; ``on_table``
    sees each ``(path, table, fingerprint)`` as it is written (so no one reads the archive back);
    ``compress=False`` stores the members (a local cache: same content id, no deflate).

    Entries of ``reuse`` that are still valid are copied (and, with ``keep_others``, its
    entries of videos not in ``current``); the rest are parsed with ``workers`` threads. At most ``max_held`` parse results (default ``2 * workers``) are held at once: each
    finished video's index goes straight into the temporary archive, in path order.
    """
    workers = max(1, int(workers))
    max_held = max(1, int(max_held or 2 * workers))
    paths = sorted(current)
    todo = [p for p in paths if reuse is None or not _entry_valid(reuse.entries.get(p), current[p])]
    carried = [p for p in paths if p not in todo]
    if reuse is not None and keep_others:  # keep other valid entries of the previous archive too
        carried += sorted(p for p in reuse.entries if p not in current)
    if todo:  # the opener already said so at WARNING; the CLI shows a progress bar
        log.debug("building the MP4 sidecar for %d video(s) of %s (%d reused)", len(todo),
                  store.url(), len(carried))
    digest = hashlib.sha256()
    videos: list[dict[str, Any]] = []
    with atomic_write(target) as handle, zipfile.ZipFile(handle, "w", allowZip64=True) as zf:

        def add(path: str, table: SampleTable, info: ObjectInfo | VideoEntry) -> None:
            key = f"s{len(videos)}"
            for column in INT_COLUMNS:
                values = np.asarray(getattr(table, column), dtype=np.int64)
                _write_npy(zf, f"{key}/{column}", values, digest, compress)
            _write_npy(zf, f"{key}/pts", np.asarray(table.pts, dtype=np.float64), digest, compress)
            videos.append(_video_json(path, key, info, table))
            if on_table is not None:
                on_table(path, table, info.fingerprint)
            if progress is not None:
                progress(path)

        damaged = []
        for path in carried:
            assert reuse is not None
            try:
                table = reuse.table(path)
            except SidecarDamaged:  # re-index it (when still wanted) instead of copying it
                damaged += [path] if path in current else []
                continue
            add(path, table, reuse.entries[path])
        todo += damaged
        for path, table in _parse_in_order(store, todo, current, workers, max_held, parse):
            add(path, table, current[path])
        meta = {
            "format": FORMAT_NAME,
            "schema_version": SCHEMA_VERSION,
            "revision": revision,
            "root": store.url(),
            "complete": complete,
            _VIDEOS_KEY: videos,
        }
        digest.update(json.dumps(meta, sort_keys=True).encode())
        meta["content_id"] = digest.hexdigest()
        member = zipfile.ZipInfo("meta.json", _ZIP_TIME)
        member.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(member, json.dumps(meta, indent=1, sort_keys=True).encode())
        zf.comment = _directory_digest(zf.infolist())
    return Sidecar(target)


def _parse_in_order(
    store: Store,
    paths: list[str],
    current: dict[str, ObjectInfo],
    workers: int,
    max_held: int,
    parse: Callable[[Store, str, ObjectInfo], SampleTable],
) -> Iterator[tuple[str, SampleTable]]:
    if not paths:
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sidecar") as pool:
        window: deque[tuple[str, Future[SampleTable]]] = deque()
        queue = iter(paths)
        try:
            for path in queue:
                window.append((path, pool.submit(parse, store, path, current[path])))
                if len(window) >= max_held:
                    done_path, future = window.popleft()
                    yield done_path, future.result()
            while window:
                done_path, future = window.popleft()
                yield done_path, future.result()
        finally:
            for _, future in window:
                future.cancel()


# ------------------------------------------------------------------------------------ lifecycle


#: Cache archives kept per revision; a cache miss reuses the valid entries of the newest ones.
_SIBLINGS_SEARCHED = 8


def dataset_identity(store: Store, revision: str | None, current: dict[str, ObjectInfo]) -> str:
    """What keys the local sidecar cache: the revision and every indexed video's relative path,
    size and fingerprint, not the URL it is served from.

    The same dataset behind another host, port or alias finds the same archive; a replaced
    video makes another identity. Without fingerprints nothing identifies the content, so the
    root URL is part of the key then (and such a store re-indexes on every open anyway).
    """
    digest = hashlib.sha256(b"feedline-mp4-sidecar-identity/1\0")
    digest.update((revision or "").encode() + b"\0")
    if not current or any(info.fingerprint is None for info in current.values()):
        digest.update(b"root\0" + store.url().encode() + b"\0")
    for path in sorted(current):
        info = current[path]
        digest.update(f"{path}\0{int(info.size)}\0{info.fingerprint}\0".encode())
    return digest.hexdigest()[:32]


def cache_path(store: Store, revision: str | None, current: dict[str, ObjectInfo]) -> Path:
    """The local cache file of (revision, these videos' identities); two revisions never
    share one (:func:`dataset_identity`)."""
    rev = "".join(c if c.isalnum() or c in "._-" else "-" for c in (revision or "_default"))
    key = dataset_identity(store, revision, current)
    return feedline_home() / "mp4-sidecars" / "by-content" / rev / key / SIDECAR_NAME


def _nearest_sibling(target: Path, current: dict[str, ObjectInfo]) -> Sidecar | None:
    """Of the newest cache archives of the same revision (another video set: a replaced video,
    another selection), the one with most entries valid for ``current``, to reuse them."""
    try:
        found = [p for p in target.parent.parent.glob(f"*/{SIDECAR_NAME}") if p != target]
        found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    best: Sidecar | None = None
    best_valid = 0
    for path in found[:_SIBLINGS_SEARCHED]:
        sidecar, _problem = _load(path)
        if sidecar is None:
            continue
        valid = len(current) - len(sidecar.stale(current))
        if valid > best_valid:
            if best is not None:
                best.close()
            best, best_valid = sidecar, valid
        else:
            sidecar.close()
    return best


def hub_sidecar_path(commit: str) -> str:
    """Where a Hub dataset's sidecar lives on the ``lerobot-sidecars`` branch (per dataset commit)."""
    return f"{PUBLISHED_DIR}/{commit}/{SIDECAR_NAME}"


def _published_location(store: Store) -> tuple[Store, str]:
    """The dataset root's ``meta/mp4-sidecars/``, or the sidecar branch for a Hub dataset repo
    (its sidecar for the commit the store reads, which the store already resolved)."""
    if isinstance(store, HubStore):
        try:
            return store.at_revision(HUB_SIDECAR_BRANCH), hub_sidecar_path(store.commit)
        except StoreError as exc:  # offline, auth: fall back to building
            log.info("no published sidecar branch for %s (%s)", store.url(), exc)
    return store, PUBLISHED_PATH


def _published(store: Store, current: dict[str, ObjectInfo]) -> Sidecar | None:
    """A published sidecar of the dataset, copied locally, if one exists and is readable."""
    where, path = _published_location(store)
    try:
        if not where.exists(path):
            return None
        data = where.read_bytes(path)
    except StoreError as exc:
        log.info("no published sidecar at %s (%s)", where.url(path), exc)
        return None
    fd, name = tempfile.mkstemp(prefix="published-", suffix=".npz")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    try:
        sidecar = Sidecar(Path(name))
        try:
            sidecar.verify()  # remote input: every member, against its content id
        except SidecarError:
            sidecar.close()
            raise
    except SidecarError as exc:
        os.unlink(name)
        problem = str(exc).replace(name, where.url(path))
        log.warning("ignoring the published MP4 sidecar and indexing locally: %s", problem)
        return None
    return sidecar


def ensure_sidecar(
    store: Store,
    paths: Iterable[str],
    *,
    revision: str | None = None,
    lock_timeout_s: float = 1800.0,
    workers: int = DEFAULT_WORKERS,
    current: dict[str, ObjectInfo] | None = None,
    parse: Callable[[Store, str, ObjectInfo], SampleTable] = parse_video,
    damaged: str | None = None,
    on_table: Callable[[str, SampleTable, str | None], None] | None = None,
) -> tuple[Sidecar, dict[str, ObjectInfo]]:
    """A sidecar valid for every path (cache → published → build under lock), and the listing.

    A cache that fails to load is rebuilt with one warning naming it. ``damaged``: why the
    caller found the cache unusable after loading it (a bad CRC in a member); it is rebuilt too,
    its intact entries reused.
    """
    current = current_objects(store, paths) if current is None else current
    target = cache_path(store, revision, current)
    cached, problem = _load(target)
    problem = damaged or problem
    if cached is not None:
        if not cached.stale(current) and damaged is None:
            return cached, current
        cached.close()
    # Without fingerprints nothing published can be validated, so do not even download it.
    identified = all(info.fingerprint is not None for info in current.values())
    published = _published(store, current) if identified else None
    lock = target.with_name(target.name + ".lock")
    try:
        with process_lock(lock, lock_timeout_s):
            if published is not None and not published.stale(current):
                with atomic_write(target) as handle:
                    handle.write(published.path.read_bytes())
                log.info("using the published MP4 sidecar of %s", store.url())
                return Sidecar(target), current
            cached, again = _load(target)  # another process may have built it while we waited
            if cached is not None and not cached.stale(current) and damaged is None:
                return cached, current
            problem = again if again is not None else problem
            base = cached if cached is not None else published
            sibling = _nearest_sibling(target, current) if base is None else None
            base = base if sibling is None else sibling
            if problem is not None:
                log.warning(
                    "rebuilding the damaged MP4 sidecar cache of %s for %d video(s): %s",
                    store.url(), len(current), problem,
                )
            else:
                todo = len(base.stale(current)) if base is not None else len(current)
                if todo:
                    log.warning(
                        "building the MP4 sidecar index of %s for %d video(s) (once per revision "
                        "and video; later opens reuse %s)", store.url(), todo, target,
                    )
                else:  # another selection or another host of the same videos: copied, not parsed
                    log.info("the MP4 sidecar index of %s reuses %s", store.url(), base.path)
            try:
                built = write_sidecar(
                    target, store, current, revision=revision, reuse=base,
                    keep_others=sibling is None, workers=workers, parse=parse, on_table=on_table,
                    compress=False,
                )
            finally:
                if cached is not None:
                    cached.close()
                if sibling is not None:
                    sibling.close()
            return built, current
    except LockTimeout as exc:
        raise SidecarError(
            f"waiting for another process to build the MP4 sidecar of {store.url()}: {exc}; "
            "raise sidecar_lock_timeout_s or build it ahead with `feedline build-sidecar`"
        ) from exc
    finally:
        if published is not None:  # a temporary local copy
            published.close()
            published.path.unlink(missing_ok=True)
