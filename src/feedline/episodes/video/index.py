"""The derived, read-only, memory-mapped index of the video files a rank actually uses.

The sidecar NPZ is canonical (int64 everywhere; deflated when published). Reading it per process would
cost memory in every rank and DataLoader worker, so the first open converts each needed video
into plain ``.npy`` files under ``feedline_home()/streaming-indexes/<generation>/<video>/``:

* integer columns in the smallest dtype that holds them exactly (never ``uint64``, which
  NumPy would promote to float when mixed with signed values);
* a constant column (size, composition offset) stored once, an arithmetic one (dts with a
  constant duration, offsets with a constant byte stride) as start + step;
* float64 ``pts`` always stored (bit-exact), dense ``sync``/``presented`` flags;
* loaded with ``mmap_mode="r"``, so ranks on one machine share pages.

Files are not fsynced one by one (4,800 of them at 1,000,000 episodes, seconds of a cold open):
every map checks each file's size and CRC-32, so a folder a crash left torn is rebuilt.

A generation is one sidecar content id plus the index format: a rebuilt sidecar makes a new
immutable generation and live readers of the old one keep working. Conversion runs under a
lock and installs each video's directory with one atomic rename.

The index is a cache of ours, so it is checked each time it is mapped: ``meta.json`` carries a
digest of itself and the size and CRC-32 of every array file, and must name the video and
sample count the sidecar has. A folder failing any check is rebuilt (one warning naming it).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.errors import IndexDamaged, SidecarDamaged, SidecarError
from feedline.episodes.video.mp4.table import INT_COLUMNS, SampleTable, TrackInfo
from feedline.episodes.video.sidecar import (
    DEFAULT_WORKERS,
    Sidecar,
    VideoEntry,
    ensure_sidecar,
    try_load,
)
from feedline.io import LockTimeout, Store, feedline_home, process_lock
from feedline.io.arrays import load_npy
from feedline.io.atomic import fsync_dir

log = logging.getLogger(__name__)

#: 2: ``meta.json`` holds a self-digest and each array file's size and CRC-32.
#: 3: every non-constant column is a mapped file (no arithmetic ranges made into arrays at map
#: time) and the derived orders (keyframes, display order and times) are stored too, so a mapped
#: table holds no private memory: a worker touching 400 videos held ~3 MiB of computed arrays per
#: 80,000-sample table, 1.3 GiB at 1,000,000 episodes.
INDEX_FORMAT = 3
#: The derived orders stored beside the columns, each as the table's lazily computed field.
_DERIVED = (("sync_index", "_sync_index"), ("display_order", "_display"), ("display_pts", "_display_pts"))
_DTYPES = (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.int64)


def generation_dir(sidecar: Sidecar) -> Path:
    """The derived-index folder of one sidecar content and index format."""
    return _generation(sidecar.content_id)


def _generation(content_id: str) -> Path:
    return feedline_home() / "streaming-indexes" / f"f{INDEX_FORMAT}-{content_id[:24]}"


def video_dir(sidecar: Sidecar, path: str) -> Path:
    """The derived-index folder of one video in ``sidecar``'s generation."""
    return index_folder(sidecar.content_id, path)


def index_folder(content_id: str, path: str) -> Path:
    """The derived-index folder of one video in the generation of sidecar ``content_id``."""
    return _generation(content_id) / hashlib.sha256(path.encode()).hexdigest()[:20]


def smallest_dtype(values: np.ndarray) -> np.dtype:
    """The narrowest integer dtype that represents every value exactly."""
    if len(values) == 0:
        return np.dtype(np.uint8)
    lo, hi = int(values.min()), int(values.max())
    for dtype in _DTYPES:
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return np.dtype(dtype)
    raise SidecarError(f"index values {lo}..{hi} do not fit in int64")


def _save(folder: Path, name: str, values: np.ndarray, sums: dict[str, list[int]]) -> None:
    """Write ``values`` as ``name.npy`` (the bytes ``np.save`` writes) and note their size and
    CRC-32 in ``sums``, from the bytes in hand rather than read back."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(values), allow_pickle=False)
    data = buf.getbuffer()
    (folder / f"{name}.npy").write_bytes(data)
    sums[f"{name}.npy"] = [len(data), zlib.crc32(data)]


def _encode(name: str, values: np.ndarray, folder: Path, sums: dict[str, list[int]]) -> dict[str, Any]:
    n = len(values)
    if n and (values == values[0]).all():
        return {"kind": "const", "value": int(values[0])}
    steps = np.diff(values)
    # An arithmetic run (constant-rate dts and ticks) keeps the int64 it was computed as when it
    # was stored as a range: code downstream adds and subtracts these columns as they come.
    dtype = np.dtype(np.int64) if n > 2 and (steps == steps[0]).all() else smallest_dtype(values)
    _save(folder, name, values.astype(dtype, copy=False), sums)
    return {"kind": "array", "dtype": dtype.str}


def _decode(spec: dict[str, Any], name: str, n: int, folder: Path) -> np.ndarray:
    kind = spec["kind"]
    if kind == "const":
        return np.broadcast_to(np.int64(spec["value"]), (n,))
    array = load_npy(folder / f"{name}.npy", mmap=True)
    if len(array) != n:
        raise SidecarError(f"{folder}: column {name} has {len(array)} entries, expected {n}")
    return array


def _meta_digest(meta: dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _file_sum(path: Path) -> list[int]:
    data = path.read_bytes()
    return [len(data), zlib.crc32(data)]


def convert_video(sidecar: Sidecar, path: str, folder: Path) -> None:
    """Write one video's derived index into the (new, empty) ``folder`` and fsync its files."""
    convert_table(sidecar.table(path), path, sidecar.entries[path].fingerprint, folder)


def convert_table(table: SampleTable, path: str, fingerprint: str | None, folder: Path) -> None:
    """Write the derived index of ``path``'s sample table into the (new, empty) ``folder``."""
    n = len(table)
    sums: dict[str, list[int]] = {}
    columns = {
        name: _encode(name, np.asarray(getattr(table, name)), folder, sums) for name in INT_COLUMNS
    }
    for flag in ("sync", "presented"):  # dense flags, even when constant
        _save(folder, flag, np.asarray(getattr(table, flag), dtype=np.bool_), sums)
        columns[flag] = {"kind": "array", "dtype": "|b1"}
    _save(folder, "pts", np.asarray(table.pts, dtype=np.float64), sums)
    for name, _ in _DERIVED:  # int64 orders, float64 times, as computed
        _save(folder, name, np.asarray(getattr(table, name)), sums)
    meta: dict[str, Any] = {
        "format": INDEX_FORMAT,
        "path": path,
        "samples": n,
        "fingerprint": fingerprint,
        "info": table.info.to_json(),
        "columns": columns,
        "files": dict(sorted(sums.items())),
    }
    meta["digest"] = _meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))


#: What a damaged index folder raises. ``meta.json`` is checked against its digest before it is
#: read, so a field of the wrong type past that point is feedline's bug, not damage.
_INDEX_FAULTS = (OSError, ValueError, KeyError, EOFError)


def map_converted(folder: Path, entry: VideoEntry | None = None) -> SampleTable:
    """Map one converted video index (a folder of column arrays) read-only.

    Checks ``meta.json``'s digest, every array file's size and CRC-32, and (given ``entry``,
    the sidecar's record of the video) its path, fingerprint and sample count; any failure is
    an :class:`IndexDamaged` naming the folder.
    """
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if not isinstance(meta, dict) or meta.get("format") != INDEX_FORMAT:
            raise ValueError(f"index format {meta.get('format') if isinstance(meta, dict) else meta!r}")
        if meta.get("digest") != _meta_digest(meta):
            raise ValueError("meta.json does not match its digest")
        n = int(meta["samples"])
        if entry is not None and (meta["path"], meta["fingerprint"], n) != (
            entry.path, entry.fingerprint, entry.samples
        ):
            raise ValueError(f"indexes {meta['path']} ({n} samples), not {entry.path}")
        for name, expected in meta["files"].items():
            if _file_sum(folder / name) != expected:
                raise ValueError(f"{name} does not match its recorded size and CRC-32")
        cols = {name: _decode(spec, name, n, folder) for name, spec in meta["columns"].items()}
        pts = load_npy(folder / "pts.npy", mmap=True)
        if pts.shape != (n,):
            raise ValueError(f"pts.npy holds {pts.shape}, expected ({n},)")
        derived = {
            field: load_npy(folder / f"{name}.npy", mmap=True)
            for name, field in _DERIVED
        }
        if not (len(derived["_display"]) == len(derived["_display_pts"]) <= n
                and len(derived["_sync_index"]) <= n):
            raise ValueError("its derived orders do not fit its samples")
        return SampleTable(
            info=TrackInfo.from_json(meta["info"]),
            offset=cols["offset"],
            size=cols["size"],
            dts=cols["dts"],
            ctts=cols["ctts"],
            pts_ticks=cols["pts_ticks"],
            pts=pts,
            sync=cols["sync"],
            presented=cols["presented"],
            origin=None if entry is None else (entry.size, entry.fingerprint),
            **derived,
        )
    except (SidecarError, *_INDEX_FAULTS) as exc:
        text = " ".join(str(exc).split())[:200]
        raise IndexDamaged(f"{folder}: damaged streaming index ({type(exc).__name__}: {text})") from None


def _install_dir(tmp: Path, folder: Path) -> None:
    """Rename the complete ``tmp`` to ``folder``, moving a damaged ``folder`` aside first."""
    trash = None
    if folder.exists() or folder.is_symlink():
        trash = Path(tempfile.mkdtemp(prefix=".damaged-", dir=folder.parent))
        os.rename(folder, trash / "old")
    try:
        os.rename(tmp, folder)
        fsync_dir(folder.parent)
    finally:
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)


def derived_tables(
    sidecar: Sidecar, paths: list[str], lock_timeout_s: float, keep: bool = True
) -> dict[str, SampleTable]:
    """Memory-mapped tables for ``paths`` (converting only those not converted yet, and
    rebuilding, with one warning each, folders that fail their checks).

    ``keep=False`` only converts the missing folders and returns nothing: a dataset's hundreds
    of tables are not all held at once just to have them on disk."""
    out: dict[str, SampleTable] = {}
    todo = []
    for path in paths:
        folder = video_dir(sidecar, path)
        if not (folder.exists() or folder.is_symlink()):
            todo.append(path)
            continue
        if not keep:
            continue  # checked when it is mapped (a damaged folder is rebuilt then)
        try:
            out[path] = map_converted(folder, sidecar.entries[path])
        except IndexDamaged:
            todo.append(path)  # checked again under the lock: another process may repair it
    if todo:
        gen = generation_dir(sidecar)
        gen.mkdir(parents=True, exist_ok=True)
        try:
            with process_lock(gen / ".convert.lock", lock_timeout_s):
                for path in todo:
                    table = _convert_locked(sidecar, path, gen)
                    if keep:
                        out[path] = table
        except LockTimeout as exc:
            raise SidecarError(f"waiting for another process to convert the streaming index: {exc}") from exc
    return out


def _convert_locked(sidecar: Sidecar, path: str, gen: Path) -> SampleTable:
    folder = video_dir(sidecar, path)
    entry = sidecar.entries[path]
    if folder.exists() or folder.is_symlink():
        try:
            return map_converted(folder, entry)
        except IndexDamaged as exc:
            log.warning("rebuilding %s", exc)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=gen))
    try:
        convert_video(sidecar, path, tmp)
        _install_dir(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return map_converted(folder, entry)


class _Staged:
    """Derived-index folders converted from each table while a sidecar is being built, then
    moved into its generation once its content id is known: the opener does not read the
    archive it just wrote back (a tenth of a 1,000,000-episode cold open)."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.folders: dict[str, Path] = {}

    def __call__(self, path: str, table: SampleTable, fingerprint: str | None) -> None:
        if self.root is None:
            base = feedline_home() / "streaming-indexes"
            base.mkdir(parents=True, exist_ok=True)
            self.root = Path(tempfile.mkdtemp(prefix=".staged-", dir=base))
        folder = self.root / hashlib.sha256(path.encode()).hexdigest()[:20]
        folder.mkdir()
        convert_table(table, path, fingerprint, folder)
        self.folders[path] = folder

    def install(self, sidecar: Sidecar, lock_timeout_s: float) -> None:
        """Move the folders of ``sidecar``'s videos that its generation lacks into it."""
        if not self.folders:
            return
        gen = generation_dir(sidecar)
        gen.mkdir(parents=True, exist_ok=True)
        try:
            with process_lock(gen / ".convert.lock", lock_timeout_s):
                for path, folder in self.folders.items():
                    target = video_dir(sidecar, path)
                    if path in sidecar.entries and not (target.exists() or target.is_symlink()):
                        os.rename(folder, target)
                fsync_dir(gen)
        except LockTimeout:
            pass  # another process is converting: the folders are converted the usual way

    def discard(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


class IndexProvider:
    """Sample tables for a store's videos: sidecar lifecycle + derived index, picklable.

    After unpickling (a DataLoader worker), tables already validated by the parent are mapped
    from the same generation without a new listing.

    Args:
        store: where the dataset's videos are read from.
        revision: the dataset revision; keys the sidecar cache. Default ``None``.
        lock_timeout_s: seconds to wait for another process building or converting the same
            index. Default 1800.
        workers: parallel MP4 parses when a sidecar must be built. Default 4.
    """

    def __init__(
        self,
        store: Store,
        *,
        revision: str | None = None,
        lock_timeout_s: float = 1800.0,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.store = store
        self.revision = revision
        self.lock_timeout_s = lock_timeout_s
        self.workers = workers
        self.sidecar_path: Path | None = None
        self.content_id: str | None = None
        self.validated: dict[str, str | None] = {}  # path -> fingerprint checked by a fresh listing
        #: The validated sidecar's record of each validated path: with it a converted folder is
        #: mapped without opening the archive (~40 ms at 400 videos, once per table otherwise).
        self.entries: dict[str, VideoEntry] = {}

    def tables(self, paths: list[str]) -> dict[str, SampleTable]:
        """Memory-mapped sample tables of ``paths`` (building or converting what is missing)."""
        mapped = self._mapped(paths)
        if mapped is not None:
            return mapped
        sidecar = self._reuse(paths) or self._ensure(paths, damaged=None)
        try:
            return derived_tables(sidecar, list(paths), self.lock_timeout_s)
        except SidecarDamaged as exc:  # a member failed its CRC: rebuild the cached archive
            sidecar.close()
            sidecar = self._ensure(paths, damaged=str(exc))
            return derived_tables(sidecar, list(paths), self.lock_timeout_s)
        finally:
            sidecar.close()

    def _mapped(self, paths: list[str]) -> dict[str, SampleTable] | None:
        """``paths``' converted folders of the validated sidecar, mapped and checked, or
        ``None`` when one is not there yet or fails its checks (the full path handles it)."""
        if self.content_id is None or any(
            p not in self.entries or self.entries[p].fingerprint is None for p in paths
        ):
            return None  # as in _reuse: an object without fingerprint is listed again
        out: dict[str, SampleTable] = {}
        for path in paths:
            folder = index_folder(self.content_id, path)
            if not folder.is_dir():
                return None
            try:
                out[path] = map_converted(folder, self.entries[path])
            except IndexDamaged:
                return None
        return out

    def prepare(self, paths: list[str]) -> None:
        """Build (or check) the sidecar of ``paths`` and convert their missing index folders,
        keeping no table: the open makes sure every video is indexed, then maps each when it
        is used."""
        sidecar = self._reuse(paths) or self._ensure(paths, damaged=None)
        try:
            derived_tables(sidecar, list(paths), self.lock_timeout_s, keep=False)
        except SidecarDamaged as exc:
            sidecar.close()
            sidecar = self._ensure(paths, damaged=str(exc))
            derived_tables(sidecar, list(paths), self.lock_timeout_s, keep=False)
        finally:
            sidecar.close()

    def _ensure(self, paths: list[str], damaged: str | None) -> Sidecar:
        staged = _Staged()
        try:
            sidecar, current = ensure_sidecar(
                self.store, paths, revision=self.revision, lock_timeout_s=self.lock_timeout_s,
                workers=self.workers, damaged=damaged, on_table=staged,
            )
            staged.install(sidecar, self.lock_timeout_s)
        finally:
            staged.discard()
        self.sidecar_path = sidecar.path
        if sidecar.content_id != self.content_id:
            self.entries = {}
        self.content_id = sidecar.content_id
        self.validated.update({p: info.fingerprint for p, info in current.items()})
        self.entries.update({p: sidecar.entries[p] for p in current if p in sidecar.entries})
        return sidecar

    def _reuse(self, paths: list[str]) -> Sidecar | None:
        if self.sidecar_path is None or any(p not in self.validated for p in paths):
            return None
        sidecar = try_load(self.sidecar_path)
        if sidecar is None:
            return None
        if sidecar.content_id == self.content_id:
            return sidecar  # the very archive the parent process validated
        for path in paths:
            entry = sidecar.entries.get(path)
            if entry is None or entry.fingerprint != self.validated[path] or entry.fingerprint is None:
                sidecar.close()
                return None
        return sidecar
