"""A video replaced after the dataset was opened: payload reads fail with one line saying it
changed, for both readers (they share :func:`~feedline.episodes.video.minimp4.fetch_span`)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from feedline.episodes.errors import VideoChangedError
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import plan_span
from feedline.episodes.video.mp4.table import read_table
from feedline.io import open_store

VIDEO = "videos/h264_multi.mp4"
OTHER = "videos/av1_single_end.mp4"


def _replace(target: Path, data: bytes) -> None:
    tmp = target.with_suffix(".new")
    tmp.write_bytes(data)
    os.replace(tmp, target)


def _assert_changed(reader: VideoFrameReader, url: str) -> None:
    with pytest.raises(VideoChangedError) as err:
        reader.frames_at(VIDEO, [1.0])
    message = str(err.value)
    assert "\n" not in message and url in message and "changed since the dataset was opened" in message
    table = reader.table(VIDEO)
    with pytest.raises(VideoChangedError):  # what the streaming reader calls
        reader.fetch(VIDEO, plan_span(table, 0, 0))


def test_video_replaced_on_nginx_after_open(corpus_src: Path, nginx_server, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    name = f"changed-{uuid.uuid4().hex[:8]}"
    served = Path(nginx_server.root) / name
    shutil.copytree(corpus_src, served)
    store = open_store(f"{nginx_server.url}/{name}")
    reader = VideoFrameReader(store, video_paths=[VIDEO], decoder_cache_size=0)
    assert reader.frames_at(VIDEO, [0.0]).shape[0] == 1
    _replace(served / VIDEO, (corpus_src / OTHER).read_bytes())  # another video, another size
    _assert_changed(reader, store.url(VIDEO))


@pytest.fixture
def local(corpus_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, VideoFrameReader]:
    """A private copy of the corpus, and a reader that has read one frame of VIDEO."""
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    root = Path(shutil.copytree(corpus_src, tmp_path / "root"))
    reader = VideoFrameReader(open_store(str(root)), video_paths=[VIDEO], decoder_cache_size=0)
    assert reader.frames_at(VIDEO, [0.0]).shape[0] == 1
    return root, reader


def test_video_replaced_by_same_size_content_after_open(local) -> None:
    """Same size, different bytes: the local store's fingerprint tells them apart."""
    root, reader = local
    store = reader.store
    data = bytearray((root / VIDEO).read_bytes())
    table = read_table(lambda s, e: bytes(data[s:e]), len(data), VIDEO)
    data[int(table.offset[-1]) + 3] ^= 0xFF
    _replace(root / VIDEO, bytes(data))
    _assert_changed(reader, store.url(VIDEO))


def test_video_removed_after_open(local) -> None:
    root, reader = local
    store = reader.store
    (root / VIDEO).unlink()
    with pytest.raises(Exception) as err:  # a missing file: named, and not as a decode error
        reader.frames_at(VIDEO, [1.0])
    assert store.url(VIDEO) in str(err.value) and "\n" not in str(err.value)


def test_unchanged_video_reads_on(local) -> None:
    root, reader = local
    assert reader.frames_at(VIDEO, [0.0, 1.0, 2.0]).shape[0] == 3
    assert reader.table(VIDEO).origin == (os.path.getsize(root / VIDEO), open_store(str(root)).stat(VIDEO).fingerprint)


def test_a_touched_local_video_says_its_mtime_changed(local) -> None:
    """Same bytes, new mtime: the message names the validator that changed, and claims no new
    content or ETag the local store never saw."""
    root, reader = local
    st = (root / VIDEO).stat()
    os.utime(root / VIDEO, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    with pytest.raises(VideoChangedError) as err:
        reader.frames_at(VIDEO, [1.0])
    assert "(same size, new mtime)" in str(err.value), err.value
    assert "ETag" not in str(err.value) and "content" not in str(err.value)


def test_a_touched_video_on_nginx_says_its_etag_changed(corpus_src: Path, nginx_server, tmp_path,
                                                         monkeypatch) -> None:
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    name = f"touched-{uuid.uuid4().hex[:8]}"
    served = Path(shutil.copytree(corpus_src, Path(nginx_server.root) / name))
    reader = VideoFrameReader(open_store(f"{nginx_server.url}/{name}"), video_paths=[VIDEO],
                              decoder_cache_size=0)
    assert reader.frames_at(VIDEO, [0.0]).shape[0] == 1
    st = (served / VIDEO).stat()
    os.utime(served / VIDEO, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # nginx: "mtime-size"
    with pytest.raises(VideoChangedError) as err:
        reader.frames_at(VIDEO, [1.0])
    assert "ETag" in str(err.value) and "content" not in str(err.value), err.value
