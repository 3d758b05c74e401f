"""Damaged local caches (the sidecar archive, the derived index): detected on load, rebuilt with
one warning naming the damaged file, and the tables read afterwards are exact. A damaged
published sidecar is ignored with a warning and the index is built locally. An archive edited
consistently (every zip CRC recomputed) is damage too: the frames read after it are exact."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset, decode_identity
from feedline.episodes.video import sidecar as sidecar_module
from feedline.episodes.video.index import IndexProvider, video_dir
from feedline.episodes.video.mp4.table import INT_COLUMNS
from feedline.episodes.video.sidecar import (
    PUBLISHED_PATH,
    SIDECAR_NAME,
    Sidecar,
    cache_path,
    current_objects,
    parse_video,
    write_sidecar,
)
from feedline.io import open_store
from tests.episodes import mp4_factory as factory

VIDEOS = sorted(f"videos/{name}" for name in factory.CORPUS)
REVISION = "main"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _cache(root: Path) -> Path:
    store = open_store(str(root))
    return cache_path(store, REVISION, current_objects(store, VIDEOS))


def _tables(root: Path) -> dict:
    return IndexProvider(open_store(str(root)), revision=REVISION, lock_timeout_s=60).tables(VIDEOS)


def _same(a: dict, b: dict) -> None:
    for path in VIDEOS:
        for column in (*INT_COLUMNS, "pts"):
            assert np.array_equal(getattr(a[path], column), getattr(b[path], column)), (path, column)
        assert a[path].info == b[path].info


def _repaired_with_one_warning(
    root: Path, good: dict, damaged: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The next open gives exact tables and one warning naming ``damaged``; the one after, none."""
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _same(good, _tables(root))
    messages = _warnings(caplog)
    assert len(messages) == 1 and str(damaged) in messages[0] and "damaged" in messages[0], messages
    caplog.clear()
    _same(good, _tables(root))
    assert _warnings(caplog) == []


def _member_data_offset(archive: Path, name: str) -> tuple[int, int]:
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(name)
    raw = archive.read_bytes()
    at = info.header_offset
    start = at + 30 + int.from_bytes(raw[at + 26 : at + 28], "little") + int.from_bytes(raw[at + 28 : at + 30], "little")
    return start, info.compress_size


def zero_bytes(archive: Path) -> None:
    archive.write_bytes(b"")


def truncated(archive: Path) -> None:
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])


def bad_crc(archive: Path) -> None:
    """A flipped bit inside one member's compressed data: the directory still loads."""
    start, size = _member_data_offset(archive, "s0/pts.npy")
    data = bytearray(archive.read_bytes())
    data[start + size // 2] ^= 0x01
    archive.write_bytes(bytes(data))


def no_content_id(archive: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    meta = json.loads(members["meta.json"])
    del meta["content_id"]
    members["meta.json"] = json.dumps(meta).encode()
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _edit_meta(archive: Path, edit: Callable[[dict], None]) -> None:
    with zipfile.ZipFile(archive) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    meta = json.loads(members["meta.json"])
    edit(meta)
    members["meta.json"] = json.dumps(meta).encode()
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def videos_not_a_list(archive: Path) -> None:
    """JSON of the wrong shape in meta.json is damage, not a crash."""
    _edit_meta(archive, lambda meta: meta.update(sources=7))


def entry_info_wrong_type(archive: Path) -> None:
    def edit(meta: dict) -> None:
        meta["sources"][0]["info"]["edits"] = 5  # not a list of pairs

    _edit_meta(archive, edit)


def _rewrite(archive: Path, edit: Callable[[str, bytes], bytes], *, keep_comment: bool) -> None:
    """Rewrite every member through zipfile, which recomputes each CRC-32: an edit no CRC check
    sees. ``meta.json`` (and the content id in it) is kept as it was."""
    with zipfile.ZipFile(archive) as zf:
        members = [(info, edit(info.filename, zf.read(info))) for info in zf.infolist()]
        comment = zf.comment
    with zipfile.ZipFile(archive, "w") as zf:
        for info, data in members:
            zf.writestr(info, data)
        if keep_comment:
            zf.comment = comment


def _roll_pts(name: str, data: bytes) -> bytes:
    if not name.endswith("/pts.npy"):
        return data
    out = io.BytesIO()
    np.lib.format.write_array(out, np.roll(np.load(io.BytesIO(data)), 1))
    return out.getvalue()


def pts_rolled(archive: Path) -> None:
    """Every video's pts rolled by one sample, CRCs recomputed, the directory digest kept."""
    _rewrite(archive, _roll_pts, keep_comment=True)


def pts_rolled_no_digest(archive: Path) -> None:
    """The same edit by a tool that drops the zip comment: checked in full against the content id."""
    _rewrite(archive, _roll_pts, keep_comment=False)


@pytest.mark.parametrize(
    "damage", [zero_bytes, truncated, bad_crc, no_content_id, videos_not_a_list,
               entry_info_wrong_type, pts_rolled, pts_rolled_no_digest]
)
def test_damaged_sidecar_cache_is_rebuilt_with_one_warning(
    root: Path, damage: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    good = _tables(root)
    target = _cache(root)
    shutil.rmtree(target.parents[4] / "streaming-indexes")  # the sidecar is read again
    damage(target)
    _repaired_with_one_warning(root, good, target, caplog)
    Sidecar(target).verify()  # rebuilt: a complete archive matching its content id


def test_a_bug_while_reading_the_sidecar_is_not_reported_as_damage(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only faults of the file are damage: a TypeError of feedline's own (caused here on purpose,
    since no archive makes the code itself wrong) surfaces as itself, not as a rebuild."""
    _tables(root)
    target = _cache(root)

    def broken(entry, sizes):
        raise TypeError("a bug in the reader")

    monkeypatch.setattr(sidecar_module, "check_members", broken)
    with pytest.raises(TypeError, match="a bug in the reader"):
        Sidecar(target)


def test_cache_without_a_directory_digest_is_checked_in_full_and_used(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Archives written before the digest existed are still used: intact ones with no warning."""
    good = _tables(root)
    target = _cache(root)
    shutil.rmtree(target.parents[4] / "streaming-indexes")
    _rewrite(target, lambda name, data: data, keep_comment=False)
    before = target.read_bytes()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _same(good, _tables(root))
    assert _warnings(caplog) == [] and target.read_bytes() == before


CAM0 = "observation.images.cam_0"


@pytest.mark.parametrize("reader", ["map-style", "streaming"])
def test_consistently_edited_cache_gives_exact_frames(
    reader: str, av1_dataset: SyntheticDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every frame of a dataset read after its cached archive's pts were rolled (CRCs recomputed)
    is the frame its row names, and the cache is rebuilt with one warning naming it."""
    home = tmp_path / "home"
    monkeypatch.setenv("FEEDLINE_HOME", str(home))
    root = str(av1_dataset.root)
    EpisodeDataset(root=root)[0]  # builds the cache
    (archive,) = home.rglob(SIDECAR_NAME)
    pts_rolled(archive)
    shutil.rmtree(home / "streaming-indexes")  # the frames' index is derived from the archive again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        if reader == "map-style":
            ds = EpisodeDataset(root=root)
            items = [ds[i] for i in range(len(ds))]
        else:
            items = list(StreamingEpisodeDataset(root=root))
        seen = [(decode_identity(it[CAM0]), int(it["episode_index"]), int(it["frame_index"])) for it in items]
    assert len(seen) == av1_dataset.total_frames
    assert [identity for identity, _, _ in seen] == [(0, episode, frame) for _, episode, frame in seen]
    messages = [m for m in _warnings(caplog) if "sidecar" in m]  # not the num_workers=0 advice
    assert len(messages) == 1 and str(archive) in messages[0] and "damaged" in messages[0], messages


def _folder(root: Path, path: str) -> Path:
    sidecar = Sidecar(_cache(root))
    try:
        return video_dir(sidecar, path)
    finally:
        sidecar.close()


def meta_truncated(folder: Path) -> None:
    meta = folder / "meta.json"
    meta.write_bytes(meta.read_bytes()[:40])


def meta_missing(folder: Path) -> None:
    (folder / "meta.json").unlink()


def pts_truncated(folder: Path) -> None:
    pts = folder / "pts.npy"
    pts.write_bytes(pts.read_bytes()[:-16])


def pts_missing(folder: Path) -> None:
    (folder / "pts.npy").unlink()


def sync_zeroed(folder: Path) -> None:
    """The flags' data zeroed (header intact): every sample would read as not a keyframe."""
    sync = folder / "sync.npy"
    raw = sync.read_bytes()
    header = len(raw) - len(np.load(sync))
    sync.write_bytes(raw[:header] + bytes(len(raw) - header))


def meta_sample_count(folder: Path) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    meta["samples"] -= 1
    (folder / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "damage", [meta_truncated, meta_missing, pts_truncated, pts_missing, sync_zeroed, meta_sample_count]
)
def test_damaged_derived_index_is_rebuilt_with_one_warning(
    root: Path, damage: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    good = {  # copies: the mapped files are about to be damaged
        p: dataclasses.replace(t, **{c: np.array(getattr(t, c)) for c in (*INT_COLUMNS, "pts")})
        for p, t in _tables(root).items()
    }
    folder = _folder(root, "videos/h264_multi.mp4")
    damage(folder)
    _repaired_with_one_warning(root, good, folder, caplog)
    assert sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".")) == [".convert.lock"]


def width_not_an_integer(archive: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    meta = json.loads(members["meta.json"])
    meta["sources"][0]["info"]["width"] = "64px"
    members["meta.json"] = json.dumps(meta).encode()
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.mark.parametrize(
    "damage", [zero_bytes, truncated, bad_crc, no_content_id, width_not_an_integer, pts_rolled]
)
def test_damaged_published_sidecar_is_ignored_and_built_locally(
    root: Path, damage: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(str(root))
    published = root / PUBLISHED_PATH
    write_sidecar(published, store, current_objects(store, VIDEOS), revision=None, complete=True)
    damage(published)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        tables = _tables(root)
    ignored = [m for m in _warnings(caplog) if m.startswith("ignoring the published")]
    assert len(ignored) == 1 and store.url(PUBLISHED_PATH) in ignored[0], _warnings(caplog)
    assert "\n" not in ignored[0]
    local = cache_path(store, REVISION, current_objects(store, VIDEOS))
    Sidecar(local).verify()
    for path in VIDEOS:  # built locally from the videos, not copied from the damaged archive
        assert np.array_equal(tables[path].offset, parse_video(store, path, store.stat(path)).offset)
