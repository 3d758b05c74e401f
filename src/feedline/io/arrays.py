"""Local ``.npy`` / ``.npz`` reads that are safe from many threads at once.

numpy parses every array header with ``ast.literal_eval``, and CPython 3.11 raises
``SystemError: AST constructor recursion depth mismatch`` when two threads build ASTs at the same
time (python/cpython#106905). The footer readers and a worker's fetch threads load cached arrays
concurrently, so every such load goes through one lock; it is held for the header and the
mapping (or the small read), not for the work done with the arrays.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: Held around every header parse; also for members read lazily from an open ``np.load`` archive.
NPY_LOCK = threading.Lock()


def load_npy(path: Path, *, mmap: bool = False) -> np.ndarray:
    """One ``.npy`` file (memory-mapped read-only with ``mmap``), never unpickled."""
    with NPY_LOCK:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """Every member of an ``.npz`` archive, read now, never unpickled."""
    with NPY_LOCK, np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def read_members(archive: Any, names: Mapping[str, str]) -> dict[str, np.ndarray]:
    """``{key: archive[member]}`` of an open ``np.load`` archive (each header parsed as read)."""
    with NPY_LOCK:
        return {key: archive[member] for key, member in names.items()}
