"""feedline.io.arrays: cached arrays load from many threads at once (the footer readers and the
fetch threads do), and come back exact."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from feedline.io.arrays import load_npy, load_npz, read_members


def test_many_threads_load_exact_arrays(tmp_path: Path) -> None:
    # Unlocked, this load pattern raised "AST constructor recursion depth mismatch" on CPython
    # 3.11 (numpy parses each header with ast.literal_eval); the lock makes it one at a time.
    arrays = {f"a{i}": np.arange(i, 50 + i, dtype=np.int64) for i in range(16)}
    for name, values in arrays.items():
        np.save(tmp_path / f"{name}.npy", values)
    np.savez(tmp_path / "all.npz", **arrays)

    def load(i: int) -> bool:
        name = f"a{i % 16}"
        mapped = load_npy(tmp_path / f"{name}.npy", mmap=True)
        whole = load_npz(tmp_path / "all.npz")
        return (isinstance(mapped, np.memmap) and not mapped.flags.writeable
                and np.array_equal(mapped, arrays[name]) and whole.keys() == arrays.keys()
                and all(np.array_equal(whole[k], v) for k, v in arrays.items()))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(load, range(400)))
    with np.load(tmp_path / "all.npz") as archive:
        got = read_members(archive, {"x": "a3", "y": "a5"})
    assert np.array_equal(got["x"], arrays["a3"]) and np.array_equal(got["y"], arrays["a5"])
