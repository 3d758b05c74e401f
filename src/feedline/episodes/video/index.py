"""The derived, read-only, memory-mapped index of the video files a rank actually uses.

The sidecar NPZ is compressed and canonical (int64 everywhere). Reading it per process would
cost memory in every rank and DataLoader worker, so the first open converts each needed video
into plain ``.npy`` files under ``feedline_home()/streaming-indexes/<generation>/<video>/``:

* integer columns in the smallest dtype that holds them exactly (never ``uint64``, which
  NumPy would promote to float when mixed with signed values);
* a constant column (size, composition offset) stored once, an arithmetic one (dts with a
  constant duration, offsets with a constant byte stride) as start + step;
* float64 ``pts`` always stored (bit-exact), dense ``sync``/``presented`` flags;
* loaded with ``mmap_mode="r"``, so ranks on one machine share pages.

A generation is one sidecar content id plus the index format: a rebuilt sidecar makes a new
immutable generation and live readers of the old one keep working. Conversion runs under a
lock and installs each video's directory with one atomic rename.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.errors import SidecarError
from feedline.episodes.video.mp4.table import INT_COLUMNS, SampleTable, TrackInfo
from feedline.episodes.video.sidecar import DEFAULT_WORKERS, Sidecar, ensure_sidecar, try_load
from feedline.io import LockTimeout, Store, feedline_home, process_lock

INDEX_FORMAT = 1
_DTYPES = (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.int64)


def generation_dir(sidecar: Sidecar) -> Path:
    """The derived-index folder of one sidecar content and index format."""
    return feedline_home() / "streaming-indexes" / f"f{INDEX_FORMAT}-{sidecar.content_id[:24]}"


def video_dir(sidecar: Sidecar, path: str) -> Path:
    """The derived-index folder of one video in ``sidecar``'s generation."""
    return generation_dir(sidecar) / hashlib.sha256(path.encode()).hexdigest()[:20]


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


def _encode(name: str, values: np.ndarray, folder: Path) -> dict[str, Any]:
    n = len(values)
    if n and (values == values[0]).all():
        return {"kind": "const", "value": int(values[0])}
    if n > 2:
        steps = np.diff(values)
        if (steps == steps[0]).all():
            return {"kind": "range", "start": int(values[0]), "step": int(steps[0])}
    dtype = smallest_dtype(values)
    np.save(folder / f"{name}.npy", values.astype(dtype), allow_pickle=False)
    return {"kind": "array", "dtype": dtype.str}


def _decode(spec: dict[str, Any], name: str, n: int, folder: Path) -> np.ndarray:
    kind = spec["kind"]
    if kind == "const":
        return np.broadcast_to(np.int64(spec["value"]), (n,))
    if kind == "range":
        out = spec["start"] + spec["step"] * np.arange(n, dtype=np.int64)
        out.setflags(write=False)
        return out
    array = np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
    if len(array) != n:
        raise SidecarError(f"{folder}: column {name} has {len(array)} entries, expected {n}")
    return array


def convert_video(sidecar: Sidecar, path: str, folder: Path) -> None:
    """Write one video's derived index into the (new, empty) ``folder``."""
    table = sidecar.table(path)
    n = len(table)
    columns = {name: _encode(name, np.asarray(getattr(table, name)), folder) for name in INT_COLUMNS}
    for flag in ("sync", "presented"):  # dense flags, even when constant
        np.save(folder / f"{flag}.npy", np.asarray(getattr(table, flag), dtype=np.bool_))
        columns[flag] = {"kind": "array", "dtype": "|b1"}
    np.save(folder / "pts.npy", np.asarray(table.pts, dtype=np.float64))
    meta = {
        "format": INDEX_FORMAT,
        "path": path,
        "samples": n,
        "fingerprint": sidecar.entries[path].fingerprint,
        "info": table.info.to_json(),
        "columns": columns,
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))


def map_converted(folder: Path) -> SampleTable:
    """Map one converted video index (a folder of column arrays) read-only."""
    meta = json.loads((folder / "meta.json").read_text())
    n = int(meta["samples"])
    cols = {name: _decode(spec, name, n, folder) for name, spec in meta["columns"].items()}
    pts = np.load(folder / "pts.npy", mmap_mode="r", allow_pickle=False)
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
    )


def derived_tables(sidecar: Sidecar, paths: list[str], lock_timeout_s: float) -> dict[str, SampleTable]:
    """Memory-mapped tables for ``paths`` (converting only those not converted yet)."""
    out: dict[str, SampleTable] = {}
    todo = []
    for path in paths:
        folder = video_dir(sidecar, path)
        if (folder / "meta.json").is_file():
            out[path] = map_converted(folder)
        else:
            todo.append(path)
    if todo:
        gen = generation_dir(sidecar)
        gen.mkdir(parents=True, exist_ok=True)
        try:
            with process_lock(gen / ".convert.lock", lock_timeout_s):
                for path in todo:
                    folder = video_dir(sidecar, path)
                    if not (folder / "meta.json").is_file():
                        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=gen))
                        try:
                            convert_video(sidecar, path, tmp)
                            os.rename(tmp, folder)
                        finally:
                            shutil.rmtree(tmp, ignore_errors=True)
                    out[path] = map_converted(folder)
        except LockTimeout as exc:
            raise SidecarError(f"waiting for another process to convert the streaming index: {exc}") from exc
    return out


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

    def tables(self, paths: list[str]) -> dict[str, SampleTable]:
        """Memory-mapped sample tables of ``paths`` (building or converting what is missing)."""
        sidecar = self._reuse(paths)
        if sidecar is None:
            sidecar, current = ensure_sidecar(
                self.store, paths, revision=self.revision,
                lock_timeout_s=self.lock_timeout_s, workers=self.workers,
            )
            self.sidecar_path = sidecar.path
            self.content_id = sidecar.content_id
            self.validated.update({p: info.fingerprint for p, info in current.items()})
        try:
            return derived_tables(sidecar, list(paths), self.lock_timeout_s)
        finally:
            sidecar.close()

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
