"""The derived memory-mapped index: narrow dtypes, constants once, generations, partial conversion."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from feedline.episodes.video.index import (
    IndexProvider,
    derived_tables,
    generation_dir,
    smallest_dtype,
    video_dir,
)
from feedline.episodes.video.mp4.table import INT_COLUMNS
from feedline.episodes.video.sidecar import current_objects, ensure_sidecar
from feedline.io import open_store
from tests.episodes import mp4_factory as factory

VIDEOS = sorted(f"videos/{name}" for name in factory.CORPUS)


def test_smallest_exact_dtype() -> None:
    assert smallest_dtype(np.array([0, 255])) == np.uint8
    assert smallest_dtype(np.array([-1, 100])) == np.int8
    assert smallest_dtype(np.array([0, 70_000])) == np.uint32
    assert smallest_dtype(np.array([-40_000, 5])) == np.int32
    assert smallest_dtype(np.array([0, 2**40])) == np.int64
    assert smallest_dtype(np.array([0, 2**33, -1])) == np.int64  # never uint64


def test_conversion_is_exact_narrow_and_read_only(root: Path) -> None:
    store = open_store(str(root))
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main")
    tables = derived_tables(sidecar, VIDEOS, 60)
    for path in VIDEOS:
        canonical, mapped = sidecar.table(path), tables[path]
        for column in (*INT_COLUMNS, "pts"):
            a, b = getattr(canonical, column), getattr(mapped, column)
            assert np.array_equal(a, b), (path, column)
            assert not b.flags.writeable and len(b) == len(a)
        assert mapped.pts.dtype == np.float64 and isinstance(mapped.pts, np.memmap)
        assert mapped.sync.dtype == np.bool_ and isinstance(mapped.sync, np.memmap)
        assert mapped.size.dtype.itemsize <= 2  # tiny frames: sizes fit 16 bits
        assert mapped.info == canonical.info
        for name in ("sync_index", "display_order", "display_pts"):  # stored, mapped, equal
            a, b = getattr(canonical, name), getattr(mapped, name)
            assert np.array_equal(a, b) and isinstance(b, np.memmap), (path, name)
    import json

    meta = json.loads((video_dir(sidecar, "videos/av1_multi.mp4") / "meta.json").read_text())
    # AV1: no reordering -> ctts constant (stored once), dts a constant-duration range
    assert meta["columns"]["ctts"] == {"kind": "const", "value": 0}
    assert meta["columns"]["dts"]["kind"] == "array"  # a mapped file, never an array made at map time
    assert not (video_dir(sidecar, "videos/av1_multi.mp4") / "ctts.npy").exists()
    h264 = json.loads((video_dir(sidecar, "videos/h264_multi.mp4") / "meta.json").read_text())
    assert h264["columns"]["ctts"]["kind"] == "array" and h264["columns"]["ctts"]["dtype"] in ("|u1", "<u2")


def test_only_requested_videos_are_converted(root: Path) -> None:
    store = open_store(str(root))
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main")
    derived_tables(sidecar, VIDEOS[:1], 60)
    gen = generation_dir(sidecar)
    dirs = [p for p in gen.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert dirs == [video_dir(sidecar, VIDEOS[0])]


def test_new_sidecar_makes_new_generation_and_live_readers_keep_working(root: Path) -> None:
    store = open_store(str(root))
    provider = IndexProvider(store, revision="main")
    old = provider.tables(VIDEOS)
    old_sizes = {p: np.array(old[p].size) for p in VIDEOS}
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main")
    old_gen = generation_dir(sidecar)
    # replace one video (same path): a new sidecar, a new generation
    victim = root / VIDEOS[3]
    shutil.copy(root / VIDEOS[2], victim.with_suffix(".tmp"))
    os.replace(victim.with_suffix(".tmp"), victim)
    fresh = IndexProvider(store, revision="main").tables(VIDEOS)
    new_sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main")
    assert generation_dir(new_sidecar) != old_gen and old_gen.is_dir()
    assert np.array_equal(fresh[VIDEOS[3]].size, fresh[VIDEOS[2]].size)
    for path in VIDEOS:  # the old mappings are untouched
        assert np.array_equal(np.array(old[path].size), old_sizes[path])


def test_pickled_provider_reuses_validated_generation(root: Path) -> None:
    import pickle

    store = open_store(str(root))
    provider = IndexProvider(store, revision="main")
    provider.tables(VIDEOS[:2])
    clone = pickle.loads(pickle.dumps(provider))
    calls = []
    clone.store.list = lambda prefix="": calls.append(prefix) or []  # type: ignore[method-assign]
    tables = clone.tables(VIDEOS[:2])
    assert calls == [] and set(tables) == set(VIDEOS[:2])
    assert current_objects(store, VIDEOS[:2]).keys() == set(VIDEOS[:2])


def test_two_processes_convert_concurrently(root: Path) -> None:
    import subprocess
    import sys
    import textwrap

    store = open_store(str(root))
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main")
    script = textwrap.dedent(
        f"""
        import numpy as np
        from pathlib import Path
        from feedline.episodes.video.index import derived_tables
        from feedline.episodes.video.sidecar import Sidecar
        tables = derived_tables(Sidecar(Path({str(sidecar.path)!r})), {VIDEOS!r}, 60)
        print(sum(int(np.asarray(t.size).sum()) for t in tables.values()))
        """
    )
    repo = str(Path(__file__).resolve().parents[2])
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": repo})
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _, err in outs]
    total = sum(int(np.asarray(sidecar.table(p).size).sum()) for p in VIDEOS)
    assert [int(out) for out, _ in outs] == [total, total]
    gen = generation_dir(sidecar)
    assert sorted(p.name for p in gen.iterdir() if p.is_dir()) == sorted(
        video_dir(sidecar, p).name for p in VIDEOS
    )  # no temporary folders left behind


def test_prepare_converts_every_video_and_keeps_no_table(root: Path) -> None:
    store = open_store(str(root))
    provider = IndexProvider(store, revision="main")
    provider.prepare(VIDEOS)
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main")
    assert all(video_dir(sidecar, p).is_dir() for p in VIDEOS)
    assert set(provider.entries) == set(VIDEOS)


def test_a_converted_table_is_mapped_without_opening_the_sidecar(root: Path, monkeypatch) -> None:
    """Once validated, mapping a table reads its own folder only: the archive (hundreds of
    members at 1,000,000 episodes) is not opened again per table."""
    from feedline.episodes.video import index as index_module

    store = open_store(str(root))
    provider = IndexProvider(store, revision="main")
    provider.prepare(VIDEOS)
    loads = []
    real = index_module.try_load
    monkeypatch.setattr(index_module, "try_load", lambda path: loads.append(path) or real(path))
    tables = {p: provider.tables([p])[p] for p in VIDEOS}
    assert loads == []
    full = IndexProvider(store, revision="main").tables(VIDEOS)
    for path in VIDEOS:
        assert np.array_equal(tables[path].offset, full[path].offset)
        assert np.array_equal(tables[path].pts, full[path].pts)
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main")
    shutil.rmtree(video_dir(sidecar, VIDEOS[0]))  # gone: the full path converts it again
    assert np.array_equal(provider.tables([VIDEOS[0]])[VIDEOS[0]].size, full[VIDEOS[0]].size)


def test_a_reader_keeps_a_bounded_number_of_tables(root: Path, monkeypatch) -> None:
    from feedline.episodes.video import frames

    monkeypatch.setattr(frames, "TABLE_CACHE_SIZE", 2)
    reader = frames.VideoFrameReader(open_store(str(root)), revision="main", video_paths=VIDEOS)
    assert len(reader._tables) == 0  # the open indexes every video and maps none yet
    first = reader.table(VIDEOS[0])
    for path in VIDEOS[1:]:
        reader.table(path)
    assert list(reader._tables) == VIDEOS[-2:]
    assert np.array_equal(reader.table(VIDEOS[0]).offset, first.offset)  # mapped again


def test_a_fresh_build_converts_from_the_tables_in_hand(root: Path, monkeypatch) -> None:
    """The opener that builds the sidecar converts each video's index from the table it just
    parsed (no read back of the archive), and those folders equal converted-from-archive ones."""
    from feedline.episodes.video import sidecar as sidecar_module

    reads = []
    real = sidecar_module.Sidecar.table
    monkeypatch.setattr(sidecar_module.Sidecar, "table", lambda self, p: reads.append(p) or real(self, p))
    store = open_store(str(root))
    provider = IndexProvider(store, revision="main")
    provider.prepare(VIDEOS)
    assert reads == []
    staged = {p: provider.tables([p])[p] for p in VIDEOS}
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main")
    gen = generation_dir(sidecar)
    assert not [p for p in gen.parent.iterdir() if p.name.startswith(".staged-")]
    shutil.rmtree(gen)
    again = IndexProvider(store, revision="main").tables(VIDEOS)  # converted from the archive
    assert reads  # this time the archive was read
    for path in VIDEOS:
        for column in (*INT_COLUMNS, "pts", "sync", "presented"):
            assert np.array_equal(getattr(staged[path], column), getattr(again[path], column))
