"""The work dir of a staged (distributed) dedup run: parameters, arrays and done markers.

Why: a run over many shards is killed sometimes; a rerun must redo only the tasks that did not
finish, and must never mix arrays made with other settings. So the first run records its
parameters (dedup settings, partitions, every input's name, size and ETag/mtime) in
``params.json``; a rerun with different ones is refused. Each task writes its arrays with
:func:`feedline.io.atomic_write` and then its ``<task>.done.json`` marker, a
:class:`feedline.run.markers.DoneMarker` for the parameters' digest, also atomically: a marker
exists only when every file it vouches for is complete. (The digest is the one this module
always computed, so work dirs of earlier versions stay valid.)

Arrays are plain ``.npy`` files (fixed-width numpy, memory-mapped by readers), never pickles.
:class:`NpyWriter` writes one in pieces, so a task streaming over a large shard holds one batch,
not the shard; :class:`NpyRows` reads row ranges back without mapping the whole file.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from feedline.dedup.errors import DedupError
from feedline.io import atomic_write
from feedline.run.markers import DoneMarker, params_digest

PARAMS_NAME = "params.json"
MARKER_SUFFIX = ".done.json"


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``name old -> new`` for each setting that changed (nested settings flattened)."""
    diffs: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key == "inputs":
            diffs.append("inputs (names, sizes or change stamps)")
        elif isinstance(a, dict) and isinstance(b, dict):
            diffs.extend(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
        else:
            diffs.append(f"{key} {a!r} -> {b!r}")
    return diffs


class WorkDir:
    """One run's folder of intermediate arrays and markers."""

    def __init__(self, root: str | os.PathLike[str], params: dict[str, Any]) -> None:
        self.root = Path(root)
        self.params = params
        self.digest = params_digest(params)

    def claim(self) -> None:
        """Record the parameters, or check them against a previous run's; one-line error if they differ."""
        path = self.root / PARAMS_NAME
        if path.exists():
            try:
                old = orjson.loads(path.read_bytes())
            except orjson.JSONDecodeError:
                raise DedupError(f"{path}: unreadable; delete the work dir to start over") from None
            if old != self.params:
                diffs = "; ".join(_differences(old, self.params))
                raise DedupError(
                    f"{self.root}: work dir made with different parameters ({diffs}); "
                    "use another --work-dir or delete it"
                )
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "wb") as f:
            f.write(orjson.dumps(self.params, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))

    @staticmethod
    def recorded_partitions(root: str | os.PathLike[str]) -> int | None:
        """The partition count an earlier run in ``root`` used, so a resume keeps it by default."""
        path = Path(root) / PARAMS_NAME
        try:
            value = orjson.loads(path.read_bytes()).get("partitions")
        except (OSError, orjson.JSONDecodeError, AttributeError):
            return None
        return value if isinstance(value, int) else None

    # -- files ------------------------------------------------------------------------------
    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def save(self, relative: str, array: np.ndarray) -> None:
        """Install one ``.npy`` array atomically."""
        with atomic_write(self.path(relative), "wb") as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)

    def load(self, relative: str, *, mmap: bool = True) -> np.ndarray:
        return np.load(self.path(relative), mmap_mode="r" if mmap else None, allow_pickle=False)

    def save_bytes(self, relative: str, data: bytes) -> None:
        with atomic_write(self.path(relative), "wb") as f:
            f.write(data)

    # -- markers ----------------------------------------------------------------------------
    def marker(self, task: str) -> DoneMarker:
        """``<task>.done.json``, valid only for this run's parameters."""
        return DoneMarker(str(self.path(task + MARKER_SUFFIX)), self.digest)

    def done(self, task: str, require: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The marker of a finished task (its recorded counts), or None; also None when it
        lacks one of the ``require`` entries (a task whose output format changed since)."""
        marker = self.marker(task).read()
        if marker is None or any(marker.get(k) != v for k, v in (require or {}).items()):
            return None
        return marker

    def mark(self, task: str, info: dict[str, Any]) -> dict[str, Any]:
        """Record ``task`` as done with ``info``, after every file it vouches for is installed."""
        return self.marker(task).write(**info)


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


class NpyWriter:
    """A ``.npy`` file appended to batch by batch and installed atomically by :meth:`close`.

    The header is written first for zero rows and rewritten in place at the end: numpy pads a
    header so that the first axis can grow to 21 digits without changing its length."""

    def __init__(self, path: Path, dtype: Any, row_shape: tuple[int, ...] = (), *, durable: bool = True) -> None:
        self.dtype = np.dtype(dtype)
        self.row_shape = row_shape
        self.rows = 0
        self._header_len = len(_npy_header(self.dtype, (0, *row_shape)))
        self._cm: AbstractContextManager[IO[bytes]] = atomic_write(path, "wb", durable=durable)
        self._f = self._cm.__enter__()
        self._f.write(_npy_header(self.dtype, (0, *row_shape)))

    def append(self, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array, dtype=self.dtype)
        if data.shape[1:] != self.row_shape:
            raise ValueError(f"rows of shape {data.shape[1:]}, expected {self.row_shape}")
        self._f.write(memoryview(data).cast("B"))  # the array's own buffer, no copy
        self.rows += len(data)

    def close(self) -> None:
        """Fix the header's row count and install the file."""
        header = _npy_header(self.dtype, (self.rows, *self.row_shape))
        if len(header) != self._header_len:  # numpy's growth padding makes this impossible
            raise DedupError(f"{self.rows} rows do not fit the .npy header written first")
        self._f.seek(0)
        self._f.write(header)
        self._cm.__exit__(None, None, None)

    def abort(self) -> None:
        """Drop the temporary file; the target is left as it was."""
        self._cm.__exit__(DedupError, DedupError("aborted"), None)


class NpyRows:
    """Row ranges of a 1-D or 2-D ``.npy`` file read with ``pread``: memory is the rows asked
    for, not the file pages a memory map would keep resident."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            self._data = f.tell()
        if fortran:
            raise DedupError(f"{path}: Fortran-ordered arrays are not written here")
        self.shape: tuple[int, ...] = shape
        self.dtype = np.dtype(dtype)
        self._row_items = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1

    def raw(self, start: int, stop: int) -> bytes:
        """Rows ``start .. stop - 1`` as the file's bytes (no copy into an array)."""
        size = self.dtype.itemsize * self._row_items
        return os.pread(self._fd, (stop - start) * size, self._data + start * size)

    def rows(self, start: int, stop: int) -> np.ndarray:
        return np.frombuffer(self.raw(start, stop), dtype=self.dtype).reshape(stop - start, *self.shape[1:])

    def close(self) -> None:
        os.close(self._fd)
