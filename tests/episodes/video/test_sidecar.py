"""Sidecar archive (schema v3) and its lifecycle: cache, published copy, locked build, invalidation."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from feedline.episodes.errors import SidecarError
from feedline.episodes.video.mp4.table import INT_COLUMNS, read_table
from feedline.episodes.video.sidecar import (
    PUBLISHED_PATH,
    SCHEMA_VERSION,
    cache_path,
    current_objects,
    ensure_sidecar,
    parse_video,
    write_sidecar,
)
from feedline.io import open_store
from tests.episodes import mp4_factory as factory

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(corpus_src: Path, tmp_path: Path) -> Path:
    """A private copy per test (tests replace videos)."""
    target = tmp_path / "root"
    shutil.copytree(corpus_src, target)
    return target


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("FEEDLINE_HOME", str(path))
    return path


VIDEOS = sorted(f"videos/{name}" for name in factory.CORPUS)


class CountingParse:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, store, path, info):  # type: ignore[no-untyped-def]
        self.paths.append(path)
        return parse_video(store, path, info)


def flip_payload_byte(path: Path) -> None:
    """Replace the file by one of the same size with different content (a new object)."""
    data = bytearray(path.read_bytes())
    table = read_table(lambda s, e: bytes(data[s:e]), len(data), str(path))
    data[int(table.offset[-1]) + 3] ^= 0xFF
    tmp = path.with_suffix(".new")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, path)


def test_archive_is_plain_npz_with_canonical_columns(root: Path, home: Path) -> None:
    store = open_store(str(root))
    current = current_objects(store, VIDEOS)
    sidecar = write_sidecar(home / "s.npz", store, current, revision="r1", complete=True, workers=2)
    with np.load(home / "s.npz", allow_pickle=False) as npz:
        meta = json.loads(npz["meta.json"])
        assert meta["schema_version"] == SCHEMA_VERSION == 3 and meta["revision"] == "r1"
        assert meta["complete"] is True
        for video in meta["sources"]:  # schema 3's key, kept so published sidecars stay readable
            assert video["fingerprint"] == current[video["path"]].fingerprint
            for column in INT_COLUMNS:
                assert npz[f"{video['key']}/{column}"].dtype == np.int64
            assert npz[f"{video['key']}/pts"].dtype == np.float64
    for path in VIDEOS:
        direct = parse_video(store, path, current[path])
        stored = sidecar.table(path)
        for column in (*INT_COLUMNS, "pts"):
            assert np.array_equal(getattr(direct, column), getattr(stored, column)), column
        assert stored.info == direct.info
    # same content, same bytes (fixed zip times, sorted paths)
    again = write_sidecar(home / "t.npz", store, current, revision="r1", complete=True, workers=1)
    assert again.content_id == sidecar.content_id
    assert (home / "s.npz").read_bytes() == (home / "t.npz").read_bytes()


def test_build_holds_a_bounded_number_of_parse_results(root: Path, home: Path) -> None:
    store = open_store(str(root))
    current = current_objects(store, VIDEOS)
    counts = {"parsed": 0, "written": 0, "worst": 0}
    lock = threading.Lock()

    def parse(store, path, info):  # type: ignore[no-untyped-def]
        table = parse_video(store, path, info)
        with lock:
            counts["parsed"] += 1
            counts["worst"] = max(counts["worst"], counts["parsed"] - counts["written"])
        return table

    def progress(path: str) -> None:
        counts["written"] += 1

    write_sidecar(home / "s.npz", store, current, revision=None, workers=2, max_held=2,
                  parse=parse, progress=progress)
    assert counts["written"] == len(VIDEOS)
    assert counts["worst"] <= 2


def test_cache_then_rebuild_only_replaced_video_same_size(root: Path, home: Path) -> None:
    store = open_store(str(root))
    parse = CountingParse()
    first, _ = ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    assert sorted(parse.paths) == VIDEOS
    assert first.path == cache_path(store, "main", current_objects(store, VIDEOS))
    parse.paths.clear()
    second, _ = ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    assert parse.paths == [] and second.content_id == first.content_id
    # a replaced object of exactly the same size is re-indexed, and only that one
    victim = root / VIDEOS[1]
    size = victim.stat().st_size
    flip_payload_byte(victim)
    assert victim.stat().st_size == size
    third, _ = ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    assert parse.paths == [VIDEOS[1]]
    assert third.content_id != first.content_id
    # another revision never shares the cache entry
    parse.paths.clear()
    ensure_sidecar(store, VIDEOS[:1], revision="v2.0", parse=parse)
    assert parse.paths == VIDEOS[:1]


def test_older_schema_uses_a_separate_key_and_is_never_read(root: Path, home: Path) -> None:
    store = open_store(str(root))
    target = cache_path(store, "main", current_objects(store, VIDEOS))
    target.parent.mkdir(parents=True)
    old = target.with_name("sidecar-v2.npz")
    old.write_bytes(b"an older schema archive")
    # a v3-named file holding another schema is ignored and rebuilt, never trusted
    with zipfile.ZipFile(target, "w") as zf:
        zf.writestr("meta.json", json.dumps({"format": "feedline-mp4-sidecar", "schema_version": 2}))
    parse = CountingParse()
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    assert sorted(parse.paths) == VIDEOS and sidecar.meta["schema_version"] == 3
    assert old.read_bytes() == b"an older schema archive"
    # a damaged cache file (disk full, foreign tool) is rebuilt as well
    sidecar.close()
    target.write_bytes(target.read_bytes()[:100])
    parse.paths.clear()
    ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    assert sorted(parse.paths) == VIDEOS


def test_published_sidecar_is_used_and_validated(root: Path, home: Path) -> None:
    store = open_store(str(root))
    current = current_objects(store, VIDEOS)
    write_sidecar(root / PUBLISHED_PATH, store, current, revision=None, complete=True)
    parse = CountingParse()
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    assert parse.paths == [] and sidecar.complete
    assert cache_path(store, "main", current_objects(store, VIDEOS)).is_file()
    # a stale published sidecar still serves the unchanged videos; the replaced one is rebuilt
    shutil.rmtree(home)
    flip_payload_byte(root / VIDEOS[0])
    sidecar, _ = ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    assert parse.paths == [VIDEOS[0]]


def test_store_without_fingerprints_rebuilds_every_open(corpus_src: Path, home: Path, nginx_server) -> None:
    target = Path(nginx_server.root) / "sidecar-noetag"
    if not target.exists():
        shutil.copytree(corpus_src, target)
    store = open_store(f"{nginx_server.noetag_url}/sidecar-noetag")
    assert store.stat(VIDEOS[0]).fingerprint is None
    parse = CountingParse()
    ensure_sidecar(store, VIDEOS[:2], revision="main", parse=parse)
    ensure_sidecar(store, VIDEOS[:2], revision="main", parse=parse)
    assert sorted(parse.paths) == sorted(VIDEOS[:2] * 2)
    # with ETags (strong fingerprints) the second open is served from the cache
    store = open_store(f"{nginx_server.url}/sidecar-noetag")
    parse.paths.clear()
    ensure_sidecar(store, VIDEOS[:2], revision="main", parse=parse)
    ensure_sidecar(store, VIDEOS[:2], revision="main", parse=parse)
    assert sorted(parse.paths) == VIDEOS[:2]


def test_s3_replaced_same_size_object_rebuilds(corpus_src: Path, home: Path, s3_server) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    prefix = f"{s3_server.bucket}/sidecar-replace"
    for path in VIDEOS:
        fs.pipe(f"{prefix}/{path}", (corpus_src / path).read_bytes())
    store = open_store(f"s3://{prefix}", **s3_server.storage_options)
    parse = CountingParse()
    ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    data = bytearray((corpus_src / VIDEOS[2]).read_bytes())
    data[-1] ^= 0x01  # moov at the front: the last byte is sample payload
    fs.pipe(f"{prefix}/{VIDEOS[2]}", bytes(data))
    parse.paths.clear()
    ensure_sidecar(store, VIDEOS, revision="main", parse=parse)
    assert parse.paths == [VIDEOS[2]]


# ---------------------------------------------------------------------- real processes


SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from feedline.episodes.video import sidecar
    from feedline.io import open_store

    root, log, delay, paths = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]

    def slow_parse(store, path, info):
        with open(log, "a") as handle:
            handle.write(path + "\\n")
        time.sleep(delay)
        return sidecar.parse_video(store, path, info)

    sc, _ = sidecar.ensure_sidecar(open_store(root), paths, revision="main", workers=1, parse=slow_parse)
    print(sc.content_id)
    """
)


def _spawn(root: Path, log: Path, delay: float, paths: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(root), str(log), str(delay), *paths],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait_for_lines(log: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{log} never reached {count} lines")


def test_kill_9_during_build_keeps_previous_sidecar(root: Path, home: Path, tmp_path: Path) -> None:
    store = open_store(str(root))
    before, _ = ensure_sidecar(store, VIDEOS, revision="main")
    target = cache_path(store, "main", current_objects(store, VIDEOS))
    original = target.read_bytes()
    flip_payload_byte(root / VIDEOS[0])
    log = tmp_path / "parse.log"
    proc = _spawn(root, log, 30.0, VIDEOS)
    try:
        _wait_for_lines(log, 1)
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert target.read_bytes() == original  # the previous archive, intact
    parse = CountingParse()
    after, _ = ensure_sidecar(store, VIDEOS, revision="main", parse=parse, lock_timeout_s=10)
    assert parse.paths == [VIDEOS[0]] and after.content_id != before.content_id


def test_two_processes_race_and_build_once(root: Path, home: Path, tmp_path: Path) -> None:
    log = tmp_path / "parse.log"
    procs = [_spawn(root, log, 0.3, VIDEOS) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert sorted(log.read_text().splitlines()) == VIDEOS  # each video parsed once in all
    assert outs[0][0].strip() == outs[1][0].strip()  # both got the same archive


def test_lock_timeout_names_the_lock_and_holder(root: Path, home: Path, tmp_path: Path) -> None:
    store = open_store(str(root))
    lock = cache_path(store, "main", current_objects(store, VIDEOS)).with_name(cache_path(store, "main", current_objects(store, VIDEOS)).name + ".lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from feedline.io import process_lock
            with process_lock({str(lock)!r}, 5):
                print("held", flush=True)
                time.sleep(30)
        """)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(SidecarError) as info:
            ensure_sidecar(store, VIDEOS, revision="main", lock_timeout_s=0.5)
        message = str(info.value)
        assert str(lock) in message and f"pid {holder.pid}" in message
        assert "raise sidecar_lock_timeout_s" in message and "streaming_" not in message
    finally:
        holder.kill()
        holder.wait()
