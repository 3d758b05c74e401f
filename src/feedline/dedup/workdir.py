"""The work dir of a staged (distributed) dedup run: parameters, arrays and done markers.

Why: a run over many shards is killed sometimes; a rerun must redo only the tasks that did not
finish, and must never mix arrays made with other settings. So the first run records its
parameters (dedup settings, partitions, every input's name, size and ETag/mtime) in
``params.json``; a rerun with different ones is refused. Each task writes its arrays with
:func:`feedline.io.atomic_write` and then its ``<task>.done.json`` marker, also atomically: a
marker exists only when every file it vouches for is complete.

Arrays are plain ``.npy`` files (fixed-width numpy, memory-mapped by readers), never pickles.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from feedline.dedup.errors import DedupError
from feedline.io import atomic_write

PARAMS_NAME = "params.json"
MARKER_SUFFIX = ".done.json"


def params_digest(params: dict[str, Any]) -> str:
    """A short stable digest of the parameters, stored in every marker."""
    return hashlib.sha256(orjson.dumps(params, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


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
    def marker_path(self, task: str) -> Path:
        return self.path(task + MARKER_SUFFIX)

    def done(self, task: str) -> dict[str, Any] | None:
        """The marker of a finished task (its recorded counts), or None."""
        path = self.marker_path(task)
        try:
            marker = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except orjson.JSONDecodeError:
            return None  # cannot happen with atomic installs; redo the task rather than trust it
        if marker.get("params") != self.digest:
            return None
        return marker

    def mark(self, task: str, info: dict[str, Any]) -> dict[str, Any]:
        marker = {"params": self.digest, **info}
        with atomic_write(self.marker_path(task), "wb") as f:
            f.write(orjson.dumps(marker))
        return marker
